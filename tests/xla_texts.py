"""XLA's out-of-memory texts, written around a real compiled program: its instructions, op names,
metadata and shapes come from the module JAX compiled (``Compiled.as_text()``), and only XLA's
wrapper is written here, since no CPU run raises it.

The wrapper follows ``BufferAssignment::ToVerboseString`` (openxla/xla
xla/service/buffer_assignment.cc at bfbc776e6233f97b5fb13bbc6022834f61646b62): "BufferAssignment
OOM Debugging.", the stats (``StatsString``: a label right-aligned to 33 characters, ": ", the size
right-aligned to 10), then "Peak buffers:" and per value ``"\\n\\tBuffer i:\\n\\t\\tSize: " +
HumanReadableNumBytes(size)``, ``"\\n\\t\\tOperator: " + OpMetadataToString(metadata)`` where the
op name is not empty, then ``"\\n\\t\\tEntry Parameter Subshape: " + shape`` for an entry parameter
or ``"\\n\\t\\tXLA Label: " + opcode + "\\n\\t\\tShape: " + shape``, and
``"\\n\\t\\t==========================\\n"``. jax-cuda12-pjrt 0.10.2's ``xla_cuda_plugin.so``
holds these strings ("BufferAssignment OOM Debugging.", "Peak buffers:", "\\t\\tOperator: ",
"\\t\\tEntry Parameter Subshape: ", "\\t\\tXLA Label: ", "\\t\\tShape: ") and
``OpMetadataToString``'s, "stack_frame_id=" among them (read with ``strings``; the source file at
the XLA commit JAX 0.10.2 pins, 5a9e73cb, was not read). The Operator text is copied from the module: HLO
printing writes an instruction's metadata as ``metadata={`` + ``OpMetadataToString`` + ``}``
(``HloInstruction``'s printer, xla/hlo/ir/hlo_instruction.cc), the same function, so the text
inside those braces is what the OOM text prints for that instruction (``stack_frame_id=N`` from
JAX 0.8, ``source_file=`` and ``source_line=`` inline before: read in the modules of 0.7.2 and
0.8.3). The sizes are the instructions' own shapes' bytes; which values XLA would call the peak
is not modelled: the caller picks them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_ITEM_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4}
_ITEM_BYTES |= {"f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<shape>[a-z]\w*\[[\d,]*\])(?:\{[^}]*\})? (?P<op>[a-z][\w-]*)\("
)


def human_readable_num_bytes(n: int) -> str:
    """tsl::strings::HumanReadableNumBytes for n >= 0, as xla/tsl/platform/numbers.cc writes it
    (format "%s%.*f%ciB", in jaxlib 0.10.2's libjax_common.so): under 1024 "<n>B"; else integer
    division by 1024 while n >= 1024 * 1024, one unit of "KMGTPE" per division, then n / 1024
    with 1 decimal for K and 2 for the others."""
    if n < 1024:
        return f"{n}B"
    unit = 0
    while n >= 1024 * 1024:
        n //= 1024
        unit += 1
    return format(n / 1024, ".1f" if unit == 0 else ".2f") + "KMGTPE"[unit] + "iB"


@dataclass(frozen=True)
class Instruction:
    """One instruction of a module's entry computation with an array shape: its name, shape
    (without layout), opcode and metadata as printed (the text inside ``metadata={...}``)."""

    name: str
    shape: str
    opcode: str
    metadata: str

    @property
    def size(self) -> int:
        dtype, dims = self.shape.split("[", 1)
        return _ITEM_BYTES[dtype] * math.prod(int(d) for d in dims.rstrip("]").split(",") if d)

    @property
    def op_name(self) -> str:
        found = re.search(r'op_name="((?:[^"\\]|\\.)*)"', self.metadata)
        return found.group(1) if found else ""


def _metadata(line: str) -> str:
    """The text inside ``metadata={...}``, braces inside quoted values kept."""
    start = line.find("metadata={")
    if start < 0:
        return ""
    i, quoted, text = start + len("metadata={"), False, []
    while i < len(line):
        ch = line[i]
        if quoted and ch == "\\":
            text.append(line[i : i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            break
        text.append(ch)
        i += 1
    return "".join(text)


def entry_instructions(hlo_text: str) -> list[Instruction]:
    """The entry computation's instructions that have an array shape, in order."""
    found, inside = [], False
    for line in hlo_text.splitlines():
        if line.startswith("ENTRY"):
            inside = True
            continue
        if inside and line.startswith("}"):
            break
        match = _INSTRUCTION.match(line) if inside else None
        if match:
            found.append(Instruction(match.group("name"), match.group("shape"), match.group("op"), _metadata(line)))
    return found


def verbose_oom_text(request: int, values: list[Instruction], arguments: int, outputs: int, temporaries: int) -> str:
    """``RESOURCE_EXHAUSTED: Out of memory while trying to allocate <request>.`` followed by
    ``ToVerboseString``'s section for ``values`` (largest first, as ``TopKPeakBuffers`` orders
    them) and the stats given."""
    stats = [
        ("parameter allocation", arguments),
        ("constant allocation", 0),
        ("maybe_live_out allocation", outputs),
        ("preallocated temp allocation", temporaries),
        ("total allocation", arguments + outputs + temporaries),
    ]
    text = "BufferAssignment OOM Debugging.\nBufferAssignment stats:\n"
    text += "".join(f"{label:>33}: {human_readable_num_bytes(size):>10}\n" for label, size in stats)
    parts = []
    for i, value in enumerate(sorted(values, key=lambda v: -v.size), 1):
        parts.append(f"\n\tBuffer {i}:\n\t\tSize: {human_readable_num_bytes(value.size)}")
        if value.op_name:
            parts.append(f"\n\t\tOperator: {value.metadata}")
        if value.opcode == "parameter":
            parts.append(f"\n\t\tEntry Parameter Subshape: {value.shape}")
        else:
            parts.append(f"\n\t\tXLA Label: {value.opcode}\n\t\tShape: {value.shape}")
        parts.append("\n\t\t==========================\n")
    head = f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {human_readable_num_bytes(request)}.\n"
    return head + text + "Peak buffers:" + "".join(parts)
