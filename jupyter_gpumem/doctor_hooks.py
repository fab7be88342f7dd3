"""The doctor's cell hooks, kept apart from ``doctor.py`` so that loading the extension is cheap.

A cell imports the doctor only when it has work for it: an error to diagnose, ``%gpumem cells
on``, or JAX arrays to attribute to the cell (JAX already imported).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .cell_hooks import CellHooks

log = logging.getLogger(__name__)

# %gpumem doctor on|off and %gpumem cells on|off; the doctor reads and writes this same dict.
state: dict[str, Any] = {"doctor": True, "cells": False, "shell": None}
_hooks = CellHooks()


def install(shell: Any) -> None:
    """Add the doctor's cell hooks to ``shell`` (idempotent).

    After each cell: an out-of-memory error gets a report (the error itself is shown and
    propagates as before: the hook only adds output); new array buffers are attributed to the
    cell; with ``%gpumem cells on``, one line of memory use.
    """
    if shell in _hooks:
        return
    state["shell"] = shell
    running: dict[str, Any] = {"track": None}

    def pre_run_cell(info: Any = None) -> None:
        if state["cells"]:
            try:
                from .doctor import Track

                running["track"] = Track().start()
            except Exception:
                running["track"] = None

    def post_run_cell(result: Any = None) -> None:
        tracker, running["track"] = running["track"], None
        if tracker is None and getattr(result, "error_in_exec", None) is None and "jax" not in sys.modules:
            return  # nothing for the doctor: no error, no line to print, no JAX arrays yet
        try:
            from .doctor import after_cell

            after_cell(result, shell, tracker)
        except Exception:  # a diagnosis must never be a second error
            log.debug("jupyter-gpumem doctor hook failed", exc_info=True)

    _hooks.add(shell, pre_run_cell, post_run_cell)


def uninstall(shell: Any) -> None:
    """Remove the hooks ``install`` added; a no-op if there are none."""
    _hooks.remove(shell)
