"""The out-of-memory texts JAX 0.11.2 raised on an H100 (the GPU proof of 2026-11-26, kept unedited
in tests/data/oom_texts/h100_jax_0.11.2_*.txt), read as the doctor reads them.

What they showed that the texts read from the sources did not:

- every allocator names itself and the device after the size: "Out of memory while trying to
  allocate 159.29GiB with allocator GPU_0_bfc on device 0. [tf-allocator-allocation-error='']
  [executable_name='jit_broadcast_in_dim']"; BFC is GPU_<n>_bfc, cuda_async gpu_async_<n>, and
  platform and address both SE_<n>_space_<m>. The platform form "Failed to allocate request for
  ... on device ordinal N" (tests/data/oom_texts/platform_allocator.txt, from the reference page)
  was not raised.
- the vmm allocator raises its own form, in bytes rounded up to its granularity: "Not enough PA budget:
  pa_allocated=2097152B, allocation_size=102626230272B, pa_budget=63763120128B" (the format string
  of DeviceAddressVmmAllocator in XLA's device_address_vmm_allocator.cc; an older one wrote
  "... for allocation: pa_allocated=%uB, rounded_size=%uB, pa_budget=%uB").
- a compile on a full GPU fails in the autotuner: "Failed to get configs for: 2 out of 2
  instructions. See logs for all failures. Example failure: \\nOut of memory while trying to
  allocate 32.00MiB ..." (XLA's autotuner joins the first failure's status to that sentence and
  keeps its code); the same program compiled with xla_gpu_autotune_level 0 got past the
  compile and failed only at run, for its 16 MiB output (h100_jax_0.11.2_oom_compile_autotune_off.txt).
- a program whose temporaries pass the device (238.94 GiB on an 80 GB card) compiles and fails
  at run with the allocator's text alone: no "BufferAssignment OOM Debugging", no "Peak buffers:".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpumem.doctor.oom_text import allocator_words, recognise_text

TEXTS = Path(__file__).parents[1] / "data" / "oom_texts"
GiB = 2**30


def recorded(name: str) -> str:
    return (TEXTS / f"h100_jax_0.11.2_{name}.txt").read_text()


@pytest.mark.parametrize(
    "name, form, size, allocator",
    [
        ("bfc_oom_array", "gpu_human", "159.29GiB", "GPU_0_bfc"),
        ("cuda_async_oom", "gpu_human", "95.58GiB", "gpu_async_0"),
        ("platform_oom", "gpu_human", "95.58GiB", "SE_0_space_0"),
        ("address_oom", "gpu_human", "95.58GiB", "SE_0_space_0"),
        ("jit_oom_run", "gpu_human", "238.94GiB", "GPU_0_bfc"),
        ("oom_fill_1MiB", "gpu_human", "1.00MiB", "GPU_0_bfc"),
        ("oom_compile_compile", "gpu_human", "32.00MiB", "GPU_0_bfc"),
        ("oom_compile_autotune_off", "gpu_human", "16.00MiB", "GPU_0_bfc"),
    ],
)
def test_each_recorded_text_gives_its_size_the_allocator_and_device_0(name, form, size, allocator):
    text = recorded(name)
    assert size in text  # the size as XLA printed it, read back into its rounding range
    found = recognise_text(text, "JaxRuntimeError")
    assert (found.form, found.allocator, found.ordinal, found.exact) == (form, allocator, 0, False)
    low, high = found.requested_range
    assert low <= found.requested_bytes <= high and high - low < 0.01 * low


def test_the_vmm_text_is_read_as_rounded_up_to_the_granularity_and_names_no_device():
    """vmm prints the request rounded up to the allocation granularity (``RoundUpToGranularity``
    and the physical size in ``AllocatePhysicalWithinBudget``, XLA's
    device_address_vmm_allocator.cc, read): the most the request can be, not the request."""
    found = recognise_text(recorded("vmm_oom"), "JaxRuntimeError")
    assert (found.form, found.requested_bytes, found.exact, found.ordinal) == ("vmm", 102_626_230_272, False, None)
    assert found.requested_range == (102_626_230_272 - (2 << 20) + 1, 102_626_230_272)


def test_the_older_vmm_text_is_read_at_its_rounded_size():
    older = "RESOURCE_EXHAUSTED: Not enough PA budget for allocation: pa_allocated=0B, rounded_size=4194304B, pa_budget=2097152B"
    assert recognise_text(older).requested_bytes == 4_194_304


def test_only_the_compile_time_text_is_the_autotuners():
    assert recognise_text(recorded("oom_compile_compile")).autotuning is True
    for name in ("oom_compile_autotune_off", "bfc_oom_array", "jit_oom_run", "vmm_oom"):
        assert recognise_text(recorded(name)).autotuning is False, name


def test_a_run_time_oom_of_a_program_carries_no_peak_buffers():
    text = recorded("jit_oom_run")
    assert "Peak buffers:" not in text and "BufferAssignment OOM Debugging" not in text


@pytest.mark.parametrize(
    "name, words",
    [
        ("GPU_0_bfc", "JAX's BFC pool"),
        ("GPU_12_bfc", "JAX's BFC pool"),
        ("gpu_async_0", "the CUDA driver's memory pool (cuda_async)"),
        ("SE_0_space_0", "CUDA directly, without a pool (the platform or address allocator)"),
        ("SE_3_space_1", "CUDA directly, without a pool (the platform or address allocator)"),
        ("GPU_0_bfcx", ""),
        ("something_else", ""),
        (None, ""),
    ],
)
def test_an_allocators_name_is_said_in_words_only_where_it_is_known(name, words):
    assert allocator_words(name) == words


def test_the_recorded_compile_oom_replays_as_a_report_that_names_the_autotuner_and_its_fix():
    """The trace of that compile (tests/data/traces/oom_compile.jsonl, real: BFC with preallocation
    off and a fraction of 1.0 on a full H100) replayed at its oom event, with the settings the
    recorded process ran with, not this one's."""
    from jupyter_gpumem import doctor
    from jupyter_gpumem.core.tracefile import read_trace

    trace = read_trace(str(Path(__file__).parents[1] / "data" / "traces" / "oom_compile.jsonl"))
    event = next(e for e in trace.events if e.name == "oom")
    sample = [s for s in trace.samples if s.t <= event.t][-1]
    error = recognise_text(event.data["message"], "JaxRuntimeError")
    report = doctor.oom_report(error, sample=sample, recorded_env=trace.header["settings"]["env"])
    lines = report.lines()
    assert trace.synthetic is False and report.readings.synthetic is False
    assert lines[2] == (
        "Raised by XLA's allocator GPU_0_bfc (JAX's BFC pool). While compiling: XLA's autotuner ran out as it "
        "tried kernels for the program, so the size is one trial's scratch, not an array of the program."
    )
    assert [s[:3] for s in report.settings][:2] == [("preallocate", "off", "recorded"), ("fraction", "1", "recorded")]
    first = report.fixes[0]
    assert first.kind == "autotune"
    assert first.action.startswith('jax.jit(f).lower(*args).compile(compiler_options={"xla_gpu_autotune_level": 0})')
    assert not any("preallocate off" in a for a in first.extra_actions)  # it was off
    assert "allocator GPU_0_bfc (JAX&#x27;s BFC pool). While compiling" in report._repr_html_()
    assert report.to_json()["error"]["autotuning"] is True
