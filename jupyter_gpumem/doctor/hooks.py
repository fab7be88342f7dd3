"""The doctor's cell hooks and their switches (``%gpumem doctor|cells on|off``), kept apart from
the doctor's other modules so that loading the extension is cheap.

A cell imports the doctor only when it has work for it: an error to diagnose, or ``%gpumem
cells on``. Noting which cell made which array (``array_cells``) costs the new arrays only.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from jupyter_gpumem.core import sites
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor.session import SESSION, Switch
from jupyter_gpumem.sampling.cell_hooks import CellHooks

log = logging.getLogger(__name__)

_hooks = CellHooks()


def _interrupted(what: str) -> None:
    # An interrupt meant for the cell's code can land in a hook; say so in one line, no traceback.
    print(f"gpumem: interrupted while {what}; the cell's own result stands", file=sys.stderr)


def _note_arrays_from_before_loading() -> None:
    """The arrays that live when the hooks are added are "before tracking", no cell's."""
    if "jax" in sys.modules:
        from jupyter_gpumem.doctor import array_cells

        try:
            array_cells.note_new_arrays(None)
        except RuntimeError:  # jaxlib's XlaRuntimeError from listing the live arrays
            log.debug("jupyter-gpumem could not list the arrays made before loading", exc_info=True)


def install(shell: Any) -> None:
    """Add the doctor's cell hooks to ``shell`` (idempotent).

    After each cell: the arrays the cell made are noted as its own (``array_cells``, at the cost
    of the new arrays only); an out-of-memory error gets a report (the error itself is shown and
    propagates as before: the hook only adds output); with ``%gpumem cells on``, one line of
    memory use. Nothing here waits on JAX or reads an array's buffers.
    """
    if shell in _hooks:
        return
    SESSION.shell = shell
    running: dict[str, Any] = {"track": None}
    _note_arrays_from_before_loading()

    def pre_run_cell(info: Any = None) -> None:
        # IPython 9.8+ counts the cell before pre_run_cell, earlier ones after it ran
        count = sites.running_cell_number(shell, stored=getattr(info, "store_history", True))
        try:
            if "jax" in sys.modules:
                from jupyter_gpumem.doctor import array_cells

                array_cells.begin_cell(count)
            if SESSION.cells:
                from jupyter_gpumem.doctor.tracking import Track

                running["track"] = Track().start()
        except KeyboardInterrupt:
            running["track"] = None
            _interrupted("measuring memory before the cell")
        except Exception:  # the hook's one catch-all: it runs on its own, so it never fails a cell
            running["track"] = None
            log.debug("jupyter-gpumem pre-cell hook failed", exc_info=True)

    def post_run_cell(result: Any = None) -> None:
        tracker, running["track"] = running["track"], None
        count = sites.finished_cell_number(result)
        try:
            if "jax" in sys.modules:
                from jupyter_gpumem.doctor import array_cells

                array_cells.end_cell(count)
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
