"""Settings asked for after JAX registered its plugins but before its backend started.

The CUDA plugin reads the environment once, when JAX registers it: its ``initialize()`` calls
``xla_client.generate_pjrt_gpu_plugin_options()`` and passes the dict to ``register_plugin``
(jax_plugins/cuda/__init__.py at jax-v0.4.38, v0.7.2, v0.10.2, v0.11.0;
jax_plugins/xla_cuda13/__init__.py in the jax-cuda13-pjrt 0.12.0.1 wheel), which binds it into
the factory, ``partial(make_pjrt_c_api_client, plugin_name, options=options)``.
``_discover_and_register_pjrt_plugins`` (jax/_src/xla_bridge.py, the same versions) runs once
per process, from the first ``backends()``, and sets ``_plugins_registered``; the backend may
still fail to start, e.g. with ``JAX_PLATFORMS=cuda`` and no CUDA backend, so
``backends_are_initialized()`` stays False.

Each scenario runs the real CPU JAX in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from child_env import pythonpath
from machine import without_cuda_plugin

# Each scenario is JAX with no CUDA backend that starts; with the CUDA plugin installed, JAX_PLATFORMS=cuda
# starts it (on the GPU machine every one of them failed, 2026-11-26).
pytestmark = without_cuda_plugin

_ASK = """
from jax._src import xla_bridge
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.core.readings import AllocatorSettings
from jupyter_gpumem.settings.status import status

def ask(**settings):
    before = dict(os.environ)
    try:
        allocator_shim.validate(AllocatorSettings(**settings))
        allocator_shim.apply_settings(AllocatorSettings(**settings))
    except allocator_shim.BackendStartedError as err:
        return {"refused": str(err), "env_unchanged": dict(os.environ) == before}
    return {"accepted": True}

cuda = xla_bridge._backend_factories.get("cuda")
print(json.dumps({
    # jaxlib's own GPU client (xla_bridge.make_gpu_client, registered at import in 0.4.38, gone by
    # 0.7.2) reads the environment when the backend starts: on such a JAX nothing is fixed yet.
    "builtin_gpu_client": cuda is not None and "options" not in getattr(cuda.factory, "keywords", {}),
    "registered": xla_bridge._plugins_registered,
    "started": xla_bridge.backends_are_initialized(),
    "off": ask(preallocate=False),
    "fraction": ask(fraction=0.5),
    "async_prealloc": ask(async_prealloc=0),
    "status": status().backend_line(),
}))
"""

_NO_CUDA_BACKEND = (
    """
import json, os
import jax
try:
    jax.devices()  # JAX_PLATFORMS=cuda, and no CUDA backend here
except (RuntimeError, AssertionError) as err:  # AssertionError: no /dev/nvidia0, cuda skipped
    pass
"""
    + _ASK
)

_CUDA_PLUGIN_THAT_FAILED = (
    """
import functools, json, os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import jax
from jax._src import hardware_utils, xla_bridge
from jaxlib import xla_client

def plugin_client(plugin_name, options=None):
    raise RuntimeError("synthetic: CUDA_ERROR_OUT_OF_MEMORY")

# What the CUDA plugin's initialize() registers: the generator's options, bound into the factory.
options = xla_client.generate_pjrt_gpu_plugin_options()
xla_bridge.register_backend_factory("cuda", functools.partial(plugin_client, "cuda", options=options),
                                    priority=500, fail_quietly=False)
hardware_utils.has_visible_nvidia_gpu = lambda: True
try:
    jax.devices()
except RuntimeError as err:
    import sys
    sys.last_value = err  # what IPython's _get_exc_info keeps of the failed cell
del os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]  # what it says now is not what the plugin read
"""
    + _ASK
)


def _fresh(script: str, **env_extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_", "TF_CUDA"))}
    env.update(PYTHONPATH=pythonpath(), TF_CPP_MIN_LOG_LEVEL="3", **env_extra)  # a JAX put first on the path kept
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def no_cuda_backend():
    return _fresh(_NO_CUDA_BACKEND, JAX_PLATFORMS="cuda")


@pytest.fixture(scope="module")
def cuda_plugin_that_failed():
    return _fresh(_CUDA_PLUGIN_THAT_FAILED, JAX_PLATFORMS="cuda,cpu")


@pytest.mark.jax_versions
def test_jax_registers_its_plugins_before_a_backend_that_never_starts(no_cuda_backend):
    assert (no_cuda_backend["registered"], no_cuda_backend["started"]) == (True, False)


@pytest.mark.jax_versions
def test_preallocation_after_plugin_registration_is_refused_and_changes_nothing(no_cuda_backend):
    if no_cuda_backend["builtin_gpu_client"]:
        # jaxlib 0.4.38's make_gpu_client calls generate_pjrt_gpu_plugin_options() when the
        # backend starts (jaxlib/xla_client.py): the setting can still take effect.
        assert no_cuda_backend["off"] == {"accepted": True}
        return
    refused = no_cuda_backend["off"]
    assert refused["env_unchanged"] is True
    assert refused["refused"].startswith("JAX has already registered its plugins (its backend has not started)")
    assert "No CUDA plugin registered, so JAX will start on the CPU" in refused["refused"]
    assert "restart the kernel and run `%gpumem preallocate off`" in refused["refused"]


@pytest.mark.jax_versions
def test_a_fraction_after_plugin_registration_is_refused(no_cuda_backend):
    if no_cuda_backend["builtin_gpu_client"]:
        assert no_cuda_backend["fraction"] == {"accepted": True}
        return
    assert "so fraction 0.5 cannot take effect" in no_cuda_backend["fraction"]["refused"]


@pytest.mark.jax_versions
def test_async_prealloc_is_still_accepted_after_plugin_registration(no_cuda_backend):
    """XLA's cuda_async allocator reads TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC when the backend
    starts (``SetStreamAndPreallocateMemory``, gpu_cudamallocasync_allocator.cc), not the plugin."""
    assert no_cuda_backend["async_prealloc"] == {"accepted": True}


@pytest.mark.jax_versions
def test_status_says_the_plugin_settings_are_fixed_before_the_backend_starts(no_cuda_backend):
    if no_cuda_backend["builtin_gpu_client"]:
        assert no_cuda_backend["status"].startswith("JAX's backend has not started: settings can still change.")
        return
    assert no_cuda_backend["status"].startswith("JAX's backend has not started, but JAX has registered its plugins")
    assert "settings can still change" not in no_cuda_backend["status"]


@pytest.mark.jax_versions
def test_the_refusal_names_what_the_cuda_plugin_read_not_what_the_environment_says_now(cuda_plugin_that_failed):
    refused = cuda_plugin_that_failed["fraction"]["refused"]
    assert "In effect: preallocate is off; fraction is 0.75; allocator is bfc" in refused


@pytest.mark.jax_versions
def test_asking_for_what_the_cuda_plugin_already_read_is_accepted(cuda_plugin_that_failed):
    assert cuda_plugin_that_failed["off"] == {"accepted": True}


_SET_THEN_REGISTERED = """
import json, os
import jax
from jax._src import xla_bridge
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.core.readings import AllocatorSettings
allocator_shim.apply_settings(AllocatorSettings(preallocate=False))
try:
    jax.devices()  # JAX_PLATFORMS=cuda, and no CUDA backend here
except (RuntimeError, AssertionError):
    pass
before = dict(os.environ)
try:
    allocator_shim.reset()
    said = None
except allocator_shim.BackendStartedError as err:
    said = str(err)
cuda = xla_bridge._backend_factories.get("cuda")
print(json.dumps({"said": said, "env_unchanged": dict(os.environ) == before,
                  "started": xla_bridge.backends_are_initialized(),
                  "builtin_gpu_client": cuda is not None and "options" not in getattr(cuda.factory, "keywords", {})}))
"""


@pytest.mark.jax_versions
def test_reset_after_plugin_registration_is_refused_and_changes_nothing():
    result = _fresh(_SET_THEN_REGISTERED, JAX_PLATFORMS="cuda")
    if result["builtin_gpu_client"]:  # jaxlib's own GPU client reads the environment at start
        assert (result["started"], result["said"], result["env_unchanged"]) == (False, None, False)
        return
    assert (result["started"], result["env_unchanged"]) == (False, True)
    assert result["said"].startswith("JAX has already registered its plugins (its backend has not started)")
    assert "(preallocate is off); reset cannot take them back" in result["said"]


@pytest.mark.jax_versions
def test_status_quotes_the_failed_start_while_the_backend_has_not_started(cuda_plugin_that_failed):
    """With ``JAX_PLATFORMS`` naming cuda first, ``backends()`` raises the plugin's error and
    starts nothing (jax/_src/xla_bridge.py, the versions above); the cell's error is the record."""
    status = cuda_plugin_that_failed["status"]
    assert "In effect: preallocate is off" not in status and "in effect: preallocate is off" in status
    assert "Starting it failed: \"Unable to initialize backend 'cuda': synthetic: CUDA_ERROR_OUT_OF_MEMORY" in status
