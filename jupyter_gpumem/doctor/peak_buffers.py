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
  ``HloLiveRange`` section ends with "Live ranges at T (peak):", the values live then; the
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

ARGUMENT, OUTPUT, TEMPORARY, CONSTANT = "argument", "output", "temporary", "constant"
OUTPUT_OR_TEMPORARY = "output or temporary"  # an OOM text does not say which allocation a value is in
DONATED = "donated argument"  # an argument whose buffer is also an output


@dataclass(frozen=True)
class PeakBuffer:
    """One value live at the peak: ``size`` bytes, its ``role`` (argument, output, temporary,
    constant, "output or temporary" where the text cannot tell, donated argument), the JAX
    operation that made it (``op_name``), its source (file, line, function where known), its
    XLA opcode (``label``) and shape."""

    size: int
    role: str
    op_name: str = ""
    source_file: str | None = None
    source_line: int | None = None
    function: str = ""
    label: str = ""
    shape: str = ""

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

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
_SIZE = re.compile(r"(?P<n>[0-9.]+)\s*(?P<unit>[KMGTP]iB|B)\b")


def human_bytes(text: str) -> int | None:
    """Bytes from ``tsl::strings::HumanReadableNumBytes`` (``4.89GiB``, ``38.7KiB``, ``4B``;
    rounded as printed), or None."""
    match = _SIZE.search(text)
    if match is None:
        return None
    return round(float(match.group("n")) * _UNITS[match.group("unit")])


_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S+))')


def metadata_fields(text: str) -> dict[str, str]:
    """``key=value`` pairs of an ``OpMetadata`` as XLA prints it (quoted or bare values)."""
    return {
        m.group(1): m.group(2) if m.group(2) is not None else m.group(3).rstrip(",}") for m in _FIELD.finditer(text)
    }


def _line_number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


# ---- the OOM text ----------------------------------------------------------------------------

_STATS = {
    "parameter allocation": "argument",
    "constant allocation": "constant",
    "maybe_live_out allocation": "output",
    "preallocated temp allocation": "temp",
    "total allocation": "total",
}
OOM_SECTION = "BufferAssignment OOM Debugging."
OOM_PEAK_LIMIT = 15  # kMaxBuffersToShow in ToVerboseString


def parse_oom_text(text: str) -> ProgramPeak | None:
    """The program's peak from an out-of-memory error's text, or None where it carries no
    "BufferAssignment OOM Debugging." section. Sizes are as XLA rounded them; a value listed
    with "Entry Parameter Subshape" is an argument, the others an output or a temporary (the
    text does not say which)."""
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
            buffers.append(_oom_buffer(block))
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


def _oom_buffer(block: str) -> PeakBuffer:
    fields: dict[str, str] = {}
    for raw in block.splitlines():
        key, colon, value = raw.strip().partition(": ")
        if colon and key not in fields:
            fields[key] = value.strip()
    meta = metadata_fields(fields.get("Operator", ""))
    parameter = "Entry Parameter Subshape" in fields
    return PeakBuffer(
        size=human_bytes(fields.get("Size", "")) or 0,
        role=ARGUMENT if parameter else OUTPUT_OR_TEMPORARY,
        op_name=meta.get("op_name", ""),
        source_file=meta.get("source_file"),
        source_line=_line_number(meta.get("source_line")),
        label="parameter" if parameter else fields.get("XLA Label", ""),
        shape=fields.get("Entry Parameter Subshape") or fields.get("Shape", ""),
    )


# ---- the dump of a compiled program ----------------------------------------------------------

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+), (.*):$")
_VALUE = re.compile(r"<(\d+) ([^\s{>]+)(\{[0-9,]*\})?(?: \(phi\))? @\d+>")
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) \((.*)\) -> .*\{\s*$")
_PARAMETER_NAME = re.compile(r"(?:^|, )%?([\w.\-]+): ")
_LOOP = re.compile(r"=.*? while\(.*?condition=%?([\w.\-]+), body=%?([\w.\-]+)")
_ASSIGNED = re.compile(r"^ value: <(\d+) [^>]*> \(size=(\d+),offset=\d+\): (.*)$")
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


def stack_frames(hlo_text: str) -> dict[int, tuple[str, int, str]]:
    """``stack_frame_id -> (file, line, function)`` of the innermost frame, from an HLO
    module's ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames`` tables (XLA's
    ``StackFrameIndex``, printed by HloModule::ToString); empty where it has none."""
    tables: dict[str, dict[int, str]] = {}
    current = None
    for raw in hlo_text.splitlines():
        if raw in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(raw, {})
            continue
        if current is None:
            continue
        head, _, rest = raw.partition(" ")
        if head.isdigit():
            current[int(head)] = rest
        elif raw.strip() or raw.startswith("%") or raw.startswith("ENTRY"):
            current = None

    def unquoted(text: str) -> str:
        return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text

    frames: dict[int, tuple[str, int, str]] = {}
    for frame_id, text in tables.get("StackFrames", {}).items():
        location = tables.get("FileLocations", {}).get(int(metadata_fields(text).get("file_location_id", "0") or 0))
        if location is None:
            continue
        fields = metadata_fields(location)
        file = unquoted(tables.get("FileNames", {}).get(int(fields.get("file_name_id", "0") or 0), ""))
        function = unquoted(tables.get("FunctionNames", {}).get(int(fields.get("function_name_id", "0") or 0), ""))
        line = _line_number(fields.get("line"))
        if file and line is not None:
            frames[frame_id] = (file, line, function)
    return frames


def loop_states(hlo_text: str) -> dict[str, str]:
    """``parameter name -> the metadata text of its while loop``, for the parameters of loop
    bodies and conditions (a loop's state: a scan's carry and the per-step values it stacks),
    which carry no metadata of their own."""
    params_of: dict[str, list[str]] = {}
    loops: dict[str, str] = {}
    for raw in hlo_text.splitlines():
        header = _COMPUTATION.match(raw)
        if header:
            params_of[header.group(1)] = _PARAMETER_NAME.findall(header.group(2))
            continue
        loop = _LOOP.search(raw)
        if loop:
            meta = raw.split("metadata={", 1)[1] if "metadata={" in raw else ""
            loops[loop.group(1)] = loops[loop.group(2)] = meta
    return {name: meta for computation, meta in loops.items() for name in params_of.get(computation, ())}


def _allocations(buffer_assignment: str) -> tuple[dict[int, str], dict[int, int], dict[int, str], dict[str, int]]:
    """Pure: each assigned value's role, size and shape, and the allocations' totals by kind
    (``"alias"``: donated arguments), from a buffer-assignment dump."""
    role_of: dict[int, str] = {}
    size_of: dict[int, int] = {}
    shape_of: dict[int, str] = {}
    totals = {ARGUMENT: 0, OUTPUT: 0, TEMPORARY: 0, CONSTANT: 0, "alias": 0}
    role = TEMPORARY
    for raw in buffer_assignment.splitlines():
        match = _ALLOCATION.match(raw)
        if match:
            size, role = int(match.group(2)), _allocation_role(match.group(3))
            if role == DONATED:
                totals[ARGUMENT] += size
                totals[OUTPUT] += size
                totals["alias"] += size
            elif "thread-local" not in match.group(3):
                totals[role] += size
            continue
        assigned = _ASSIGNED.match(raw)
        if assigned:
            value_id = int(assigned.group(1))
            role_of[value_id], size_of[value_id] = role, int(assigned.group(2))
            shape_of[value_id] = assigned.group(3).split("{", 1)[0].strip()
    return role_of, size_of, shape_of, totals


def parse_dump(buffer_assignment: str, hlo_text: str = "") -> ProgramPeak:
    """The program's peak from its buffer-assignment dump (the text of
    ``*buffer-assignment.txt``, with ``*buffer-assignment-values.txt`` and ``*-live-range.txt``
    appended where XLA writes them apart) and its optimised HLO (for stack frames).

    Totals are the allocations' sizes by kind, as ``CompiledMemoryStats`` counts them: an
    allocation that is both a parameter and maybe-live-out (a donated argument) counts as both
    and as aliased. The values live at the peak are XLA's "Live ranges at T (peak)" list, else
    the largest sum of sizes over the "BufferLiveRange" intervals."""
    role_of, size_of, shape_of, totals = _allocations(buffer_assignment)
    frames = stack_frames(hlo_text)
    loops = loop_states(hlo_text)
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
        if instruction and value_id in role_of:
            meta_text = raw.split("metadata={", 1)[1] if "metadata={" in raw else ""
            label = instruction.group(3)
            if not meta_text and label == "parameter" and instruction.group(1) in loops:
                meta_text, label = loops[instruction.group(1)], "while"  # a loop's state: its loop's source
            meta = metadata_fields(meta_text)
            file, line, function = meta.get("source_file"), _line_number(meta.get("source_line")), ""
            frame = frames.get(int(meta.get("stack_frame_id", "0") or 0)) if "stack_frame_id" in meta else None
            if frame is not None:
                file, line, function = frame
            made_by[value_id] = PeakBuffer(
                size_of[value_id],
                role_of[value_id],
                meta.get("op_name", ""),
                file,
                line,
                function,
                label,
                shape_of.get(value_id, ""),
            )
            value_id = None

    live = _peak_listing(buffer_assignment) or _peak_from_ranges(buffer_assignment, key_of, size_of)
    buffers = _live_buffers(live, key_of, made_by, role_of, shape_of)
    buffers.sort(key=lambda b: -b.size)
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


def _peak_from_ranges(text: str, key_of: Mapping[str, int], size_of: Mapping[int, int]) -> list[tuple[str, int]]:
    ranges = []
    inside = False
    for raw in text.splitlines():
        if raw.strip() == "BufferLiveRange:":
            inside = True
            continue
        match = _RANGE.match(raw) if inside else None
        if inside and match is None:
            inside = False
        if match:
            key = _key(match.group(1), match.group(2))
            value_id = key_of.get(key)
            if value_id is not None:
                ranges.append((key, size_of.get(value_id, 0), int(match.group(3)), int(match.group(4))))
    if not ranges:
        return []
    times = sorted({start for _, _, start, _ in ranges})
    best = max(times, key=lambda t: sum(size for _, size, s, e in ranges if s <= t <= e))
    return [(key, size) for key, size, s, e in ranges if s <= best <= e]


# ---- by source line --------------------------------------------------------------------------

NO_SOURCE = "(no source line: made by XLA)"


def where_made(buffer: PeakBuffer, cells: Mapping[str, int]) -> str:
    """The buffer's source as ``cell [n] line L in fn`` (a notebook cell's file, by the shell's
    map of cell files) or ``file.py:L in fn``; arguments without a source are "(arguments)"."""
    if buffer.source_file is None or buffer.source_line is None:
        return "(arguments)" if buffer.role in (ARGUMENT, DONATED) else NO_SOURCE
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
    "PeakBuffer",
    "ProgramPeak",
    "PeakLine",
    "parse_oom_text",
    "parse_dump",
    "stack_frames",
    "peak_by_line",
    "peak_lines_text",
    "totals_text",
    "where_made",
    "human_bytes",
    "metadata_fields",
    "OOM_SECTION",
]
