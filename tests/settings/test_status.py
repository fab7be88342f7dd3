"""%gpumem status: settings and their sources, warnings, and how the report reads."""

from __future__ import annotations

import pytest

from jupyter_gpumem.core.readings import DeviceReading, DeviceUnreadable, NotAvailable
from jupyter_gpumem.settings.status import StatusReport, display_gpu_warnings, status
from jupyter_gpumem.sources.jax_backend import BackendDevice, BackendInfo
from jupyter_gpumem.testing import fake_nvml

NO_NVML = NotAvailable("no_library", "synthetic: no NVML in this test")

_VARS = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC",
    "TF_GPU_ALLOCATOR",
    "JAX_COMPILER_ENABLE_REMAT_PASS",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)


def _gpu(index: int, display: bool) -> DeviceReading:
    # synthetic readings
    return DeviceReading(
        index=index,
        name="Synthetic GPU",
        uuid=f"GPU-synthetic-{index}",
        total_bytes=8 << 30,
        used_bytes=1 << 30,
        free_bytes=7 << 30,
        display_active=display,
    )


def _by_name(report: StatusReport) -> dict:
    return {s.name: s for s in report.settings}


def test_unset_variables_are_jax_defaults():
    settings = _by_name(status(NO_NVML))
    assert {name: (s.shown, s.source) for name, s in settings.items() if name != "remat"} == {
        "preallocate": ("on", "JAX default"),
        "fraction": ("0.75", "JAX default"),
        "allocator": ("default (bfc)", "JAX default"),
        "async_prealloc": ("not set", "JAX default"),
    }


def test_variables_set_before_loading_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    monkeypatch.setenv("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", str(2 << 30))
    settings = _by_name(status(NO_NVML))
    assert (settings["preallocate"].value, settings["preallocate"].source) == (False, "environment")
    assert settings["async_prealloc"].shown == "2.00 GiB"


def test_preallocate_reads_as_jax_reads_it(monkeypatch):
    # JAX turns preallocation off only for false, False and 0: "FALSE" leaves it on.
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "FALSE")
    assert _by_name(status(NO_NVML))["preallocate"].value is True


def test_both_fraction_names_set_is_warned(monkeypatch):
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", ".5")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".6")
    warnings = status(NO_NVML).warnings
    assert len([w for w in warnings if "both XLA_CLIENT_MEM_FRACTION and XLA_PYTHON_CLIENT_MEM_FRACTION" in w]) == 1


def test_a_stale_tf_gpu_allocator_is_warned(monkeypatch):
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    assert any("TF_GPU_ALLOCATOR" in w and "does not read" in w for w in status(NO_NVML).warnings)


def test_a_value_jax_will_reject_is_warned_with_jax_s_message(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_malloc_async")
    warnings = status(NO_NVML).warnings
    assert any("fall back to the CPU" in w and "XLA_PYTHON_CLIENT_ALLOCATOR" in w for w in warnings)


def test_a_clean_environment_has_no_warnings():
    assert status(NO_NVML).warnings == ()


def test_a_display_gpu_is_warned():
    warnings = display_gpu_warnings((_gpu(0, False), _gpu(1, True)))
    assert len(warnings) == 1 and warnings[0].startswith("GPU 1 (Synthetic GPU) drives a display")


def test_unreadable_devices_and_missing_nvml_give_no_display_warning():
    unreadable = DeviceUnreadable(index=0, why=NotAvailable("gpu_lost", "synthetic"))
    assert display_gpu_warnings((unreadable,)) == [] and display_gpu_warnings(NO_NVML) == []


def test_status_includes_display_warnings_from_nvml_readings():
    assert any("drives a display" in w for w in status((_gpu(0, True),)).warnings)


NOT_STARTED = BackendInfo(started=False, jax_imported=False, jax_version=None)
ON_THE_CPU = BackendInfo(started=True, jax_imported=True, jax_version="0.0-synthetic", platform="cpu")


@pytest.mark.parametrize(("backend", "reads"), [(NOT_STARTED, 1), (ON_THE_CPU, 2)], ids=["not-started", "on-the-cpu"])
def test_status_reads_nvml_once_and_releases_it(monkeypatch, backend, reads):
    """Once, and a second time only for the driver's CUDA version when JAX runs on the CPU beside
    GPUs; each read is released. The backend is given: a worker process of this run may have
    started JAX on the CPU in an earlier test (it read 2 inits with the backend left to chance)."""
    from jupyter_gpumem.sources import jax_backend

    monkeypatch.setattr(jax_backend, "backend_info", lambda: backend)
    monkeypatch.setattr(jax_backend, "cpu_chosen", lambda: False)
    with fake_nvml("display_gpu") as world:
        report = status()
    assert any("drives a display" in w for w in report.warnings)
    assert world.calls["nvmlInit"] + world.calls["nvmlInitWithFlags"] == reads == world.calls["nvmlShutdown"]
    assert (report.cpu_fallback is not None) == backend.started


def test_text_report_lists_each_setting_with_value_source_and_variable(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    text = str(status(NO_NVML))
    allocator_line = next(line for line in text.splitlines() if line.strip().startswith("allocator"))
    assert allocator_line.split() == ["allocator", "platform", "environment", "XLA_PYTHON_CLIENT_ALLOCATOR"]
    assert "async-prealloc" in text and "jax.config jax_compiler_enable_remat_pass" in text


def test_html_report_is_a_table_with_escaped_text(monkeypatch):
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "<b>x</b>")
    html = status(NO_NVML)._repr_html_()
    assert html.count("<tr>") == 6  # a header and five settings
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html


def test_json_report_carries_settings_backend_and_warnings():
    data = status(NO_NVML).to_json()
    assert [s["name"] for s in data["settings"]] == ["preallocate", "fraction", "allocator", "async_prealloc", "remat"]
    assert set(data["backend"]) == {
        "started",
        "jax_imported",
        "jax_version",
        "platform",
        "devices",
        "fallback_reason",
        "error",
    }
    assert data["warnings"] == []


def test_backend_line_explains_a_cpu_fallback():
    backend = BackendInfo(
        started=True,
        jax_imported=True,
        jax_version="0.0.0",
        platform="cpu",
        devices=(BackendDevice(id=0, kind="cpu", platform="cpu"),),
        fallback_reason="the CUDA backend failed to start: synthetic error",
    )
    report = StatusReport(settings=(), warnings=(), backend=backend)
    assert report.backend_line() == (
        "JAX's backend has started on cpu (0: cpu). It fell back to the CPU: "
        "the CUDA backend failed to start: synthetic error"
    )


def test_package_status_can_be_called_again_after_its_module_is_imported():
    import jupyter_gpumem

    first, second = jupyter_gpumem.status(), jupyter_gpumem.status()
    assert isinstance(first, StatusReport) and isinstance(second, StatusReport)


def test_control_characters_in_the_environment_are_shown_escaped_in_the_text(monkeypatch):
    """A value from the environment (here the allocator, which JAX would reject) is named in the
    settings and in a warning; its escapes and newlines must not act on the terminal."""
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc\x1b[2J\nWarnings:\n  - all fine")
    text = str(status(nvml_readings=NO_NVML))
    assert "\x1b" not in text and "\\x1b[2J\\nWarnings:\\n  - all fine" in text
    assert [line for line in text.splitlines() if line.startswith("Warnings:")] == ["Warnings:"]
    assert not any(line.startswith("  - all fine") for line in text.splitlines())


def test_gpu_or_replay_is_live_where_nvml_reads_a_gpu_and_the_cuda_plugin_is_installed():
    from jupyter_gpumem.core.readings import DeviceReading
    from jupyter_gpumem.settings.status import gpu_or_replay_text

    gpu = DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-synthetic", 80 << 30, 0, 80 << 30)
    assert gpu_or_replay_text((gpu,), cuda_plugin=True) == (
        True,
        "Live: JAX can use NVIDIA H100 80GB HBM3 on the machine this cell ran on.",
    )


def test_gpu_or_replay_without_a_gpu_says_why_and_that_lessons_replay_synthetic_traces():
    from jupyter_gpumem.core.readings import DeviceReading, NotAvailable
    from jupyter_gpumem.settings.status import gpu_or_replay_text

    live, text = gpu_or_replay_text(NotAvailable("no_driver", "no NVIDIA driver"), cuda_plugin=True)
    assert not live and text.startswith(
        "No GPU for JAX on the machine this cell ran on (no NVIDIA driver): JAX runs on its CPU."
    )
    assert "REPLAY" in text and "SYNTHETIC" in text
    gpu = DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-synthetic", 80 << 30, 0, 80 << 30)
    live, text = gpu_or_replay_text((gpu,), cuda_plugin=False)
    assert not live and text.startswith(
        "No GPU for JAX on the machine this cell ran on (JAX's CUDA plugin is not installed): JAX runs on its CPU."
    )
