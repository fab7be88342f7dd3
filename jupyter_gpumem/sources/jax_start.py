"""Who started JAX's backend: the Python stack at the moment it was created, recorded by a hook
that is installed without importing jax.

JAX runs each function in ``jax._src.xla_bridge._backend_initialization_hooks`` with every
backend ``_init_backend`` creates, inside ``backends()``, on the thread that asked for it
(``register_backend_initialization_hook``, jax/_src/xla_bridge.py, 0.10.2). The hook is
registered as soon as that module exists: at load when jax is already imported, else right
after ``jax._src.xla_bridge`` is imported (``import_watch``). The
hook only copies the stack (file, line, function per frame): it never raises into JAX, never
touches an array, and changes nothing the user's code sees.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping

from jupyter_gpumem.sources.import_watch import after_import, cancel

if TYPE_CHECKING:
    from jupyter_gpumem.core.sites import Origin

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


def watch(cells: Callable[[], Mapping[str, int]] | None = None) -> None:
    """Record who starts JAX's backend from now on (cheap: imports nothing). ``cells`` gives the
    shell's map of cell files to execution counts, asked when the stack is reduced."""
    if cells is not None:
        _state["cells"] = cells
    after_import(BRIDGE, _register)


def unwatch() -> None:
    """Remove the import finder, where it is still waiting."""
    cancel(BRIDGE)


def starter() -> "Origin | None":
    """Where the backend was started, or None where it was not seen: not started yet, or
    started before :func:`watch` ran."""
    frames = _state["frames"]
    if frames is None:
        return None
    from jupyter_gpumem.core.sites import origin_of

    return origin_of(frames, _state["cells"]())


def started_before_watch() -> bool:
    """The backend was already running when the extension loaded."""
    return bool(_state["before_watch"])
