"""Bytes live over a compiled program's order, by source line: what ``%gpumem peak`` draws.

Pure: read from the same buffer-assignment dump as ``peak_buffers`` (each value's live range in
XLA's schedule, its place in memory, what made it). At each step of the schedule a value is live
from the first step of its range to the last; values that share a slot at once (a loop's state,
an in-place update) count once, as ``peak_buffers.peak_moment`` counts them, so the drawn peak
is the report's. Allocations that hold their values for the whole program (parameters, outputs
that may live out, constants) are live at every step, whole, as XProf's memory viewer counts
them. ``peak_figure`` draws it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jupyter_gpumem.doctor.peak_buffers import (
    TEMPORARY,
    DumpAllocations,
    PeakBuffer,
    dump_allocations,
    live_ranges,
    values_made,
    where_made,
)

__all__ = ["PeakValue", "PeakTimeline", "peak_timeline", "OTHER_LINES", "TOP_LINES", "MAX_STEPS"]

TOP_LINES = 8  # the lines drawn apart; the rest are one band
MAX_STEPS = 1500  # steps drawn at most: per stretch, the step with the most live (the peak is kept)
OTHER_LINES = "other lines"


@dataclass(frozen=True)
class PeakValue:
    """One value live at the peak: what made it (``where``, ``label``: its instruction), its
    ``shape`` with dtype, as XLA writes it (``f32[128,256]``), and its bytes."""

    where: str
    label: str
    shape: str
    size: int


@dataclass(frozen=True)
class PeakTimeline:
    """Bytes live at each drawn step of the program's order (``steps``), per source line
    (``lines``, largest at the peak first; ``OTHER_LINES`` last where there are more than
    ``TOP_LINES``): ``live[i][j]`` is line i's bytes at ``steps[j]``. ``length`` is the schedule's
    length in steps, ``peak_step`` the first step at the peak, ``at_peak`` each line's values
    live there, largest first."""

    steps: tuple[int, ...]
    lines: tuple[str, ...]
    live: tuple[tuple[int, ...], ...]
    length: int
    peak_step: int
    peak_bytes: int
    at_peak: Mapping[str, tuple[PeakValue, ...]]

    def totals(self) -> list[int]:
        """Bytes live at each drawn step, all lines together."""
        return [sum(column) for column in zip(*self.live)] if self.live else []


def _buffer(value: int, found: DumpAllocations, made_by: Mapping[int, PeakBuffer]) -> PeakBuffer:
    made = made_by.get(value)
    if made is not None:
        return made
    return PeakBuffer(
        found.size[value], found.role.get(value, TEMPORARY), label=found.key[value], shape=found.shape.get(value, "")
    )


def _spans(buffer_assignment: str, hlo_text: str, cells: Mapping[str, int]):
    """Each temporary value's ``(first, last, slot, value)``; each whole-program allocation as
    ``(size, its values' (first, last, value) where they have a range, its largest value)``;
    every value as a PeakValue; the schedule's length. None where the dump has no live ranges
    (an XLA that does not write them)."""
    ranges = live_ranges(buffer_assignment)
    if not ranges:
        return None
    found = dump_allocations(buffer_assignment)
    _, made_by = values_made(buffer_assignment, hlo_text, found)
    values = {}
    for value in found.key:
        b = _buffer(value, found, made_by)
        values[value] = PeakValue(where_made(b, cells), b.label or b.op_name, b.shape, found.size[value])
    spans = [
        (*ranges[key], (*found.place[value], found.size[value]), value)
        for value, key in found.key.items()
        if key in ranges and found.place[value][0] not in found.whole_program
    ]
    whole = []
    for index, size in found.whole_program.items():
        held = [v for v, (where, _) in found.place.items() if where == index]
        if held:
            timed = [(*ranges[found.key[v]], v) for v in held if found.key[v] in ranges]
            whole.append((size, timed, max(held, key=lambda v: found.size[v])))
    length = max([r[1] for r in ranges.values()], default=0) + 1
    return spans, whole, values, length


def _named_at(step: int, allocation, values) -> int:
    """The value a whole-program allocation is named by at ``step``: its largest value live then,
    else its largest (as ``peak_buffers.peak_from_ranges`` names it at the peak)."""
    _, timed, largest = allocation
    now = [v for first, last, v in timed if first <= step <= last]
    return max(now, key=lambda v: values[v].size) if now else largest


def _renamings(whole, values) -> dict[int, list[tuple[int, int]]]:
    """``step -> [(allocation, value)]``: where a whole-program allocation's name changes, at the
    steps its own values start or end (it is named by its largest value before any)."""
    out: dict[int, list[tuple[int, int]]] = {}
    for index, allocation in enumerate(whole):
        for step in sorted({s for first, last, _ in allocation[1] for s in (first, last + 1)}):
            out.setdefault(step, []).append((index, _named_at(step, allocation, values)))
    return out


def _sweep(spans, whole, values) -> tuple[list[int], list[dict[str, int]], list[dict[tuple, int]]]:
    """Each step where something starts or ends, the bytes live there per line, and which value
    each slot's bytes count for there: of the values holding a slot at once (counted once), the
    one that started first, as ``peak_buffers.peak_from_ranges`` names it at the peak."""
    order = {value: i for i, (_, _, _, value) in enumerate(spans)}
    events = sorted(
        (step, starts, first, order[value], slot, value)
        for first, last, slot, value in spans
        for step, starts in ((first, 1), (last + 1, 0))
    )
    renamed = _renamings(whole, values)
    steps_all = sorted({e[0] for e in events} | set(renamed)) or [0]
    holders: dict[tuple, dict[int, tuple[int, int]]] = {}
    counted: dict[tuple, int] = {}  # slot -> the value its bytes count for now
    named = [largest for _, _, largest in whole]  # each whole-program allocation's value now
    now: dict[str, int] = {}
    for (size, _, _), value in zip(whole, named):
        now[values[value].where] = now.get(values[value].where, 0) + size
    columns, owners = [], []
    i = 0
    for step in steps_all:
        for index, value in renamed.get(step, ()):
            size = whole[index][0]
            now[values[named[index]].where] -= size
            now[values[value].where] = now.get(values[value].where, 0) + size
            named[index] = value
        while i < len(events) and events[i][0] == step:  # ends first, then starts, as peak_moment
            _, starts, first, rank, slot, value = events[i]
            held = holders.setdefault(slot, {})
            if starts:
                held[value] = (first, rank)
            else:
                held.pop(value, None)
            before = counted.pop(slot, None)
            if before is not None:
                now[values[before].where] -= slot[2]
            if held:
                counted[slot] = min(held, key=held.__getitem__)
                now[values[counted[slot]].where] = now.get(values[counted[slot]].where, 0) + slot[2]
            i += 1
        columns.append({where: size for where, size in now.items() if size})
        owners.append(dict(counted))
    return steps_all, columns, owners


def _whole_value(step: int, allocation, values) -> PeakValue:
    """A whole-program allocation at ``step`` as one value: its size, named as ``_named_at`` names it."""
    named = values[_named_at(step, allocation, values)]
    return PeakValue(named.where, named.label, named.shape, allocation[0])


def _thinned(steps: list[int], totals: list[int], keep_step: int) -> list[int]:
    """Indices of at most about ``MAX_STEPS`` steps: in each stretch, the one with the most
    live, and always the first, the last and ``keep_step``'s."""
    if len(steps) <= MAX_STEPS:
        return list(range(len(steps)))
    per = len(steps) / (MAX_STEPS - 3)
    picks = {0, len(steps) - 1, steps.index(keep_step)}
    for b in range(MAX_STEPS - 3):
        lo, hi = int(b * per), max(int(b * per) + 1, int((b + 1) * per))
        picks.add(max(range(lo, min(hi, len(steps))), key=totals.__getitem__))
    return sorted(picks)


def peak_timeline(
    buffer_assignment: str, hlo_text: str = "", cells: Mapping[str, int] | None = None
) -> PeakTimeline | None:
    """The program's bytes live over its order, by the line that made them (a notebook cell's as
    ``cell [n] line L``, by ``cells``); None where the dump has no live ranges."""
    spans_found = _spans(buffer_assignment, hlo_text, cells or {})
    if spans_found is None:
        return None
    spans, whole, values, length = spans_found
    steps, columns, owners = _sweep(spans, whole, values)
    totals = [sum(c.values()) for c in columns]
    peak_at = max(range(len(totals)), key=lambda j: (totals[j], -j))
    at_slots = owners[peak_at]
    by_size = sorted(columns[peak_at].items(), key=lambda kv: -kv[1])
    ever = {w for c in columns for w, b in c.items() if b}
    top = [w for w, b in by_size if b][:TOP_LINES]
    rest = ever - set(top)
    keep = _thinned(steps, totals, steps[peak_at])
    live = [tuple(columns[j].get(w, 0) for j in keep) for w in top]
    if rest:
        live.append(tuple(sum(columns[j].get(w, 0) for w in rest) for j in keep))
    held = [values[v] for v in at_slots.values()] + [_whole_value(steps[peak_at], w, values) for w in whole]
    at_peak: dict[str, list[PeakValue]] = {}
    for v in sorted(held, key=lambda x: -x.size):
        at_peak.setdefault(v.where if v.where in top else OTHER_LINES, []).append(v)
    return PeakTimeline(
        tuple(steps[j] for j in keep),
        tuple(top + ([OTHER_LINES] if rest else [])),
        tuple(live),
        max(length, steps[-1]),
        steps[peak_at],
        totals[peak_at],
        {k: tuple(v) for k, v in at_peak.items()},
    )
