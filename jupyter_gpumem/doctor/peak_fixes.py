"""What would lower a program's peak (``peak_buffers.ProgramPeak``), from its numbers alone:
checkpoint, dtype, donation, or a note that the outputs are the peak. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jupyter_gpumem.doctor.peak_buffers import (
    ARGUMENT,
    OUTPUT_OR_TEMPORARY,
    TEMPORARY,
    PeakBuffer,
    ProgramPeak,
    where_made,
)

__all__ = ["DOMINANT_SHARE", "PeakFix", "donation_candidates", "peak_fixes", "share"]


DOMINANT_SHARE = 0.25  # a line or kind of value this much of the peak is worth a fix


@dataclass(frozen=True)
class PeakFix:
    """One change that would lower the peak: ``kind`` (checkpoint, dtype, donate, outputs),
    ``saves`` (bytes it could take off the peak, at most; 0 where it lowers nothing) and what to
    do, in words with the code to type."""

    kind: str
    saves: int
    text: str


def share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def peak_fixes(
    peak: ProgramPeak, cells: Mapping[str, int] | None = None, measured: tuple[PeakFix, ...] = ()
) -> list[PeakFix]:
    """What would lower ``peak``, largest saving first:

    - a function whose values saved for the backward pass (forward values of a gradient, live at
      the peak; in an OOM text, where outputs and temporaries are not told apart, either) are a
      quarter of it or more: ``jax.checkpoint`` of that function, naming it and
      the bytes it would stop keeping; where it is a scan whose function is already
      checkpointed, scanning checkpointed chunks of steps ("chunk", saving an unknown amount: 0);
    - a float32 upcast (``convert_element_type`` to f32) that is a quarter or more: the dtype;
    - outputs a half of the peak or more: they are the result, so remat would not lower them;
    - ``measured``: fixes checked by compiling the program with them (donation, a sharding:
      ``doctor.peak_trials``), as they are.
    """

    whole = peak.peak_bytes or 1
    fixes = _checkpoint_fixes(peak, cells, whole) + _upcast_fixes(peak, cells, whole)
    fixes += list(measured) + _output_fixes(peak, whole)
    return sorted(fixes, key=lambda f: -f.saves)


def _checkpoint_fixes(peak: ProgramPeak, cells: Mapping[str, int] | None, whole: int) -> list[PeakFix]:
    """Pure: a "checkpoint" fix for each function whose values kept for the backward pass are a
    quarter of the peak or more (a loop's: checkpoint the function it scans)."""
    from jupyter_gpumem.core.units import format_bytes

    fixes: list[PeakFix] = []
    saved: dict[str, list[PeakBuffer]] = {}
    for b in peak.buffers:
        if b.role in (TEMPORARY, OUTPUT_OR_TEMPORARY) and b.saved_for_backward:
            saved.setdefault(b.function or where_made(b, cells or {}), []).append(b)
    for function, buffers in saved.items():
        size = sum(b.size for b in buffers)
        if size >= DOMINANT_SHARE * whole:
            kept = f"({format_bytes(size)}, {share(size, whole)} of the peak)"
            loop = next((b for b in buffers if b.label == "while"), None)
            if loop is not None and loop.checkpointed:
                fixes.append(
                    PeakFix(
                        "chunk",
                        0,
                        (
                            f"the loop (scan) at {where_made(loop, cells or {})} already recomputes its steps (the "
                            f"function it scans is checkpointed) and keeps each step's carry for the backward pass "
                            f"{kept}: to keep fewer, scan over chunks of steps with each chunk checkpointed (a scan of "
                            "scans), or shorten the sequence"
                        ),
                    )
                )
                continue
            if loop is not None:
                fixes.append(
                    PeakFix(
                        "checkpoint",
                        size,
                        (
                            f"the loop (scan) at {where_made(loop, cells or {})} stacks its steps' values for the backward "
                            f"pass {kept}: wrap the function it scans in jax.checkpoint "
                            "(jax.lax.scan(jax.checkpoint(body), ...)), so each step's values are recomputed, not kept"
                        ),
                    )
                )
                continue
            name = function if buffers[0].function else f"the function around {function}"
            fixes.append(
                PeakFix(
                    "checkpoint",
                    size,
                    (
                        f"wrap {name} in jax.checkpoint (jax.checkpoint({buffers[0].function or 'fn'}), or "
                        f"@jax.checkpoint on its def): its {len(buffers)} values kept for the backward pass "
                        f"{kept} would be recomputed instead of kept"
                    ),
                )
            )
    return fixes


def _output_fixes(peak: ProgramPeak, whole: int) -> list[PeakFix]:
    """Pure: an "outputs" note where the outputs are half of the peak or more."""
    from jupyter_gpumem.core.units import format_bytes

    if not peak.output_bytes or peak.output_bytes < 2 * DOMINANT_SHARE * whole:
        return []
    return [
        PeakFix(
            "outputs",
            0,
            (
                f"the outputs are {format_bytes(peak.output_bytes)} ({share(peak.output_bytes, whole)} of the peak): they "
                "are the result, so jax.checkpoint (remat) would not lower them; return less (reduce inside the "
                "function), a lower precision, or fewer at a time"
            ),
        )
    ]


def _upcast_fixes(peak: ProgramPeak, cells: Mapping[str, int] | None, whole: int) -> list[PeakFix]:
    """Pure: a "dtype" fix for each line whose float32 upcasts are a quarter of the peak or more."""
    from jupyter_gpumem.core.units import format_bytes

    out: list[PeakFix] = []
    upcasts: dict[str, list[PeakBuffer]] = {}
    for b in peak.buffers:
        if b.upcast_to_float32 and b.role != ARGUMENT:
            upcasts.setdefault(where_made(b, cells or {}), []).append(b)
    for where, buffers in upcasts.items():
        size = sum(b.size for b in buffers)
        if size >= DOMINANT_SHARE * whole:
            out.append(
                PeakFix(
                    "dtype",
                    size // 2,
                    (
                        f"keep {where} in its input's dtype: its float32 copies ({buffers[0].shape}, {format_bytes(size)}, "
                        f"{share(size, whole)} of the peak) are made by an upcast (astype / convert_element_type); "
                        "in bfloat16 they would take half, or pass preferred_element_type to the op that needs float32"
                    ),
                )
            )
    return out


def donation_candidates(arguments: tuple, outputs: tuple) -> list:
    """The non-donated arguments whose arrays an output could take over, on one device: same
    per-device shape and dtype, one to one, after those a donated argument already takes
    (``arguments``: ``(position or keyword, bytes, donated, ((shape, dtype), ...))``,
    ``outputs``: ``(shape, dtype, bytes)``, both per device). Only candidates: what XLA aliases
    is read from the program compiled with them donated (``doctor.peak_trials``)."""
    taken: dict[tuple, int] = {}
    for _, _, donated, arrays in arguments:
        if donated:
            for key in arrays:
                taken[key] = taken.get(key, 0) + 1
    wanted: dict[tuple, int] = {}
    for shape, dtype, _ in outputs:
        key = (tuple(shape), str(dtype))
        if taken.get(key, 0) > 0:
            taken[key] -= 1
        else:
            wanted[key] = wanted.get(key, 0) + 1
    positions = []
    for position, _, donated, arrays in arguments:
        if donated:
            continue
        matched = False
        for key in arrays:
            if wanted.get(key):
                wanted[key] -= 1
                matched = True
        if matched:
            positions.append(position)
    return positions
