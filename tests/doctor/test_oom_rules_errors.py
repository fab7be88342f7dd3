"""The OOM advice read whole for the errors that are not a pool running short (a kernel that
could not be loaded, a CUDA graph, the pinned host pool), for the failing program's own budget,
and the order ``advise`` puts the fixes in.

Every reading here is synthetic (``oom()`` marks it so), made up for the rule it tests; the
numbers in the comments are worked by hand. The error forms are those of tests/doctor/test_oom.py
(recognised from the texts in tests/data/oom_texts).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from jupyter_gpumem.core.sites import Growth
from jupyter_gpumem.doctor.oom_readings import Fix, OomReadings, OtherProcess
from jupyter_gpumem.doctor.oom_rules import (
    advise,
    autotuner,
    command_buffers,
    donate_arguments,
    kernel_load,
    pinned_host_pool,
    program_itself,
    rematerialisation,
)
from jupyter_gpumem.doctor.program_budget import ProgramBudget

GiB = 1024**3
MiB = 1024**2
RESTART_FIRST = "  (restart the kernel, then run it first)"


def oom(requested: int | None = None, **readings) -> OomReadings:
    """Synthetic readings of a failure: the request and the fields a test names, nothing else known."""
    return OomReadings(requested=requested, synthetic=True, **readings)


def preallocated(**readings) -> OomReadings:
    """A preallocated BFC pool of 60 of 80 GiB, 40 in use (fraction 0.75), NVML 200 MiB free."""
    return oom(
        device_total=80 * GiB,
        device_free=200 * MiB,
        bytes_in_use=40 * GiB,
        pool_bytes=60 * GiB,
        bytes_limit=60 * GiB,
        largest_free_block=20 * GiB,
        preallocate=True,
        fraction=0.75,
        **readings,
    )


# --- a compiled kernel that could not be loaded --------------------------------------------------

CUBIN_WHY = "Loading a compiled kernel's code (CUBIN) takes device memory outside JAX's pool, and the device was full: "
FREE_LINE = "%gpumem free   (drops output history and compiled programs; `del` the arrays you no longer need too)"


def test_a_kernel_that_could_not_load_beside_a_preallocated_pool_is_advised_preallocation_off():
    assert kernel_load(preallocated(error_form="cubin"), None) == Fix(
        "kernel_load",
        "The device had no room left to load a compiled kernel: the preallocated pool holds it",
        "%gpumem preallocate off" + RESTART_FIRST,
        CUBIN_WHY + "NVML shows 200.00 MiB free of 80.00 GiB; JAX's pool holds 60.00 GiB (75% of the device). "
        "Preallocation takes the pool up front, so only what is left beside it is there for kernels; "
        "20.00 GiB of the pool is unused.",
        20 * GiB,
        None,
        ("%gpumem fraction 0.65" + RESTART_FIRST,),
    )


def test_a_full_preallocated_pool_names_no_unused_bytes_and_without_a_fraction_no_lower_one():
    fix = kernel_load(oom(pool_bytes=60 * GiB, bytes_in_use=60 * GiB, preallocate=True, error_form="cubin"), None)
    assert (fix.why, fix.gain_bytes, fix.extra_actions) == (
        CUBIN_WHY + "JAX's pool holds 60.00 GiB. Preallocation takes the pool up front, so only what is left "
        "beside it is there for kernels.",
        0,
        (),
    )


def test_a_kernel_that_could_not_load_with_nothing_known_is_advised_to_free_memory():
    assert kernel_load(oom(error_form="cubin"), None) == Fix(
        "kernel_load",
        "The device had no room left to load a compiled kernel",
        FREE_LINE,
        CUBIN_WHY + "no device numbers were readable.",
        None,
        None,
        (),
    )


def test_a_kernel_that_could_not_load_names_the_free_bytes_the_pool_and_the_other_processes():
    r = oom(device_free=200 * MiB, pool_bytes=60 * GiB, others=(OtherProcess(9, 10 * GiB),), error_form="cubin")
    assert kernel_load(r, None).why == (
        CUBIN_WHY + "NVML shows 200.00 MiB free; JAX's pool holds 60.00 GiB; other processes hold 10.00 GiB."
    )


def test_without_preallocation_a_lower_fraction_is_worked_from_the_limit_when_none_is_set():
    # limit 60 of 80 GiB: 0.75, ten points lower 0.65
    r = oom(device_total=80 * GiB, bytes_limit=60 * GiB, pool_bytes=30 * GiB, preallocate=False, error_form="cubin")
    fix = kernel_load(r, None)
    assert (fix.action, fix.extra_actions) == (FREE_LINE, ("%gpumem fraction 0.65" + RESTART_FIRST,))


def test_the_lower_fraction_worked_from_the_limit_is_rounded_down_to_a_whole_percent():
    # limit 141 of 200 GiB: 70.5%, ten points lower 60.5%: 0.6
    r = oom(device_total=200 * GiB, bytes_limit=141 * GiB, preallocate=False, error_form="cubin")
    assert kernel_load(r, None).extra_actions == ("%gpumem fraction 0.6" + RESTART_FIRST,)


def test_the_lower_fraction_offered_is_never_below_a_tenth():
    fix = kernel_load(oom(bytes_limit=GiB, fraction=0.15, preallocate=False, error_form="cubin"), None)
    assert fix.extra_actions == ("%gpumem fraction 0.1" + RESTART_FIRST,)


@pytest.mark.parametrize(
    "readings",
    [
        oom(device_total=80 * GiB, pool_bytes=30 * GiB, preallocate=False, fraction=0.75, error_form="cubin"),
        oom(device_total=80 * GiB, bytes_limit=0, pool_bytes=30 * GiB, error_form="cubin"),
        oom(bytes_limit=60 * GiB, pool_bytes=30 * GiB, error_form="cubin"),
    ],
    ids=["no limit", "a limit of 0", "no device total"],
)
def test_without_a_limit_in_effect_no_lower_fraction_is_offered(readings):
    assert kernel_load(readings, None).extra_actions == ()


def test_under_cuda_async_a_kernel_that_could_not_load_gets_no_pool_advice():
    # the driver pool: preallocation sets only its release threshold, and no fraction caps it
    r = preallocated(error_form="cubin", allocator="cuda_async")
    fix = kernel_load(r, None)
    assert (fix.title, fix.action, fix.extra_actions) == (
        "The device had no room left to load a compiled kernel",
        FREE_LINE,
        (),
    )


# --- a CUDA graph that could not be instantiated --------------------------------------------------

CACHES_LINE = "%gpumem free --caches   (compiled programs hold their CUDA graphs until JAX's caches are cleared)"


def test_a_cuda_graph_that_could_not_be_instantiated_is_advised_no_command_buffers():
    assert command_buffers(preallocated(error_form="command_buffer"), None) == Fix(
        "command_buffer",
        "The device had no memory left to instantiate a CUDA graph (one of XLA's command buffers)",
        "%env XLA_FLAGS=--xla_gpu_enable_command_buffer=  (restart the kernel, then run it before JAX starts; "
        "keep any flags XLA_FLAGS already has on the same line)",
        "XLA records the kernels of a compiled program into CUDA graphs, and instantiating one takes device "
        "memory from the driver, outside JAX's pool; each compiled program keeps its graphs alive. "
        "--xla_gpu_enable_command_buffer is the list of command types XLA records; empty, it records none, "
        "so no graph is instantiated and kernels are launched one by one (somewhat slower).",
        None,
        None,
        ("Leave the driver more room: %gpumem preallocate off" + RESTART_FIRST, CACHES_LINE),
    )


@pytest.mark.parametrize(
    "readings",
    [
        oom(error_form="command_buffer"),
        oom(fraction=0.75, error_form="command_buffer"),
        preallocated(error_form="command_buffer", allocator="cuda_async"),
    ],
    ids=["nothing known", "a fraction but no limit in effect", "cuda_async"],
)
def test_a_cuda_graph_without_a_pool_setting_to_change_is_advised_only_to_clear_caches(readings):
    assert command_buffers(readings, None).extra_actions == (CACHES_LINE,)


@pytest.mark.parametrize("rule", [kernel_load, command_buffers])
def test_a_pool_running_short_gets_no_kernel_or_graph_advice(rule):
    assert rule(preallocated(requested=GiB), None) is None


# --- the pinned host memory pool ------------------------------------------------------------------


def test_a_full_pinned_host_pool_is_advised_a_limit_a_quarter_above_what_it_must_hold():
    # (15200000000 + 50 GiB) * 1.25 = 80.2 GiB: 81
    r = oom(15_200_000_000, host_array_bytes=50 * GiB, error_form="host")
    assert pinned_host_pool(r, None) == Fix(
        "host_memory",
        "The pinned host memory pool is full: 14.16 GiB requested; live arrays in host memory kinds hold 50.00 GiB",
        "%env XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB=81  (restart the kernel, then run it before JAX starts)",
        "This is host RAM, not GPU memory: JAX's GPU client keeps arrays in the pinned_host memory kind, and "
        "host offloading, in a pinned host pool capped by XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (GiB, default 64; "
        "16 with XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE=true). Pinned memory cannot be paged out: keep the "
        "limit below the machine's free RAM.",
        None,
        None,
        (
            "Or keep less in host memory: `del` pinned_host arrays you no longer need, or move them to the "
            "device (jax.device_put); `%gpumem arrays` lists them as host bytes.",
        ),
    )


def test_a_full_pinned_host_pool_of_unknown_size_is_advised_to_raise_the_limit():
    fix = pinned_host_pool(oom(error_form="host"), None)
    assert (fix.title, fix.action) == (
        "The pinned host memory pool is full: ? requested",
        "Raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (GiB, default 64) before JAX starts, then restart",
    )


@pytest.mark.parametrize(
    "requested, held, limit",
    [(GiB, None, 65), (52 * GiB, None, 65), (52 * GiB + 1, None, 66), (None, 60 * GiB, 75), (GiB, 0, 65)],
)
def test_the_host_limit_offered_is_at_least_65_gib(requested, held, limit):
    fix = pinned_host_pool(oom(requested, host_array_bytes=held, error_form="host"), None)
    assert fix.action.startswith(f"%env XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB={limit}  ")


def test_no_host_arrays_are_named_when_none_are_held():
    assert pinned_host_pool(oom(GiB, host_array_bytes=0, error_form="host"), None).title == (
        "The pinned host memory pool is full: 1.00 GiB requested"
    )


def test_a_device_error_gets_no_host_pool_advice():
    assert pinned_host_pool(preallocated(requested=GiB), None) is None


# --- the failing program's own budget -------------------------------------------------------------


def short_of_2_mib(program: ProgramBudget, **readings) -> OomReadings:
    """A 1 GiB device whose live arrays leave 2 MiB, no allocator statistics."""
    return oom(4 * MiB, device_total=GiB, live_bytes=GiB - 2 * MiB, program=program, **readings)


def budget(output: int, temp: int, *, code: int = 0, gain: int = 0, donated: bool = False) -> ProgramBudget:
    """``step``'s budget in MiB: 8 MiB of arguments, nothing aliased."""
    return ProgramBudget("step (train.py:12)", 8 * MiB, output * MiB, temp * MiB, code * MiB, 0, donated, gain * MiB)


def test_temporaries_alone_past_what_is_free_send_the_program_to_remat_with_its_whole_budget():
    assert program_itself(short_of_2_mib(budget(4, 3, code=1, gain=4)), None) == Fix(
        "program",
        "step (train.py:12): its temporaries alone (3.00 MiB) exceed what is free (2.00 MiB)",
        "Make the program need less: wrap the heavy layers in jax.checkpoint (remat), or use a smaller batch",
        "The compiled program needs arguments 8.00 MiB, outputs 4.00 MiB, temporaries 3.00 MiB, code 1.00 MiB, "
        "aliased 0 B; donating its arguments would not be enough; no allocator setting changes what the "
        "program itself needs.",
        None,
        False,
    )


def test_outputs_weighing_as_much_as_the_temporaries_are_to_be_made_smaller_not_recomputed():
    fix = program_itself(short_of_2_mib(budget(2, 2)), None)
    assert (fix.title, fix.action, fix.why) == (
        "step (train.py:12): its outputs and temporaries (4.00 MiB) exceed what is free (2.00 MiB)",
        "Make its outputs smaller: a smaller batch or array, a lower precision dtype, or outputs sharded across "
        "devices (jax.sharding); jax.checkpoint shrinks only temporaries",
        "The compiled program needs arguments 8.00 MiB, outputs 2.00 MiB, temporaries 2.00 MiB, code 0 B, "
        "aliased 0 B; no allocator setting changes what the program itself needs.",
    )


def test_temporaries_outweighing_the_outputs_are_to_be_recomputed():
    fix = program_itself(short_of_2_mib(budget(1, 2)), None)
    assert fix.action.startswith("Make the program need less: wrap the heavy layers in jax.checkpoint")


def test_a_program_that_fits_exactly_once_its_arguments_are_donated_is_not_blamed():
    assert program_itself(short_of_2_mib(budget(4, 0, gain=2)), None) is None


@pytest.mark.parametrize(
    "readings, free",
    [
        # the allocator's free bytes first: 60 - 59 in use = 1 GiB, though NVML shows 10 free
        (oom(platform="cpu", device_free=10 * GiB, pool_bytes=60 * GiB, bytes_in_use=59 * GiB), "1.00 GiB"),
        # on the CPU, the host's available memory, not 16 - 1 GiB of live arrays
        (oom(platform="cpu", device_free=GiB, device_total=16 * GiB, live_bytes=GiB), "1.00 GiB"),
        (oom(device_total=GiB, live_bytes=2 * GiB), "0 B"),
    ],
    ids=["the allocator", "the cpu", "arrays past the total"],
)
def test_the_program_is_weighed_against_what_it_could_have(readings, free):
    fix = program_itself(replace(readings, requested=2 * GiB, program=budget(2048, 0)), None)
    assert fix.title == f"step (train.py:12): its outputs and temporaries (2.00 GiB) exceed what is free ({free})"


@pytest.mark.parametrize(
    "readings",
    [oom(GiB, device_free=MiB, program=budget(2048, 0)), oom(GiB, device_total=GiB, device_free=MiB)],
    ids=["nothing free known on a gpu", "no program"],
)
def test_no_program_fix_without_a_program_or_what_it_could_have(readings):
    assert program_itself(readings, None) is None


def test_a_program_whose_outputs_can_reuse_its_arguments_is_advised_to_donate_them():
    assert donate_arguments(short_of_2_mib(budget(4, 0, gain=4)), None) == Fix(
        "donation",
        "step (train.py:12): donate the arguments its outputs replace (saves 4.00 MiB)",
        "jax.jit(f, donate_argnums=(...))  with the positions of the arguments you do not use after the call",
        "Outputs of 4.00 MiB match arguments that are not donated; donated, XLA writes them into those "
        "buffers: the call would add 0 B instead of 4.00 MiB, against 2.00 MiB free.",
        4 * MiB,
        True,
    )


def test_a_program_already_donating_some_arguments_is_told_of_the_others_without_free_bytes_known():
    fix = donate_arguments(oom(GiB, program=budget(4, 1, gain=2, donated=True)), None)
    assert (fix.why, fix.enough) == (
        "Outputs of 2.00 MiB match arguments that are not donated already; donated, XLA writes them into "
        "those buffers: the call would add 3.00 MiB instead of 5.00 MiB.",
        None,
    )


@pytest.mark.parametrize("temp, fits", [(0, True), (1, False)])
def test_donation_is_enough_when_the_call_then_needs_no_more_than_is_free(temp, fits):
    # outputs 4 + temporaries, less 2 donated: 2 MiB (fits in 2 free) or 3 MiB
    assert donate_arguments(short_of_2_mib(budget(4, temp, gain=2)), None).enough is fits


def test_a_donation_of_a_single_byte_is_still_offered():
    program = ProgramBudget("step (train.py:12)", 8, 4, 0, 0, 0, donation_gain=1)
    assert donate_arguments(short_of_2_mib(program), None).gain_bytes == 1


@pytest.mark.parametrize("program", [budget(4, 0), None], ids=["nothing to donate", "no program"])
def test_no_donation_fix_without_outputs_to_put_in_arguments(program):
    assert donate_arguments(short_of_2_mib(program), None) is None


@pytest.mark.parametrize("temp, advised", [(4, True), (3, False)])
def test_remat_is_advised_only_where_the_program_s_temporaries_hold_the_request(temp, advised):
    r = oom(4 * MiB, remat=False, program=budget(0, temp))
    assert (rematerialisation(r, None) is not None) is advised


# --- the order of the fixes -----------------------------------------------------------------------


def test_a_cuda_graph_fix_comes_before_every_other():
    r = preallocated(error_form="command_buffer", others=(OtherProcess(9, 20 * GiB, "Jupyter kernel"),))
    assert [f.kind for f in advise(r)] == ["command_buffer", "other_process"]


def test_a_request_larger_than_the_device_comes_after_gpus_unused_and_the_program_s_own_fix():
    r = oom(
        100 * GiB,
        device_total=64 * GiB,
        device_free=10 * GiB,
        platform="cpu",
        visible_gpus=1,
        history_bytes=GiB,
        program=ProgramBudget("step (train.py:12)", 0, 100 * GiB, 0, 0, 0),
    )
    assert [f.kind for f in advise(r)] == ["cpu_beside_gpus", "program", "too_large"]


def test_a_donation_that_fits_ranks_above_a_larger_fix_that_falls_short():
    # no statistics, NVML 0 free: short by all 4 MiB; history's 1.5 MiB falls short, while donating
    # 1 MiB makes the call need 2 MiB, what is free
    r = short_of_2_mib(budget(3, 0, gain=1), device_free=0, history_bytes=3 * MiB // 2, remat=True)
    assert [(f.kind, f.enough) for f in advise(r)] == [("donation", True), ("history", False)]


def test_arrays_kept_from_earlier_runs_that_cover_the_shortfall_rank_above_history_that_does_not():
    # NVML 2 GiB free of a 8 GiB request: short by 6 GiB; the growing line holds 6 GiB, history 1 GiB
    kept = Growth("cell [3] line 2", 4, 8, 6 * GiB)
    r = oom(8 * GiB, device_total=80 * GiB, device_free=2 * GiB, history_bytes=GiB, growing=(kept,))
    assert [(f.kind, f.enough) for f in advise(r)] == [("growing", True), ("history", False)]


def test_a_fix_short_of_enough_ranks_above_one_whose_gain_is_not_known():
    r = oom(8 * GiB, device_total=80 * GiB, device_free=2 * GiB, remat=False, history_bytes=GiB)
    assert [(f.kind, f.enough) for f in advise(r)] == [("history", False), ("remat", None)]


def test_a_fix_that_wins_no_bytes_still_ranks_above_one_whose_gain_is_not_known():
    # a full preallocated pool (nothing unused to win) and 30 GiB held by host pids besides it
    r = oom(
        device_total=80 * GiB,
        pool_bytes=40 * GiB,
        bytes_in_use=40 * GiB,
        preallocate=True,
        host_pid_processes=(OtherProcess(1001, 70 * GiB, here=False),),
        error_form="cubin",
    )
    assert [(f.kind, f.gain_bytes) for f in advise(r)] == [("kernel_load", 0), ("other_process", None)]


def test_a_fix_winning_a_single_byte_ranks_above_one_winning_none():
    # a full preallocated pool (kernel_load wins 0) and a program 2 GiB short, 1 byte of it donatable
    r = oom(
        device_total=80 * GiB,
        live_bytes=40 * GiB,
        pool_bytes=40 * GiB,
        bytes_in_use=40 * GiB,
        preallocate=True,
        error_form="cubin",
        program=ProgramBudget("step (train.py:12)", 0, 2 * GiB, 0, 0, 0, donation_gain=1),
    )
    assert [(f.kind, f.gain_bytes) for f in advise(r)] == [("donation", 1), ("kernel_load", 0), ("program", None)]


def test_a_host_memory_error_is_advised_the_host_limit_alone():
    r = preallocated(requested=GiB, error_form="host", platform="cpu", visible_gpus=1, remat=False)
    assert [f.kind for f in advise(r)] == ["host_memory"]


# --- the compiler's autotuner ran out (recorded text: tests/doctor/test_oom_texts_recorded.py) -------

AUTOTUNE_LINE = (
    'jax.jit(f).lower(*args).compile(compiler_options={"xla_gpu_autotune_level": 0})  '
    "(this program only, with f and args yours; call what it returns)"
)
AUTOTUNE_FREE = "%gpumem free   (then run the cell again: the trials run once per program, with the room freed)"
AUTOTUNE_ALL = (
    "%env XLA_FLAGS=--xla_gpu_autotune_level=0  (every program; restart the kernel, then run it before "
    "JAX starts, keeping any flags XLA_FLAGS already has)"
)


def test_a_compile_the_autotuner_failed_is_advised_autotuning_off_for_that_program():
    fix = autotuner(oom(32 * MiB, autotuning=True, preallocate=False), 32 * MiB)
    assert (fix.kind, fix.action, fix.gain_bytes, fix.enough) == ("autotune", AUTOTUNE_LINE, None, None)
    assert fix.title == (
        "The compiler ran out of memory while it tried kernels for the program (autotuning), before the program ran"
    )
    assert fix.extra_actions == (AUTOTUNE_FREE, AUTOTUNE_ALL)
    assert "Level 0 skips the trials and takes a default kernel" in fix.why


def test_beside_a_preallocated_bfc_pool_the_autotuner_is_also_advised_preallocation_off():
    extra = autotuner(preallocated(autotuning=True), None).extra_actions
    assert extra[1].startswith("%gpumem preallocate off  (restart the kernel, then run it first")
    assert len(extra) == 3
    # cuda_async's pool is the driver's: preallocation off is not the room there
    assert len(autotuner(preallocated(autotuning=True, allocator="cuda_async"), None).extra_actions) == 2


def test_an_oom_that_is_not_the_autotuners_gets_no_autotune_fix():
    assert autotuner(preallocated(), 1 * GiB) is None
    assert "autotune" not in [f.kind for f in advise(preallocated(requested=1 * GiB))]


def test_the_autotune_fix_comes_before_the_pool_fixes():
    kinds = [f.kind for f in advise(preallocated(requested=32 * GiB, autotuning=True, history_bytes=30 * GiB))]
    assert kinds == ["autotune", "history", "fraction_cap"]
