"""Which fixes would end this out-of-memory error, best first? Pure rules over the numbers read at failure.

``advise(readings)`` ranks ``Fix`` es derived from ``OomReadings``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from jupyter_gpumem.units import format_bytes


@dataclass(frozen=True)
class OtherProcess:
    """Another process holding memory on the failing device (from NVML)."""

    pid: int
    used_bytes: int | None  # None: the driver hides it (containers, MIG)
    label: str = "process"  # "Jupyter kernel", "process", ...


@dataclass(frozen=True)
class OomReadings:
    """Numbers read at the failure, the input to ``advise``. Any may be None (not known).

    - ``device_total``: the device's total memory (NVML, or host RAM for the CPU)
    - ``device_free``: what the driver says is free now (NVML)
    - ``bytes_in_use``, ``pool_bytes``, ``bytes_limit``, ``largest_free_block``: the allocator's
      stats for the failing device (None on CPU and allocators without stats)
    - ``own_process_bytes``: NVML's bytes for this process on the device
    - ``others``: the other processes on the device
    - ``preallocate``, ``fraction``, ``allocator``, ``remat``: the settings in effect
    - ``live_bytes``: bytes of live JAX arrays on the device (deduplicated)
    - ``history_bytes``: of those, bytes reachable only through Out/_ history
    """

    requested: int | None
    device_total: int | None = None
    device_free: int | None = None
    bytes_in_use: int | None = None
    pool_bytes: int | None = None
    bytes_limit: int | None = None
    largest_free_block: int | None = None
    own_process_bytes: int | None = None
    others: tuple[OtherProcess, ...] = ()
    preallocate: bool | None = None
    fraction: float | None = None
    allocator: str | None = None
    remat: bool | None = None
    live_bytes: int | None = None
    history_bytes: int = 0
    platform: str = "gpu"
    synthetic: bool = False

    # derived ----------------------------------------------------------------------------------

    @property
    def headroom(self) -> int | None:
        """Bytes the pool may still grow by (limit - pool), capped by what the driver has free."""
        if self.bytes_limit is None or self.pool_bytes is None:
            return None
        room = max(0, self.bytes_limit - self.pool_bytes)
        if self.device_free is not None:
            room = min(room, max(0, self.device_free))
        return room

    @property
    def pool_free(self) -> int | None:
        if self.pool_bytes is None or self.bytes_in_use is None:
            return None
        return max(0, self.pool_bytes - self.bytes_in_use)

    @property
    def total_free(self) -> int | None:
        """Free bytes in the pool plus what it may still grow by: the most that could be had."""
        if self.pool_free is None:
            return None
        return self.pool_free + (self.headroom or 0)

    @property
    def largest_request(self) -> int | None:
        """The largest single allocation that could succeed: the largest free block, or growth."""
        if self.largest_free_block is None and self.headroom is None:
            return None
        return max(self.largest_free_block or 0, self.headroom or 0)

    @property
    def fragmentation(self) -> float | None:
        free = self.pool_free
        if free is None or self.largest_free_block is None:
            return None
        if free <= 0:
            return 0.0
        return max(0.0, min(1.0, (free - self.largest_free_block) / free))

    @property
    def others_bytes(self) -> int:
        return sum(p.used_bytes or 0 for p in self.others)


FIX_KINDS = (
    "too_large",
    "other_process",
    "history",
    "fragmentation",
    "fraction_cap",
    "compiled_programs",
    "remat",
)


@dataclass(frozen=True)
class Fix:
    """One ranked fix: what to run or do, why (with the numbers), and the bytes it may win."""

    kind: str
    title: str
    action: str  # the exact %gpumem line or Python to run, or the action to take
    why: str
    gain_bytes: int | None = None  # bytes it would make available, where it can be estimated
    enough: bool | None = None  # whether that covers the shortfall (None: unknown)
    extra_actions: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "title": self.title,
            "action": self.action,
            "extra_actions": list(self.extra_actions),
            "why": self.why,
            "gain_bytes": self.gain_bytes,
            "enough": self.enough,
        }


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


def advise(r: OomReadings) -> list[Fix]:
    """Fixes for the failure ``r`` describes, best first.

    Ranking: a fix that, by the numbers, wins enough bytes for the request comes before one
    that does not; then the bytes won, largest first; fixes whose gain cannot be estimated come
    last, in the order of FIX_KINDS.
    """
    fixes: list[Fix] = []
    need = shortfall(r)
    req = r.requested
    total = r.device_total

    def enough(gain: int | None) -> bool | None:
        if gain is None or need is None:
            return None
        return gain >= need

    # The request is larger than the device: nothing but a smaller program helps.
    if req is not None and total is not None and req > total:
        where = "host memory" if r.platform == "cpu" else "the device"
        fixes.append(
            Fix(
                "too_large",
                f"The request ({_b(req)}) is larger than {where} ({_b(total)})",
                "Make the program need less: a smaller batch or array, a lower precision dtype, "
                "or shard the array across devices (jax.sharding).",
                f"{_b(req)} requested, {_b(total)} total: no allocator setting can make it fit.",
                None,
                False,
            )
        )
        return fixes  # every other fix is beside the point

    # Other processes hold the device.
    others = [p for p in r.others if (p.used_bytes or 0) > 0]
    if others and total:
        held = r.others_bytes
        share = held / total
        biggest = max(others, key=lambda p: p.used_bytes or 0)
        if share >= 0.25 or (need is not None and need > 0 and held >= need):
            gain = held
            kernels = [p for p in others if p.label == "Jupyter kernel"]
            who = f"{len(others)} other process{'es' if len(others) > 1 else ''}"
            if kernels:
                who += f" ({len(kernels)} of them Jupyter kernels)"
            action = (
                f"Shut down or restart the process holding the most: pid {biggest.pid} "
                f"({biggest.label}, {_b(biggest.used_bytes)}); the JupyterLab GPU panel shows which notebook it is."
            )
            extra = ()
            if kernels and share >= 0.5:
                extra = (
                    "In each other JAX kernel, run `%gpumem preallocate off` (or `%gpumem fraction 0.4`) "
                    "as its first cell and restart it, so that kernels share the card instead of taking 75% each.",
                )
            fixes.append(
                Fix(
                    "other_process",
                    f"{who} hold {_b(held)} ({share:.0%}) of this device",
                    action,
                    f"Other processes hold {_b(held)} of {_b(total)}; this kernel cannot use it.",
                    gain,
                    enough(gain),
                    extra,
                )
            )

    # Output history keeps arrays alive (ipython#11204).
    if r.history_bytes > 0:
        gain = r.history_bytes
        fixes.append(
            Fix(
                "history",
                f"Output history (Out, _) keeps {_b(gain)} of arrays alive",
                "%gpumem free --history",
                f"Cells whose last line showed an array keep it in Out; {_b(gain)} is held only there.",
                gain,
                enough(gain),
            )
        )

    # Enough free in total, but no block large enough: fragmentation.
    tf, lr = r.total_free, r.largest_request
    if req is not None and tf is not None and lr is not None and tf >= req > lr:
        frag = r.fragmentation
        actions = ["jupyter_gpumem.defragment(params)  # for the largest pytree you hold; rebind it to the result"]
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
        fixes.append(
            Fix(
                "fragmentation",
                f"Enough memory is free ({_b(tf)}) but the largest block is {_b(lr)}",
                main,
                f"{_b(req)} requested; free in total {_b(tf)}; largest free block "
                f"{_b(r.largest_free_block)}{frag_text}.{why_extra}",
                tf,
                True,
                tuple(actions),
            )
        )

    # The pool is capped by the fraction although the device has room.
    if req is not None and total and r.bytes_limit is not None and r.bytes_in_use is not None:
        needed_in_pool = r.bytes_in_use + req
        physical_room = total - r.others_bytes
        if needed_in_pool > r.bytes_limit and needed_in_pool <= physical_room * 0.95:
            fraction = _suggested_fraction(needed_in_pool, total)
            if fraction is not None and (r.fraction is None or fraction > r.fraction):
                gain = int(fraction * total) - r.bytes_limit
                current = f"{r.fraction:g}" if r.fraction is not None else "?"
                fixes.append(
                    Fix(
                        "fraction_cap",
                        f"The pool is capped at {_b(r.bytes_limit)} by the fraction ({current})",
                        f"%gpumem fraction {fraction:g}  (restart the kernel, then run it first)",
                        f"In use {_b(r.bytes_in_use)} + request {_b(req)} = {_b(needed_in_pool)} exceeds the limit "
                        f"{_b(r.bytes_limit)}, while the device has {_b(physical_room)} not held by other processes.",
                        gain,
                        enough(gain),
                    )
                )

    # Compiled programs (executables, CUDA graphs) hold memory outside the pool.
    if r.own_process_bytes is not None and r.platform == "gpu":
        pool = r.pool_bytes if r.pool_bytes is not None else r.bytes_in_use
        if pool is not None:
            outside = max(0, r.own_process_bytes - pool)
            # A CUDA context alone is a few hundred MiB; more than that is worth a try.
            if outside > 1024**3 or (total and outside > 0.05 * total):
                fixes.append(
                    Fix(
                        "compiled_programs",
                        f"{_b(outside)} of this process's memory is outside JAX's pool",
                        "%gpumem free --caches   (runs jax.clear_caches())",
                        "Compiled programs and their CUDA graphs hold memory outside the allocator "
                        f"(jax#16778): NVML counts {_b(r.own_process_bytes)} for this process, the pool {_b(pool)}.",
                        outside,
                        enough(outside),
                        ("To stop CUDA graphs holding memory: %env XLA_FLAGS=--xla_gpu_enable_command_buffer= (before JAX starts)",),
                    )
                )

    # Rematerialisation: the request is a program's temporaries more than its live arrays.
    if req is not None:
        if r.remat is False:
            fixes.append(
                Fix(
                    "remat",
                    "XLA's rematerialisation pass is off",
                    "%gpumem remat on   (then re-run: it applies to new compilations)",
                    "With remat off, XLA keeps every intermediate; turning it on lets it recompute some instead.",
                    None,
                    None,
                    ("Or wrap the heavy layers in jax.checkpoint (jax.remat) to recompute activations in the backward pass.",),
                )
            )
        elif r.live_bytes is not None and req > r.live_bytes and (total is None or req > 0.1 * total):
            fixes.append(
                Fix(
                    "remat",
                    f"The request ({_b(req)}) is larger than all live arrays ({_b(r.live_bytes)}): a program's temporaries",
                    "Wrap the heavy layers in jax.checkpoint (jax.remat), or use a smaller batch",
                    "Temporaries, not live arrays, need the memory; recomputing activations trades time for memory.",
                    None,
                    None,
                    ("`%gpumem estimate f(args)` shows a jitted call's temporary bytes before running it.",),
                )
            )

    order = {kind: i for i, kind in enumerate(FIX_KINDS)}
    fixes.sort(
        key=lambda f: (
            0 if f.enough else (1 if f.gain_bytes is not None else 2),
            -(f.gain_bytes or 0),
            order.get(f.kind, 99),
        )
    )
    return fixes
