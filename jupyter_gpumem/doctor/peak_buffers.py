"""What was live at a program's peak, by the user's source line: read from XLA's own texts.

Two texts carry it, both written by XLA's buffer assignment (openxla/xla
xla/service/buffer_assignment.cc at bfbc776e6233f97b5fb13bbc6022834f61646b62):

- an out-of-memory error: ``BufferAssignment::ToVerboseString`` appends "BufferAssignment OOM
  Debugging.", the stats (``StatsString``: "parameter allocation:", "maybe_live_out
  allocation:", "preallocated temp allocation:", "total allocation:", sizes as
  ``HumanReadableNumBytes``) and "Peak buffers:", the 15 largest values of the allocations at
  their peak (``TopKPeakBuffers``), each with "Size:", "Operator:" (``OpMetadataToString``:
  ``op_name="..." source_file="..." source_line=N``), then "XLA Label:" and "Shape:", or for an
  entry parameter "Entry Parameter Subshape:". Users paste these in jax#13428, t5x#870 and
  alpa#759.
- a program compiled with ``xla_dump_to``: ``*buffer-assignment.txt`` (``ToString``: each
  allocation, its kind and its values; newer XLA moves "Used values:" to
  ``*buffer-assignment-values.txt`` and the live ranges to ``*-live-range.txt``), whose
  ``HloLiveRange`` section gives each value's first and last step ("BufferLiveRange:"), from
  which the peak is counted as XProf's memory viewer counts it (:func:`peak_from_ranges`); the
  optimised HLO (``*after_optimizations.txt``) gives each instruction's source, inline
  (``source_file=``, JAX 0.4.38..0.7.2) or through its ``StackFrames`` tables
  (``stack_frame_id=``, JAX 0.10.2).

Everything here is pure: texts in, typed values out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from jupyter_gpumem.core import sites
from jupyter_gpumem.doctor.hlo_sources import (
    checkpointed_loops,
    frame_id,
    loop_states,
    metadata_fields,
    source_of,
    stack_frames,
)
from jupyter_gpumem.doctor.oom_text import xla_size_in

ARGUMENT, OUTPUT, TEMPORARY, CONSTANT = "argument", "output", "temporary", "constant"
OUTPUT_OR_TEMPORARY = "output or temporary"  # an OOM text does not say which allocation a value is in
DONATED = "donated argument"  # an argument whose buffer is also an output


@dataclass(frozen=True)
class PeakBuffer:
    """One value live at the peak: ``size`` bytes, its ``role`` (argument, output, temporary,
    constant, "output or temporary" where the text cannot tell, donated argument), the JAX
    operation that made it (``op_name``), its source (file, line, function where known), its
    XLA opcode (``label``) and shape; ``checkpointed``: a loop's state where the function the
    loop scans is already recomputed for the backward pass (:func:`checkpointed_loops`);
    ``stack_frame_id``: the frame its metadata names where no source was found for it (an OOM
    text of JAX 0.8 or later read without its program's tables)."""

    size: int
    role: str
    op_name: str = ""
    source_file: str | None = None
    source_line: int | None = None
    function: str = ""
    label: str = ""
    shape: str = ""
    checkpointed: bool = False
    stack_frame_id: int | None = None

    @property
    def operation(self) -> str:
        """The last part of the JAX op name (``jit(f)/jvp()/sin`` -> ``sin``), bracketed
        parameters dropped."""
        return self.op_name.split(";")[0].rsplit("/", 1)[-1].split("[", 1)[0]

    @property
    def saved_for_backward(self) -> bool:
        """Made by the forward pass of a gradient (``jvp`` in its name, not ``transpose``)."""
        name = self.op_name.split(";")[0]
        return "jvp(" in name and "transpose(" not in name

    @property
    def upcast_to_float32(self) -> bool:
        return self.operation == "convert_element_type" and self.shape.startswith("f32[")


@dataclass(frozen=True)
class ProgramPeak:
    """A program's memory at its peak: totals per kind of allocation (bytes, per device) and
    the values live then (``buffers``, largest first). ``peak_bytes``: what the values
    sum to (the dump), or the total allocation (an OOM text, which lists at most
    ``shown_limit`` values). ``source``: "error text" or "compiled"."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    constant_bytes: int
    alias_bytes: int
    peak_bytes: int
    buffers: tuple[PeakBuffer, ...]
    source: str
    shown_limit: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes + self.constant_bytes - self.alias_bytes


@dataclass(frozen=True)
class PeakLine:
    """The values one source line made that were live at the peak: where (``cell [3] line 2 in
    f`` or ``model.py:40 in f``), their bytes, share of the peak, and the values themselves."""

    where: str
    size: int
    share: float
    buffers: tuple[PeakBuffer, ...]

    @property
    def roles(self) -> str:
        """The roles of its values, most bytes first: ``temporary 12.0 MiB, argument 4.0 MiB``."""
        from jupyter_gpumem.core.units import format_bytes

        by_role: dict[str, int] = {}
        for b in self.buffers:
            by_role[b.role] = by_role.get(b.role, 0) + b.size
        return ", ".join(f"{role} {format_bytes(n)}" for role, n in sorted(by_role.items(), key=lambda kv: -kv[1]))

    @property
    def ops(self) -> str:
        """Its operations and shapes, largest first, each once: ``dot_general f32[64,64]``."""
        seen: list[str] = []
        for b in sorted(self.buffers, key=lambda b: -b.size):
            text = " ".join(p for p in (b.operation or b.label, b.shape) if p)
            if text and text not in seen:
                seen.append(text)
        return "; ".join(seen[:3]) + (f"; +{len(seen) - 3} more" if len(seen) > 3 else "")


# ---- the numbers XLA prints ------------------------------------------------------------------


def human_bytes(text: str) -> int | None:
    """Bytes of the first size in ``text`` written as ``tsl::strings::HumanReadableNumBytes``
    writes it (``4.89GiB``, ``38.7KiB``, ``4B``), as printed (rounded; the counts it stands for:
    ``oom_text.read_xla_size``), or None."""
    size = xla_size_in(text)
    return None if size is None else size.printed


# ---- the OOM text ----------------------------------------------------------------------------

_STATS = {
    "parameter allocation": "argument",
    "constant allocation": "constant",
    "maybe_live_out allocation": "output",
    "preallocated temp allocation": "temp",
    "total allocation": "total",
}
OOM_SECTION = "BufferAssignment OOM Debugging."
# How many peak buffers XLA lists: --xla_debug_buffer_assignment_show_max, 15 by default
# (xla/debug_options_flags.cc); XLA_FLAGS can raise it, and the text then lists more.
OOM_PEAK_LIMIT = 15


def parse_oom_text(text: str, frames: Mapping[int, tuple[str, int, str]] | None = None) -> ProgramPeak | None:
    """The program's peak from an out-of-memory error's text, or None where it carries no
    "BufferAssignment OOM Debugging." section. Sizes are as XLA rounded them; a value listed
    with "Entry Parameter Subshape" is an argument, the others an output or a temporary (the
    text does not say which).

    Each value's "Operator:" is its instruction's metadata (``OpMetadataToString``): since JAX
    0.8 it names a ``stack_frame_id`` and no source, so its file, line and function are read
    from ``frames``, the failing program's tables (:func:`stack_frames` of its optimised
    module); a frame not found there is kept as ``PeakBuffer.stack_frame_id``."""
    if not isinstance(text, str) or OOM_SECTION not in text:
        return None
    section = text[text.index(OOM_SECTION) :]
    stats: dict[str, int] = {}
    for raw in section.splitlines():
        label, colon, value = raw.strip().partition(":")
        if colon and label in _STATS and _STATS[label] not in stats:
            size = human_bytes(value)
            if size is not None:
                stats[_STATS[label]] = size
        if raw.startswith("Peak buffers:"):
            break
    buffers: list[PeakBuffer] = []
    _, found, listing = section.partition("Peak buffers:")
    if found:
        for block in re.split(r"\n\s*Buffer \d+:", "\n" + listing)[1:]:
            buffers.append(_oom_buffer(block, frames or {}))
    total = stats.get("total") or (stats.get("argument", 0) + stats.get("output", 0) + stats.get("temp", 0))
    return ProgramPeak(
        stats.get("argument", 0),
        stats.get("output", 0),
        stats.get("temp", 0),
        stats.get("constant", 0),
        0,
        total,
        tuple(sorted(buffers, key=lambda b: -b.size)),
        "error text",
        OOM_PEAK_LIMIT,
    )


def _oom_buffer(block: str, frames: Mapping[int, tuple[str, int, str]]) -> PeakBuffer:
    fields: dict[str, str] = {}
    for raw in block.splitlines():
        key, colon, value = raw.strip().partition(": ")
        if colon and key not in fields:
            fields[key] = value.strip()
    meta = metadata_fields(fields.get("Operator", ""))
    parameter = "Entry Parameter Subshape" in fields
    file, line, function = source_of(meta, frames)
    return PeakBuffer(
        size=human_bytes(fields.get("Size", "")) or 0,
        role=ARGUMENT if parameter else OUTPUT_OR_TEMPORARY,
        op_name=meta.get("op_name", ""),
        source_file=file,
        source_line=line,
        function=function,
        label="parameter" if parameter else fields.get("XLA Label", ""),
        shape=fields.get("Entry Parameter Subshape") or fields.get("Shape", ""),
        stack_frame_id=frame_id(meta) if file is None or line is None else None,
    )


# ---- the dump of a compiled program ----------------------------------------------------------

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+), (.*):$")
_VALUE = re.compile(r"<(\d+) ([^\s{>]+)(\{[0-9,]*\})?(?: \(phi\))? @\d+>")
_ASSIGNED = re.compile(r"^ value: <(\d+) ([^\s{>]+)(\{[0-9,]*\})?[^>]*> \(size=(\d+),offset=(\d+)\): (.*)$")
_INSTRUCTION = re.compile(r"from instruction: %?(\S+) = (.+?) ([a-z][\w-]*)\(")
_PEAK_AT = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$")
_LIVE = re.compile(r"^\s+(\S+?)(\{[0-9,]*\})?: (\d+) bytes")
_RANGE = re.compile(r"^\s+(\S+?)(\{[0-9,]*\})?:(\d+)-(\d+)\s*$")


def _key(name: str, index: str | None) -> str:
    return name + (index if index and index != "{}" else "")


def _allocation_role(kinds: str) -> str:
    if kinds.startswith("parameter") or ", parameter " in kinds:
        return DONATED if "maybe-live-out" in kinds else ARGUMENT
    if "maybe-live-out" in kinds:
        return OUTPUT
    if "constant" in kinds:
        return CONSTANT
    return TEMPORARY


@dataclass(frozen=True)
class DumpAllocations:
    """What a buffer-assignment dump says of each assigned value (``role``, ``size``, ``shape``,
    and where it sits: ``place``, ``(allocation, offset)``), the allocations' totals by kind
    (``"alias"``: donated arguments), and the allocations that hold their values for the whole
    program (``whole_program``: index -> size; parameters, maybe-live-out, constants and
    thread-local ones, what XProf's memory viewer calls indefinite)."""

    role: dict[int, str]
    size: dict[int, int]
    shape: dict[int, str]
    place: dict[int, tuple[int, int]]
    key: dict[int, str]
    totals: dict[str, int]
    whole_program: dict[int, int]


def dump_allocations(buffer_assignment: str) -> DumpAllocations:
    """Pure: the values and allocations of a buffer-assignment dump."""
    found = DumpAllocations({}, {}, {}, {}, {}, {ARGUMENT: 0, OUTPUT: 0, TEMPORARY: 0, CONSTANT: 0, "alias": 0}, {})
    role, index = TEMPORARY, -1
    for raw in buffer_assignment.splitlines():
        match = _ALLOCATION.match(raw)
        if match:
            index, size, kinds = int(match.group(1)), int(match.group(2)), match.group(3)
            role = _allocation_role(kinds)
            if role == DONATED:
                found.totals[ARGUMENT] += size
                found.totals[OUTPUT] += size
                found.totals["alias"] += size
            elif "thread-local" not in kinds:
                found.totals[role] += size
            if role != TEMPORARY or "thread-local" in kinds:
                found.whole_program[index] = size
            continue
        assigned = _ASSIGNED.match(raw)
        if assigned:
            value_id = int(assigned.group(1))
            found.role[value_id], found.size[value_id] = role, int(assigned.group(4))
            found.place[value_id] = (index, int(assigned.group(5)))
            found.key[value_id] = _key(assigned.group(2), assigned.group(3))
            found.shape[value_id] = assigned.group(6).split("{", 1)[0].strip()
    return found


def parse_dump(buffer_assignment: str, hlo_text: str = "") -> ProgramPeak:
    """The program's peak from its buffer-assignment dump (the text of
    ``*buffer-assignment.txt``, with ``*buffer-assignment-values.txt`` and ``*-live-range.txt``
    appended where XLA writes them apart) and its optimised HLO (for stack frames).

    Totals are the allocations' sizes by kind, as ``CompiledMemoryStats`` counts them: an
    allocation that is both a parameter and maybe-live-out (a donated argument) counts as both
    and as aliased. The peak is XProf's memory viewer's (see :func:`peak_from_ranges`); where
    the dump has no "BufferLiveRange:" section, XLA's "Live ranges at T (peak)" list."""
    found = dump_allocations(buffer_assignment)
    key_of, made_by = values_made(buffer_assignment, hlo_text, found)
    live = peak_from_ranges(live_ranges(buffer_assignment), found) or _peak_listing(buffer_assignment)
    buffers = _live_buffers(live, key_of, made_by, found.role, found.shape)
    buffers.sort(key=lambda b: -b.size)
    totals = found.totals
    return ProgramPeak(
        totals[ARGUMENT],
        totals[OUTPUT],
        totals[TEMPORARY],
        totals[CONSTANT],
        totals["alias"],
        sum(b.size for b in buffers),
        tuple(buffers),
        "compiled",
    )


def values_made(
    buffer_assignment: str, hlo_text: str, found: DumpAllocations
) -> tuple[dict[str, int], dict[int, PeakBuffer]]:
    """Pure: ``value name -> id``, and each assigned value as a buffer with what made it: its
    instruction's op name and source (a loop's state: its loop's), from the dump's "Used
    values" and the optimised HLO."""
    frames = stack_frames(hlo_text)
    loops = loop_states(hlo_text)
    rematted = checkpointed_loops(hlo_text, loops, frames)
    key_of: dict[str, int] = {}
    made_by: dict[int, PeakBuffer] = {}
    value_id = None
    for raw in buffer_assignment.splitlines():
        header = _VALUE.fullmatch(raw.strip())
        if header:
            value_id = int(header.group(1))
            key_of.setdefault(_key(header.group(2), header.group(3)), value_id)
            continue
        instruction = _INSTRUCTION.search(raw) if value_id is not None else None
        if instruction and value_id in found.role:
            meta_text = raw.split("metadata={", 1)[1] if "metadata={" in raw else ""
            label = instruction.group(3)
            if (label == "while" or not meta_text and label == "parameter") and instruction.group(1) in loops:
                meta_text, label = loops[instruction.group(1)], "while"  # a loop's state: its loop's source
            meta = metadata_fields(meta_text)
            file, line, function = source_of(meta, frames)
            made_by[value_id] = PeakBuffer(
                found.size[value_id],
                found.role[value_id],
                meta.get("op_name", ""),
                file,
                line,
                function,
                label,
                found.shape.get(value_id, ""),
                instruction.group(1) in rematted,
            )
            value_id = None
    for value, key in found.key.items():
        key_of.setdefault(key, value)
    return key_of, made_by


def _live_buffers(
    live: list[tuple[str, int]],
    key_of: Mapping[str, int],
    made_by: Mapping[int, PeakBuffer],
    role_of: Mapping[int, str],
    shape_of: Mapping[int, str],
) -> list[PeakBuffer]:
    """Pure: each value live at the peak as a buffer, with what made it where the dump says."""
    buffers = []
    for key, size in live:
        found = key_of.get(key)
        buffer = made_by.get(found) if found is not None else None
        if buffer is None:
            buffer = PeakBuffer(
                size,
                role_of.get(found, TEMPORARY) if found is not None else TEMPORARY,
                label=key,
                shape=shape_of.get(found, "") if found is not None else "",
            )
        buffers.append(replace(buffer, size=size))
    return buffers


def _peak_listing(text: str) -> list[tuple[str, int]]:
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        if _PEAK_AT.match(raw):
            found = []
            for entry in lines[i + 1 :]:
                match = _LIVE.match(entry)
                if match is None:
                    break
                found.append((_key(match.group(1), match.group(2)), int(match.group(3))))
            return found
    return []


def live_ranges(text: str) -> dict[str, tuple[int, int]]:
    """``value -> (first, last)`` step of the program's schedule where it is live (both ends
    included), from the "BufferLiveRange:" section ``HloLiveRange::ToString`` writes
    (``name{index}:start-end``; xla/hlo/utils/hlo_live_range.cc, the same in the dumps of
    JAX 0.4.38 to 0.10.2)."""
    ranges: dict[str, tuple[int, int]] = {}
    inside = False
    for raw in text.splitlines():
        if raw.strip() == "BufferLiveRange:":
            inside = True
            continue
        match = _RANGE.match(raw) if inside else None
        if match is None:
            inside = False
            continue
        ranges.setdefault(_key(match.group(1), match.group(2)), (int(match.group(3)), int(match.group(4))))
    return ranges


def peak_moment(spans: list[tuple[int, int, tuple[int, int, int]]]) -> tuple[int, int]:
    """``(bytes, step)``: the most bytes live at once and the first step they are, for values
    given as ``(first, last, slot)``, where ``slot`` is ``(allocation, offset, size)``: values
    in the same slot at once share its memory (a loop's state, an in-place update), counted
    once, as XProf's heap simulation counts a ``SHARE_WITH`` buffer once."""
    events = sorted(e for first, last, slot in spans for e in ((first, 1, slot), (last + 1, 0, slot)))
    holders: dict[tuple[int, int, int], int] = {}
    live, best, i = 0, (0, events[0][0] if events else 0), 0
    while i < len(events):
        step = events[i][0]
        while i < len(events) and events[i][0] == step:  # ends first, then starts, then measure
            _, starts, slot = events[i]
            holders[slot] = holders.get(slot, 0) + (1 if starts else -1)
            if holders[slot] == (1 if starts else 0):
                live += slot[2] if starts else -slot[2]
            i += 1
        if live > best[0]:
            best = (live, step)
    return best


def peak_from_ranges(ranges: Mapping[str, tuple[int, int]], found: DumpAllocations) -> list[tuple[str, int]]:
    """The values at the program's peak as ``(value, bytes)``, counted as XProf's memory viewer
    counts its peak (openxla/xprof xprof/convert/hlo_proto_to_memory_visualization_utils.cc at
    a27d00aa: ``peak_heap_mib`` is the heap simulator's peak of the temporaries plus every
    allocation of indefinite lifetime, whole): each whole-program allocation by its size, named
    by its value live at the peak (else its largest), and the temporaries live at the
    :func:`peak_moment`. Empty where the dump has no live ranges."""
    spans = {
        value: (*ranges[key], (*found.place[value], found.size[value]))
        for value, key in found.key.items()
        if key in ranges and found.place[value][0] not in found.whole_program
    }
    if not ranges:
        return []
    _, step = peak_moment(list(spans.values()))
    live: list[tuple[str, int]] = []
    seen: set[tuple[int, int, int]] = set()
    for value, (first, last, slot) in sorted(spans.items(), key=lambda kv: kv[1][0]):
        if first <= step <= last and slot not in seen:  # named for the value that made it
            seen.add(slot)
            live.append((found.key[value], slot[2]))
    for index, size in found.whole_program.items():
        held = [v for v, (where, _) in found.place.items() if where == index]
        if held:
            now = [
                v for v in held if found.key[v] in ranges and ranges[found.key[v]][0] <= step <= ranges[found.key[v]][1]
            ]
            live.append((found.key[max(now or held, key=lambda v: found.size[v])], size))
    return live


# ---- by source line --------------------------------------------------------------------------

NO_SOURCE = "(no source line: made by XLA)"
FRAME_ONLY = "stack frame {} (no line in XLA's text)"
FRAME_ID = "stack_frame_id="  # in an OOM text whose metadata names sources by frame (JAX 0.8 and later)


def where_made(buffer: PeakBuffer, cells: Mapping[str, int]) -> str:
    """The buffer's source as ``cell [n] line L in fn`` (a notebook cell's file, by the shell's
    map of cell files) or ``file.py:L in fn``; arguments without a source are "(arguments)", a
    value whose metadata names only a stack frame "stack frame N (no line in XLA's text)"."""
    if buffer.source_file is None or buffer.source_line is None:
        if buffer.role in (ARGUMENT, DONATED):
            return "(arguments)"
        return NO_SOURCE if buffer.stack_frame_id is None else FRAME_ONLY.format(buffer.stack_frame_id)
    return str(sites.frame_site(buffer.source_file, buffer.source_line, buffer.function or "<module>", cells))


def peak_by_line(peak: ProgramPeak, cells: Mapping[str, int] | None = None) -> list[PeakLine]:
    """The peak's values grouped by the line that made them, largest first; ``share`` is of
    ``peak.peak_bytes``."""
    groups: dict[str, list[PeakBuffer]] = {}
    for b in peak.buffers:
        groups.setdefault(where_made(b, cells or {}), []).append(b)
    total = peak.peak_bytes or sum(b.size for b in peak.buffers) or 1
    lines = [
        PeakLine(where, sum(b.size for b in bs), sum(b.size for b in bs) / total, tuple(bs))
        for where, bs in groups.items()
    ]
    return sorted(lines, key=lambda line: (-line.size, line.where))


def peak_lines_text(peak: ProgramPeak, cells: Mapping[str, int] | None = None, top: int = 5) -> list[str]:
    """Rows for a report: one per source line, ``  12.0 MiB  40%  cell [3] line 2 in f:
    temporary 12.0 MiB; dot_general f32[64,64]``."""
    from jupyter_gpumem.core.units import format_bytes

    rows = []
    for line in peak_by_line(peak, cells)[:top]:
        rows.append(f"{format_bytes(line.size):>11} {line.share:>4.0%}  {line.where}: {line.roles}; {line.ops}")
    return rows


def totals_text(peak: ProgramPeak) -> str:
    """``arguments 1.0 MiB, outputs ..., temporaries ...`` as the peak's source gives them."""
    from jupyter_gpumem.core.units import format_bytes

    text = (
        f"arguments {format_bytes(peak.argument_bytes)}, outputs {format_bytes(peak.output_bytes)}, "
        f"temporaries {format_bytes(peak.temp_bytes)}"
    )
    if peak.alias_bytes:
        text += f", aliased {format_bytes(peak.alias_bytes)}"
    return text


__all__ = [
    "loop_states",
    "checkpointed_loops",
    "PeakBuffer",
    "ProgramPeak",
    "PeakLine",
    "parse_oom_text",
    "parse_dump",
    "DumpAllocations",
    "dump_allocations",
    "values_made",
    "live_ranges",
    "peak_moment",
    "peak_from_ranges",
    "stack_frames",
    "peak_by_line",
    "peak_lines_text",
    "totals_text",
    "where_made",
    "FRAME_ONLY",
    "FRAME_ID",
    "NO_SOURCE",
    "human_bytes",
    "metadata_fields",
    "OOM_SECTION",
]
