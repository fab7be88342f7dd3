"""What keeps the last error's frames, and the JAX arrays in them, alive; and letting go of them.

A failed cell's traceback keeps every frame it passed through, and each frame its locals: the
classic notebook leak (jax#14934). Read from IPython 9.18 on Python 3.11, any one of these
keeps the whole traceback:

- ``sys.last_traceback``, ``last_value``, ``last_type`` (and ``last_exc`` from 3.12), set by
  ``InteractiveShell._get_exc_info`` (IPython/core/interactiveshell.py);
- the traceback display, ``shell.InteractiveTB.tb``, set by
  ``AutoFormattedTB.structured_traceback`` (IPython/core/ultratb.py);
- the failed cell's ``ExecutionResult``: ``shell.last_execution_result.error_in_exec`` and its
  ``__traceback__`` (until the next cell ends);
- after ``%debug`` or ``%pdb``, the debugger, ``shell.InteractiveTB.pdb``: its
  ``curframe_locals`` is the last frame's locals, which Python 3.11's ``Pdb.forget()`` leaves.

And ``frame.clear()`` alone frees nothing there on 3.11: the display read ``frame.f_locals``,
and the frame keeps that snapshot dict (``frame_tp_clear`` clears the fast locals only).
Reading ``f_locals`` again after the clear drops the cleared names from the snapshot.
"""

from __future__ import annotations

import gc
import inspect
import sys
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.names import names_by_array
from jupyter_gpumem.sources import jax_arrays

_SYS_NAMES = ("last_traceback", "last_value", "last_type", "last_exc")

# Frames that clear() would finalize (a suspended generator or coroutine) are left alone.
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@dataclass(frozen=True)
class ErrorRelease:
    """What letting go of the last error did, checked afterwards.

    ``error``: the error's class name ("" where only a traceback was found); ``holders``: the
    places its traceback was dropped from (none: nothing was held); ``frames_cleared``: frames
    whose locals were cleared; ``arrays``/``array_bytes``: JAX arrays its frames held;
    ``freed``/``freed_bytes``: those of them gone afterwards (by weak reference);
    ``still_held``: for each one still alive, what holds it, in words; ``unfinished``: the look
    through the frames' locals ran out of time, so it may have missed some.
    """

    error: str
    holders: tuple[str, ...]
    frames_cleared: int
    arrays: int
    array_bytes: int
    freed: int
    freed_bytes: int
    still_held: tuple[str, ...]
    unfinished: bool = False

    def words(self) -> str:
        """What was let go of, in words; "" where no error had happened (nothing was held)."""
        if not self.holders:
            return ""
        what = f"the last error ({self.error})" if self.error else "the last error"
        out = f"{what}: traceback dropped from {', '.join(self.holders)}"
        if self.frames_cleared:
            out += f"; {self.frames_cleared} frame{'s' if self.frames_cleared != 1 else ''} cleared"
        missed = " (the look through its frames ran out of time: it may have missed some)" if self.unfinished else ""
        if not self.arrays:
            return out + "; its frames held no JAX arrays" + missed
        out += f"; its frames held {_count(self.arrays)} ({format_bytes(self.array_bytes)}){missed}"
        if self.freed == self.arrays:
            return out + ": all freed"
        out += f": {self.freed} freed ({format_bytes(self.freed_bytes)}), {self.arrays - self.freed} still alive"
        return out + (", held by " + "; ".join(self.still_held) if self.still_held else "")


def _count(n: int) -> str:
    return f"{n} array{'s' if n != 1 else ''}"


def _exception_chain(exc: Any, into: dict[int, BaseException]) -> None:
    """The exception, what it was raised from, and an ExceptionGroup's members."""
    todo = [exc]
    while todo and len(into) < 64:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in into:
            continue
        into[id(e)] = e
        members = getattr(e, "exceptions", ())
        todo += [e.__cause__, e.__context__, *(members if isinstance(members, tuple) else ())]


def _frames(tracebacks: list[types.TracebackType]) -> list[types.FrameType]:
    seen: dict[int, types.FrameType] = {}
    for tb in tracebacks:
        while isinstance(tb, types.TracebackType):
            seen.setdefault(id(tb.tb_frame), tb.tb_frame)
            tb = tb.tb_next
    return list(seen.values())


# The shell's own frames (run_code) hold the shell, whose output history is not the error's.
_SHELL_PACKAGES = ("IPython", "ipykernel")


def _holds_own_locals(frame: types.FrameType) -> bool:
    """A function's frame (generators and coroutines too), not the shell's own: its locals are
    its own, not a module's or a class body's namespace."""
    if not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
        return False
    module = frame.f_globals.get("__name__")
    return not (isinstance(module, str) and module.split(".", 1)[0] in _SHELL_PACKAGES)


def _clearable(frame: types.FrameType) -> bool:
    """A function's frame that clear() cannot finalize (not a generator's or a coroutine's)."""
    flags = frame.f_code.co_flags
    return bool(flags & inspect.CO_OPTIMIZED) and not flags & _RESUMABLE


def _holders(
    shell: Any,
) -> tuple[list[tuple[str, Callable[[], None]]], list[types.TracebackType], dict[int, BaseException]]:
    """Where the last error is held: ``(label, drop)`` for each place, the tracebacks, the errors."""
    places: list[tuple[str, Callable[[], None]]] = []
    tracebacks: list[types.TracebackType] = []
    errors: dict[int, BaseException] = {}
    present = [n for n in _SYS_NAMES if getattr(sys, n, None) is not None]
    if present:
        tracebacks.append(getattr(sys, "last_traceback", None))
        _exception_chain(getattr(sys, "last_value", None), errors)
        _exception_chain(getattr(sys, "last_exc", None), errors)

        def drop_sys() -> None:
            for n in present:
                if hasattr(sys, n):
                    delattr(sys, n)

        places.append(("sys.last_traceback", drop_sys))
    display = getattr(shell, "InteractiveTB", None)
    if isinstance(getattr(display, "tb", None), types.TracebackType):
        tracebacks.append(display.tb)
        places.append(("the traceback display (InteractiveTB.tb)", lambda: setattr(display, "tb", None)))
    pdb = getattr(display, "pdb", None)
    # Only a debugger that is not in a session now (forget() sets curframe to None).
    if (
        pdb is not None
        and getattr(pdb, "curframe", None) is None
        and (getattr(pdb, "curframe_locals", None) or getattr(pdb, "botframe", None) is not None)
    ):

        def drop_pdb() -> None:
            pdb.curframe_locals = {}
            pdb.botframe = None

        places.append(("the debugger's last frame (InteractiveTB.pdb)", drop_pdb))
    last = getattr(shell, "last_execution_result", None)
    kept = [getattr(last, n, None) for n in ("error_in_exec", "error_before_exec")]
    if any(isinstance(e, BaseException) and e.__traceback__ is not None for e in kept):
        for e in kept:
            _exception_chain(e, errors)
        places.append(("the failed cell's result (last_execution_result)", lambda: None))
    tracebacks += [e.__traceback__ for e in errors.values() if e.__traceback__ is not None]
    return places, [tb for tb in tracebacks if isinstance(tb, types.TracebackType)], errors


def _arrays_in(frames: list[types.FrameType], seconds: float) -> tuple[list[Any], bool]:
    """The JAX arrays that the frames' own locals reach (two levels into containers), and
    whether the look ran out of time."""
    namespace = {}
    for i, frame in enumerate(frames):
        if not _holds_own_locals(frame):
            continue
        try:
            local_values = dict(frame.f_locals)
        except RuntimeError:
            continue
        namespace.update({f"{i}:{name}": value for name, value in local_values.items()})
    if not namespace:
        return [], False
    walk = names_by_array(namespace, depth=2, seconds=seconds)
    if not walk.names:
        return [], walk.unfinished
    return [a for a in jax_arrays.live_arrays_newest_first() if id(a) in walk.names], walk.unfinished


def _size(array: Any) -> int:
    try:
        fp = jax_arrays.footprint(array)
        return fp.on_device + fp.host_bytes
    except (RuntimeError, ValueError, AttributeError):
        return 0


def _clear(frames: list[types.FrameType]) -> int:
    cleared = 0
    for frame in frames:
        if not _clearable(frame):
            continue
        try:
            frame.clear()
            frame.f_locals  # noqa: B018 -- refreshes 3.11's snapshot dict, dropping the cleared names
        except RuntimeError:  # still executing (another thread, or an enclosing call)
            continue
        cleared += 1
    return cleared


def release(shell: Any, seconds: float = 1.0) -> ErrorRelease:
    """Let go of the last error's traceback: drop it where it is held, clear its function frames,
    collect garbage, then check by weak reference which of the frames' arrays are gone.

    The error objects themselves stay (their class and message), without their traceback.
    """
    places, tracebacks, errors = _holders(shell)
    if not places:
        return ErrorRelease("", (), 0, 0, 0, 0, 0, ())
    first = next(iter(errors.values()), None)
    name = type(first).__name__ if first is not None else ""
    frames = _frames(tracebacks)
    arrays, unfinished = _arrays_in(frames, seconds)
    refs = [(weakref.ref(a), _size(a)) for a in arrays]
    del arrays, first
    for _, drop in places:
        drop()
    for err in errors.values():
        err.__traceback__ = None
    cleared = _clear(frames)
    del frames, tracebacks, errors
    gc.collect()
    # Only weak references here, so that this frame is not among what holds an array.
    gone = [size for ref, size in refs if ref() is None]
    survivors = [ref for ref, _ in refs if ref() is not None]
    still = tuple(what_holds(ref, seconds / len(survivors[:3])) for ref in survivors[:3])
    return ErrorRelease(
        name,
        tuple(label for label, _ in places),
        cleared,
        len(refs),
        sum(size for _, size in refs),
        len(gone),
        sum(gone),
        still,
        unfinished,
    )


def what_holds(ref: Callable[[], Any], seconds: float = 1.0, depth: int = 8) -> str:
    """The first chain of references up from the object behind the weak reference ``ref`` to a
    namespace or module, in words, each step held by the next ("'x' in the namespace of
    __main__", "dict['x'] <- frame f() <- traceback <- ... <- 'ip' in the namespace of __main__"),
    found within ``seconds``."""
    target = ref()
    if target is None:
        return "(nothing: it is gone)"
    deadline = time.perf_counter() + seconds
    objs: list[Any] = [target]
    paths: list[list[str]] = [[]]
    seen = {id(target), id(sys._getframe()), id(objs), id(paths)}
    i = 0
    while i < len(objs) and time.perf_counter() < deadline:
        obj, path = objs[i], paths[i]
        i += 1
        if len(path) >= depth:
            continue
        for holder in gc.get_referrers(obj):
            if id(holder) in seen:
                continue
            seen.add(id(holder))
            step = _describe(holder, obj)
            if step.startswith("root:"):
                return " <- ".join([*path, step[5:]])
            objs.append(holder)
            paths.append([*path, step])
    return "something not found within the time given"


def _describe(ref: Any, obj: Any) -> str:
    """One step of a holder chain; ``root:`` marks a namespace where the chain ends."""
    if isinstance(ref, dict):
        keys = [k for k, v in list(ref.items()) if v is obj][:1]
        key = repr(keys[0]) if keys else "?"
        if "__builtins__" in ref and "__name__" in ref:
            return f"root:{key[1:-1] if keys else '?'} in the namespace of {ref.get('__name__')!s}"
        return f"dict[{key}]"
    if isinstance(ref, types.ModuleType):
        return f"root:module {ref.__name__}"
    if isinstance(ref, types.FrameType):
        return f"frame {ref.f_code.co_name}()"
    return type(ref).__name__
