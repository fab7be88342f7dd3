"""What the doctor does after a cell: the OOM report and the per-cell line, as its switches
(``doctor.session``) say.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpumem.doctor import oom_peak, oom_text
from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME
from jupyter_gpumem.doctor.report import oom_report
from jupyter_gpumem.doctor.session import SESSION
from jupyter_gpumem.doctor.text import bytes_or_na
from jupyter_gpumem.doctor.tracking import Track


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


def _on_error(error: BaseException | None, shell: Any) -> None:
    if error is None:
        return
    found = oom_text.recognise(error)
    if found is None:
        return
    from jupyter_gpumem.sampling.sampler import get_sampler

    get_sampler().add_event("oom", requested_bytes=found.requested_bytes, form=found.form)
    if SESSION.doctor:
        report = oom_report(found, shell, raised=error)
        if report is not None:
            _display(report)
            if report.readings.program is not None:
                _display_figure(oom_peak.failing_program_figure(error, shell))


def _display_figure(figure: dict | None) -> None:
    """The failing program's picture, under the report: the words come first, unkept by its compile."""
    if figure is None:
        return
    from IPython.display import display

    said = "the failing call's program: bytes live over its order by source line (drawn with plotly)"
    display({PLOTLY_MIME: figure, "text/plain": said}, raw=True)


# The per-cell line's CPU caveat is said once per kernel, not after every cell.
_said = {"cpu_caveat": False}


def after_cell(result: Any, shell: Any, tracker: Track | None) -> None:
    """The doctor's work after a cell (called by ``hooks``, once ``tracker`` is stopped and the
    cell's arrays are noted): the per-cell line and the OOM report."""
    from jupyter_gpumem.core import sites

    count = sites.finished_cell_number(result)
    if tracker is not None and SESSION.cells:
        caveat = tracker.measure != "allocator" and not _said["cpu_caveat"]
        print(tracker.line(f"cell {count}" if count is not None else "cell", caveat=caveat) + _sites_text(shell))
        _said["cpu_caveat"] = _said["cpu_caveat"] or caveat
    _on_error(getattr(result, "error_in_exec", None), shell)


def _sites_text(shell: Any) -> str:
    """Where the cell's new, still-live arrays were allocated (the top three lines by bytes), and
    which of those lines keep arrays from earlier runs too (``sites.growing``)."""
    from jupyter_gpumem.core import sites
    from jupyter_gpumem.doctor import array_cells

    made = array_cells.made_by_last_cell()
    cells = sites.cell_numbers(shell)
    top = sites.top_sites(made, cells)
    text = ("; allocated at " + ", ".join(f"{site} ({bytes_or_na(size)})" for site, size in top)) if top else ""
    growth = _growth_text([tb for tb, _ in made], cells)
    return text + growth


def _growth_text(new_tracebacks: list, cells: Any) -> str:
    """``; growing: ...`` for the lines the cell added arrays at whose live arrays come from
    two or more runs; "" without any."""
    from jupyter_gpumem.core import sites
    from jupyter_gpumem.doctor import array_cells

    if not new_tracebacks:
        return ""
    allocation = sites.allocation_labeller(cells)
    lines_now = {allocation(tb).line for tb in set(new_tracebacks) if tb is not None}
    live = [(allocation(tb), n, size) for tb, n, size in array_cells.live_by_traceback()]
    found = sites.growing(made for made in live if made[0].line in lines_now)
    return ("; growing: " + ", ".join(str(g) for g in found[:3])) if found else ""
