"""Fixes to a call's peak that are checked before they are offered: the program is compiled
again with the fix (``sources.jax_arrays.compile_variant``: shapes and shardings only, never
run) and its ``memory_analysis()`` read, per device.

- donation: an output takes over a donated argument's buffer only where XLA aliases them, which
  it does for the same per-device shape and dtype (``Some donated buffers were not usable`` is
  JAX's word for the others: jax/_src/interpreters/mlir.py, 0.10.2); offered where the
  compiled program's aliased bytes grow and its total falls;
- sharding: an argument the program replicates (a whole copy on each device), laid out over its
  mesh's largest axis, one dimension at a time; offered with the best layout where the total
  per device falls.

Only ``%gpumem peak`` calls this, when the user asks: nothing here runs from a hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.peak_fixes import DOMINANT_SHARE, PeakFix, donation_candidates, share
from jupyter_gpumem.sources import jax_arrays
from jupyter_gpumem.sources.jax_sharding import ArrayLayout, shard_specs, spec_text

__all__ = ["MAX_SHARD_TRIALS", "Trials", "measured_fixes", "shape_text"]

MAX_SHARD_TRIALS = 2  # replicated arguments tried, largest first: each layout is one more compile


@dataclass(frozen=True)
class Trials:
    """The fixes that compiled smaller (``fixes``), what was tried and not offered, with the
    numbers that say why (``declined``), and how many compiles it took."""

    fixes: tuple[PeakFix, ...]
    declined: tuple[str, ...]
    compiles: int


def shape_text(shape: tuple, dtype: str) -> str:
    """``f32[4096,512]`` as XLA writes shapes."""
    short = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int32": "s32", "int64": "s64"}
    return f"{short.get(dtype, dtype)}[{','.join(str(d) for d in shape)}]"


def _name(position: Any, names: Mapping[Any, str]) -> str:
    written = names.get(position)
    label = f"argument {position}" if isinstance(position, int) else f"keyword {position}"
    return f"{written} ({label})" if written else label


def _totals(before: jax_arrays.CompiledMemory, after: jax_arrays.CompiledMemory) -> str:
    return (
        f"arguments {format_bytes(before.argument_bytes)} -> {format_bytes(after.argument_bytes)}, "
        f"temporaries {format_bytes(before.temp_bytes)} -> {format_bytes(after.temp_bytes)}, "
        f"aliased {format_bytes(before.alias_bytes)} -> {format_bytes(after.alias_bytes)}; "
        f"total {format_bytes(before.total_bytes)} -> {format_bytes(after.total_bytes)}"
        + (" per device" if before.devices > 1 else "")
    )


def _donation(call: tuple, memory: jax_arrays.CompiledMemory, arguments: tuple, names: Mapping, whole: int) -> Trials:
    """Donate the arguments an output could take over (per device), compiled to see what XLA
    aliases."""
    positions = donation_candidates(arguments, memory.outputs)
    if not positions:
        return Trials((), (), 0)
    already = [p for p, _, donated, _ in arguments if donated]
    listed = ", ".join(str(p) for p in positions if isinstance(p, int))
    keywords = tuple(str(p) for p in positions if not isinstance(p, int))
    how = (f"donate_argnums=({listed},)" if listed else "") + (
        (", " if listed else "") + f"donate_argnames={keywords!r}" if keywords else ""
    )
    try:
        after = jax_arrays.compile_variant(*call, donate=tuple(already + positions))
    except ValueError as err:
        return Trials((), (f"{how}: could not be compiled to check it ({err})",), 1)
    gain = memory.total_bytes - after.total_bytes
    if gain <= 0 or after.alias_bytes <= memory.alias_bytes:
        return Trials((), (f"{how}: compiled with it, XLA aliases no more ({_totals(memory, after)})",), 1)
    who = ", ".join(_name(p, names) for p in positions)
    text = (
        f"jax.jit(..., {how}): donating {who}, outputs of the same shape and dtype on each device are written into "
        f"its buffers, {format_bytes(gain)} ({share(gain, whole)} of the peak) less; the caller must not use it "
        f"afterwards (compiled with it, not run: {_totals(memory, after)})"
    )
    return Trials((PeakFix("donate", gain, text),), (), 1)


def _sharding(call: tuple, memory: jax_arrays.CompiledMemory, names: Mapping, whole: int) -> Trials:
    """Lay out each large replicated argument over its mesh, one dimension at a time; the best
    layout that lowers the total is offered."""
    fixes, declined, compiles = [], [], 0
    replicated = [x for x in memory.layouts if x.replicated and x.device_bytes >= DOMINANT_SHARE * whole]
    for layout in sorted(replicated, key=lambda x: -x.device_bytes)[:MAX_SHARD_TRIALS]:
        tried: list[tuple[int, tuple, jax_arrays.CompiledMemory]] = []
        for spec in shard_specs(layout):
            compiles += 1
            try:
                after = jax_arrays.compile_variant(*call, reshard={(layout.position, layout.leaf): (layout, spec)})
            except ValueError:  # a layout the function cannot take (its own in_shardings, explicit axes)
                continue
            tried.append((after.total_bytes, spec, after))
        if not tried:
            continue
        total, spec, after = min(tried, key=lambda t: t[0])
        found = _shard_words(layout, spec, names)
        if total >= memory.total_bytes:
            declined.append(f"{found}: compiled so, it needs no less ({_totals(memory, after)})")
            continue
        gain = memory.total_bytes - total
        fixes.append(
            PeakFix(
                "shard",
                gain,
                f"{found}: {format_bytes(gain)} ({share(gain, whole)} of the peak) less "
                f"(compiled so, not run: {_totals(memory, after)})",
            )
        )
    return Trials(tuple(fixes), tuple(declined), compiles)


def _shard_words(layout: ArrayLayout, spec: tuple, names: Mapping) -> str:
    size = dict(layout.mesh_axes)[next(a for a in spec if a is not None)]
    device_shape = tuple(d // size if a is not None else d for d, a in zip(layout.global_shape, spec))
    return (
        f"shard {_name(layout.position, names)}: the program keeps a whole copy of it on each of its "
        f"{layout.devices} devices ({shape_text(layout.global_shape, layout.dtype)}, {format_bytes(layout.device_bytes)} "
        f"each); jax.device_put it with NamedSharding(mesh, {spec_text(spec)}) (or pass that as its in_shardings) and "
        f"each device holds {shape_text(device_shape, layout.dtype)}"
    )


def measured_fixes(
    callee: Any,
    args: tuple,
    kwargs: Mapping[str, Any],
    dump: jax_arrays.CompiledDump,
    peak_bytes: int,
    names: Mapping[Any, str] | None = None,
) -> Trials:
    """Donation and sharding fixes for the call, each compiled and measured; ``names``: how the
    user wrote each argument (position or keyword -> text)."""
    call, whole = (callee, tuple(args), kwargs), peak_bytes or 1
    donation = _donation(call, dump.memory, dump.arguments, names or {}, whole)
    sharding = _sharding(call, dump.memory, names or {}, whole)
    return Trials(
        donation.fixes + sharding.fixes, donation.declined + sharding.declined, donation.compiles + sharding.compiles
    )
