"""Where each instruction of an optimised HLO module came from, read from its text: the
``OpMetadata`` fields XLA prints (``op_name``, ``source_file``, ``source_line``,
``stack_frame_id``), the ``StackFrames`` tables, and the loops whose state (a scan's carry and
stacked values) has no metadata of its own. Pure: texts in, plain values out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = [
    "checkpointed_loops",
    "line_number",
    "loop_states",
    "metadata_fields",
    "ops_at_frames",
    "source_of",
    "stack_frames",
]

_FIELD = re.compile(r'(\w+)=(?:"((?:[^"\\]|\\.)*)"|(\S+))')


def metadata_fields(text: str) -> dict[str, str]:
    """``key=value`` pairs of an ``OpMetadata`` as XLA prints it (quoted or bare values)."""
    return {
        m.group(1): m.group(2) if m.group(2) is not None else m.group(3).rstrip(",}") for m in _FIELD.finditer(text)
    }


def line_number(text: str | None) -> int | None:
    """A line number printed by XLA, or None."""
    return int(text) if text is not None and text.isdigit() else None


def frame_id(fields: Mapping[str, str]) -> int | None:
    """The ``stack_frame_id`` of an ``OpMetadata`` (:func:`metadata_fields`), or None."""
    return line_number(fields.get("stack_frame_id"))


def source_of(
    fields: Mapping[str, str], frames: Mapping[int, tuple[str, int, str]]
) -> tuple[str | None, int | None, str]:
    """``(file, line, function)`` an ``OpMetadata`` (:func:`metadata_fields`) names: through its
    ``stack_frame_id`` and the module's tables (:func:`stack_frames`; JAX 0.8 and later), else
    inline (``source_file``, ``source_line``; no function); None for what it does not say."""
    frame = frames.get(frame_id(fields) or 0)
    if frame is not None:
        return frame
    return fields.get("source_file"), line_number(fields.get("source_line")), ""


_METADATA = re.compile(r"metadata=\{(.*?)\}(?=,|\s*$)", re.MULTILINE)


def ops_at_frames(hlo_text: str) -> frozenset[tuple[str, int]]:
    """``(op_name, stack_frame_id)`` of each instruction's metadata in a module (op names as
    printed, escapes kept): the pairs an OOM text of this module can name."""
    pairs = set()
    for match in _METADATA.finditer(hlo_text):
        fields = metadata_fields(match.group(1))
        found = frame_id(fields)
        if found is not None and "op_name" in fields:
            pairs.add((fields["op_name"], found))
    return frozenset(pairs)


# "%region_0.20 (arg_tuple.21: (...)) -> (...) {"; JAX 0.4.38's XLA prints "region_0.20 {" alone
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+)(?: \((.*)\) -> .*)? \{\s*$")
_PARAMETER = re.compile(r"^\s+%?([\w.\-]+) = .* parameter\(\d+\)")
_PARAMETER_NAME = re.compile(r"(?:^|, )%?([\w.\-]+): ")
_LOOP = re.compile(r"=.*? while\(.*?condition=%?([\w.\-]+), body=%?([\w.\-]+)")


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
        line = line_number(fields.get("line"))
        if file and line is not None:
            frames[frame_id] = (file, line, function)
    return frames


def loop_states(hlo_text: str) -> dict[str, str]:
    """``name -> the metadata text of its while loop``, for each loop and the parameters of
    its body and condition (a loop's state: a scan's carry and the per-step values it stacks),
    which carry no metadata of their own. A loop named for no transform whose body's
    operations are a gradient's forward pass (JAX 0.5.3 and 0.6.2 name the forward scan of
    ``jax.grad`` ``jit(f)/jit(main)/while`` and its body's operations
    ``jit(f)/jit(main)/jvp(while)/body/...``) gets its body's ``jvp(...)`` name."""
    params_of: dict[str, list[str]] = {}
    loops: dict[str, tuple[str, str]] = {}  # computation -> (loop metadata, loop body)
    first_op: dict[str, str] = {}
    computation = ""
    for raw in hlo_text.splitlines():
        header = _COMPUTATION.match(raw)
        if header:
            computation = header.group(1)
            params_of[computation] = _PARAMETER_NAME.findall(header.group(2) or "")
            continue
        parameter = _PARAMETER.match(raw)
        if parameter and parameter.group(1) not in params_of.setdefault(computation, []):
            params_of[computation].append(parameter.group(1))
        loop = _LOOP.search(raw)
        if loop:
            meta = raw.split("metadata={", 1)[1] if "metadata={" in raw else ""
            loops[loop.group(1)] = loops[loop.group(2)] = (meta, loop.group(2))
            name = raw.strip().split(" ", 1)[0].lstrip("%")
            loops[name] = (meta, loop.group(2))
            params_of[name] = [name]  # the loop's own results: its name
        elif computation not in first_op and 'op_name="' in raw:
            first_op[computation] = metadata_fields(raw.split("metadata={", 1)[1]).get("op_name", "")
    named = {c: _forward_name(meta, first_op.get(body, "")) for c, (meta, body) in loops.items()}
    return {name: meta for c, meta in named.items() for name in params_of.get(c, ())}


_OP_NAME = re.compile(r'op_name="([^"]*)"')


def checkpointed_loops(hlo_text: str, loops: Mapping[str, str], frames: Mapping[int, tuple[str, int, str]]) -> set[str]:
    """The names in ``loops`` (:func:`loop_states`) of the loops, and their states, at a source
    line where some loop's body recomputes what it needs: an operation named
    ``<loop's op_name>/body/.../checkpoint/...`` (or ``remat``), as JAX names the backward scan
    of ``jax.lax.scan(jax.checkpoint(f), ...)`` (read on CPU JAX 0.10.2). The forward loop of
    that scan is named for no checkpoint; it shares the source line."""
    ops = set(_OP_NAME.findall(hlo_text))

    def source(meta: str) -> tuple[str, int] | None:
        file, line, _ = source_of(metadata_fields(meta), frames)
        return (file, line) if file is not None and line is not None else None

    def recomputes(meta: str) -> bool:
        prefix = metadata_fields(meta).get("op_name", "") + "/body/"
        return prefix != "/body/" and any(
            op.startswith(prefix) and ("checkpoint" in op[len(prefix) :] or "remat" in op[len(prefix) :]) for op in ops
        )

    lines = {source(meta) for meta in loops.values() if recomputes(meta)} - {None}
    return {name for name, meta in loops.items() if source(meta) in lines}


def _forward_name(meta: str, body_op: str) -> str:
    op_name = metadata_fields(meta).get("op_name", "")
    parts = body_op.split("/")
    forward = next((i for i, p in enumerate(parts) if p.startswith("jvp(")), None)
    if not op_name or "jvp(" in op_name or "transpose(" in body_op or forward is None:
        return meta
    return meta.replace(f'op_name="{op_name}"', f'op_name="{"/".join(parts[: forward + 1])}"', 1)
