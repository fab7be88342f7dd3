"""JAX on the CPU while GPUs are right there: said loudly wherever JAX's platform shows, with the
one line that fixes it.

``pip install jax`` installs no CUDA plugin (the ``cuda12``/``cuda13`` extras of jax's
setup.py bring ``jax-cudaNN-plugin``), and JAX then starts its CPU backend without a word: the
plugin discovery in jax/_src/xla_bridge.py (``discover_pjrt_plugins``, v0.10.2 and v0.11.0)
finds nothing to register. The CPU JAX installed here is that case, and the fake NVML world
``three_gpus`` (CUDA 12.4 driver, ``nvmlSystemGetCudaDriverVersion`` 12040) the GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import pythonpath
from machine import without_cuda_plugin

from jupyter_gpumem.core.readings import DeviceReading, JaxDeviceReading, NotAvailable, ProcessReading, Sample
from jupyter_gpumem.doctor.oom_readings import OomReadings
from jupyter_gpumem.doctor.oom_rules import advise
from jupyter_gpumem.kernel import comm as kernel_comm
from jupyter_gpumem.monitor.series import notes_for
from jupyter_gpumem.settings.cpu_fallback import CpuFallback, cpu_fallback, plugin_command, read_cpu_fallback
from jupyter_gpumem.settings.status import status
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.sources.jax_backend import BackendDevice, BackendInfo
from jupyter_gpumem.testing import DROPIN_DIR, fake_nvml

pytestmark = pytest.mark.jax_versions

GiB = 1024**3
ON_CPU = BackendInfo(
    started=True,
    jax_imported=True,
    jax_version="0.0-synthetic",
    platform="cpu",
    devices=(BackendDevice(0, "cpu", "cpu"),),
)
SENTENCE = (
    "NVML sees 3 GPUs, but JAX runs on the CPU: JAX's CUDA plugin is not installed. "
    'Fix: pip install -U "jax[cuda12]", then restart the kernel.'
)


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)


@pytest.fixture
def jax_on_cpu(monkeypatch):
    """This process's JAX started on the CPU, with no plugin error recorded (synthetic)."""
    monkeypatch.setattr(jax_backend, "backend_info", lambda: ON_CPU)
    monkeypatch.setattr(jax_backend, "platforms_requested", lambda: None)


# --- the fix line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cuda, line",
    [
        (12040, 'pip install -U "jax[cuda12]"'),
        (13000, 'pip install -U "jax[cuda13]"'),
        (None, 'pip install -U "jax[cuda12]"   (or pip install -U "jax[cuda13]" where the driver supports CUDA 13)'),
        (
            11080,
            "upgrade the NVIDIA driver (it runs CUDA 11.8; JAX's CUDA plugins need CUDA 12 or later), "
            'then pip install -U "jax[cuda12]"',
        ),
    ],
    ids=["cuda-12.4-driver", "cuda-13.0-driver", "unknown", "cuda-11.8-driver"],
)
def test_the_plugin_to_install_follows_the_driver_s_cuda_version(cuda, line):
    assert plugin_command(cuda) == line


@pytest.mark.parametrize("page", ["README.md", "docs/guide.md"])
def test_the_install_line_in_the_docs_is_the_one_the_panel_shows_and_says_how_to_choose(page):
    # The panel, the status bar and the OOM report show plugin_command for the driver NVML reads;
    # the docs show its lines, and which one a driver takes, never a third choice of their own.
    install = (Path(__file__).parents[2] / page).read_text().split("\n## Install", 1)[1].split("\n## ", 1)[0]
    block = install.split("```bash\n", 1)[1].split("```", 1)[0]
    jax_lines = [line for line in block.splitlines() if "jax[" in line]
    assert jax_lines == [f'{plugin_command(12040)}   # or "jax[cuda13]" where the driver runs CUDA 13']
    assert plugin_command(13000) in install and "nvidia-smi" in install


def test_a_plugin_error_jax_recorded_is_the_fix_shown():
    found = cpu_fallback("cpu", 2, fallback_reason="the CUDA backend failed to start: synthetic")
    assert found == CpuFallback(2, "the CUDA backend failed to start: synthetic", is_command=False)
    assert found.sentence() == "NVML sees 2 GPUs, but JAX runs on the CPU: the CUDA backend failed to start: synthetic."


@pytest.mark.parametrize(
    "platform, gpus, requested",
    [("cuda", 3, False), ("cpu", 0, False), ("cpu", 3, True)],
    ids=["on-a-gpu", "no-gpus", "cpu-asked-for"],
)
def test_no_warning_unless_jax_is_on_the_cpu_beside_gpus_unasked(platform, gpus, requested):
    assert cpu_fallback(platform, gpus, cpu_requested=requested) is None


# --- each face ------------------------------------------------------------------------------------


def test_status_warns_first_with_the_fix(jax_on_cpu):
    with fake_nvml("three_gpus"):
        report = status()
    assert report.warnings[0] == SENTENCE
    assert SENTENCE in str(report)


def test_status_given_no_gpus_asks_nvml_nothing_more(jax_on_cpu):
    with fake_nvml("three_gpus") as world:
        status(nvml_readings=())  # NVML read by the caller, and empty: nothing to warn about
        assert world.total_calls() == 0


def test_jax_platforms_cpu_is_a_choice_not_warned(monkeypatch):
    monkeypatch.setattr(jax_backend, "backend_info", lambda: ON_CPU)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    with fake_nvml("three_gpus"):
        assert read_cpu_fallback() is None


def test_the_panel_s_snapshot_carries_the_warning(jax_on_cpu, monkeypatch):
    from jupyter_gpumem.settings import apply as allocator_shim

    monkeypatch.setattr(allocator_shim, "read_jax_devices", lambda: ())
    with fake_nvml("three_gpus"):
        snapshot = kernel_comm.snapshot()
    assert snapshot["platform"] == "cpu" and snapshot["warnings"][0] == SENTENCE


def _cpu_beside_three_gpus() -> Sample:
    # synthetic readings: three GPUs, the last idle; JAX's one device is the CPU
    gpus = tuple(
        DeviceReading(
            i,
            "Synthetic GPU",
            f"GPU-{i}",
            40 * GiB,
            GiB,
            39 * GiB,
            processes=() if i == 2 else (ProcessReading(999, GiB),),
        )
        for i in range(3)
    )
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, NotAvailable("no_stats", "the CPU keeps no allocator statistics"))
    return Sample(t=1.0, pid=4242, devices=gpus, jax=(cpu,))


def test_the_monitor_notes_each_gpu_that_jax_runs_on_the_cpu():
    notes = notes_for(_cpu_beside_three_gpus(), 1)
    assert any(note.startswith("JAX runs on the CPU, not on this GPU") for note in notes)


def test_the_oom_advice_puts_the_gpus_before_host_memory():
    r = OomReadings(
        requested=16 * 2**40,
        device_total=64 * GiB,
        platform="cpu",
        visible_gpus=3,
        idle_gpus=1,
        gpu_fix='pip install -U "jax[cuda12]"',
        synthetic=True,
    )
    fixes = advise(r)
    assert [f.kind for f in fixes] == ["cpu_beside_gpus", "too_large"]
    assert fixes[0].title == "JAX runs on the CPU, but NVML sees 3 GPUs, 1 of them idle"
    assert fixes[0].action == 'pip install -U "jax[cuda12]"'


def test_the_oom_report_counts_the_gpus_and_the_idle_ones(jax_on_cpu):
    from jupyter_gpumem import doctor
    from jupyter_gpumem.doctor.oom_text import OomError

    error = OomError("cpu", 16 * 2**40, True, None, "JaxRuntimeError", "synthetic")
    with fake_nvml("three_gpus"):
        report = doctor.oom_report(error, sample=_cpu_beside_three_gpus(), live=[], synthetic=True)
    assert report.fixes[0].kind == "cpu_beside_gpus"
    assert (report.readings.visible_gpus, report.readings.idle_gpus) == (3, 1)


# --- the real CPU JAX beside the fake world, in a fresh interpreter ------------------------------

_SCRIPT = """
import json
import jax.numpy as jnp
from jupyter_gpumem import doctor
from jupyter_gpumem.kernel import comm as kernel_comm
from jupyter_gpumem.sampling.sampler import get_sampler
from jupyter_gpumem.monitor.series import notes_for
from jupyter_gpumem.settings.status import status
jnp.ones(3).block_until_ready()
try:
    jnp.zeros((2**46,), jnp.float32)
except Exception as exc:
    report = doctor.oom_report(exc)
print(json.dumps({
    "status": str(status()),
    "panel": kernel_comm.snapshot()["warnings"],
    "monitor": notes_for(get_sampler().sample_once(), 0),
    "oom": [[f.kind, f.title, f.action] for f in report.fixes],
}))
"""


@pytest.fixture(scope="module")
def faces():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_", "CUDA_"))}
    env.update(
        PYTHONPATH=pythonpath(DROPIN_DIR),
        JUPYTER_GPUMEM_FAKE_NVML="three_gpus",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@without_cuda_plugin
def test_real_cpu_jax_gpumem_status_says_so(faces):
    assert f"Warnings:\n  - {SENTENCE}" in faces["status"]


@without_cuda_plugin
def test_real_cpu_jax_panel_says_so(faces):
    assert faces["panel"][0] == SENTENCE


@without_cuda_plugin
def test_real_cpu_jax_monitor_says_so(faces):
    assert faces["monitor"][0].startswith("JAX runs on the CPU, not on this GPU")


@without_cuda_plugin
def test_real_cpu_jax_oom_report_leads_with_the_gpus(faces):
    assert faces["oom"][0] == [
        "cpu_beside_gpus",
        "JAX runs on the CPU, but NVML sees 3 GPUs, 1 of them idle",
        'pip install -U "jax[cuda12]"',
    ]
    assert [kind for kind, _, _ in faces["oom"]][1:2] == ["too_large"]


# --- a CUDA backend that fails to start, and a CPU chosen through jax.config ----------------------

_FAILED_START = """
import json, sys
import jax
import jax.numpy as jnp
from jax._src import hardware_utils, xla_bridge
from jupyter_gpumem.kernel import comm as kernel_comm
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.settings.status import status

def cuda_that_cannot_start():
    raise RuntimeError("synthetic: CUDA_ERROR_OUT_OF_MEMORY: out of memory")

# What the CUDA plugin does at discovery (register_plugin: fail_quietly=False), on a machine
# with a GPU device node; the plugin itself is not installed here.
xla_bridge.register_backend_factory("cuda", cuda_that_cannot_start, priority=400, fail_quietly=False)
hardware_utils.has_visible_nvidia_gpu = lambda: True
jax_backend.cuda_plugin_installed = lambda: True
first = None
try:
    jnp.ones(3).block_until_ready()
except RuntimeError as err:
    first = str(err)
jnp.ones(3).block_until_ready()
before_ipython_kept_it = jax_backend.backend_info().fallback_reason
sys.last_value = RuntimeError(first)  # what IPython's _get_exc_info keeps of the failed cell
from jupyter_gpumem import doctor
try:
    jnp.zeros((2**46,), jnp.float32)
except Exception as exc:
    report = doctor.oom_report(exc)
print(json.dumps({
    "oom": [[f.kind, f.title, f.action] for f in report.fixes],
    "first": first, "platform": jax.default_backend(), "errors": dict(xla_bridge._backend_errors),
    "reason_without_record": before_ipython_kept_it, "status": str(status()),
    "panel": kernel_comm.snapshot()["warnings"],
}))
"""


def _fresh(script: str, **extra_env: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_", "CUDA_"))}
    env.update(
        PYTHONPATH=pythonpath(DROPIN_DIR),  # a JAX put first on the path kept
        JUPYTER_GPUMEM_FAKE_NVML="three_gpus",
        TF_CPP_MIN_LOG_LEVEL="3",
        **extra_env,
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def failed_start():
    return _fresh(_FAILED_START)


@pytest.mark.jax_versions
@without_cuda_plugin
def test_a_cuda_backend_that_fails_to_start_is_raised_once_and_not_recorded(failed_start):
    """The JAX behaviour the reason rests on, on the installed JAX: ``backends()`` in
    jax/_src/xla_bridge.py (0.4.38, 0.7.2, 0.10.2, 0.11.2, 0.12.0.1) raises a fail_quietly=False
    platform's error, keeps the CPU backend it made first, and records nothing in
    ``_backend_errors``."""
    assert failed_start["first"].startswith("Unable to initialize backend 'cuda': synthetic: CUDA_ERROR_OUT_OF_MEMORY")
    assert failed_start["platform"] == "cpu" and "cuda" not in failed_start["errors"]


@pytest.mark.jax_versions
@without_cuda_plugin
def test_a_cuda_backend_that_failed_to_start_is_named_even_without_a_record(failed_start):
    reason = failed_start["reason_without_record"]
    assert reason.startswith(
        "the CUDA backend failed to start (the CUDA plugin is installed and a GPU device is visible)"
    )
    assert "JAX kept no record of why" in reason and "no visible" not in reason


@pytest.fixture(scope="module")
def failed_start_watched():
    """The same, with the extension watching JAX's start (as ``%load_ext`` does before it)."""
    watched = _FAILED_START.replace(
        "import jax\n", "import jax\nfrom jupyter_gpumem.sources import jax_start\njax_start.watch()\n", 1
    )
    assert watched != _FAILED_START
    return _fresh(watched)


@pytest.mark.jax_versions
@without_cuda_plugin
def test_a_failed_start_the_cell_caught_is_named_with_its_error_where_the_start_was_watched(failed_start_watched):
    """The caught error is no cell's last error, and JAX kept nothing of it; the wrapper around
    ``_init_backend`` saw it go by."""
    reason = failed_start_watched["reason_without_record"]
    assert reason.startswith("the CUDA backend failed to start")
    assert 'Creating it raised: "RuntimeError: synthetic: CUDA_ERROR_OUT_OF_MEMORY: out of memory"' in reason
    assert "JAX kept no record of why" not in reason


@pytest.mark.jax_versions
@without_cuda_plugin
def test_status_and_panel_quote_the_start_error_the_cell_raised(failed_start):
    quoted = "The first operation raised: \"Unable to initialize backend 'cuda': synthetic: CUDA_ERROR_OUT_OF_MEMORY"
    assert quoted in failed_start["status"] and "not installed" not in failed_start["status"]
    assert failed_start["panel"][0].startswith(
        "NVML sees 3 GPUs, but JAX runs on the CPU: the CUDA backend failed to start"
    )
    assert quoted in failed_start["panel"][0]


_CHOSEN_THROUGH_CONFIG = """
import json
import jax
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp
jnp.ones(3).block_until_ready()
from jupyter_gpumem.kernel import comm as kernel_comm
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.settings.status import status
print(json.dumps({"requested": jax_backend.platforms_requested(), "status": str(status()),
                  "panel": kernel_comm.snapshot()["warnings"]}))
"""


@pytest.fixture(scope="module")
def chosen_through_config():
    return _fresh(_CHOSEN_THROUGH_CONFIG)


@pytest.mark.jax_versions
def test_jax_platforms_set_through_jax_config_is_read(chosen_through_config):
    """``jax.config.read("jax_platforms")`` raises AttributeError ("For flags with a
    corresponding contextmanager ...", ``Config.read`` in jax/_src/config.py, 0.4.38 to 0.12.0.1);
    the option is read as the property every option is."""
    assert chosen_through_config["requested"] == "cpu"


@pytest.mark.jax_versions
def test_a_cpu_chosen_through_jax_config_is_said_as_a_choice_not_a_missing_plugin(chosen_through_config):
    assert 'The CPU was chosen: jax_platforms is "cpu".' in chosen_through_config["status"]
    assert "pip install" not in chosen_through_config["status"]
    assert chosen_through_config["panel"] == []


@pytest.mark.jax_versions
@without_cuda_plugin
def test_the_oom_report_gives_the_failed_start_as_the_gpu_fix(failed_start):
    kind, _, action = failed_start["oom"][0]
    assert kind == "cpu_beside_gpus"
    assert action.startswith(
        "The CUDA backend failed to start (the CUDA plugin is installed and a GPU device is visible)"
    )
    assert "pip install" not in action
