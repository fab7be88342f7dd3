"""What the doctor does after a cell (the OOM report, the per-cell line), and its switches:
``%gpumem doctor on|off`` and ``%gpumem cells on|off``.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpumem.doctor.hooks import install
from jupyter_gpumem.doctor import oom_text
from jupyter_gpumem.doctor.hooks import state as _state
from jupyter_gpumem.doctor.report import oom_report
from jupyter_gpumem.doctor.text import _b, _pretty_as_text
from jupyter_gpumem.doctor.tracking import Track
from jupyter_gpumem.core.magic_args import Grammar, Option


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
    if _state["doctor"]:
        report = oom_report(found, shell, raised=error)
        if report is not None:
            _display(report)


# The per-cell line's CPU caveat is said once per kernel, not after every cell.
_said = {"cpu_caveat": False}


def after_cell(result: Any, shell: Any, tracker: "Track | None") -> None:
    """The doctor's work after a cell (called by ``doctor_hooks``, once the cell's arrays are
    noted): the per-cell line and the OOM report."""
    count = getattr(result, "execution_count", None)
    if tracker is not None and _state["cells"]:
        tracker.stop()
        caveat = tracker.measure != "allocator" and not _said["cpu_caveat"]
        print(tracker.line(f"cell {count}" if count is not None else "cell", caveat=caveat) + _sites_text(shell))
        _said["cpu_caveat"] = _said["cpu_caveat"] or caveat
    _on_error(getattr(result, "error_in_exec", None), shell)


def _sites_text(shell: Any) -> str:
    """Where the cell's new, still-live arrays were allocated: the top three lines by bytes."""
    from jupyter_gpumem.core import sites
    from jupyter_gpumem.doctor import array_cells

    top = sites.top_sites(array_cells.made_by_last_cell(), sites.cell_numbers(shell))
    return ("; allocated at " + ", ".join(f"{site} ({_b(size)})" for site, size in top)) if top else ""


# What %gpumem doctor and %gpumem cells take: on, off, or nothing to ask.
SWITCH_ARGS = {key: Grammar(f"%gpumem {key}", positionals=(Option(key, choices=("on", "off")),)) for key in ("doctor", "cells")}


def _switch(argv: list[str], key: str, shell: Any, on_text: str) -> str:
    """Set the switch ``key`` from ``on|off``; with no word, say where it is."""
    word = SWITCH_ARGS[key].parse(argv)[key]
    if word is None:
        return f"gpumem: {key} is {'on' if _state[key] else 'off'}"
    _state[key] = word == "on"
    if shell is not None:
        install(shell)
    return f"gpumem: {key} {'on: ' + on_text if _state[key] else 'off'}"


class _Line(str):
    """A one-line answer shown as plain text."""

    _repr_pretty_ = _pretty_as_text


def magic_doctor(argv: list[str], shell: Any) -> _Line:
    """``%gpumem doctor on|off``: the OOM report after a failing cell (on by default)."""
    return _Line(_switch(argv, "doctor", shell, "an out-of-memory error in a cell is followed by a report"))


def magic_cells(argv: list[str], shell: Any) -> _Line:
    """``%gpumem cells on|off``: one line of memory use after each cell."""
    return _Line(_switch(argv, "cells", shell, "one line of memory use after each cell"))
