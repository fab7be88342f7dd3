"""The doctor's cell hooks and their switches (``%gpumem doctor|cells on|off``), kept apart from
the doctor's other modules so that loading the extension is cheap.

A cell imports the doctor only when it has work for it: an error to diagnose, or ``%gpumem
cells on``. The default hooks never list JAX's arrays; ``cells on`` pays for what it measures.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor.session import SESSION, Switch
from jupyter_gpumem.sampling.cell_hooks import CellHooks

log = logging.getLogger(__name__)

_hooks = CellHooks()


def _interrupted(what: str) -> None:
    # An interrupt meant for the cell's code can land in a hook; say so in one line, no traceback.
    print(f"gpumem: interrupted while {what}; the cell's own result stands", file=sys.stderr)


def install(shell: Any) -> None:
    """Add the doctor's cell hooks to ``shell`` (idempotent).

    After each cell: an out-of-memory error gets a report (the error itself is shown and
    propagates as before: the hook only adds output); with ``%gpumem cells on``, one line of
    memory use, the cell's new arrays and the lines that keep arrays run after run. Without an
    error and with ``cells`` off, a cell costs the hooks two attribute reads: they never list
    JAX's arrays (which cell made an array is read from its traceback when a command or report
    asks). Nothing here waits on JAX or reads an array's buffers.
    """
    if shell in _hooks:
        return
    SESSION.shell = shell
    running: dict[str, Any] = {"track": None, "noting": False}

    def pre_run_cell(info: Any = None) -> None:
        if not SESSION.cells:
            return
        try:
            from jupyter_gpumem.doctor.tracking import Track

            # On the CPU, starting the track brings the registry up to date: one listing, not two
            running["track"] = tracker = Track().start()
            if "jax" in sys.modules:
                from jupyter_gpumem.doctor import array_cells

                array_cells.begin_cell(noted=tracker.noted_arrays)
                running["noting"] = True
        except KeyboardInterrupt:
            running["track"] = None
            _interrupted("measuring memory before the cell")
        except Exception:  # the hook's one catch-all: it runs on its own, so it never fails a cell
            running["track"] = None
            log.debug("jupyter-gpumem pre-cell hook failed", exc_info=True)

    def post_run_cell(result: Any = None) -> None:
        tracker, running["track"] = running["track"], None
        noting, running["noting"] = running["noting"], False
        try:
            if tracker is not None:
                tracker.stop()  # on the CPU this registers the cell's new arrays as its own
            if noting:
                from jupyter_gpumem.doctor import array_cells

                array_cells.end_cell(noted=tracker is not None and tracker.measure == "live_arrays")
            if tracker is None and getattr(result, "error_in_exec", None) is None:
                return  # nothing for the doctor: no error, no line to print
            from jupyter_gpumem.doctor.after_cell import after_cell

            after_cell(result, shell, tracker)
        except KeyboardInterrupt:
            _interrupted("reporting on the cell")
        except Exception:  # the hook's one catch-all: a diagnosis must never be a second error
            log.debug("jupyter-gpumem doctor hook failed", exc_info=True)

    _hooks.add(shell, pre_run_cell, post_run_cell)


def uninstall(shell: Any) -> None:
    """Remove the hooks ``install`` added, and forget which cell made which array."""
    _hooks.remove(shell)
    if "jupyter_gpumem.doctor.array_cells" in sys.modules:
        from jupyter_gpumem.doctor import array_cells

        array_cells.forget_all()


# What %gpumem doctor and %gpumem cells take: on, off, or nothing to ask.
SWITCH_ARGS = {
    key: Grammar(f"%gpumem {key}", positionals=(Option(key, choices=("on", "off")),)) for key in ("doctor", "cells")
}


def _switch(argv: list[str], key: Switch, shell: Any, on_text: str) -> str:
    """Set the switch ``key`` from ``on|off``; with no word, say where it is."""
    word = SWITCH_ARGS[key].parse(argv)[key]
    if word is None:
        return f"gpumem: {key} is {'on' if SESSION.is_on(key) else 'off'}"
    SESSION.turn(key, word == "on")
    if shell is not None:
        install(shell)
    return f"gpumem: {key} {'on: ' + on_text if SESSION.is_on(key) else 'off'}"


class _Line(str):
    """A one-line answer shown as plain text."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Imported here: the hooks load with the extension, the reports' text only when shown.
        from jupyter_gpumem.doctor.text import pretty_as_text

        pretty_as_text(self, printer, cycle)


def magic_doctor(argv: list[str], shell: Any) -> _Line:
    """``%gpumem doctor on|off``: the OOM report after a failing cell (on by default)."""
    return _Line(_switch(argv, "doctor", shell, "an out-of-memory error in a cell is followed by a report"))


def magic_cells(argv: list[str], shell: Any) -> _Line:
    """``%gpumem cells on|off``: one line of memory use after each cell."""
    return _Line(_switch(argv, "cells", shell, "one line of memory use after each cell"))
