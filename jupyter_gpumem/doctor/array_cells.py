"""How many device bytes the live JAX arrays hold, which arrays a tracked cell made, and how
many live arrays each traceback made.

Brought up to date only when asked (``device_bytes``: ``track()``, ``%gpumem free`` and ``cells
on`` on the CPU; ``begin_cell``/``end_cell``: ``%gpumem cells on``), never by the default cell
hooks: listing JAX's arrays costs milliseconds at tens of thousands of arrays. Which cell made an
array is read from its own traceback instead (``core.sites.allocation_labeller``). Each update
costs the arrays made since the last one: JAX lists its arrays newest first, so the walk stops
at the first array already known. Arrays are known by identity, through weak references; a
dead one leaves the registry in its weakref callback, so a later array at the same address is
never taken for it. Sizes come from the sharding (``jax_arrays.footprint``); no buffer is
touched and nothing waits on JAX.

Imports neither jax nor the doctor.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.sources import jax_arrays


@dataclass(frozen=True)
class _Entry:
    ref: Any  # weakref.ref to the array
    device_bytes: int
    buffer: tuple[int, int] | None = None  # jax_arrays.cpu_buffer_key: counted once per buffer
    traceback: Any = None  # the array's jaxlib Traceback: a field read, no buffer is touched


_entries: dict[int, _Entry] = {}
_total = [0]
# CPU buffers that several arrays share (jax_arrays.cpu_buffer_key): [arrays alive, bytes],
# the bytes counted in _total once, while any of them lives.
_buffers: dict[tuple[int, int], list[int]] = {}
# Weakref callbacks run wherever an array dies, this thread included while it holds the lock.
_lock = threading.RLock()
# Whether a cell is being tracked (between begin_cell and end_cell).
_tracking = [False]
# The tracked cell's new arrays, for the per-cell line's allocation sites: (weakref, jaxlib
# Traceback or None, device bytes).
_made: list[tuple[Any, Any, int]] = []
# Per traceback, [live registered arrays, their device bytes]: what made the live arrays.
_by_traceback: dict[Any, list[int]] = {}


def _forget(key: int, ref: Any) -> None:
    with _lock:
        entry = _entries.get(key)
        if entry is not None and entry.ref is ref:
            del _entries[key]
            _uncount(entry)


def _count(entry: _Entry) -> None:
    if entry.traceback is not None:
        made = _by_traceback.setdefault(entry.traceback, [0, 0])
        made[0] += 1
        made[1] += entry.device_bytes
    if entry.buffer is None:
        _total[0] += entry.device_bytes
        return
    shared = _buffers.setdefault(entry.buffer, [0, entry.device_bytes])
    if shared[0] == 0:
        _total[0] += shared[1]
    shared[0] += 1


def _uncount(entry: _Entry) -> None:
    made = _by_traceback.get(entry.traceback) if entry.traceback is not None else None
    if made is not None:
        made[0] -= 1
        made[1] -= entry.device_bytes
        if made[0] <= 0:
            del _by_traceback[entry.traceback]
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


def note_new_arrays() -> int:
    """Register the arrays made since the last call (those of a tracked cell as its own);
    returns how many were new. Never starts JAX."""
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
            traceback = getattr(array, "traceback", None)
            _entries[key] = _Entry(ref, size, buffer, None if shared else traceback)
            _count(_entries[key])
            new += 1
            if _tracking[0] and not shared:
                _made.append((ref, traceback, size))
    return new


def begin_cell(noted: bool = False) -> None:
    """Register the arrays that live now (``noted``: they were, just now), then take those found
    until ``end_cell`` (by ``track()`` and ``%gpumem`` commands in the cell, too) as the cell's
    own."""
    _tracking[0] = False
    _made.clear()
    if not noted:
        note_new_arrays()
    _tracking[0] = True


def end_cell(noted: bool = False) -> int:
    """Register the cell's new arrays as its own (``noted``: they were, just now) and stop
    tracking; returns how many were registered here."""
    try:
        return note_new_arrays() if _tracking[0] and not noted else 0
    finally:
        _tracking[0] = False


def made_by_last_cell() -> list[tuple[Any, int]]:
    """``(traceback, device bytes)`` of each array the last cell made that is still alive."""
    return [(tb, size) for ref, tb, size in _made if ref() is not None]


def live_by_traceback() -> list[tuple[Any, int, int]]:
    """``(traceback, arrays, device bytes)`` of the registered live arrays, per traceback, as of
    the last update."""
    with _lock:
        for _ in range(3):
            try:
                return [(tb, made[0], made[1]) for tb, made in list(_by_traceback.items())]
            except RuntimeError:  # an array died (its weakref callback ran) while it was read
                continue
        return []


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
        _by_traceback.clear()
        _total[0] = 0
        _tracking[0] = False
        _made.clear()
