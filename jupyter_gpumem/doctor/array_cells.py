"""Which cell made each live JAX array, and how many device bytes the live arrays hold.

Kept current after every cell at the cost of the arrays made since the last cell: JAX lists its
arrays newest first, so the walk stops at the first array already known. Arrays are known by
identity, through weak references; a dead one leaves the registry in its weakref callback, so a
later array at the same address is never taken for it. Sizes come from the sharding
(``jax_arrays.footprint``); no buffer is touched and nothing waits on JAX.

Imports neither jax nor the doctor: the cell hooks call it on every cell.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.sources import jax_arrays


@dataclass(frozen=True)
class _Entry:
    cell: int | None  # None: made before tracking began, or between cells
    ref: Any  # weakref.ref to the array
    device_bytes: int
    buffer: tuple[int, int] | None = None  # jax_arrays.cpu_buffer_key: counted once per buffer


_entries: dict[int, _Entry] = {}
_total = [0]
# CPU buffers that several arrays share (jax_arrays.cpu_buffer_key): [arrays alive, bytes],
# the bytes counted in _total once, while any of them lives.
_buffers: dict[tuple[int, int], list[int]] = {}
# Weakref callbacks run wherever an array dies, this thread included while it holds the lock.
_lock = threading.RLock()
_current: list[int | None] = [None]
# The running cell's new arrays, for the per-cell line's allocation sites: (weakref, jaxlib
# Traceback or None, device bytes). Reading ``traceback`` is a field read: no buffer is touched.
_made: list[tuple[Any, Any, int]] = []


def _forget(key: int, ref: Any) -> None:
    with _lock:
        entry = _entries.get(key)
        if entry is not None and entry.ref is ref:
            del _entries[key]
            _uncount(entry)


def _count(entry: _Entry) -> None:
    if entry.buffer is None:
        _total[0] += entry.device_bytes
        return
    shared = _buffers.setdefault(entry.buffer, [0, entry.device_bytes])
    if shared[0] == 0:
        _total[0] += shared[1]
    shared[0] += 1


def _uncount(entry: _Entry) -> None:
    if entry.buffer is None:
        _total[0] -= entry.device_bytes
        return
    shared = _buffers.get(entry.buffer)
    if shared is None:
        return
    shared[0] -= 1
    if shared[0] <= 0:
        del _buffers[entry.buffer]
        _total[0] -= shared[1]


def _device_bytes(array: Any) -> int:
    try:
        return 0 if array.is_deleted() else jax_arrays.footprint(array).on_device
    except (RuntimeError, ValueError):  # jaxlib: deleted while we read it; a sharding without sizes
        return 0


def note_new_arrays(cell: int | None = None) -> int:
    """Register the arrays made since the last call as made by ``cell`` (the cell running now
    when None); returns how many were new. Never starts JAX."""
    if cell is None:
        cell = _current[0]
    new = 0
    with _lock:
        arrays = jax_arrays.live_arrays_newest_first()
        for array in arrays:
            key = id(array)
            entry = _entries.get(key)
            if entry is not None and entry.ref() is array:
                # Everything older was seen by an earlier call, unless jaxlib listed arrays made
                # on other threads as a list of their own (py_array.cc keeps one list per bucket
                # of creating threads): then fewer arrays are known than are alive, and the rest
                # of the list is read too.
                if len(_entries) >= len(arrays):
                    break
                continue
            try:
                ref = weakref.ref(array, lambda r, k=key: _forget(k, r))
            except TypeError:
                continue
            size = _device_bytes(array)
            buffer = jax_arrays.cpu_buffer_key(array) if size else None
            if entry is not None:
                _uncount(entry)
            # An array sharing a buffer already counted (a CPU array's numpy view) adds nothing.
            shared = buffer is not None and _buffers.get(buffer, [0])[0] > 0
            _entries[key] = _Entry(cell, ref, size, buffer)
            _count(_entries[key])
            new += 1
            if cell is not None and cell == _current[0] and not shared:
                _made.append((ref, getattr(array, "traceback", None), size))
    return new


def begin_cell(cell: int | None) -> None:
    """Arrays found while this cell runs (``track()``, ``%gpumem`` commands) belong to it."""
    _current[0] = cell
    _made.clear()


def end_cell(cell: int | None) -> int:
    """Register the cell's new arrays as its own; returns how many."""
    try:
        return note_new_arrays(cell)
    finally:
        _current[0] = None


def made_by_last_cell() -> list[tuple[Any, int]]:
    """``(traceback, device bytes)`` of each array the last cell made that is still alive."""
    return [(tb, size) for ref, tb, size in _made if ref() is not None]


def cell_of(array: Any) -> int | None:
    """The cell that made ``array``, where known."""
    entry = _entries.get(id(array))
    return entry.cell if entry is not None and entry.ref() is array else None


def device_bytes() -> int:
    """Device bytes of the live arrays, counted as they were registered (after picking up any
    new ones). An array deleted by donation but still referenced counts until it is released."""
    note_new_arrays()
    return _total[0]


def forget_all() -> None:
    """Drop the registry (tests, and unloading the extension)."""
    with _lock:
        _entries.clear()
        _buffers.clear()
        _total[0] = 0
        _current[0] = None
        _made.clear()
