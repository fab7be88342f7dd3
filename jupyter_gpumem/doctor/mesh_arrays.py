"""Arrays on a mesh: each array's layout in words with what sharding it would save, and
``%gpumem arrays --by device``: each device's arrays, how much of it is copies of replicated
arrays, and the device that holds most against the others. Pure, over ``ArrayRecord`` s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.layout import (
    device_span,
    layout_words,
    sharding_saving,
    suggested_spec,
)
from jupyter_gpumem.doctor.text import bytes_or_na


def on_several_devices(records: Iterable[Any]) -> bool:
    """Whether any array lies on more than one device (a mesh is in use)."""
    return any(r.layout is not None and r.layout.devices > 1 for r in records)


def memory_words(records: Iterable[Any]) -> str:
    """Where the arrays' "device memory" is: the host's, where every device is a CPU device."""
    platforms = {r.layout.platform for r in records if r.layout is not None and r.bytes_per_device}
    return "in host memory (CPU devices)" if platforms == {"cpu"} else "in device memory"


def saving_of(record: Any) -> dict[int, int]:
    """Per device, the bytes sharding ``record`` over the devices that hold its copies would
    save (``layout.sharding_saving``); empty where it is held once or no dimension divides."""
    if record.layout is None:
        return {}
    return sharding_saving(record.bytes_per_device, record.shape, record.layout)


def layout_cell(record: Any) -> str:
    """The layout column: ``replicated: 8 copies; sharded as P('d'): 112.00 MiB less``, or why
    it cannot be sharded evenly."""
    layout = record.layout
    if layout is None:
        return ""
    words = layout_words(layout)
    if layout.copies <= 1:
        return words
    saved = sum(saving_of(record).values())
    if not saved:
        return f"{words}; no dimension divides by {layout.copies}"
    spec = suggested_spec(record.shape, layout)
    return f"{words}; sharded{' as ' + spec if spec else ''}: {bytes_or_na(saved)} less"


def replicated_sentence(counted: Iterable[tuple[Any, int]]) -> str:
    """`` Copies of replicated arrays: 112.00 MiB of the 128.00 MiB; sharding them would free
    112.00 MiB (--by device).``; "" without any array held more than once. ``counted``: each
    record with the number of arrays it stands for (arrays alike, ``arrays.alike``)."""
    copies = saved = 0
    for r, n in counted:
        if r.layout is not None and r.layout.copies > 1:
            copies += n * (r.device_bytes - r.device_bytes // r.layout.copies)
            saved += n * sum(saving_of(r).values())
    if not copies:
        return ""
    can = (
        f"sharding them would free {bytes_or_na(saved)}"
        if saved
        else "none can be sharded evenly (no dimension divides by its copies)"
    )
    return f" Copies of replicated arrays take {bytes_or_na(copies)}; {can} (`%gpumem arrays --by device`)."


@dataclass(frozen=True)
class DeviceLoad:
    """One device's share of the live arrays: ``replicated`` is the bytes of arrays it holds
    whole or in part while other devices hold the same elements (more than one copy),
    ``saving`` what sharding those would take off this device."""

    label: str
    device: int
    arrays: int
    nbytes: int
    replicated: int
    saving: int


def device_loads(records: Iterable[Any]) -> list[DeviceLoad]:
    """Each device that holds arrays, the most loaded first (then by device id)."""
    per: dict[int, list] = {}
    platform: dict[int, str] = {}
    for r in records:
        saved = saving_of(r)
        copied = r.layout is not None and r.layout.copies > 1
        for device, n in r.bytes_per_device.items():
            row = per.setdefault(device, [0, 0, 0, 0])
            row[0] += 1
            row[1] += n
            row[2] += n if copied else 0
            row[3] += saved.get(device, 0)
            if r.layout is not None:
                platform.setdefault(device, r.layout.platform)
    loads = [
        DeviceLoad(f"{platform.get(d) or 'device'} {d}", d, *row)
        for d, row in per.items()  # type: ignore[arg-type]
    ]
    return sorted(loads, key=lambda load: (-load.nbytes, load.device))


def most_loaded_sentence(loads: list[DeviceLoad]) -> str:
    """The device that holds most, against the others: `` cpu 3 holds the most, 18.00 MiB; the
    other 7 hold 16.00 MiB each.``; "" with fewer than two devices."""
    if len(loads) < 2:
        return ""
    top, rest = loads[0], loads[1:]
    low, high = min(x.nbytes for x in rest), max(x.nbytes for x in rest)
    if top.nbytes == low:
        return f" All {len(loads)} devices hold the same, {bytes_or_na(top.nbytes)} each."
    others = f"{bytes_or_na(low)} each" if low == high else f"{bytes_or_na(low)} to {bytes_or_na(high)}"
    ids = device_span([x.device for x in rest])
    return (
        f" {top.label} holds the most, {bytes_or_na(top.nbytes)}, {bytes_or_na(top.nbytes - high)} more than any "
        f"other; the other {len(rest)} ({ids}) hold {others}."
    )


def device_rows(records: Iterable[Any], top: int) -> list[tuple[str, ...]]:
    """The rows of ``--by device``, the ``top`` most loaded devices."""
    return [
        (
            load.label,
            str(load.arrays),
            bytes_or_na(load.nbytes),
            bytes_or_na(load.replicated),
            bytes_or_na(load.saving) if load.saving else "",
        )
        for load in device_loads(records)[:top]
    ]


DEVICE_HEADERS = ("device", "arrays", "bytes", "replicated", "sharding would save")
