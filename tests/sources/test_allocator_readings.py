"""allocator_shim readings: the start probe, backend state and per-device allocator stats.

Fake ``jax`` modules stand in for the backend where a GPU would be needed; the real CPU JAX
runs in fresh interpreters for what it can show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from types import SimpleNamespace

import pytest

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.settings import apply as shim
from jupyter_gpumem.sources import jax_backend

pytestmark = pytest.mark.jax_versions


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in (
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
    ):
        monkeypatch.delenv(var, raising=False)
    jax_backend.forget_device_identities()  # each test's world is its own


def _device(jax_id, hw_id, stats, platform="cuda"):
    memory_stats = stats if callable(stats) else (lambda: stats)
    return SimpleNamespace(
        id=jax_id, local_hardware_id=hw_id, platform=platform, device_kind="Synthetic GPU", memory_stats=memory_stats
    )


def fake_jax(monkeypatch, *, started, platform="cuda", devices=(), errors=None, factories=None, probe=True):
    """Install synthetic ``jax`` and ``jax._src.xla_bridge`` modules for this test."""
    jax = types.ModuleType("jax")
    jax.__version__ = "0.0-synthetic"
    bridge = types.ModuleType("jax._src.xla_bridge")
    client = SimpleNamespace(platform=platform, local_devices=devices if callable(devices) else (lambda: list(devices)))
    bridge._backends = {platform: client} if started else {}
    bridge._default_backend = client if started else None
    bridge._backend_errors = dict(errors or {})
    bridge._backend_factories = dict(factories or {})
    if probe:
        bridge.backends_are_initialized = lambda: bool(bridge._backends)
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)
    return bridge


BFC_STATS = {
    "bytes_in_use": 1024,
    "peak_bytes_in_use": 2048,
    "bytes_limit": 8 << 30,
    "pool_bytes": 4 << 20,
    "largest_free_block_bytes": -1,
    "num_allocs": 7,
}


def test_backend_has_not_started_when_jax_was_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert shim.backend_started() is False


@pytest.mark.parametrize("started", [False, True])
def test_backend_started_asks_jax_s_own_probe(monkeypatch, started):
    fake_jax(monkeypatch, started=started)
    assert shim.backend_started() is started


@pytest.mark.parametrize("started", [False, True])
def test_backend_started_falls_back_to_the_backends_dict_without_the_probe(monkeypatch, started):
    fake_jax(monkeypatch, started=started, probe=False)
    assert shim.backend_started() is started


def test_readings_before_start_say_jax_has_not_started(monkeypatch):
    fake_jax(monkeypatch, started=False)
    readings = shim.read_jax_devices()
    assert readings == model.NotAvailable(model.NOT_STARTED, "JAX has not started yet; readings begin when it does")


def test_readings_without_jax_installed_say_so(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setattr(jax_backend.importlib.util, "find_spec", lambda name, *args: None)
    readings = shim.read_jax_devices()
    assert isinstance(readings, model.NotAvailable) and readings.code == model.NO_JAX


def test_gpu_readings_are_normalised_and_mapped_through_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA's order is then NVML's
    # no NVML to ask (as on CI): the mapping comes from CUDA_VISIBLE_DEVICES alone. A real NVML
    # with one GPU (the GPU machine) has no index 3, and the reading would rightly say so.
    monkeypatch.setattr(
        jax_backend,
        "NvmlSource",
        lambda: SimpleNamespace(
            identities=lambda: model.NotAvailable(model.NO_LIBRARY, "synthetic: no NVML"), shutdown=lambda: None
        ),
    )
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, BFC_STATS), _device(1, 1, BFC_STATS)])
    readings = shim.read_jax_devices()
    assert [(r.jax_id, r.nvml_index, r.platform) for r in readings] == [(0, 2, "gpu"), (1, 3, "gpu")]
    stats = readings[0].stats
    assert (stats.allocator, stats.bytes_in_use, stats.pool_bytes, stats.largest_free_block_bytes) == (
        "bfc",
        1024,
        4 << 20,
        None,
    )
    assert readings[0].cuda_pool is None  # not a cuda_async device


def test_a_uuid_in_cuda_visible_devices_that_nvml_cannot_look_up_is_not_guessed(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0a1b")
    monkeypatch.setattr(
        jax_backend,
        "NvmlSource",
        lambda: SimpleNamespace(
            identities=lambda: model.NotAvailable(model.NO_LIBRARY, "synthetic: no NVML"), shutdown=lambda: None
        ),
    )
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, BFC_STATS)])
    reading = shim.read_jax_devices()[0]
    assert (
        reading.nvml_index is None
        and reading.nvml_unmatched == "NVML cannot be read to find GPU-0a1b: synthetic: no NVML"
    )


def test_cuda_async_devices_carry_the_cuda_pool_reading(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    pool = model.CudaPoolReading(
        reserved_bytes=3 << 30, reserved_high_bytes=4 << 30, used_bytes=1 << 30, used_high_bytes=2 << 30
    )
    ordinals = []
    monkeypatch.setattr(jax_backend, "read_default_pool", lambda ordinal: ordinals.append(ordinal) or pool)
    fake_jax(monkeypatch, started=True, devices=[_device(0, 1, {"bytes_in_use": 10, "bytes_limit": 0})])
    reading = shim.read_jax_devices()[0]
    assert reading.cuda_pool == pool and ordinals == [1]
    assert reading.stats.allocator == "cuda_async" and reading.stats.bytes_limit is None


def test_a_cuda_pool_without_libcuda_loaded_is_not_available(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, {"bytes_in_use": 10})])
    assert shim.read_jax_devices()[0].cuda_pool.code == model.NOT_STARTED


def test_a_failing_memory_stats_is_a_reading_not_an_exception(monkeypatch):
    def broken():
        raise RuntimeError("synthetic driver error")

    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, broken)])
    stats = shim.read_jax_devices()[0].stats
    assert stats.code == model.ERROR and "synthetic driver error" in stats.reason


def test_read_jax_devices_never_raises(monkeypatch):
    def no_devices():
        raise RuntimeError("synthetic: client gone")

    fake_jax(monkeypatch, started=True, devices=no_devices)
    readings = shim.read_jax_devices()
    assert isinstance(readings, model.NotAvailable) and readings.code == model.ERROR


def test_backend_info_names_the_started_backend_s_devices(monkeypatch):
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, None), _device(1, 1, None)])
    assert jax_backend.backend_info() == jax_backend.BackendInfo(
        started=True,
        jax_imported=True,
        jax_version="0.0-synthetic",
        platform="cuda",
        devices=(
            jax_backend.BackendDevice(0, "Synthetic GPU", "cuda"),
            jax_backend.BackendDevice(1, "Synthetic GPU", "cuda"),
        ),
    )


def test_a_backend_that_cannot_list_its_devices_says_why_in_backend_info(monkeypatch):
    def no_devices():
        raise RuntimeError("synthetic: client gone")

    fake_jax(monkeypatch, started=True, devices=no_devices)
    info = jax_backend.backend_info()
    assert (info.started, info.devices, info.error) == (True, (), "RuntimeError: synthetic: client gone")


def test_cpu_fallback_reason_is_the_cuda_backend_error(monkeypatch):
    monkeypatch.setattr(jax_backend, "cuda_plugin_installed", lambda: True)
    fake_jax(
        monkeypatch,
        started=True,
        platform="cpu",
        devices=[_device(0, 0, None, "cpu")],
        errors={"cuda": "synthetic: no supported devices found", "tpu": "synthetic: no libtpu"},
    )
    info = jax_backend.backend_info()
    assert info.platform == "cpu"
    assert info.fallback_reason == "the CUDA backend failed to start: synthetic: no supported devices found"


@pytest.mark.parametrize(
    "errors",
    [
        {"cuda": "", "rocm": ""},  # jax 0.4.30 on a CPU-only jaxlib
        {"rocm": "module 'jaxlib.xla_extension' has no attribute 'GpuAllocatorConfig'"},  # jax 0.4.38
    ],
)
def test_the_built_in_gpu_factories_of_a_cpu_only_jaxlib_are_not_a_gpu_fallback(monkeypatch, errors):
    """Up to 0.5.x JAX registers ``cuda`` and ``rocm`` factories whatever jaxlib can do; on a
    CPU-only jaxlib they fail quietly into ``_backend_errors`` (jax/_src/xla_bridge.py 0.4.38,
    lines 484-503; the errors recorded from real CPU JAX 0.4.30 and 0.4.38). JAX then says "a
    CUDA-enabled jaxlib is not installed" (line 955), and so do we: no plugin, no GPU jaxlib."""
    monkeypatch.setattr(jax_backend, "cuda_plugin_installed", lambda: False)
    bridge = fake_jax(monkeypatch, started=True, platform="cpu", devices=[_device(0, 0, None, "cpu")], errors=errors)
    bridge.xla_extension = types.ModuleType("jaxlib.xla_extension")  # no GpuAllocatorConfig: CPU-only
    assert jax_backend.backend_info().fallback_reason is None


def test_a_gpu_jaxlib_s_cuda_error_is_the_fallback_reason(monkeypatch):
    monkeypatch.setattr(jax_backend, "cuda_plugin_installed", lambda: False)
    bridge = fake_jax(
        monkeypatch,
        started=True,
        platform="cpu",
        devices=[_device(0, 0, None, "cpu")],
        errors={"cuda": "synthetic: no supported devices found"},
    )
    bridge.xla_extension = SimpleNamespace(GpuAllocatorConfig=object)  # jaxlib 0.4.x built with CUDA
    assert (
        jax_backend.backend_info().fallback_reason
        == "the CUDA backend failed to start: synthetic: no supported devices found"
    )


def test_a_tpu_error_alone_is_not_a_gpu_fallback(monkeypatch):
    monkeypatch.setattr(jax_backend, "cuda_plugin_installed", lambda: False)
    fake_jax(
        monkeypatch,
        started=True,
        platform="cpu",
        devices=[_device(0, 0, None, "cpu")],
        errors={"tpu": "synthetic: no libtpu"},
    )
    assert jax_backend.backend_info().fallback_reason is None


def test_a_cuda_plugin_that_never_registered_blames_the_rejected_environment(monkeypatch):
    monkeypatch.setattr(jax_backend, "cuda_plugin_installed", lambda: True)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_malloc_async")
    fake_jax(
        monkeypatch, started=True, platform="cpu", devices=[_device(0, 0, None, "cpu")], factories={"cpu": object()}
    )
    reason = jax_backend.backend_info().fallback_reason
    assert (
        reason.startswith("the CUDA plugin did not register because JAX rejected the environment")
        and "cuda_malloc_async" in reason
    )


BFC_JUST_STARTED = {
    "bytes_in_use": 0,
    "peak_bytes_in_use": 0,
    "bytes_limit": 8 << 30,
    "pool_bytes": 0,
    "peak_pool_bytes": 0,
    "largest_alloc_size": 0,
    "num_allocs": 0,
}


def test_a_gpu_pool_is_not_taken_when_jax_has_only_started(monkeypatch):
    """``BFCAllocator``'s constructor sets ``pool_bytes`` to 0 and takes nothing; ``Extend``, at the
    first allocation, takes the pool (openxla/xla xla/tsl/framework/bfc_allocator.cc at 80c095fc)."""
    monkeypatch.setattr(jax_backend, "_pool_seen_for", [])
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, BFC_JUST_STARTED)])
    assert jax_backend.gpu_pool_taken() is False


def test_a_gpu_pool_is_taken_after_the_first_allocation(monkeypatch):
    monkeypatch.setattr(jax_backend, "_pool_seen_for", [])
    fake_jax(monkeypatch, started=True, devices=[_device(0, 0, BFC_JUST_STARTED), _device(1, 1, BFC_STATS)])
    assert jax_backend.gpu_pool_taken() is True


@pytest.mark.parametrize("platform, started", [("cpu", True), ("cuda", False)], ids=["cpu", "not-started"])
def test_no_gpu_pool_to_speak_of_before_start_or_off_the_gpu(monkeypatch, platform, started):
    monkeypatch.setattr(jax_backend, "_pool_seen_for", [])
    fake_jax(monkeypatch, started=started, platform=platform, devices=[_device(0, 0, None, platform)])
    assert jax_backend.gpu_pool_taken() is None


@pytest.mark.parametrize(
    "env_value, expected",
    [(None, "bfc"), ("default", "bfc"), ("BFC", "bfc"), ("cuda_async", "cuda_async"), ("platform", "platform")],
)
def test_allocator_in_effect_reads_the_environment_before_start(monkeypatch, env_value, expected):
    if env_value is not None:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", env_value)
    fake_jax(monkeypatch, started=False)
    assert shim.allocator_in_effect() == expected


def test_allocator_in_effect_is_cpu_on_a_cpu_backend(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    fake_jax(monkeypatch, started=True, platform="cpu", devices=[])
    assert shim.allocator_in_effect() == "cpu"


# --- the real CPU JAX, in fresh interpreters ---------------------------------------------------


def _run(script: str, **extra_env: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(extra_env)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_readings_and_status_never_start_jax():
    result = _run("""
import json
import jax
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.settings.status import status as status_report
readings = allocator_shim.read_jax_devices()
report = status_report()
from jax._src import xla_bridge
print(json.dumps({"code": readings.code, "started": xla_bridge.backends_are_initialized(),
                  "probe": allocator_shim.backend_started(), "backend": report.backend.started}))
""")
    assert result == {"code": "not_started", "started": False, "probe": False, "backend": False}


def test_cpu_backend_readings_after_the_first_operation():
    result = _run(
        """
import json
import jax.numpy as jnp
jnp.ones(3).block_until_ready()
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.sources import jax_backend
r = allocator_shim.read_jax_devices()
info = jax_backend.backend_info()
print(json.dumps({"probe": allocator_shim.backend_started(), "platform": info.platform,
                  "devices": info.to_json()["devices"], "fallback": info.fallback_reason,
                  "readings": [(x.platform, x.nvml_index, x.stats.code) for x in r],
                  "allocator": allocator_shim.allocator_in_effect()}))
""",
        JAX_PLATFORMS="cpu",
    )  # the CPU backend asked for: on a machine with a GPU, JAX would start that one
    assert result == {
        "probe": True,
        "platform": "cpu",
        "devices": [{"id": 0, "kind": "cpu", "platform": "cpu"}],
        "fallback": None,
        "readings": [["cpu", None, "no_stats"]],
        "allocator": "cpu",
    }


@pytest.mark.jax_versions
def test_platform_in_effect_is_what_the_installed_jax_makes_of_it(monkeypatch):
    """``platform`` is BFC on JAX 0.10.1 and 0.10.2 (jax#39145: openxla/xla#41761 gave XLA's
    Backend a BFC allocator, which the PJRT client falls back to; openxla/xla#45668, in 0.11.0,
    undid it), so its statistics are BFC's there; elsewhere it is the passthrough, which reports
    none (``StreamExecutorGpuDevice::GetAllocatorStats``: Unimplemented for an allocator that is
    not a MultiDeviceAdapter). The installed version is probed, not assumed."""
    from importlib.metadata import version

    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    installed = tuple(int(part) for part in version("jax").split(".")[:3])
    expected = "bfc" if installed in ((0, 10, 1), (0, 10, 2)) else "platform"
    assert shim.allocator_in_effect() == expected
