"""An out-of-memory error on one device of many: the failing device's own arrays ranked by what
it holds of each, its replicated arrays as a fix (shard them over the devices that hold their
copies), and the other devices in one line. Pure, over ``ArrayRecord`` s and device states.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from jupyter_gpumem.core.layout import ShardingSaving, device_span, suggested_spec
from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.mesh_arrays import saving_of
from jupyter_gpumem.doctor.names import is_history_name
from jupyter_gpumem.doctor.oom_readings import Fix, OomReadings


def ranked_on(records: Iterable[Any], device: int) -> list[Any]:
    """The arrays with bytes on ``device``, those holding most there first (ties keep order)."""
    held = [r for r in records if r.bytes_per_device.get(device)]
    return sorted(held, key=lambda r: -r.bytes_per_device[device])


def replicated_on(records: Iterable[Any], device: int) -> tuple[ShardingSaving, ...]:
    """The arrays on ``device`` that are held more than once and could be cut evenly over the
    devices holding their copies, with the bytes that would take off ``device``, most first."""
    found = []
    for r in records:
        saving = saving_of(r).get(device, 0)
        if saving <= 0:
            continue
        named = [n for n in r.names if not is_history_name(n)]
        label = (named or list(r.names) or [f"{r.dtype}{list(r.shape)}"])[0]
        found.append(ShardingSaving(label, bool(named), r.layout.copies, saving, suggested_spec(r.shape, r.layout)))
    return tuple(sorted(found, key=lambda s: -s.saving))


def _sharded_line(s: ShardingSaving) -> str:
    """The Python line that shards ``s`` as its suggested spec, or the same in words."""
    if s.assignable and s.spec:
        spec = "jax.sharding.PartitionSpec" + s.spec[1:]
        return f"{s.name} = jax.device_put({s.name}, jax.sharding.NamedSharding({s.name}.sharding.mesh, {spec}))"
    return f"shard {s.name} over the {s.copies} devices that hold copies of it" + (f" ({s.spec})" if s.spec else "")


def shard_replicated(r: OomReadings, need: int | None) -> Fix | None:
    """Replicated arrays on the failing device: every device holds all of each, and cut over
    the devices that hold its copies each would hold one share (only where a dimension divides
    by the copies: ``layout.shardable_dimension``)."""
    if not r.replicated:
        return None
    top, rest = r.replicated[0], r.replicated[1:]
    where = r.failing_label or "the failing device"
    gain = sum(s.saving for s in r.replicated)
    more = f" (and {len(rest)} more replicated, {format_bytes(gain)} in all)" if rest else ""
    return Fix(
        "replicated",
        f"Shard {top.name} over the {top.copies} devices: {format_bytes(top.saving)} less on {where}{more}",
        _sharded_line(top),
        f"{top.name} is replicated: each of the {top.copies} devices holds a whole copy. Cut along a dimension "
        f"that divides by {top.copies}, each holds one part in {top.copies}; arrays with no such dimension "
        f"are left out. A program that reads it then gets the sharded array (`%gpumem arrays --by device`).",
        gain,
        None if need is None else gain >= need,
        extra_actions=tuple(_sharded_line(s) for s in rest[:2]),
    )


def others_in_one_line(states: Sequence[Any]) -> str:
    """The devices besides the failing one, said once: their shared note, else their numbers
    summed (in use together, and the least headroom among them)."""
    notes = {s.note for s in states}
    if len(notes) == 1 and next(iter(notes)):
        return f"the same: {next(iter(notes))}"
    used = [s.in_use for s in states if s.in_use is not None]
    if not used:
        return "; ".join(sorted(n for n in notes if n)) or "no readings"
    rooms = [s.headroom for s in states if s.headroom is not None]
    text = f"in use {format_bytes(sum(used))} together, {format_bytes(min(used))} to {format_bytes(max(used))} each"
    return text + (f"; headroom {format_bytes(min(rooms))} at least" if rooms else "")


def others_label(states: Sequence[Any], ids: Sequence[int]) -> str:
    """``the other 7 (0-2, 4-7)``."""
    return f"the other {len(states)} ({device_span(list(ids))})"
