"""Run a function right after a module has been imported, without importing it: an import
finder that finds nothing itself, lets the next finder find the module, and calls the function
once the module has run (then puts the loader back as it was and leaves ``sys.meta_path``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class _AfterImport:
    """The finder for one module name."""

    def __init__(self, name: str, then: Callable[[Any], None]):
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        cancel(self.name)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module") or not hasattr(loader, "__dict__"):
            return spec
        run, then = loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            try:
                run(module)
            finally:
                loader.__dict__.pop("exec_module", None)
            then(module)

        loader.exec_module = exec_module
        return spec


def after_import(name: str, then: Callable[[Any], None]) -> None:
    """Call ``then(module)`` once ``name`` has been imported: now if it already is, else right
    after its import runs (once; a failed import calls nothing)."""
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    elif not waiting(name):
        sys.meta_path.insert(0, _AfterImport(name, then))


def waiting(name: str) -> bool:
    """Whether a call is still waiting for ``name`` to be imported."""
    return any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path)


def cancel(name: str) -> None:
    """Stop waiting for ``name``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _AfterImport) and f.name == name)]
