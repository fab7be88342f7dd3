"""The OOM report's "Live at the peak" section: what was live at the failing program's peak, by
source line, and what would lower it, read from XLA's "Peak buffers" in the error's text
(``peak_buffers.parse_oom_text``), with the failing call's program (``program_budget``) for
its name and, where the text names sources by stack frame id (JAX 0.8 and later), its tables.
Nothing is compiled for the words; the picture under them (``failing_program_figure``) compiles
the failing call again with XLA's dump, as ``%gpumem peak`` does.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpumem.doctor import peak_buffers, peak_fixes
from jupyter_gpumem.doctor.oom_text import OomError
from jupyter_gpumem.doctor.text import bytes_or_na

__all__ = ["names_its_operations", "peak_section", "failing_program_figure"]


def peak_section(error: OomError, program: Any, shell: Any) -> tuple[str, tuple[str, ...]]:
    """``(title, rows)``: what was live at the failing program's peak, by source line, and what
    would lower it, from XLA's "Peak buffers" in the error text; nothing is compiled for it
    beyond the failing call's program (``program``), whose stack-frame tables give the lines
    where the text names only frame ids (JAX 0.8 and later). A frame id left unresolved gets a
    row saying how to see its line. Where the text has no peak buffers but the failing call is
    known, a row says how to see it by line. Empty otherwise."""
    peak = peak_buffers.parse_oom_text(error.message)
    same = program is not None and peak is not None and names_its_operations(peak, program)
    if same and program.frames:
        peak = peak_buffers.parse_oom_text(error.message, program.frames)
    call = f" of {program.call}" if program is not None else ""
    if peak is None or not peak.buffers:
        if program is None:
            return "", ()
        name = program.call.split(" (", 1)[0]
        return (
            f"Live at the peak{call}:",
            (
                f"  the error text carries no XLA peak buffers; `%gpumem peak {name}(...)`, with the call's arguments, "
                "compiles it again with XLA's buffer assignment, without running it, and shows it by source line",
            ),
        )
    from jupyter_gpumem.core import sites
    from jupyter_gpumem.doctor.names import current_shell

    cells = sites.cell_numbers(shell if shell is not None else current_shell())
    title = (
        f"Live at the peak{call}, by source line (XLA's {len(peak.buffers)} largest values; "
        f"{peak_buffers.totals_text(peak)}, total {bytes_or_na(peak.peak_bytes)}):"
    )
    rows = peak_buffers.peak_lines_text(peak, cells)
    if any(peak_buffers.where_made(b, cells).startswith("stack frame ") for b in peak.buffers):
        rows.append(_frames_note(program, same))
    rows += [f"  to lower it: {fix.text}" for fix in peak_fixes.peak_fixes(peak, cells)]
    return title, tuple(rows)


def _frames_note(program: Any, same: bool) -> str:
    """Pure: the row under values named by stack frame only: why no line, and how to see it."""
    name = program.call.split(" (", 1)[0] + "(...)" if program is not None else "CALL"
    if program is None:
        why = "and the failing call was not found in the traceback to read them from"
    elif not same:
        why = "and the call found in the traceback compiles to a program whose operations differ"
    else:
        why = "not found in the failing call's program as compiled again"
    return (
        f"  XLA's text names these sources by stack frame only (JAX 0.8 and later), {why}: "
        f"`%gpumem peak {name}`, with the call's arguments, gives their lines"
    )


def names_its_operations(peak: Any, program: Any) -> bool:
    """Pure: whether each operation the text names by stack frame, ``(op_name, id)``, is one of
    the program's (``ProgramBudget.frame_ops``), so its tables are the text's: frame ids are per
    module, and another program's would name other lines."""
    named = {(b.op_name, b.stack_frame_id) for b in peak.buffers if b.stack_frame_id is not None}
    return named <= getattr(program, "frame_ops", frozenset())


# The picture's compile is a new one (the dump's options are part of JAX's cache key) and runs
# without being asked, after the error: only for a program whose lowered module is this many
# lines or fewer (a 100-layer MLP's jitted gradient: 1,110 lines, compiled with the dump in
# 0.36 s on a 2-core CPU; 40 layers: 450 lines, 0.18 s); a larger one is drawn by
# ``%gpumem peak CALL`` when asked.
FIGURE_MAX_LINES = 2000


def _lowered_lines(callee: Any, args: tuple, kwargs: dict) -> int:
    """Lines of the call's lowered module (StableHLO text): traced again from shapes, which jit
    has cached for the call that failed; nothing is compiled."""
    return callee.lower(*args, **kwargs).as_text().count("\n")


def failing_program_figure(raised: BaseException, shell: Any) -> dict | None:
    """``%gpumem peak``'s picture of the failing call's program (bytes live over its order by
    source line, the peak marked: ``peak_figure``), compiled again from its arguments' shapes
    with XLA's dump on, not run; None where no call is found in the traceback, its lowered
    module is longer than ``FIGURE_MAX_LINES``, it cannot be compiled so, or the dump gives no
    live ranges. That compile is a new one (the dump's options are part of JAX's key), so it
    takes as long as the call's first compile did."""
    from jupyter_gpumem.doctor import peak_timeline
    from jupyter_gpumem.doctor.peak_figure import peak_figure
    from jupyter_gpumem.doctor.program_budget import call_as_shapes
    from jupyter_gpumem.sources import jax_arrays

    try:
        cells, found = call_as_shapes(raised, shell)
        if found is None:
            return None
        callee, args, kwargs, where, name = found
        if _lowered_lines(callee, args, kwargs) > FIGURE_MAX_LINES:
            return None
        dump = jax_arrays.compile_with_dump(callee, args, kwargs)
        timeline = peak_timeline.peak_timeline(dump.buffer_assignment, dump.hlo, cells)
    except Exception:  # tracing the user's function again may raise anything; the report is shown already
        return None
    if timeline is None:
        return None
    each = f", per device (each of {dump.memory.devices} devices)" if dump.memory.devices > 1 else ""
    return peak_figure(timeline, f"the failing call {name} ({where}): bytes live over its program's order{each}")
