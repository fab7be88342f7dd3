"""Adding and removing a pair of IPython cell hooks, at most one pair per shell per owner.

The sampler (cell events) and the doctor (after-cell report and per-cell line) each keep one
``CellHooks``. Imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CellHooks:
    """A ``pre_run_cell``/``post_run_cell`` pair added to each IPython shell, at most one per shell."""

    def __init__(self) -> None:
        self._by_shell: dict[int, tuple[Any, Callable, Callable]] = {}

    def __contains__(self, shell: Any) -> bool:
        return id(shell) in self._by_shell

    def add(self, shell: Any, pre_run_cell: Callable, post_run_cell: Callable) -> None:
        shell.events.register("pre_run_cell", pre_run_cell)
        shell.events.register("post_run_cell", post_run_cell)
        self._by_shell[id(shell)] = (shell, pre_run_cell, post_run_cell)

    def remove(self, shell: Any) -> None:
        """Unregister the pair ``add`` gave ``shell``; a no-op if there is none."""
        entry = self._by_shell.pop(id(shell), None)
        if entry is None:
            return
        _, pre, post = entry
        for name, hook in (("pre_run_cell", pre), ("post_run_cell", post)):
            try:
                shell.events.unregister(name, hook)
            except ValueError:  # already removed by someone else
                pass
