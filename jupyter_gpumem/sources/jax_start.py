"""Who started JAX's backend: the Python stack at the moment the first backend was created,
recorded by a thin wrapper that is installed without importing jax and removes itself.

JAX creates every backend in one function, ``jax._src.xla_bridge._init_backend(platform)``,
called only from ``backends()`` while it holds ``_backend_lock``, and looked up there as a
module global at each call. It is so on every release this package supports: jax/_src/xla_bridge.py
of 0.4.30 (called at line 879, defined at 959), 0.4.38 (917, 992), 0.7.2 (812, 885), 0.10.2
(839, 912), 0.11.2 (827, 900) and 0.12.0.1 (851, 924). (JAX 0.10.2 also had
``register_backend_initialization_hook``; it came in 0.10.2 and was removed in 0.11 by jax
commit 8450f5fe85, so it serves no other release.)

The wrapper replaces that module global as soon as the module exists: at load when jax is
imported but not started, else right after ``jax._src.xla_bridge`` is imported
(``import_watch``). It calls JAX's function with the same argument, returns what it returns and
lets its errors through unchanged. Before the first backend is created it copies the
variables JAX reads at that moment (``read_at_start``: the allocator's, which the CUDA plugin and
XLA read then, and jax.config's client create options, merged in ``make_pjrt_c_api_client``);
after, it copies the stack (file, line, function per frame). A backend whose creation raises is
noted (``start_failure``). The cell hook puts JAX's function back after the cell that started
it (``settle``): from then on nothing of it is left and nothing of it runs, and a cell costs
what it cost without it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_gpumem.core.env_table import CREATE_OPTIONS_OPTION, READ_AT_START_VARS
from jupyter_gpumem.sources.import_watch import after_import, cancel

if TYPE_CHECKING:
    from jupyter_gpumem.core.sites import Origin

BRIDGE = "jax._src.xla_bridge"
CREATES_BACKENDS = "_init_backend"

_lock = threading.Lock()
_state: dict[str, Any] = {
    "frames": None,  # the stack that created the first backend, innermost first
    "platform": None,
    "wrapped": None,  # (module, JAX's function, the wrapper) while the wrapper is in place
    "before_watch": False,  # the backend had started before watch() ran
    "cells": dict,  # gives the shell's cell-file map when the stack is reduced
    "read_at_start": None,  # StartRead: what JAX's start read, copied as it began
    "failures": {},  # platform -> the error its backend's creation raised, as it went by
}

_FAILURE_CHARS = 2000


# How a copy of the start's variables was made: as the first backend was being created; when the
# extension loaded into a process whose JAX had started; or when first asked, in a process that
# never loaded it (both of the last two: the variables may have changed between).
AT_START, AT_LOAD, WHEN_ASKED = "start", "load", "asked"


@dataclass(frozen=True)
class StartRead:
    """The variables JAX read when its backend started (``None``: unset), and the value of
    jax.config's ``jax_pjrt_client_create_options`` then; ``taken`` says when the copy was made
    (``AT_START``, ``AT_LOAD`` or ``WHEN_ASKED``)."""

    env: Mapping[str, str | None]
    create_options: Any
    taken: str

    def present(self) -> dict[str, str]:
        """The variables that were set, as an environment."""
        return {var: value for var, value in self.env.items() if value is not None}


def _copy_now(taken: str) -> StartRead:
    # jax is imported whenever this runs (its backend is starting or has started): its config
    # holds the create options (jax_backend.pjrt_create_options reads them the same way)
    config = getattr(sys.modules.get("jax"), "config", None)
    options = getattr(config, CREATE_OPTIONS_OPTION, None) if config is not None else None
    return StartRead(
        env={var: os.environ.get(var) for var in READ_AT_START_VARS},
        create_options=dict(options) if isinstance(options, Mapping) else options,
        taken=taken,
    )


def _keep_start_read(taken: str) -> None:
    if _state["read_at_start"] is None:
        _state["read_at_start"] = _copy_now(taken)


def read_at_start(started: bool) -> StartRead | None:
    """What JAX read when its backend started; None while ``started`` (the caller's
    ``jax_backend.backend_started()``) is False. Where the start was not seen, a copy is made
    now, once, and says so in ``taken``."""
    if not started:
        return None
    with _lock:
        _keep_start_read(WHEN_ASKED)
        return _state["read_at_start"]


def forget_start_read() -> None:
    """Drop the copy of what JAX read at its start (tests that fake a process of their own)."""
    with _lock:
        _state["read_at_start"] = None


def stack_of(frame: Any) -> tuple[tuple[str, int, str], ...]:
    """(file, line, function) of ``frame`` and each frame that called it, innermost first."""
    frames = []
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno or 0, frame.f_code.co_name))
        frame = frame.f_back
    return tuple(frames)


def _record(backend: Any, caller: Any) -> None:
    if _state["frames"] is None:
        _state["platform"] = getattr(backend, "platform", None)
        _state["frames"] = stack_of(caller)


def _restore() -> None:
    """Put JAX's function back, where ours is still the one in the module."""
    wrapped = _state["wrapped"]
    if wrapped is None:
        return
    module, original, wrapper = wrapped
    _state["wrapped"] = None
    if vars(module).get(CREATES_BACKENDS) is wrapper:  # else someone wrapped it after us: leave theirs
        setattr(module, CREATES_BACKENDS, original)


# What reading os.environ, jax.config or a frame could raise; nothing else is caught.
_BOOKKEEPING_ERRORS = (AttributeError, LookupError, TypeError, ValueError, RuntimeError)


def _note_failure(platform: str, err: BaseException | None) -> None:
    _state["failures"][str(platform)] = f"{type(err).__name__}: {err}"[:_FAILURE_CHARS]
    if _state["frames"] is None:  # nothing started: the next try reads the variables again
        _state["read_at_start"] = None


def _wrapper(original: Callable[[str], Any]) -> Callable[[str], Any]:
    def _init_backend(platform: str) -> Any:
        try:
            _keep_start_read(AT_START)
        except _BOOKKEEPING_ERRORS:  # bookkeeping must never fail JAX's start
            pass
        created = False
        try:
            backend = original(platform)  # JAX's errors pass through: backends() decides what they mean
            created = True
        finally:
            if not created:
                _note_failure(platform, sys.exc_info()[1])
        try:
            _record(backend, sys._getframe(1))
        except Exception:  # noqa: BLE001 - bookkeeping must never fail JAX's start
            pass
        return backend

    _init_backend.__wrapped__ = original  # type: ignore[attr-defined]
    _init_backend.__doc__ = original.__doc__
    _init_backend.__module__ = getattr(original, "__module__", _init_backend.__module__)
    _init_backend.__qualname__ = getattr(original, "__qualname__", CREATES_BACKENDS)
    return _init_backend


def _install(bridge: Any) -> None:
    with _lock:
        if _state["wrapped"] is not None or _state["frames"] is not None:
            return
        started = getattr(bridge, "backends_are_initialized", None)
        if callable(started) and started():
            _state["before_watch"] = True
            _keep_start_read(AT_LOAD)
            return
        original = vars(bridge).get(CREATES_BACKENDS)
        if not callable(original):  # a JAX that creates backends elsewhere: who started it stays unknown
            return
        wrapper = _wrapper(original)
        _state["wrapped"] = (bridge, original, wrapper)
        setattr(bridge, CREATES_BACKENDS, wrapper)


def watch(cells: Callable[[], Mapping[str, int]] | None = None) -> None:
    """Record who starts JAX's backend from now on (cheap: imports nothing). ``cells`` gives the
    shell's map of cell files to execution counts, asked when the stack is reduced."""
    if cells is not None:
        _state["cells"] = cells
    after_import(BRIDGE, _install)


def unwatch() -> None:
    """Remove the import finder where it is still waiting, and the wrapper where JAX has not
    started yet."""
    cancel(BRIDGE)
    with _lock:
        _restore()


def settle(started: bool) -> None:
    """Put JAX's function back once its backend has started (``started``: the caller's
    ``jax_backend.backend_started()``). Called after the cell that started it: the wrapper stays
    through the whole of ``backends()``, which creates the CPU backend first and a GPU plugin's
    after it, so that a GPU backend's failure is seen too (``start_failure``)."""
    if started:
        with _lock:
            _restore()


def start_failure(platform: str) -> str | None:
    """The error the creation of ``platform``'s backend raised while the extension watched, or
    None. ``backends()`` raises a plugin's failure ("Unable to initialize backend 'cuda'") from
    the first operation and keeps nothing of it (``fail_quietly=False``: jax/_src/xla_bridge.py,
    0.10.2 line 846, 0.12.0.1 line 858); a caller that caught it leaves no other trace."""
    return _state["failures"].get(platform)


def watching() -> bool:
    """Whether the wrapper is in JAX's module now (only from jax's import to the end of the cell
    that started it)."""
    return _state["wrapped"] is not None


def starter() -> Origin | None:
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
