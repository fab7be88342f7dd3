"""Once JAX's backend has started, the settings in effect are what it read then, not what the
environment says now: a variable set later with ``%env`` or ``os.environ`` is named as changed,
and not in effect.

JAX reads the allocator variables once: the CUDA plugin's ``initialize()`` calls
``generate_pjrt_gpu_plugin_options()`` at plugin discovery and binds the dict into its factory
(jax_plugins/cuda/__init__.py at jax-v0.4.38 to v0.10.2; jax_plugins/xla_cuda13/__init__.py line
371 in the jax-cuda13-pjrt 0.11.2 wheel), ``make_pjrt_c_api_client`` merges jax.config's create
options over it when the backend is created (jax/_src/xla_bridge.py, 0.10.2 line 574, 0.11.2
line 562, 0.12.0.1 line 586), and nothing reads the variables again in the process. On the CPU
here no plugin reads them at all: the copy the extension makes as the first backend is created
(``sources/jax_start.py``) is what JAX would have read.

Each scenario runs real CPU JAX in a fresh IPython process (tests/kernel_session.py).
"""

from __future__ import annotations

import functools
import json

import pytest

from jupyter_gpumem.sources import jax_plugins

from kernel_session import run_session

pytestmark = pytest.mark.jax_versions

SHOW = (
    "import json\n"
    "from jupyter_gpumem.settings.apply import settings_in_effect, allocator_in_effect\n"
    "from jupyter_gpumem.settings.publish import current\n"
    "print('STATE' + json.dumps({'settings': {s.name: [s.value, s.source, s.changed_after_start] for s in "
    "settings_in_effect()}, 'published': current().to_json()['settings']}))"
)
START = "import jax.numpy as jnp\nx = jnp.ones(3)"


def state_of(record: dict) -> dict:
    line = next(line for line in record["out"].splitlines() if line.startswith("STATE"))
    return json.loads(line[5:])


@pytest.fixture(scope="module")
def fraction_set_late(tmp_path_factory):
    """The issue's steps: JAX started, then ``%env`` sets the fraction, then status and two
    refused settings."""
    return run_session(
        tmp_path_factory.mktemp("late"),
        [
            START,
            "%env XLA_PYTHON_CLIENT_MEM_FRACTION=.3",
            "%gpumem status",
            "%gpumem fraction .5",
            "%gpumem fraction .3",
            SHOW,
        ],
    )


def test_a_fraction_set_after_the_start_is_not_shown_as_in_effect(fraction_set_late):
    status = fraction_set_late[2]["out"]
    row = next(line for line in status.splitlines() if line.strip().startswith("fraction"))
    assert row.split()[1] == "0.75", status
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION changed in cell [2], not in effect" in row


def test_status_says_what_changed_what_jax_read_and_that_only_a_restart_applies_it(fraction_set_late):
    status = fraction_set_late[2]["out"]
    assert (
        "XLA_PYTHON_CLIENT_MEM_FRACTION was changed in cell [2] to '.3' (fraction 0.3), but JAX read it unset "
        "when its backend started: fraction is 0.75 in this process. Only a restart applies the new value"
    ) in " ".join(status.split())


def test_a_refused_fraction_names_the_fraction_jax_read(fraction_set_late):
    refused = " ".join(fraction_set_late[3]["out"].split())
    assert not fraction_set_late[3]["ok"]
    assert "In effect now: fraction is 0.75 (JAX default, XLA_CLIENT_MEM_FRACTION unset;" in refused
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION says '.3' since cell [2], which is not in effect" in refused


def test_asking_for_the_late_value_is_refused_too(fraction_set_late):
    """Before, the fraction in the environment counted as in effect, so asking for it again was
    taken as a no-op."""
    assert not fraction_set_late[4]["ok"]
    assert "so fraction 0.3 cannot take effect" in fraction_set_late[4]["out"]


def test_the_published_settings_carry_what_jax_read_and_the_late_change(fraction_set_late):
    state = state_of(fraction_set_late[5])
    assert state["settings"]["fraction"][:2] == [0.75, "JAX default"]
    assert state["published"]["fraction"] == {
        "value": 0.75,
        "source": "JAX default",
        "changed_after_start": {"variable": "XLA_PYTHON_CLIENT_MEM_FRACTION", "now": ".3", "cell": 2},
    }


def test_preallocation_and_allocator_set_with_os_environ_after_the_start_are_named(tmp_path):
    out = run_session(
        tmp_path,
        [
            START,
            "import os\nos.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'\n"
            "os.environ['XLA_PYTHON_CLIENT_ALLOCATOR'] = 'cuda_async'",
            SHOW,
        ],
    )
    settings = state_of(out[2])["settings"]
    assert settings["preallocate"][:2] == [True, "JAX default"]
    assert settings["allocator"][:2] == ["default", "JAX default"]
    assert settings["preallocate"][2]["now"] == "false" and settings["preallocate"][2]["cell"] == 2
    assert (
        settings["allocator"][2]["asked"] == "cuda_async" and settings["allocator"][2]["in_effect"] == "default (bfc)"
    )


def test_settings_made_before_the_start_are_in_effect_and_not_named_as_changed(tmp_path):
    out = run_session(tmp_path, ["%env XLA_PYTHON_CLIENT_PREALLOCATE=false", START, SHOW])
    settings = state_of(out[2])["settings"]
    assert settings["preallocate"] == [False, "environment", None]


def test_a_variable_set_back_to_what_jax_read_is_not_a_change(tmp_path):
    out = run_session(
        tmp_path,
        [START, "%env XLA_PYTHON_CLIENT_MEM_FRACTION=.3", "%env XLA_PYTHON_CLIENT_MEM_FRACTION=.75", SHOW],
    )
    assert state_of(out[3])["settings"]["fraction"] == [0.75, "JAX default", None]


def test_the_extension_loaded_after_the_start_says_the_start_was_not_seen(tmp_path):
    """The extension loads into a process whose JAX had started: the variables are copied at
    load, and a later change says the copy is not what JAX read at its start."""
    out = run_session(
        tmp_path,
        [
            "%unload_ext jupyter_gpumem",
            START,
            "%load_ext jupyter_gpumem",
            "%env XLA_PYTHON_CLIENT_MEM_FRACTION=.3",
            "%gpumem status",
        ],
    )
    status = " ".join(out[4]["out"].split())
    assert "it was unset when first seen here (JAX had started before the extension loaded)" in status


_PLUGIN_READ_THEN_STARTED = """
import functools, json, os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
import jax
from jax._src import hardware_utils, xla_bridge
from jaxlib import xla_client

# A CUDA plugin as its initialize() registers it: the generator's options bound into the factory
# (partial(make_pjrt_c_api_client, plugin_name, options=options), jax/_src/xla_bridge.py 0.10.2
# line 644). Its client here is a CPU client: no GPU on this machine.
def plugin_client(plugin_name, options=None):
    return xla_bridge.make_cpu_client() if hasattr(xla_bridge, "make_cpu_client") else xla_client.make_cpu_client()

options = xla_client.generate_pjrt_gpu_plugin_options()
xla_bridge._discover_and_register_pjrt_plugins()
xla_bridge.register_backend_factory("cuda", functools.partial(plugin_client, "cuda", options=options),
                                    priority=500, fail_quietly=False)
hardware_utils.has_visible_nvidia_gpu = lambda: True
del os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"]  # after the plugin read it, before the start
jax.devices()
"""


def test_after_the_start_the_cuda_plugin_s_own_options_win_over_the_copy(tmp_path):
    """The plugin read preallocate=false at registration; the variable was removed before the
    backend started, so the copy made at the start says unset. What the plugin read is in effect."""
    out = run_session(tmp_path, [_PLUGIN_READ_THEN_STARTED, SHOW], env={"JAX_PLATFORMS": "cuda,cpu"})
    assert out[0]["ok"], out[0]["out"]
    assert state_of(out[1])["settings"]["preallocate"][0] is False


def test_a_closure_factory_s_options_are_read_as_jax_up_to_0_6_binds_them():
    """Up to JAX 0.6, ``register_plugin`` binds the options in a nested ``def factory()``
    (jax/_src/xla_bridge.py: 0.4.38 line 687, 0.5.3 and 0.6.2 the same shape); written here in
    that shape, since no CUDA plugin registers on this machine."""

    def register_plugin(plugin_name, options=None):
        def factory():
            return (plugin_name, options)

        return factory

    factory = register_plugin("cuda", options={"preallocate": False})
    assert jax_plugins._bound_options(factory) == {"preallocate": False}
    assert jax_plugins._bound_options(functools.partial(print, "cuda", options={"a": 1})) == {"a": 1}
    assert jax_plugins._bound_options(functools.partial(print, "cuda")) is jax_plugins._NOT_BOUND


def test_a_published_late_change_reads_back_and_a_malformed_one_is_dropped():
    from jupyter_gpumem.settings.published import PublishedSettings, parse

    late = {"variable": "XLA_PYTHON_CLIENT_MEM_FRACTION", "now": ".3", "cell": 2}
    written = PublishedSettings(
        pid=7, kernel_id="k", backend_started=True, fraction=0.75, changed_after_start={"fraction": late}
    )
    read = parse(json.dumps(written.to_json()), 7)
    assert read.changed_after_start == {"fraction": late}
    assert read.settings_json()["changed_after_start"] == {"fraction": late}
    for bad in ({"variable": 3}, {"variable": "V", "cell": True}, {"variable": "V", "now": "x" * 300}, "no"):
        raw = written.to_json()
        raw["settings"]["fraction"]["changed_after_start"] = bad
        assert parse(json.dumps(raw), 7).changed_after_start == {}, bad


@pytest.fixture(scope="module")
def preallocation_set_late_then_oom(tmp_path_factory):
    """JAX started, preallocation turned off with %env, then a real CPU out-of-memory error
    (2**46 float32: 256 TiB) and its report, and the monitor's settings header."""
    return run_session(
        tmp_path_factory.mktemp("late-oom"),
        [
            START,
            "%env XLA_PYTHON_CLIENT_PREALLOCATE=false",
            "from jupyter_gpumem import doctor\n"
            "try:\n    jnp.zeros((2**46,), jnp.float32)\n"
            "except Exception as err:\n    print(doctor.oom_report(err))",
            "from jupyter_gpumem.monitor.header import status_block\n"
            "from jupyter_gpumem.settings.status import status\nprint(status_block(status()))",
        ],
    )


def test_the_oom_report_shows_what_jax_read_and_names_the_late_variable(preallocation_set_late_then_oom):
    report = preallocation_set_late_then_oom[2]["out"]
    row = next(line for line in report.splitlines() if line.strip().startswith("preallocate"))
    assert row.split()[1] == "on", report
    assert "XLA_PYTHON_CLIENT_PREALLOCATE changed in cell [2], not in effect" in row


def test_the_monitor_header_warns_of_the_late_variable(preallocation_set_late_then_oom):
    header = preallocation_set_late_then_oom[3]["out"]
    assert "<summary>preallocate on ·" in header
    assert "⚠ XLA_PYTHON_CLIENT_PREALLOCATE was changed in cell [2] to &#x27;false&#x27;" in header


@pytest.mark.parametrize(
    "flags, forced",
    [
        ("--xla_gpu_command_buffer_update_mode=SKIP_TEMP", "SKIP_TEMP"),
        ("--xla_gpu_command_buffer_update_mode=skip_temp --xla_gpu_autotune_level=0", "skip_temp"),
        ("--xla_gpu_command_buffer_update_mode=SKIP_TEMP --xla_gpu_command_buffer_update_mode=ALWAYS_UPDATE", None),
        ("--xla_gpu_autotune_level=0", None),
    ],
)
def test_a_command_buffer_update_mode_other_than_always_update_makes_the_allocator_vmm(flags, forced):
    """XLA overrides the allocator kind to vmm when the mode is not ALWAYS_UPDATE
    (``GetStreamExecutorGpuDeviceAllocator``, xla/pjrt/gpu/se_gpu_pjrt_client.cc, openxla/xla of
    2026-08, read; no GPU here). The allocator variable asks for cuda_async."""
    from jupyter_gpumem.settings.effective import command_buffer_mode_forcing_vmm, effective, environment_problems

    env = {"XLA_FLAGS": flags, "XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"}
    assert command_buffer_mode_forcing_vmm(env) == forced
    assert effective(env)["allocator"] == ("vmm" if forced else "cuda_async")
    said = [p for p in environment_problems(env) if "command_buffer_update_mode" in p]
    assert said == (
        [
            f"XLA_FLAGS sets --xla_gpu_command_buffer_update_mode={forced}, which makes XLA use the vmm "
            "allocator whatever XLA_PYTHON_CLIENT_ALLOCATOR says (it needs vmm for command buffers' stable "
            "addresses)."
        ]
        if forced
        else []
    )


@pytest.mark.parametrize(
    "raw, read",
    [("true", True), ("ON", True), ("0", False), ("No", False), (" true", None), ("maybe", None), ("", None)],
)
def test_the_remat_variable_is_read_as_jax_s_bool_env_reads_it(raw, read):
    """jax/_src/config.py ``bool_env`` (0.4.38 to 0.12.0.1) lower-cases the value and takes six
    spellings each way; anything else, spaces included, raises at ``import jax``."""
    from jupyter_gpumem.settings.effective import remat_from_env

    assert remat_from_env(raw) is read


def test_a_remat_variable_jax_would_refuse_is_warned_of_before_import_and_import_really_fails(tmp_path):
    out = run_session(
        tmp_path,
        ["%gpumem status", "import jax"],
        env={"JAX_COMPILER_ENABLE_REMAT_PASS": " true"},
    )
    status = " ".join(out[0]["out"].split())
    assert "JAX_COMPILER_ENABLE_REMAT_PASS=' true' is not a value JAX reads" in status
    row = next(line for line in out[0]["out"].splitlines() if line.strip().startswith("remat"))
    assert row.split()[1:5] == ["'", "true'", "(JAX", "refuses"], row
    assert not out[1]["ok"] and out[1]["error"] == "ValueError"


@pytest.mark.parametrize(
    "raw, on", [("1", True), ("TRUE", True), ("true", True), ("0", False), ("yes", False), (" 1", False)]
)
def test_unified_memory_is_read_as_xla_reads_it(raw, on):
    """``tsl::ReadBoolFromEnvVar`` lower-cases the value and takes "true"/"1" (and "false"/"0");
    anything else leaves the default, off (tsl/util/env_var.cc; xla/pjrt/gpu/gpu_helpers.cc)."""
    from jupyter_gpumem.settings.effective import unified_memory

    assert unified_memory({"TF_FORCE_UNIFIED_MEMORY": raw}) is on


def test_the_kernel_publishes_unified_memory_as_jax_started_with_it(tmp_path):
    out = run_session(
        tmp_path,
        [
            START,
            "%env TF_FORCE_UNIFIED_MEMORY=0",
            "from jupyter_gpumem.settings.publish import current\nprint('UNIFIED', current().unified_memory)",
        ],
        env={"TF_FORCE_UNIFIED_MEMORY": "1"},
    )
    assert "UNIFIED True" in out[2]["out"]
