"""What is live at a call's peak, by source line, before it runs: ``%gpumem peak CALL``.

The call is compiled, never run, with XLA's dump on (``sources.jax_arrays.compile_with_dump``);
its buffer assignment is read by ``doctor.peak_buffers``. Totals are ``memory_analysis()``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core import sites
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor import peak_buffers, peak_fixes, peak_timeline, peak_trials
from jupyter_gpumem.doctor.estimating import evaluate_call
from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME, peak_figure
from jupyter_gpumem.doctor.text import PreReport, bytes_or_na, pretty_as_text
from jupyter_gpumem.sources import jax_arrays, jax_sharding

PEAK_ARGS = Grammar("%gpumem peak", positionals=(Option("expression", "CALL", required=True),))
TOP_LINES = 8


@dataclass(frozen=True)
class PeakReport(PreReport):
    """A call's memory at its peak: ``memory`` (``memory_analysis()``), ``peak`` (XLA's buffer
    assignment), the peak's values by source line (``lines``), ``fixes``, and how long the
    compile took."""

    _html_class = "jupyter-gpumem-peak"
    _repr_pretty_ = pretty_as_text

    expression: str
    memory: jax_arrays.CompiledMemory
    peak: peak_buffers.ProgramPeak
    lines_by_source: tuple[peak_buffers.PeakLine, ...]
    fixes: tuple[peak_fixes.PeakFix, ...]
    seconds: float
    trials: peak_trials.Trials = peak_trials.Trials((), (), 0)
    trial_seconds: float = 0.0
    timeline: peak_timeline.PeakTimeline | None = None  # None where the dump has no live ranges

    def figure(self) -> dict | None:
        """The picture: bytes live over the program's order by source line, the peak marked
        (plotly's JSON, ``peak_figure``); None where the dump gives no live ranges."""
        if self.timeline is None:
            return None
        m = self.memory
        each = f", per device (each of {m.devices} devices runs the same program)" if m.devices > 1 else ""
        return peak_figure(self.timeline, f"{self.expression}: bytes live over the program's order{each}")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        figure = self.figure()
        if figure is not None:
            said = "bytes live over the program's order by source line (drawn with plotly); the report below says it in words"
            display({PLOTLY_MIME: figure, "text/plain": said}, raw=True)
        display({"text/plain": str(self), "text/html": self._repr_html_()}, raw=True)

    def lines(self) -> list[str]:
        m = self.memory
        each = f" per device (each of {m.devices} devices runs the same partitioned program)" if m.devices > 1 else ""
        checked = (
            f"; {self.trials.compiles} compiles to check fixes, {self.trial_seconds:.2f} s"
            if self.trials.compiles
            else ""
        )
        out = [
            f"{self.expression}: peak {bytes_or_na(self.peak.peak_bytes)}{each} (compiled in {self.seconds:.2f} s, not run"
            + ("" if m.jitted else "; not jitted: compiled as jax.jit of it, its array arguments traced")
            + checked
            + ")",
            f"  arguments {bytes_or_na(m.argument_bytes)}, outputs {bytes_or_na(m.output_bytes)}, temporaries {bytes_or_na(m.temp_bytes)}, "
            f"aliased {bytes_or_na(m.alias_bytes)} (memory_analysis{', one device' if m.devices > 1 else ''})",
            *mesh_lines(m, self.peak),
            "  Live at the peak, by source line (largest first; shapes on one device):"
            if m.devices > 1
            else "  Live at the peak, by source line (largest first):",
        ]
        for line in self.lines_by_source[:TOP_LINES]:
            out.append(f"  {bytes_or_na(line.size):>11} {line.share:>4.0%}  {line.where}: {line.roles}; {line.ops}")
        if len(self.lines_by_source) > TOP_LINES:
            rest = self.lines_by_source[TOP_LINES:]
            out.append(f"  {bytes_or_na(sum(x.size for x in rest)):>11}        {len(rest)} more lines")
        out.append(
            "  What would lower it:"
            if self.fixes
            else "  No fix stands out: no single function's saved values, upcast, undonated argument or output dominates."
        )
        out += [f"  {i}. {f.text}" for i, f in enumerate(self.fixes, 1)]
        if self.trials.declined:
            out.append("  Checked and not offered:")
            out += [f"  - {text}" for text in self.trials.declined]
        return out

    def to_json(self) -> dict:
        return {
            "expression": self.expression,
            "peak_bytes": self.peak.peak_bytes,
            "argument_bytes": self.memory.argument_bytes,
            "output_bytes": self.memory.output_bytes,
            "temp_bytes": self.memory.temp_bytes,
            "alias_bytes": self.memory.alias_bytes,
            "seconds": self.seconds,
            "lines": [
                {"where": x.where, "bytes": x.size, "share": x.share, "roles": x.roles, "ops": x.ops}
                for x in self.lines_by_source
            ],
            "fixes": [{"kind": f.kind, "saves": f.saves, "text": f.text} for f in self.fixes],
            "declined": list(self.trials.declined),
            "devices": self.memory.devices,
            "arguments": [_layout_json(x) for x in self.memory.layouts],
            "outputs": [_layout_json(x) for x in self.memory.output_layouts],
        }


def _layout_json(x: jax_sharding.ArrayLayout) -> dict:
    return {
        "position": x.position,
        "shape": list(x.global_shape),
        "device_shape": list(x.device_shape),
        "dtype": x.dtype,
        "device_bytes": x.device_bytes,
        "spec": x.spec,
        "replicated": x.replicated,
    }


def _layout_text(x: jax_sharding.ArrayLayout) -> str:
    whole = peak_trials.shape_text(x.global_shape, x.dtype)
    mine = peak_trials.shape_text(x.device_shape, x.dtype)
    where = "replicated, a whole copy on each" if x.replicated else (x.spec or "sharded")
    return f"{whole} -> {mine} {bytes_or_na(x.device_bytes)} ({where})"


def mesh_lines(m: jax_arrays.CompiledMemory, peak: peak_buffers.ProgramPeak) -> list[str]:
    """For a program over several devices: each argument's and output's shape on one device, and
    what the program replicates (arguments, outputs, values gathered whole at the peak)."""
    if m.devices <= 1:
        return []
    out = [f"  On {m.devices} devices (global shape -> one device's):"]
    out += [f"    argument {x.position}: {_layout_text(x)}" for x in m.layouts]
    out += [f"    output {x.leaf}: {_layout_text(x)}" for x in m.output_layouts]
    replicated = [x for x in m.layouts + m.output_layouts if x.replicated]
    gathered = [b for b in peak.buffers if b.label.startswith("all-gather")]
    if replicated:
        out.append(
            f"  Replicated: {bytes_or_na(sum(x.device_bytes for x in replicated))} per device are whole copies "
            f"({len(replicated)} {'array' if len(replicated) == 1 else 'arrays'})"
        )
    if gathered:
        out.append(
            f"  Gathered whole at the peak (all-gather): {bytes_or_na(sum(b.size for b in gathered))} per device "
            f"({'; '.join(dict.fromkeys(b.shape for b in gathered))})"
        )
    return out


def peak_report(
    expression: str,
    dump: jax_arrays.CompiledDump,
    cells: Mapping[str, int],
    trials: peak_trials.Trials = peak_trials.Trials((), (), 0),
    trial_seconds: float = 0.0,
) -> PeakReport:
    """The report for a compiled dump and the fixes checked for it (``trials``); pure."""
    peak = peak_buffers.parse_dump(dump.buffer_assignment, dump.hlo)
    fixes = peak_fixes.peak_fixes(peak, cells, trials.fixes)
    lines = tuple(peak_buffers.peak_by_line(peak, cells))
    timeline = peak_timeline.peak_timeline(dump.buffer_assignment, dump.hlo, cells)
    return PeakReport(expression, dump.memory, peak, lines, tuple(fixes), dump.seconds, trials, trial_seconds, timeline)


def peak(
    callee: Any, *args: Any, _expression: str = "", _cells: Mapping[str, int] | None = None, **kwargs: Any
) -> PeakReport:
    """Compile ``callee(*args, **kwargs)`` without running it and report its peak by line, with
    the donation and sharding fixes that compiled smaller (each compiled, never run)."""
    import time

    dump = jax_arrays.compile_with_dump(callee, tuple(args), kwargs)
    peak_bytes = peak_buffers.parse_dump(dump.buffer_assignment, dump.hlo).peak_bytes
    start = time.perf_counter()
    trials = peak_trials.measured_fixes(callee, args, kwargs, dump, peak_bytes, argument_names(_expression))
    seconds = time.perf_counter() - start
    return peak_report(_expression or getattr(callee, "__name__", "call"), dump, _cells or {}, trials, seconds)


def argument_names(expression: str) -> dict[Any, str]:
    """How the call ``expression`` writes each argument: ``{0: "a", "key": "k"}``; {} where it
    is not a call."""
    import ast

    try:
        node = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError:
        return {}
    if not isinstance(node, ast.Call):
        return {}
    names: dict[Any, str] = {i: ast.unparse(a) for i, a in enumerate(node.args) if not isinstance(a, ast.Starred)}
    names.update({k.arg: ast.unparse(k.value) for k in node.keywords if k.arg})
    return names


def magic_peak(argv: list[str], shell: Any) -> PeakReport:
    """``%gpumem peak step(params, batch)``: the arguments are evaluated, the call compiled for
    them and never run."""
    from jupyter_gpumem.doctor.names import current_shell

    text = PEAK_ARGS.parse(argv)["expression"].strip()
    callee, args, kwargs = evaluate_call(text, shell, "peak")
    cells = sites.cell_numbers(shell if shell is not None else current_shell())
    return peak(callee, *args, _expression=text, _cells=cells, **kwargs)
