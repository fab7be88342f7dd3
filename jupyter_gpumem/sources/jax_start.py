"""Who started JAX's backend: the Python stack at the moment it was created, recorded by a hook
that is installed without importing jax.

JAX runs each function in ``jax._src.xla_bridge._backend_initialization_hooks`` with every
backend ``_init_backend`` creates, inside ``backends()``, on the thread that asked for it
(``register_backend_initialization_hook``, jax/_src/xla_bridge.py, 0.10.2). The hook is
registered as soon as that module exists: at load when jax is already imported, else by an
import finder that waits for ``jax._src.xla_bridge`` and removes itself once it has run. The
hook only copies the stack (file, line, function per frame): it never raises into JAX, never
touches an array, and changes nothing the user's code sees.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from jupyter_gpumem.sites import Origin

BRIDGE = "jax._src.xla_bridge"

_lock = threading.Lock()
_state: dict[str, Any] = {
    "frames": None,  # the stack that created the first backend, innermost first
    "platform": None,
    "registered": False,  # the hook is in JAX's list
    "before_watch": False,  # the backend had started before watch() ran
    "cells": dict,  # gives the shell's cell-file map when the stack is reduced
}


def _on_backend(backend: Any) -> None:
    """JAX's backend-initialisation hook: keep the stack of the first backend's creation."""
    if _state["frames"] is not None:
        return
    frame = sys._getframe(1)
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    _state["platform"] = getattr(backend, "platform", None)
    _state["frames"] = tuple(frames)


def _register(bridge: Any) -> None:
    with _lock:
        if _state["registered"]:
            return
        started = getattr(bridge, "backends_are_initialized", None)
        if callable(started) and started():
            _state["before_watch"] = True
            return
        register = getattr(bridge, "register_backend_initialization_hook", None)
        if not callable(register):  # a JAX without the hook: who started it stays unknown
            return
        register(_on_backend)
        _state["registered"] = True


class _BridgeFinder:
    """Finds nothing itself: when ``jax._src.xla_bridge`` is imported, it lets the next finder
    find it and registers the hook once the module has run (then restores the loader)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != BRIDGE:
            return None
        unwatch()
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
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                run(module)
            finally:
                loader.__dict__.pop("exec_module", None)
            _register(module)

        loader.exec_module = exec_module
        return spec


def watch(cells: Callable[[], Mapping[str, int]] | None = None) -> None:
    """Record who starts JAX's backend from now on (cheap: imports nothing). ``cells`` gives the
    shell's map of cell files to execution counts, asked when the stack is reduced."""
    if cells is not None:
        _state["cells"] = cells
    bridge = sys.modules.get(BRIDGE)
    if bridge is not None:
        _register(bridge)
    elif not any(isinstance(f, _BridgeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _BridgeFinder())


def unwatch() -> None:
    """Remove the import finder, where it is still waiting."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _BridgeFinder)]


def starter() -> "Origin | None":
    """Where the backend was started, or None where it was not seen: not started yet, or
    started before :func:`watch` ran."""
    frames = _state["frames"]
    if frames is None:
        return None
    from jupyter_gpumem.sites import origin_of

    return origin_of(frames, _state["cells"]())


def started_before_watch() -> bool:
    """The backend was already running when the extension loaded."""
    return bool(_state["before_watch"])
