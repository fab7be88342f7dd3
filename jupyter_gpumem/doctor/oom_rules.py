"""Which fixes would end this out-of-memory error, best first? Pure rules over the numbers read at failure.

``advise(readings)`` ranks ``Fix`` es derived from ``OomReadings`` (``oom_readings.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from jupyter_gpumem.core import metrics
from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.oom_mesh import shard_replicated
from jupyter_gpumem.doctor.oom_readings import FIX_KINDS, Fix, OomReadings, OtherProcess
from jupyter_gpumem.settings.cpu_fallback import plugin_command

__all__ = ["FIX_KINDS", "Fix", "OomReadings", "OtherProcess", "RULES", "advise", "shortfall"]


def _b(n: int | None) -> str:
    return "?" if n is None else format_bytes(n)


def shortfall(r: OomReadings) -> int | None:
    """Bytes missing for the request: request minus the largest request that could succeed."""
    if r.requested is None:
        return None
    largest = r.largest_request
    if largest is None:
        if r.device_free is not None and r.platform == "gpu" and r.bytes_limit is None:
            return max(0, r.requested - r.device_free)
        return None
    return max(0, r.requested - largest)


def _suggested_fraction(need: int, total: int) -> float | None:
    """A fraction, in hundredths, that leaves room for ``need`` bytes, or None past 0.95."""
    f = math.ceil(need / total * 100 + 2) / 100  # two points spare for the CUDA context
    return f if f <= 0.95 else None


def _enough(gain: int | None, need: int | None) -> bool | None:
    """Whether ``gain`` bytes cover the shortfall ``need`` (None: unknown)."""
    if gain is None or need is None:
        return None
    return gain >= need


# --- the rules: each reads the failure and returns its Fix, or None where it does not apply ----


def jax_on_cpu_beside_gpus(r: OomReadings, need: int | None) -> Fix | None:
    """JAX ran out of host memory on the CPU while NVML lists GPUs: the real fix is the GPUs."""
    if r.platform != "cpu" or r.visible_gpus <= 0:
        return None
    gpus = f"{r.visible_gpus} GPU{'s' if r.visible_gpus != 1 else ''}"
    idle = f", {r.idle_gpus} of them idle" if r.idle_gpus else ""
    return Fix(
        "cpu_beside_gpus",
        f"JAX runs on the CPU, but NVML sees {gpus}{idle}",
        r.gpu_fix or f"{plugin_command(None)}, then restart the kernel",
        "This error is about host memory because JAX never started on a GPU; on one, the request "
        "would be weighed against the GPU's memory instead.",
        None,
        None,
    )


def request_larger_than_device(r: OomReadings, need: int | None) -> Fix | None:
    """The request is larger than the device: nothing but a smaller program helps."""
    req, total = r.requested, r.device_total
    if req is None or total is None or req <= total:
        return None
    where = "host memory" if r.platform == "cpu" else "the device"
    return Fix(
        "too_large",
        f"The request ({_b(req)}) is larger than {where} ({_b(total)})",
        "Make the program need less: a smaller batch or array, a lower precision dtype, "
        "or shard the array across devices (jax.sharding).",
        f"{_b(req)} requested, {_b(total)} total: no allocator setting can make it fit.",
        None,
        False,
    )


def other_processes(r: OomReadings, need: int | None) -> Fix | None:
    """Other processes hold a quarter of the device, or at least the shortfall."""
    others = [p for p in r.others if (p.used_bytes or 0) > 0]
    total = r.device_total
    if not others or not total:
        return None
    held = r.others_bytes
    share = held / total
    if not (share >= 0.25 or (need is not None and need > 0 and held >= need)):
        return None
    named = [p for p in others if p.here]
    kernels = [p for p in others if p.label == "Jupyter kernel"]
    one = len(others) == 1
    who = "1 other process" if one else f"{len(others)} other processes"
    if kernels:
        who += (
            " (a Jupyter kernel)"
            if one
            else (
                " (1 of them a Jupyter kernel)" if len(kernels) == 1 else f" ({len(kernels)} of them Jupyter kernels)"
            )
        )
    if named:
        biggest = max(named, key=lambda p: p.used_bytes or 0)
        action = (
            f"Shut down or restart the process holding the most: pid {biggest.pid} "
            f"({biggest.label}, {_b(biggest.used_bytes)}); the JupyterLab GPU panel shows which notebook it is."
        )
    else:  # never a pid that names no process here
        action = (
            f"Find out which processes NVML's pids {_pids(others)} are where they run (`nvidia-smi` on the "
            "host, for a container): none of them is a process here."
        )
    extra: tuple[str, ...] = ()
    if kernels and share >= 0.5:
        extra = (
            "In each other JAX kernel, run `%gpumem preallocate off` (or `%gpumem fraction 0.4`) "
            "as its first cell and restart it, so that kernels share the card instead of taking 75% each.",
        )
    return Fix(
        "other_process",
        f"{who} {'holds' if one else 'hold'} {_b(held)} ({share:.0%}) of this device",
        action,
        f"Other processes hold {_b(held)} of {_b(total)}; this kernel cannot use it.",
        held,
        _enough(held, need),
        extra,
    )


def host_pid_processes(r: OomReadings, need: int | None) -> Fix | None:
    """Processes NVML lists by host pids (a container) may hold a quarter of the device, or the
    shortfall; which of them is this kernel cannot be told, so no pid is named to shut down."""
    total, others = r.device_total, r.host_pid_others_bytes
    if not r.host_pid_processes or not total or others <= 0:
        return None
    share = others / total
    if not (share >= 0.25 or (need is not None and need > 0 and others >= need)):
        return None
    pool = metrics.held_bytes(r.stats, r.cuda_pool) or 0
    return Fix(
        "other_process",
        f"Processes NVML lists by host pid may hold up to {_b(others)} ({share:.0%}) of this device",
        f"Find out on the host which processes pids {_pids(r.host_pid_processes)} are (`nvidia-smi` there); "
        "this kernel may be one of them, and none is a process here, so none is named to shut down.",
        f"Inside a container NVML lists the host's pids (NVIDIA/nvidia-docker#1483). Together they hold "
        f"{_b(others + pool)}; this kernel's JAX pool is {_b(pool)} of it, and the rest, up to {_b(others)}, "
        "is other processes' or this kernel's outside JAX.",
        None,
        False,
    )


def _pids(procs) -> str:
    return ", ".join(str(p.pid) for p in procs)


def output_history(r: OomReadings, need: int | None) -> Fix | None:
    """Output history keeps arrays alive (ipython#11204)."""
    gain = r.history_bytes
    if gain <= 0:
        return None
    return Fix(
        "history",
        f"Output history (Out, _) keeps {_b(gain)} of arrays alive",
        "%gpumem free --history",
        f"Cells whose last line showed an array keep it in Out; {_b(gain)} is held only there.",
        gain,
        _enough(gain, need),
    )


def kept_runs(r: OomReadings, need: int | None) -> Fix | None:
    """Arrays kept from earlier runs of a cell (a list appended to on every run): emptying what
    holds them frees every array of those lines (``sites.growing``)."""
    if not r.growing:
        return None
    gain = sum(g.nbytes for g in r.growing)
    top = r.growing[0]
    others = len(r.growing) - 1
    more = f" ({others} more such line{'s' if others > 1 else ''}, {_b(gain)} in all)" if others else ""
    return Fix(
        "growing",
        f"Arrays from earlier runs of a cell are still alive: {top}{more}",
        "empty or rebind what that line adds its arrays to (the list or dict), then run the cell again",
        f"Each run of the cell kept its arrays there and no run freed the ones before; "
        f"`%gpumem arrays --by line` lists them. {_b(gain)} would be freed.",
        gain,
        _enough(gain, need),
    )


def fragmented_pool(r: OomReadings, need: int | None) -> Fix | None:
    """Enough free in total, but no block large enough: BFC fragmentation.

    Only where the allocator reports its largest free block (BFC); the cuda_async driver pool
    reports none.
    """
    req, tf, lr = r.requested, r.total_free, r.largest_request
    if r.largest_free_block is None or r.driver_pool:
        return None
    if req is None or tf is None or lr is None or not tf >= req > lr:
        return None
    frag = r.fragmentation
    actions = ("jupyter_gpumem.defragment(params)  # for the largest pytree you hold; rebind it to the result",)
    if r.preallocate is False:
        main = "%gpumem preallocate on  (restart the kernel, then run it first)"
        why_extra = (
            " With preallocation off the pool grows in separate regions that never coalesce, "
            "so the largest block is capped by a region's size; one preallocated region avoids that."
        )
    else:
        main = "Restart the kernel: a fresh pool has one free block"
        why_extra = ""
    frag_text = "" if frag is None else f"; fragmentation {frag:.0%}"
    # lr is the larger of the largest free block and what the pool can still grow by: name each
    growth = metrics.growth_room(r.stats, r.cuda_pool, device_free=r.device_free)
    growth_text = f" and the pool can grow by only {_b(growth)}" if growth else ""
    return Fix(
        "fragmentation",
        f"Enough memory is free in total ({_b(tf)}), but the largest free block is "
        f"{_b(r.largest_free_block)}{growth_text}",
        main,
        f"{_b(req)} requested; free in total {_b(tf)}; largest free block "
        f"{_b(r.largest_free_block)}{frag_text}; largest request that can succeed {_b(lr)}.{why_extra}",
        tf,
        True,
        actions,
    )


def fraction_cap(r: OomReadings, need: int | None) -> Fix | None:
    """The pool is capped by the fraction although the device has room.

    Never under cuda_async: its pool is the driver's default pool, which has no size cap; the
    fraction only sets the pool's release threshold (0 with preallocation off).
    """
    req, total, limit, in_use = r.requested, r.device_total, r.bytes_limit, r.bytes_in_use
    if req is None or not total or limit is None or in_use is None or r.driver_pool:
        return None
    needed_in_pool = in_use + req
    physical_room = total - r.others_bytes - r.host_pid_others_bytes
    if not (needed_in_pool > limit and needed_in_pool <= physical_room * 0.95):
        return None
    fraction = _suggested_fraction(needed_in_pool, total)
    if fraction is None or (r.fraction is not None and fraction <= r.fraction):
        return None
    gain = int(fraction * total) - limit
    current = f"{r.fraction:g}" if r.fraction is not None else "?"
    return Fix(
        "fraction_cap",
        f"The pool is capped at {_b(limit)} by the fraction ({current})",
        f"%gpumem fraction {fraction:g}  (restart the kernel, then run it first)",
        f"In use {_b(in_use)} + request {_b(req)} = {_b(needed_in_pool)} exceeds the limit "
        f"{_b(limit)}, while the device has {_b(physical_room)} not held by other processes.",
        gain,
        _enough(gain, need),
    )


def compiled_programs(r: OomReadings, need: int | None) -> Fix | None:
    """This process holds much more than JAX's pool: what of it clearing compiled programs can free.

    Outside the pool are the CUDA context, the kernels loaded for compiled programs, their CUDA
    graphs (jax#16778), NCCL, and any other framework in the process. XLA's temporaries (convolution
    scratch, cuBLAS workspaces) are buffers of the program, taken from the pool (the GEMM custom
    call's workspace is its output 1, a buffer-assignment slice: xla/service/gpu/fusions/custom.cc),
    so they are not in the gap. Under cuda_async the pool is the driver pool's reserved bytes, so
    reserved-but-unused memory is the pool's.
    """
    outside, pool = r.outside_pool, metrics.held_bytes(r.stats, r.cuda_pool)
    if outside is None or r.platform != "gpu":
        return None
    total = r.device_total
    # A CUDA context alone is a few hundred MiB; more than that is worth a try.
    if not (outside > 1024**3 or (total and outside > 0.05 * total)):
        return None
    which = "the CUDA driver's default pool (cuda_async)" if r.driver_pool else "the pool"
    return Fix(
        "compiled_programs",
        f"{_b(outside)} of this process's memory is outside JAX's pool",
        "%gpumem free --caches   (runs jax.clear_caches())",
        "Outside JAX's pool are the CUDA context, the kernels loaded for compiled programs, their CUDA "
        "graphs (jax#16778), NCCL and any other framework in this process; XLA's temporary buffers come "
        "from the pool. Clearing JAX's caches frees only the compiled programs' share, so this gain is at "
        f"most what it frees: NVML counts {_b(r.own_process_bytes)} for this process, {which} {_b(pool)}.",
        outside,
        _enough(outside, need),
        (
            "To stop CUDA graphs holding memory: %env XLA_FLAGS=--xla_gpu_enable_command_buffer= (before JAX starts)",
            "TensorFlow or PyTorch in this kernel hold their own memory here: limit or release it on their side",
        ),
    )


def rematerialisation(r: OomReadings, need: int | None) -> Fix | None:
    """The request is a program's temporaries more than its live arrays: recompute instead."""
    req, total = r.requested, r.device_total
    if req is None:
        return None
    if r.program is not None and r.program.temp_bytes < req:
        return None  # the failing call's own budget shows the request is not its temporaries
    if r.remat is False:
        return Fix(
            "remat",
            "XLA's rematerialisation pass is off",
            "%gpumem remat on   (it clears JAX's compiled programs: the re-run compiles again with the pass)",
            "With remat off, XLA keeps every intermediate; turning it on lets it recompute some instead.",
            None,
            None,
            ("Or wrap the heavy layers in jax.checkpoint (jax.remat) to recompute activations in the backward pass.",),
        )
    # without the arrays (a replay), the allocator's in-use bytes: every live array on the device is in them
    held, what = (
        (r.live_bytes, "all live arrays")
        if r.live_bytes is not None
        else (r.bytes_in_use, "all the allocator had in use")
    )
    if held is not None and req > held and (total is None or req > 0.1 * total):
        return Fix(
            "remat",
            f"The request ({_b(req)}) is larger than {what} ({_b(held)}): a program's temporaries",
            "Wrap the heavy layers in jax.checkpoint (jax.remat), or use a smaller batch",
            (
                "Temporaries"
                if r.live_bytes is not None
                else "Every live array on the device is within the allocator's "
                "in-use bytes, and the request alone exceeds them: temporaries"
            )
            + ", not live arrays, need the memory; "
            "recomputing activations trades time for memory.",
            None,
            None,
            ("`%gpumem estimate f(args)` shows a jitted call's temporary bytes before running it.",),
        )
    return None


def _lower_fraction_line(r: OomReadings) -> str | None:
    """``%gpumem fraction`` ten points below the one in effect (at least 0.1), to leave the
    driver room outside the pool; None when no fraction is known."""
    total = r.device_total
    fraction = r.fraction if r.fraction is not None else (r.bytes_limit / total if r.bytes_limit and total else None)
    if fraction is None:
        return None
    lower = max(0.1, math.floor(fraction * 100 - 10) / 100)
    return f"%gpumem fraction {lower:g}  (restart the kernel, then run it first)"


def kernel_load(r: OomReadings, need: int | None) -> Fix | None:
    """A compiled kernel could not be loaded ("Failed to load in-memory CUBIN ...
    CUDA_ERROR_OUT_OF_MEMORY", xla/stream_executor/cuda/cuda_executor.cc LoadCubin): the CUDA
    driver needs device memory outside JAX's pool for the kernel's code, and the device had none.
    """
    if r.error_form != "cubin":
        return None
    total, free, pool = r.device_total, r.device_free, r.pool
    seen = []
    if free is not None:
        seen.append(f"NVML shows {_b(free)} free" + (f" of {_b(total)}" if total else ""))
    if pool is not None:
        seen.append(f"JAX's pool holds {_b(pool)}" + (f" ({pool / total:.0%} of the device)" if total else ""))
    if r.others_bytes:
        seen.append(f"other processes hold {_b(r.others_bytes)}")
    numbers = ("; ".join(seen) + ".") if seen else "no device numbers were readable."
    lower_line = _lower_fraction_line(r)
    why = (
        "Loading a compiled kernel's code (CUBIN) takes device memory outside JAX's pool, and the device "
        f"was full: {numbers}"
    )
    if r.preallocate is True and not r.driver_pool:
        unused = r.pool_free
        return Fix(
            "kernel_load",
            "The device had no room left to load a compiled kernel: the preallocated pool holds it",
            "%gpumem preallocate off  (restart the kernel, then run it first)",
            why
            + " Preallocation takes the pool up front, so only what is left beside it is there for kernels"
            + (f"; {_b(unused)} of the pool is unused." if unused else "."),
            unused,
            None,
            tuple(a for a in (lower_line,) if a),
        )
    return Fix(
        "kernel_load",
        "The device had no room left to load a compiled kernel",
        "%gpumem free   (drops output history and compiled programs; `del` the arrays you no longer need too)",
        why,
        None,
        None,
        tuple(a for a in (lower_line if r.bytes_limit is not None and not r.driver_pool else None,) if a),
    )


def command_buffers(r: OomReadings, need: int | None) -> Fix | None:
    """The driver had no memory to instantiate a CUDA graph ("Underlying backend ran out of memory
    trying to instantiate command buffer", GpuCommandBuffer::Finalize,
    xla/stream_executor/gpu/gpu_command_buffer.cc). XLA records a program's kernels into CUDA
    graphs (command buffers); ``--xla_gpu_enable_command_buffer`` is the list of command types it
    records, and an empty list records none (xla/debug_options_flags.cc; the flag is in
    jax-cuda12-pjrt 0.10.2), which is the fix XLA's own message names.
    """
    if r.error_form != "command_buffer":
        return None
    room = (
        None
        if r.driver_pool
        else (
            "%gpumem preallocate off  (restart the kernel, then run it first)"
            if r.preallocate is True
            else _lower_fraction_line(r)
            if r.bytes_limit is not None
            else None
        )
    )
    extra = ((f"Leave the driver more room: {room}",) if room else ()) + (
        "%gpumem free --caches   (compiled programs hold their CUDA graphs until JAX's caches are cleared)",
    )
    return Fix(
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
        extra,
    )


def autotuner(r: OomReadings, need: int | None) -> Fix | None:
    """The compile failed in XLA's autotuner ("Failed to get configs for: N out of M instructions.
    ... Example failure: Out of memory while trying to allocate 32.00MiB ...", recorded on JAX
    0.11.2 on an H100 with the GPU filled; tests/data/oom_texts/h100_jax_0.11.2_oom_compile_compile.txt).
    XLA's GPU compiler times candidate kernels for some instructions on the device, each with
    scratch memory of its own; ``xla_gpu_autotune_level`` 0 skips the trials and takes a default
    kernel. Compiled with that option, the same program on the same full GPU got past the compile
    and failed only for its own 16 MiB output (h100_jax_0.11.2_oom_compile_autotune_off.txt)."""
    if not r.autotuning:
        return None
    room = (
        "%gpumem preallocate off  (restart the kernel, then run it first: a preallocated pool leaves the trials "
        "only what is beside it)"
        if r.preallocate is True and not r.driver_pool
        else None
    )
    return Fix(
        "autotune",
        "The compiler ran out of memory while it tried kernels for the program (autotuning), before the program ran",
        'jax.jit(f).lower(*args).compile(compiler_options={"xla_gpu_autotune_level": 0})  '
        "(this program only, with f and args yours; call what it returns)",
        "XLA's GPU compiler times candidate kernels for some operations on the device, and each trial needs "
        "device memory beside what the program's arrays will take; with the device full, the trials fail and "
        "so does the compile. Level 0 skips the trials and takes a default kernel, which may run somewhat "
        "slower. The program itself still needs its own memory when it runs.",
        None,
        None,
        tuple(
            a
            for a in (
                "%gpumem free   (then run the cell again: the trials run once per program, with the room freed)",
                room,
                "%env XLA_FLAGS=--xla_gpu_autotune_level=0  (every program; restart the kernel, then run it before "
                "JAX starts, keeping any flags XLA_FLAGS already has)",
            )
            if a
        ),
    )


def pinned_host_pool(r: OomReadings, need: int | None) -> Fix | None:
    """The GPU client's pinned host memory pool is full ("Out of host memory while trying to
    allocate 14.16GiB.", xla/stream_executor/integrations/tf_allocator_adapter.cc): host RAM capped
    by XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB, in GiB, 64 by default and 16 with
    XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE=true (GetGpuHostAllocator, xla/pjrt/gpu/gpu_helpers.cc;
    jax-cuda12-pjrt 0.10.2 reads both variables there). No device fix applies to it.
    """
    if r.error_form != "host":
        return None
    req, held = r.requested, r.host_array_bytes
    needed = (req or 0) + (held or 0)
    limit = max(65, math.ceil(needed * 1.25 / 1024**3)) if needed else None
    action = (
        f"%env XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB={limit}  (restart the kernel, then run it before JAX starts)"
        if limit
        else "Raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (GiB, default 64) before JAX starts, then restart"
    )
    held_words = f"; live arrays in host memory kinds hold {_b(held)}" if held else ""
    return Fix(
        "host_memory",
        f"The pinned host memory pool is full: {_b(req)} requested{held_words}",
        action,
        "This is host RAM, not GPU memory: JAX's GPU client keeps arrays in the pinned_host memory kind, "
        "and host offloading, in a pinned host pool capped by XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (GiB, "
        "default 64; 16 with XLA_PJRT_GPU_HOST_MEMORY_PREALLOCATE=true). Pinned memory cannot be paged out: keep the limit below the machine's free RAM.",
        None,
        None,
        (
            "Or keep less in host memory: `del` pinned_host arrays you no longer need, or move them to the "
            "device (jax.device_put); `%gpumem arrays` lists them as host bytes.",
        ),
    )


def _free_for_program(r: OomReadings) -> int | None:
    """What the program could have: the allocator's free and growable bytes; on the CPU the
    host's available memory, as ``%gpumem estimate`` weighs it; else the total less the live
    arrays."""
    if r.total_free is not None:
        return r.total_free
    if r.platform == "cpu" and r.device_free is not None:
        return r.device_free
    if r.device_total is not None and r.live_bytes is not None:
        return max(0, r.device_total - r.live_bytes)
    return None


def program_itself(r: OomReadings, need: int | None) -> Fix | None:
    """The program needs more than is free even with its arguments donated: only a smaller
    program helps, not a setting. Remat (jax.checkpoint) recomputes instead of keeping, so it
    shrinks temporaries only: where the outputs weigh at least as much, the fix is smaller
    outputs."""
    p, free = r.program, _free_for_program(r)
    if p is None or free is None or p.needs - p.donation_gain <= free:
        return None
    alone = p.temp_bytes > free
    what = (
        f"its temporaries alone ({_b(p.temp_bytes)}) exceed"
        if alone
        else f"its outputs and temporaries ({_b(p.needs)}) exceed"
    )
    if not alone and p.output_bytes >= p.temp_bytes:
        action = (
            "Make its outputs smaller: a smaller batch or array, a lower precision dtype, or outputs "
            "sharded across devices (jax.sharding); jax.checkpoint shrinks only temporaries"
        )
    else:
        action = "Make the program need less: wrap the heavy layers in jax.checkpoint (remat), or use a smaller batch"
    return Fix(
        "program",
        f"{p.call}: {what} what is free ({_b(free)})",
        action,
        f"The compiled program needs arguments {_b(p.argument_bytes)}, outputs {_b(p.output_bytes)}, temporaries "
        f"{_b(p.temp_bytes)}, code {_b(p.code_bytes)}, aliased {_b(p.alias_bytes)}; "
        + ("donating its arguments would not be enough; " if p.donation_gain else "")
        + "no allocator setting changes what the program itself needs.",
        None,
        False,
    )


def donate_arguments(r: OomReadings, need: int | None) -> Fix | None:
    """Outputs the shape of arguments that are not donated: donating lets them share buffers."""
    p = r.program
    if p is None or p.donation_gain <= 0:
        return None
    free = _free_for_program(r)
    fits = None if free is None else p.needs - p.donation_gain <= free
    return Fix(
        "donation",
        f"{p.call}: donate the arguments its outputs replace (saves {_b(p.donation_gain)})",
        "jax.jit(f, donate_argnums=(...))  with the positions of the arguments you do not use after the call",
        f"Outputs of {_b(p.donation_gain)} match arguments that are not donated{' already' if p.donated else ''}; "
        f"donated, XLA writes them into those buffers: the call would add {_b(p.needs - p.donation_gain)} "
        f"instead of {_b(p.needs)}" + ("" if free is None else f", against {_b(free)} free") + ".",
        p.donation_gain,
        fits,
    )


# In FIX_KINDS order; advise runs the first two, command_buffers and autotuner apart from the rest.
RULES: tuple[Callable[[OomReadings, int | None], Fix | None], ...] = (
    jax_on_cpu_beside_gpus,
    request_larger_than_device,
    other_processes,
    host_pid_processes,
    output_history,
    kept_runs,
    fragmented_pool,
    fraction_cap,
    compiled_programs,
    rematerialisation,
    kernel_load,
    command_buffers,
    autotuner,
    pinned_host_pool,
    program_itself,
    donate_arguments,
    shard_replicated,
)


def advise(r: OomReadings) -> list[Fix]:
    """Fixes for the failure ``r`` describes, best first.

    Each rule in ``RULES`` gives a fix or none. The pinned host memory pool running out gets
    host advice alone: no device fix helps it. JAX on the CPU beside GPUs comes first, always.
    A request larger than the device makes every other fix beside the point. Ranking: a fix
    that, by the numbers, wins enough bytes for the request comes before one that does not;
    then the bytes won, largest first; fixes whose gain cannot be estimated come last, in the
    order of FIX_KINDS.
    """
    if r.error_form == "host":  # host RAM, not the device: no device fix applies
        return [fix for fix in (pinned_host_pool(r, None),) if fix is not None]
    need = shortfall(r)
    # a CUDA graph that could not be instantiated, and a compile the autotuner failed, have their
    # own fixes, named first
    first = [
        fix
        for fix in (jax_on_cpu_beside_gpus(r, need), command_buffers(r, need), autotuner(r, need))
        if fix is not None
    ]
    too_large = request_larger_than_device(r, need)
    if too_large is not None:  # only the program's own fix can add to it
        return first + [fix for fix in (program_itself(r, need),) if fix is not None] + [too_large]
    fixes = [
        fix for rule in RULES[2:] if rule not in (command_buffers, autotuner) and (fix := rule(r, need)) is not None
    ]
    order = {kind: i for i, kind in enumerate(FIX_KINDS)}
    fixes.sort(
        key=lambda f: (
            0 if f.enough else (1 if f.gain_bytes is not None else 2),
            -(f.gain_bytes or 0),
            order.get(f.kind, 99),
        )
    )
    return first + fixes
