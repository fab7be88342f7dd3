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

__all__ = ["DOMINANT_SHARE", "PeakFix", "peak_fixes"]


DOMINANT_SHARE = 0.25  # a line or kind of value this much of the peak is worth a fix


@dataclass(frozen=True)
class PeakFix:
    """One change that would lower the peak: ``kind`` (checkpoint, dtype, donate, outputs),
    ``saves`` (bytes it could take off the peak, at most; 0 where it lowers nothing) and what to
    do, in words with the code to type."""

    kind: str
    saves: int
    text: str


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "n/a"


def peak_fixes(
    peak: ProgramPeak, cells: Mapping[str, int] | None = None, arguments: tuple = (), outputs: tuple = ()
) -> list[PeakFix]:
    """What would lower ``peak``, largest saving first, from its numbers alone:

    - a function whose values saved for the backward pass (forward values of a gradient, live at
      the peak; in an OOM text, where outputs and temporaries are not told apart, either) are a
      quarter of it or more: ``jax.checkpoint`` of that function, naming it and
      the bytes it would stop keeping; where it is a scan whose function is already
      checkpointed, scanning checkpointed chunks of steps ("chunk", saving an unknown amount: 0);
    - a float32 upcast (``convert_element_type`` to f32) that is a quarter or more: the dtype;
    - arguments not donated whose shape and dtype an output has (``arguments``: per argument
      ``(position or keyword, bytes, donated, ((shape, dtype), ...))``, ``outputs``: ``(shape,
      dtype, bytes)``): ``donate_argnums``;
    - outputs a half of the peak or more: they are the result, so remat would not lower them.
    """

    whole = peak.peak_bytes or 1
    fixes = _checkpoint_fixes(peak, cells, whole) + _upcast_fixes(peak, cells, whole)
    fixes += _donation_and_output_fixes(peak, arguments, outputs, whole)
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
            kept = f"({format_bytes(size)}, {_share(size, whole)} of the peak)"
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


def _donation_and_output_fixes(peak: ProgramPeak, arguments: tuple, outputs: tuple, whole: int) -> list[PeakFix]:
    """Pure: a "donate" fix where outputs could reuse arguments' buffers, and an "outputs" note
    where the outputs are half of the peak or more."""
    from jupyter_gpumem.core.units import format_bytes

    fixes: list[PeakFix] = []
    gain, positions = _donation(arguments, outputs)
    if gain and positions:
        listed = ", ".join(str(p) for p in positions if isinstance(p, int))
        keywords = [str(p) for p in positions if not isinstance(p, int)]
        how = (f"donate_argnums=({listed},)" if listed else "") + (
            (" and " if listed else "") + f"donate_argnames={tuple(keywords)!r}" if keywords else ""
        )
        fixes.append(
            PeakFix(
                "donate",
                gain,
                (
                    f"jax.jit(..., {how}): outputs of the same shape and dtype would reuse these arguments' buffers, "
                    f"{format_bytes(gain)} ({_share(gain, whole)} of the peak) less; the caller must not use them afterwards"
                ),
            )
        )
    if peak.output_bytes >= 2 * DOMINANT_SHARE * whole and peak.output_bytes:
        fixes.append(
            PeakFix(
                "outputs",
                0,
                (
                    f"the outputs are {format_bytes(peak.output_bytes)} ({_share(peak.output_bytes, whole)} of the peak): they "
                    "are the result, so jax.checkpoint (remat) would not lower them; return less (reduce inside the "
                    "function), a lower precision, or fewer at a time"
                ),
            )
        )
    return fixes


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
                        f"{_share(size, whole)} of the peak) are made by an upcast (astype / convert_element_type); "
                        "in bfloat16 they would take half, or pass preferred_element_type to the op that needs float32"
                    ),
                )
            )
    return out


def _donation(arguments: tuple, outputs: tuple) -> tuple[int, list]:
    """Bytes of outputs that could take over a non-donated argument's buffers (same shape and
    dtype, one to one, after those a donated argument already takes), and those arguments."""
    taken: dict[tuple, int] = {}
    for _, _, donated, arrays in arguments:
        if donated:
            for key in arrays:
                taken[key] = taken.get(key, 0) + 1
    wanted: dict[tuple, list[int]] = {}
    for shape, dtype, size in outputs:
        key = (tuple(shape), str(dtype))
        if taken.get(key, 0) > 0:
            taken[key] -= 1
        else:
            wanted.setdefault(key, []).append(size)
    gain, positions = 0, []
    for position, _, donated, arrays in arguments:
        if donated:
            continue
        matched = 0
        for key in arrays:
            if wanted.get(key):
                matched += wanted[key].pop()
        if matched:
            gain += matched
            positions.append(position)
    return gain, positions
