"""The OOM advice for device memory, read whole: each rule of ``doctor/oom_rules.py`` at its
boundaries, and the exact sentence, line to run and numbers a user reads after the error.

Every reading here is synthetic (``oom()`` marks it so), made up for the rule it tests; the
numbers in the comments are worked by hand.
"""

from __future__ import annotations

import pytest

from jupyter_gpumem.core.readings import CudaPoolReading
from jupyter_gpumem.core.sites import Growth
from jupyter_gpumem.doctor.oom_readings import Fix, OomReadings, OtherProcess
from jupyter_gpumem.doctor.oom_rules import (
    compiled_programs,
    fraction_cap,
    fragmented_pool,
    host_pid_processes,
    jax_on_cpu_beside_gpus,
    kept_runs,
    other_processes,
    output_history,
    rematerialisation,
    request_larger_than_device,
    shortfall,
)

GiB = 1024**3
MiB = 1024**2


def oom(requested: int | None = None, **readings) -> OomReadings:
    """Synthetic readings of a failure: the request and the fields a test names, nothing else known."""
    return OomReadings(requested=requested, synthetic=True, **readings)


def bfc(in_use: int, pool: int, limit: int, largest_block: int) -> dict:
    """A BFC allocator's statistics, as ``oom(**bfc(...))`` fields."""
    return {"bytes_in_use": in_use, "pool_bytes": pool, "bytes_limit": limit, "largest_free_block": largest_block}


# --- shortfall: bytes missing for the request ----------------------------------------------------


def test_shortfall_is_the_request_less_the_largest_request_that_can_succeed():
    assert shortfall(oom(8 * GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB))) == 5 * GiB


def test_shortfall_is_none_where_a_request_within_the_largest_block_failed_anyway():
    # never negative: the largest block (3 GiB) is more than the 2 GiB asked
    assert shortfall(oom(2 * GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB))) == 0


def test_shortfall_without_allocator_statistics_weighs_the_request_against_nvmls_free_bytes():
    assert shortfall(oom(12 * GiB, device_free=10 * GiB)) == 2 * GiB


def test_shortfall_against_nvmls_free_bytes_is_never_negative():
    assert shortfall(oom(GiB, device_free=10 * GiB)) == 0


@pytest.mark.parametrize(
    "readings",
    [
        oom(None, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)),
        oom(12 * GiB),
        oom(12 * GiB, device_free=10 * GiB, platform="cpu"),
        # a limit without a pool size: the pool may grow by an unknown amount, free bytes say nothing
        oom(12 * GiB, device_free=10 * GiB, bytes_limit=60 * GiB),
    ],
    ids=["no request", "nothing known", "the cpu", "a limit but no pool"],
)
def test_shortfall_is_unknown_without_a_request_or_a_largest_request(readings):
    assert shortfall(readings) is None


# --- JAX on the CPU beside GPUs ------------------------------------------------------------------


def test_jax_on_the_cpu_beside_one_gpu_says_how_to_put_jax_on_it():
    # No line found for this machine: the one for a driver whose CUDA version is unknown, both extras.
    assert jax_on_cpu_beside_gpus(oom(GiB, platform="cpu", visible_gpus=1), None) == Fix(
        "cpu_beside_gpus",
        "JAX runs on the CPU, but NVML sees 1 GPU",
        'pip install -U "jax[cuda12]"   (or pip install -U "jax[cuda13]" where the driver supports CUDA 13), '
        "then restart the kernel",
        "This error is about host memory because JAX never started on a GPU; on one, the request "
        "would be weighed against the GPU's memory instead.",
        None,
        None,
    )


def test_jax_on_the_cpu_beside_gpus_counts_the_idle_ones_and_offers_the_line_found_for_this_machine():
    r = oom(GiB, platform="cpu", visible_gpus=2, idle_gpus=1, gpu_fix='pip install -U "jax[cuda13]"')
    fix = jax_on_cpu_beside_gpus(r, None)
    assert (fix.title, fix.action) == ("JAX runs on the CPU, but NVML sees 2 GPUs, 1 of them idle", r.gpu_fix)


def test_jax_on_the_cpu_beside_busy_gpus_does_not_call_any_idle():
    fix = jax_on_cpu_beside_gpus(oom(GiB, platform="cpu", visible_gpus=2, idle_gpus=0), None)
    assert fix.title == "JAX runs on the CPU, but NVML sees 2 GPUs"


@pytest.mark.parametrize("platform, gpus", [("gpu", 2), ("cpu", 0)])
def test_jax_on_a_gpu_or_on_a_machine_without_gpus_is_not_told_to_move(platform, gpus):
    assert jax_on_cpu_beside_gpus(oom(GiB, platform=platform, visible_gpus=gpus), None) is None


# --- a request larger than the device ------------------------------------------------------------


def test_a_request_larger_than_the_device_says_only_a_smaller_program_helps():
    assert request_larger_than_device(oom(100 * GiB, device_total=80 * GiB), None) == Fix(
        "too_large",
        "The request (100.00 GiB) is larger than the device (80.00 GiB)",
        "Make the program need less: a smaller batch or array, a lower precision dtype, "
        "or shard the array across devices (jax.sharding).",
        "100.00 GiB requested, 80.00 GiB total: no allocator setting can make it fit.",
        None,
        False,
    )


def test_a_request_larger_than_the_hosts_memory_on_the_cpu_names_host_memory():
    fix = request_larger_than_device(oom(100 * GiB, device_total=64 * GiB, platform="cpu"), None)
    assert fix.title == "The request (100.00 GiB) is larger than host memory (64.00 GiB)"


@pytest.mark.parametrize(
    "readings",
    [oom(80 * GiB, device_total=80 * GiB), oom(None, device_total=80 * GiB), oom(100 * GiB)],
    ids=["exactly the device", "no request", "no device total"],
)
def test_a_request_not_known_to_exceed_the_device_is_not_too_large(readings):
    assert request_larger_than_device(readings, None) is None


# --- other processes on the device ---------------------------------------------------------------

KERNEL = "Jupyter kernel"


def test_another_kernel_holding_most_of_the_device_is_named_with_how_to_share_the_card():
    r = oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(4_200_101, 60 * GiB, KERNEL),))
    assert other_processes(r, 2 * GiB) == Fix(
        "other_process",
        "1 other process (a Jupyter kernel) holds 60.00 GiB (75%) of this device",
        "Shut down or restart the process holding the most: pid 4200101 (Jupyter kernel, 60.00 GiB); "
        "the JupyterLab GPU panel shows which notebook it is.",
        "Other processes hold 60.00 GiB of 80.00 GiB; this kernel cannot use it.",
        60 * GiB,
        True,
        (
            "In each other JAX kernel, run `%gpumem preallocate off` (or `%gpumem fraction 0.4`) as its first "
            "cell and restart it, so that kernels share the card instead of taking 75% each.",
        ),
    )


def test_other_processes_that_are_not_processes_here_are_listed_by_pid_not_named_to_shut_down():
    gone = (OtherProcess(7, 15 * GiB, here=False), OtherProcess(8, 5 * GiB, here=False))
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=gone), None)
    assert (fix.title, fix.action, fix.extra_actions) == (
        "2 other processes hold 20.00 GiB (25%) of this device",
        "Find out which processes NVML's pids 7, 8 are where they run (`nvidia-smi` on the host, for a "
        "container): none of them is a process here.",
        (),
    )


def test_the_process_named_to_shut_down_is_the_one_here_holding_the_most():
    others = (
        OtherProcess(11, 10 * GiB, "python"),
        OtherProcess(12, 20 * GiB, "train.py"),
        OtherProcess(13, 30 * GiB, here=False),
    )
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=others), None)
    assert fix.action.startswith("Shut down or restart the process holding the most: pid 12 (train.py, 20.00 GiB);")


def test_processes_nvml_gives_no_bytes_or_zero_bytes_for_are_not_counted_among_the_others():
    others = (OtherProcess(11, 40 * GiB, "python"), OtherProcess(12, None), OtherProcess(13, 0))
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=others), None)
    assert fix.title == "1 other process holds 40.00 GiB (50%) of this device"


@pytest.mark.parametrize(
    "labels, who",
    [
        ((KERNEL, "python"), "2 other processes (1 of them a Jupyter kernel) hold"),
        ((KERNEL, KERNEL), "2 other processes (2 of them Jupyter kernels) hold"),
    ],
)
def test_the_other_jupyter_kernels_are_counted_in_the_title(labels, who):
    others = tuple(OtherProcess(20 + i, 10 * GiB, label) for i, label in enumerate(labels))
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=others), None)
    assert fix.title == f"{who} 20.00 GiB (25%) of this device"


def test_other_kernels_holding_exactly_half_the_device_are_asked_to_share_it():
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, 40 * GiB, KERNEL),)), None)
    assert len(fix.extra_actions) == 1 and fix.extra_actions[0].startswith("In each other JAX kernel")


def test_other_kernels_holding_less_than_half_the_device_are_not_asked_to_share_it():
    others = (OtherProcess(9, 40 * GiB - 1, KERNEL),)
    assert other_processes(oom(12 * GiB, device_total=80 * GiB, others=others), None).extra_actions == ()


def test_other_processes_holding_a_quarter_of_the_device_are_a_fix_whatever_the_shortfall():
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, 20 * GiB),)), None)
    assert (fix.gain_bytes, fix.enough) == (20 * GiB, None)


def test_other_processes_holding_under_a_quarter_and_less_than_the_shortfall_are_no_fix():
    r = oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, 20 * GiB - 1),))
    assert other_processes(r, None) is None
    assert other_processes(r, 20 * GiB) is None


def test_other_processes_holding_under_a_quarter_but_the_whole_shortfall_are_enough():
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, 4 * GiB),)), 4 * GiB)
    assert (fix.title, fix.enough) == ("1 other process holds 4.00 GiB (5%) of this device", True)


def test_a_single_byte_other_processes_hold_covers_a_shortfall_of_one_byte():
    fix = other_processes(oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, 1),)), 1)
    assert (fix.title, fix.enough) == ("1 other process holds 1 B (0%) of this device", True)


def test_other_processes_are_no_fix_when_nothing_is_short():
    assert other_processes(oom(12 * GiB, device_total=80 * GiB, others=(OtherProcess(9, GiB),)), 0) is None


@pytest.mark.parametrize("total", [None, 0])
def test_other_processes_are_no_fix_on_a_device_of_unknown_size(total):
    assert other_processes(oom(12 * GiB, device_total=total, others=(OtherProcess(9, 60 * GiB),)), GiB) is None


# --- processes listed by host pids (a container) -------------------------------------------------


def host_listed(*gib: int) -> tuple[OtherProcess, ...]:
    return tuple(OtherProcess(1001 + i, n * GiB, here=False) for i, n in enumerate(gib))


def test_processes_listed_by_host_pids_are_counted_less_this_kernels_pool_and_named_by_pid():
    # NVML lists 50 + 10 GiB; this kernel's pool is 20 of it: up to 40 GiB (50%) is another's
    r = oom(
        12 * GiB,
        device_total=80 * GiB,
        host_pid_processes=host_listed(50, 10),
        **bfc(10 * GiB, 20 * GiB, 60 * GiB, GiB),
    )
    assert host_pid_processes(r, 2 * GiB) == Fix(
        "other_process",
        "Processes NVML lists by host pid may hold up to 40.00 GiB (50%) of this device",
        "Find out on the host which processes pids 1001, 1002 are (`nvidia-smi` there); this kernel may be "
        "one of them, and none is a process here, so none is named to shut down.",
        "Inside a container NVML lists the host's pids (NVIDIA/nvidia-docker#1483). Together they hold "
        "60.00 GiB; this kernel's JAX pool is 20.00 GiB of it, and the rest, up to 40.00 GiB, is other "
        "processes' or this kernel's outside JAX.",
        None,
        False,
    )


def test_processes_listed_by_host_pids_without_a_known_pool_count_the_pool_as_nothing():
    fix = host_pid_processes(oom(12 * GiB, device_total=80 * GiB, host_pid_processes=host_listed(40)), None)
    assert fix.why.startswith(
        "Inside a container NVML lists the host's pids (NVIDIA/nvidia-docker#1483). Together they hold "
        "40.00 GiB; this kernel's JAX pool is 0 B of it, and the rest, up to 40.00 GiB,"
    )


def test_processes_listed_by_host_pids_holding_only_this_kernels_pool_are_no_fix():
    r = oom(
        12 * GiB, device_total=80 * GiB, host_pid_processes=host_listed(20), **bfc(10 * GiB, 20 * GiB, 60 * GiB, GiB)
    )
    assert host_pid_processes(r, 2 * GiB) is None


def test_processes_listed_by_host_pids_holding_a_quarter_of_the_device_are_a_fix():
    fix = host_pid_processes(oom(12 * GiB, device_total=80 * GiB, host_pid_processes=host_listed(20)), None)
    assert fix.title == "Processes NVML lists by host pid may hold up to 20.00 GiB (25%) of this device"


def test_processes_listed_by_host_pids_holding_under_a_quarter_are_a_fix_only_for_the_whole_shortfall():
    r = oom(12 * GiB, device_total=80 * GiB, host_pid_processes=(OtherProcess(1001, 20 * GiB - 1, here=False),))
    assert (host_pid_processes(r, None), host_pid_processes(r, 20 * GiB), host_pid_processes(r, 0)) == (None,) * 3
    assert host_pid_processes(r, 20 * GiB - 1).title.startswith("Processes NVML lists by host pid may hold up to")


@pytest.mark.parametrize("total", [None, 0])
def test_processes_listed_by_host_pids_are_no_fix_on_a_device_of_unknown_size(total):
    assert host_pid_processes(oom(12 * GiB, device_total=total, host_pid_processes=host_listed(60)), GiB) is None


def test_a_single_byte_beside_this_kernels_pool_covers_a_shortfall_of_one_byte():
    listed = (OtherProcess(1001, 20 * GiB + 1, here=False),)
    r = oom(12 * GiB, device_total=80 * GiB, host_pid_processes=listed, **bfc(10 * GiB, 20 * GiB, 60 * GiB, GiB))
    assert host_pid_processes(r, 1).title == "Processes NVML lists by host pid may hold up to 1 B (0%) of this device"


def test_under_cuda_async_this_kernels_pool_among_host_pids_is_the_driver_pools_reserved_bytes():
    # the driver pool reserves 30 GiB, 10 of it in use: 50 listed - 30 = 20 GiB (25%) another's
    r = oom(
        12 * GiB,
        device_total=80 * GiB,
        host_pid_processes=host_listed(50),
        allocator="cuda_async",
        bytes_in_use=10 * GiB,
        cuda_pool=CudaPoolReading(30 * GiB, 30 * GiB, 10 * GiB, 10 * GiB),
    )
    assert host_pid_processes(r, None).why.endswith(
        "Together they hold 50.00 GiB; this kernel's JAX pool is 30.00 GiB of it, and the rest, up to "
        "20.00 GiB, is other processes' or this kernel's outside JAX."
    )


# --- output history ------------------------------------------------------------------------------


def test_arrays_held_by_output_history_are_freed_with_the_history_line():
    assert output_history(oom(4 * GiB, history_bytes=6 * GiB), 2 * GiB) == Fix(
        "history",
        "Output history (Out, _) keeps 6.00 GiB of arrays alive",
        "%gpumem free --history",
        "Cells whose last line showed an array keep it in Out; 6.00 GiB is held only there.",
        6 * GiB,
        True,
    )


@pytest.mark.parametrize("need, enough", [(6 * GiB, True), (6 * GiB + 1, False), (None, None)])
def test_history_is_enough_when_it_holds_at_least_the_shortfall(need, enough):
    assert output_history(oom(8 * GiB, history_bytes=6 * GiB), need).enough is enough


def test_a_single_byte_held_by_history_is_still_named():
    assert output_history(oom(GiB, history_bytes=1), None).title == "Output history (Out, _) keeps 1 B of arrays alive"


def test_nothing_held_by_history_is_no_fix():
    assert output_history(oom(GiB, history_bytes=0), GiB) is None


# --- a fragmented pool ---------------------------------------------------------------------------

DEFRAGMENT = "jupyter_gpumem.defragment(params)  # for the largest pytree you hold; rebind it to the result"


def test_a_fragmented_pool_with_preallocation_off_is_advised_preallocation_and_told_why():
    # pool 60 = limit, 40 in use: 20 GiB free, largest block 3 GiB; fragmentation (20 - 3) / 20
    r = oom(8 * GiB, preallocate=False, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB))
    assert fragmented_pool(r, 5 * GiB) == Fix(
        "fragmentation",
        "Enough memory is free in total (20.00 GiB), but the largest free block is 3.00 GiB",
        "%gpumem preallocate on  (restart the kernel, then run it first)",
        "8.00 GiB requested; free in total 20.00 GiB; largest free block 3.00 GiB; fragmentation 85%; "
        "largest request that can succeed 3.00 GiB. With preallocation off the pool grows in separate "
        "regions that never coalesce, so the largest block is capped by a region's size; one preallocated "
        "region avoids that.",
        20 * GiB,
        True,
        (DEFRAGMENT,),
    )


def test_a_fragmented_preallocated_pool_is_advised_a_restart_for_one_free_block():
    fix = fragmented_pool(oom(8 * GiB, preallocate=True, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)), None)
    assert (fix.action, fix.why) == (
        "Restart the kernel: a fresh pool has one free block",
        "8.00 GiB requested; free in total 20.00 GiB; largest free block 3.00 GiB; fragmentation 85%; "
        "largest request that can succeed 3.00 GiB.",
    )


def test_a_fragmented_pool_that_can_still_grow_names_the_growth_apart_from_the_block():
    # pool 50 of limit 60, NVML 2 GiB free: it grows by min(10, 2) = 2; free 10 + 2 = 12 GiB
    r = oom(8 * GiB, device_free=2 * GiB, **bfc(40 * GiB, 50 * GiB, 60 * GiB, 3 * GiB))
    fix = fragmented_pool(r, None)
    assert fix.title == (
        "Enough memory is free in total (12.00 GiB), but the largest free block is 3.00 GiB "
        "and the pool can grow by only 2.00 GiB"
    )


def test_a_request_of_exactly_all_that_is_free_is_still_fragmentation():
    assert fragmented_pool(oom(20 * GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)), None).kind == "fragmentation"


@pytest.mark.parametrize(
    "readings",
    [
        oom(3 * GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)),
        oom(20 * GiB + 1, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)),
        oom(None, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)),
        oom(8 * GiB, largest_free_block=3 * GiB, bytes_limit=60 * GiB),
        oom(8 * GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, None)),
        oom(8 * GiB, allocator="cuda_async", device_free=GiB, **bfc(40 * GiB, 60 * GiB, 60 * GiB, 3 * GiB)),
    ],
    ids=["fits the block", "more than is free", "no request", "no pool", "no block", "cuda_async"],
)
def test_no_fragmentation_unless_the_request_fits_in_total_but_not_in_the_largest_block(readings):
    assert fragmented_pool(readings, None) is None


# --- the fraction caps the pool ------------------------------------------------------------------


def test_a_pool_capped_by_the_fraction_is_offered_the_fraction_that_fits_with_two_points_spare():
    # in use 38 + request 10 = 48 GiB of 80: 60% + 2 points; 0.62 * 80 GiB - 40 GiB = 10307921510 bytes
    r = oom(10 * GiB, device_total=80 * GiB, fraction=0.5, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 2 * GiB))
    assert fraction_cap(r, 8 * GiB) == Fix(
        "fraction_cap",
        "The pool is capped at 40.00 GiB by the fraction (0.5)",
        "%gpumem fraction 0.62  (restart the kernel, then run it first)",
        "In use 38.00 GiB + request 10.00 GiB = 48.00 GiB exceeds the limit 40.00 GiB, while the device "
        "has 80.00 GiB not held by other processes.",
        10_307_921_510,
        True,
    )


def test_the_fraction_in_effect_is_a_question_mark_when_not_known():
    fix = fraction_cap(oom(10 * GiB, device_total=80 * GiB, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 2 * GiB)), None)
    assert fix.title == "The pool is capped at 40.00 GiB by the fraction (?)"


def test_the_room_offered_leaves_out_what_other_processes_and_host_pids_hold():
    # 80 - 10 (others) - (30 listed by host pid less this pool's 20) = 60 GiB
    r = oom(
        10 * GiB,
        device_total=80 * GiB,
        others=(OtherProcess(9, 10 * GiB),),
        host_pid_processes=(OtherProcess(1001, 30 * GiB, here=False),),
        **bfc(18 * GiB, 20 * GiB, 20 * GiB, GiB),
    )
    assert fraction_cap(r, None).why.endswith("while the device has 60.00 GiB not held by other processes.")


def test_a_request_filling_exactly_95_percent_of_the_room_is_offered_a_fraction():
    # room 10 - 5 = 5 GiB, 95% of it 4.75 GiB = in use 3.75 + request 1; 47.5% + 2 points: 0.5
    r = oom(
        GiB, device_total=10 * GiB, others=(OtherProcess(9, 5 * GiB),), **bfc(3 * GiB + 768 * MiB, 4 * GiB, 4 * GiB, 0)
    )
    assert fraction_cap(r, None).action == "%gpumem fraction 0.5  (restart the kernel, then run it first)"


def test_a_request_past_95_percent_of_the_room_is_offered_no_fraction():
    r = oom(
        GiB + 1,
        device_total=10 * GiB,
        others=(OtherProcess(9, 5 * GiB),),
        **bfc(3 * GiB + 768 * MiB, 4 * GiB, 4 * GiB, 0),
    )
    assert fraction_cap(r, None) is None


def test_a_fraction_of_exactly_095_is_offered():
    # 64 + 10 = 74 GiB of 80: 92.5% + 2 points = 0.95
    r = oom(10 * GiB, device_total=80 * GiB, **bfc(64 * GiB, 64 * GiB, 64 * GiB, 0))
    assert fraction_cap(r, None).action == "%gpumem fraction 0.95  (restart the kernel, then run it first)"


def test_no_fraction_past_095_is_offered():
    # 84 + 10 = 94 GiB of 100: 96%
    assert fraction_cap(oom(10 * GiB, device_total=100 * GiB, **bfc(84 * GiB, 84 * GiB, 84 * GiB, 0)), None) is None


def test_a_need_of_exactly_the_limit_is_not_capped_by_it():
    assert fraction_cap(oom(10 * GiB, device_total=80 * GiB, **bfc(30 * GiB, 40 * GiB, 40 * GiB, 0)), None) is None


@pytest.mark.parametrize("in_effect, offered", [(0.62, None), (0.61, "%gpumem fraction 0.62")])
def test_a_fraction_is_offered_only_above_the_one_in_effect(in_effect, offered):
    r = oom(10 * GiB, device_total=80 * GiB, fraction=in_effect, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 2 * GiB))
    fix = fraction_cap(r, None)
    assert (fix and fix.action.split("  ")[0]) == offered


@pytest.mark.parametrize(
    "readings",
    [
        oom(None, device_total=80 * GiB, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 0)),
        oom(10 * GiB, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 0)),
        oom(10 * GiB, device_total=0, **bfc(38 * GiB, 40 * GiB, 40 * GiB, 0)),
        oom(10 * GiB, device_total=80 * GiB, bytes_in_use=38 * GiB),
        oom(10 * GiB, device_total=80 * GiB, bytes_limit=40 * GiB),
        oom(10 * GiB, device_total=80 * GiB, allocator="cuda_async", **bfc(38 * GiB, 40 * GiB, 40 * GiB, 0)),
    ],
    ids=["no request", "no total", "zero total", "no limit", "nothing in use known", "cuda_async"],
)
def test_no_fraction_is_offered_without_the_numbers_or_under_cuda_async(readings):
    assert fraction_cap(readings, None) is None


# --- memory outside JAX's pool -------------------------------------------------------------------


def test_memory_outside_the_pool_is_weighed_as_what_clearing_caches_can_free_at_most():
    r = oom(4 * GiB, device_total=80 * GiB, own_process_bytes=30 * GiB, **bfc(19 * GiB, 20 * GiB, 20 * GiB, GiB))
    assert compiled_programs(r, 2 * GiB) == Fix(
        "compiled_programs",
        "10.00 GiB of this process's memory is outside JAX's pool",
        "%gpumem free --caches   (runs jax.clear_caches())",
        "Outside JAX's pool are the CUDA context, the kernels loaded for compiled programs, their CUDA graphs "
        "(jax#16778), NCCL and any other framework in this process; XLA's temporary buffers come from the "
        "pool. Clearing JAX's caches frees only the compiled programs' share, so this gain is at most what it "
        "frees: NVML counts 30.00 GiB for this process, the pool 20.00 GiB.",
        10 * GiB,
        True,
        (
            "To stop CUDA graphs holding memory: %env XLA_FLAGS=--xla_gpu_enable_command_buffer= (before JAX starts)",
            "TensorFlow or PyTorch in this kernel hold their own memory here: limit or release it on their side",
        ),
    )


@pytest.mark.parametrize("total, outside", [(None, GiB + 1), (10 * GiB, 512 * MiB + 1)])
def test_more_than_1_gib_or_5_percent_of_the_device_outside_the_pool_is_worth_clearing(total, outside):
    r = oom(GiB, device_total=total, own_process_bytes=2 * GiB + outside, **bfc(2 * GiB, 2 * GiB, 2 * GiB, 0))
    assert compiled_programs(r, None).gain_bytes == outside


@pytest.mark.parametrize(
    "total, outside, platform",
    [(None, GiB, "gpu"), (10 * GiB, 512 * MiB, "gpu"), (0, 512 * MiB, "gpu"), (None, 10 * GiB, "cpu")],
    ids=["1 GiB", "5 percent", "zero total", "the cpu"],
)
def test_a_cuda_context_sized_gap_or_the_cpu_gets_no_advice_on_compiled_programs(total, outside, platform):
    r = oom(
        GiB,
        device_total=total,
        platform=platform,
        own_process_bytes=2 * GiB + outside,
        **bfc(2 * GiB, 2 * GiB, 2 * GiB, 0),
    )
    assert compiled_programs(r, None) is None


def test_without_nvmls_count_for_this_process_nothing_is_outside_the_pool():
    assert compiled_programs(oom(GiB, device_total=80 * GiB, **bfc(2 * GiB, 2 * GiB, 2 * GiB, 0)), None) is None


# --- rematerialisation ---------------------------------------------------------------------------

CHECKPOINT = "Wrap the heavy layers in jax.checkpoint (jax.remat), or use a smaller batch"
ESTIMATE = ("`%gpumem estimate f(args)` shows a jitted call's temporary bytes before running it.",)


def test_remat_off_is_advised_on_with_jax_checkpoint_as_the_other_way():
    assert rematerialisation(oom(4 * GiB, remat=False), None) == Fix(
        "remat",
        "XLA's rematerialisation pass is off",
        "%gpumem remat on   (it clears JAX's compiled programs: the re-run compiles again with the pass)",
        "With remat off, XLA keeps every intermediate; turning it on lets it recompute some instead.",
        None,
        None,
        ("Or wrap the heavy layers in jax.checkpoint (jax.remat) to recompute activations in the backward pass.",),
    )


def test_a_request_beyond_all_live_arrays_is_a_programs_temporaries():
    assert rematerialisation(oom(20 * GiB, device_total=80 * GiB, live_bytes=GiB), None) == Fix(
        "remat",
        "The request (20.00 GiB) is larger than all live arrays (1.00 GiB): a program's temporaries",
        CHECKPOINT,
        "Temporaries, not live arrays, need the memory; recomputing activations trades time for memory.",
        None,
        None,
        ESTIMATE,
    )


def test_without_the_arrays_a_request_beyond_all_in_use_is_a_programs_temporaries():
    fix = rematerialisation(oom(20 * GiB, bytes_in_use=GiB), None)
    assert (fix.title, fix.action, fix.why, fix.extra_actions) == (
        "The request (20.00 GiB) is larger than all the allocator had in use (1.00 GiB): a program's temporaries",
        CHECKPOINT,
        "Every live array on the device is within the allocator's in-use bytes, and the request alone exceeds "
        "them: temporaries, not live arrays, need the memory; recomputing activations trades time for memory.",
        ESTIMATE,
    )


@pytest.mark.parametrize(
    "readings",
    [
        oom(GiB, live_bytes=GiB, remat=True),
        oom(8, device_total=80, live_bytes=1),
        oom(GiB),
        oom(None, remat=False),
    ],
    ids=["exactly the live arrays", "exactly a tenth of the device", "nothing held known", "no request"],
)
def test_no_remat_advice_for_a_request_within_what_is_held_or_a_tenth_of_the_device(readings):
    assert rematerialisation(readings, None) is None


def test_a_request_just_over_a_tenth_of_the_device_and_the_live_arrays_is_temporaries():
    assert rematerialisation(oom(9, device_total=80, live_bytes=1), None).kind == "remat"


# --- arrays kept from earlier runs of a cell (sites.growing) -------------------------------------

LOSSES = Growth("cell [3] line 2", 4, 8, 6 * GiB)  # a list appended to on each of 4 runs


def test_arrays_kept_run_after_run_are_freed_by_emptying_what_holds_them():
    assert kept_runs(oom(4 * GiB, growing=(LOSSES,)), 2 * GiB) == Fix(
        "growing",
        "Arrays from earlier runs of a cell are still alive: cell [3] line 2 keeps arrays from 4 runs (8 arrays, 6.00 GiB)",
        "empty or rebind what that line adds its arrays to (the list or dict), then run the cell again",
        "Each run of the cell kept its arrays there and no run freed the ones before; "
        "`%gpumem arrays --by line` lists them. 6.00 GiB would be freed.",
        6 * GiB,
        True,
    )


def test_several_growing_lines_are_named_by_the_largest_and_freed_together():
    fix = kept_runs(oom(GiB, growing=(LOSSES, Growth("train.py:12 in step", 2, 2, GiB))), 8 * GiB)
    assert fix.title.endswith("(8 arrays, 6.00 GiB) (1 more such line, 7.00 GiB in all)")
    assert fix.why.endswith("7.00 GiB would be freed.")
    assert (fix.gain_bytes, fix.enough) == (7 * GiB, False)


def test_three_growing_lines_count_the_two_beside_the_largest():
    fix = kept_runs(oom(GiB, growing=(LOSSES, Growth("a.py:1", 2, 2, GiB), Growth("b.py:1", 2, 2, GiB))), None)
    assert fix.title.endswith("(8 arrays, 6.00 GiB) (2 more such lines, 8.00 GiB in all)")
    assert fix.enough is None


def test_no_growing_line_is_no_kept_runs_fix():
    assert kept_runs(oom(GiB, history_bytes=GiB), GiB) is None
