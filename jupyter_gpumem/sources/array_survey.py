"""Every live JAX array sized, asked once whether it failed, and CPU buffers that two arrays share:
what ``%gpumem arrays`` reads, in as few questions per array as it can.

At 50,000 arrays each question asked of every array costs tens of milliseconds, so each array
is asked for its sharding, abstract value and readiness once, and the arrays that are ready
are checked for failure in one call (``batched_block_until_ready``, what
``jax.block_until_ready`` of several arrays calls, jax/_src/api.py, 0.4.38 to 0.10.2). It
waits on nothing: only arrays already ready are given to it, and a ready array has its value
or its error. Only where it raises is each ready array asked on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.sources import jax_arrays
from jupyter_gpumem.sources.jax_arrays import ASK_ERRORS, Footprint


@dataclass(frozen=True)
class Survey:
    """``made``: (array, footprint, ready) of each live array whose computation did not fail,
    newest first (``ready``: known to have succeeded; False while pending); ``failed``: (array,
    footprint) of each whose computation failed (never allocated)."""

    made: list
    failed: list


# Footprints by the identities of a sharding and an abstract value: arrays made alike share both
# objects (JAX interns avals: 50,000 rows of one array share one), and looking up by identity
# hashes no shape or dtype. Each entry keeps its objects alive, so their ids are not reused.
_by_ids: dict[int, tuple[Any, dict[int, tuple[Any, Footprint]]]] = {}


def survey(arrays: list) -> Survey:
    """:class:`Survey` of ``arrays`` (``jax.live_arrays()``, newest first). An array deleted
    meanwhile (its ``is_ready`` raises) is left out."""
    if len(_by_ids) > 4096:
        _by_ids.clear()
    sized: list = []
    ready: list = []
    for a in arrays:
        try:
            sharding, aval, is_ready = a.sharding, a.aval, a.is_ready()
            entry = _by_ids.get(id(sharding))
            if entry is None or entry[0] is not sharding:
                entry = _by_ids[id(sharding)] = (sharding, {})
            known = entry[1].get(id(aval))
            if known is None or known[0] is not aval:
                known = entry[1][id(aval)] = (aval, jax_arrays.footprint(a))
            fp = known[1]
        except ASK_ERRORS:  # deleted between listing and reading, or not an array after all
            continue
        sized.append((a, fp, is_ready))
        if is_ready:
            ready.append(a)
    bad = _failed_ids(ready)
    if not bad:
        return Survey(sized, [])
    return Survey(
        [(a, fp, r) for a, fp, r in sized if id(a) not in bad],
        [(a, fp) for a, fp, _ in sized if id(a) in bad],
    )


def _failed_ids(ready: list) -> set[int]:
    """ids of the arrays among ``ready`` whose computation failed."""
    if not ready:
        return set()
    try:
        from jax._src.lib import xla_client

        xla_client.batched_block_until_ready(ready)
        return set()
    except ASK_ERRORS:  # one failed at least (or no batched call here): ask each
        pass
    except ImportError:
        pass
    return {id(a) for a in ready if jax_arrays.failed(a, live=True)}


def cpu_alias_ids(made: list, named: Mapping[int, Any]) -> set[int]:
    """ids of arrays that share a CPU buffer with another listed array
    (``jax_arrays.cpu_buffer_key``), all but one per buffer: one the namespace names, else the
    oldest (JAX lists newest first). ``made``: as :class:`Survey` gives it; a pending array's
    buffer is not asked for, nor a failed one's (it is not in ``made``)."""
    if not jax_arrays.pointer_makes_no_array():
        return set()
    first: dict[tuple[int, int], Any] = {}
    shared: dict[tuple[int, int], list] = {}
    devices: dict[int, int | None] = {}  # per footprint: arrays made alike share one
    for a, fp, ready in made:
        if not ready:
            continue
        device = devices.get(id(fp), -1)
        if device == -1:
            device = devices[id(fp)] = _cpu_device(fp)
        if device is None:
            continue
        try:
            pointer = a.unsafe_buffer_pointer()
        except ASK_ERRORS:
            continue
        if not pointer:
            continue
        key = (device, pointer)
        seen = first.setdefault(key, a)
        if seen is not a:
            shared.setdefault(key, [seen]).append(a)
    drop: set[int] = set()
    for same in shared.values():
        keep = next((a for a in same if id(a) in named), same[-1])
        drop.update(id(a) for a in same if a is not keep)
    return drop


def _cpu_device(fp: Footprint) -> int | None:
    """The one CPU device an array of this footprint is on; None for any other."""
    if len(fp.device_bytes) != 1 or fp.platform != "cpu":
        return None
    return next(iter(fp.device_bytes))
