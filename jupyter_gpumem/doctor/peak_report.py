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
from jupyter_gpumem.doctor import peak_buffers, peak_fixes
from jupyter_gpumem.doctor.estimating import evaluate_call
from jupyter_gpumem.doctor.text import PreReport, bytes_or_na, pretty_as_text
from jupyter_gpumem.sources import jax_arrays

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

    def lines(self) -> list[str]:
        m = self.memory
        out = [
            f"{self.expression}: peak {bytes_or_na(self.peak.peak_bytes)} (compiled in {self.seconds:.2f} s, not run"
            + ("" if m.jitted else "; not jitted: compiled as jax.jit of it, its array arguments traced")
            + ")",
            f"  arguments {bytes_or_na(m.argument_bytes)}, outputs {bytes_or_na(m.output_bytes)}, temporaries {bytes_or_na(m.temp_bytes)}, "
            f"aliased {bytes_or_na(m.alias_bytes)} (memory_analysis)",
            "  Live at the peak, by source line (largest first):",
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
        }


def peak_report(expression: str, dump: jax_arrays.CompiledDump, cells: Mapping[str, int]) -> PeakReport:
    """The report for a compiled dump; pure."""
    peak = peak_buffers.parse_dump(dump.buffer_assignment, dump.hlo)
    fixes = peak_fixes.peak_fixes(peak, cells, dump.arguments, dump.memory.outputs)
    return PeakReport(
        expression, dump.memory, peak, tuple(peak_buffers.peak_by_line(peak, cells)), tuple(fixes), dump.seconds
    )


def peak(
    callee: Any, *args: Any, _expression: str = "", _cells: Mapping[str, int] | None = None, **kwargs: Any
) -> PeakReport:
    """Compile ``callee(*args, **kwargs)`` without running it and report its peak by line."""
    dump = jax_arrays.compile_with_dump(callee, tuple(args), kwargs)
    return peak_report(_expression or getattr(callee, "__name__", "call"), dump, _cells or {})


def magic_peak(argv: list[str], shell: Any) -> PeakReport:
    """``%gpumem peak step(params, batch)``: the arguments are evaluated, the call compiled for
    them and never run."""
    from jupyter_gpumem.doctor.names import current_shell

    text = PEAK_ARGS.parse(argv)["expression"].strip()
    callee, args, kwargs = evaluate_call(text, shell, "peak")
    cells = sites.cell_numbers(shell if shell is not None else current_shell())
    return peak(callee, *args, _expression=text, _cells=cells, **kwargs)
