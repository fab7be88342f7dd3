"""How an array lies over the devices of a mesh, in words and in bytes: on one device, replicated,
sharded, or partly replicated, and what sharding a replicated array over its devices would save.

Pure: ``Layout`` is read from an array's sharding by ``sources/jax_sharding.layout_of``; the
functions here only count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from jupyter_gpumem.core.units import format_bytes


@dataclass(frozen=True)
class Layout:
    """An array's layout over its devices.

    - ``devices``: how many devices hold a part of it
    - ``copies``: how many devices hold each element (1: none twice; ``devices``: replicated)
    - ``ways``: per dimension, how many parts it is cut into
    - ``axes``: per dimension, the mesh axes it is cut along (a NamedSharding names them;
      other shardings give ``()``)
    - ``free_axes``: the mesh axes (name, size) over which it is copied, not cut (NamedSharding)
    - ``platform``: the devices' platform (``cpu``, ``gpu``)
    """

    devices: int = 1
    copies: int = 1
    ways: tuple[int, ...] = ()
    axes: tuple[tuple[str, ...], ...] = ()
    free_axes: tuple[tuple[str, int], ...] = ()
    platform: str = ""

    @property
    def replicated(self) -> bool:
        """Every device holds all of it."""
        return self.devices > 1 and self.copies == self.devices


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(repr(n) for n in names)


def layout_words(layout: Layout) -> str:
    """The layout for people: ``one device``, ``replicated: 8 copies``, ``sharded 8 ways along
    dim 0 (mesh axis 'd')``, ``sharded 4 ways along dim 0 (mesh axis 'a'), 2 copies (partly
    replicated)``."""
    if layout.devices <= 1:
        return "one device"
    if layout.replicated:
        return f"replicated: {layout.copies} copies"
    cut = [d for d, n in enumerate(layout.ways) if n > 1]
    ways = "×".join(str(layout.ways[d]) for d in cut)
    names = tuple(a for d in cut for a in (layout.axes[d] if d < len(layout.axes) else ()))
    along = f"dim{'s' if len(cut) > 1 else ''} {', '.join(map(str, cut))}"
    if names:
        along += f" (mesh ax{'es' if len(names) > 1 else 'is'} {_quoted(names)})"
    text = f"sharded {ways} ways along {along}"
    return text + (f", {layout.copies} copies (partly replicated)" if layout.copies > 1 else "")


def shardable_dimension(shape: tuple, layout: Layout) -> int | None:
    """The first dimension that can also be cut over the devices that now hold copies: its size
    divides by its present parts times the copies, so every device would hold an equal share.
    None for an array held once (nothing to save) or where no dimension divides."""
    if layout.copies <= 1 or len(layout.ways) != len(shape):
        return None
    for d, (size, ways) in enumerate(zip(shape, layout.ways)):
        if size and size % (ways * layout.copies) == 0:
            return d
    return None


def sharding_saving(bytes_per_device: Mapping[int, int], shape: tuple, layout: Layout) -> dict[int, int]:
    """Per device, the bytes it would hold less were the array cut over the devices that hold
    its copies (along ``shardable_dimension``): each keeps one share of ``copies`` instead of
    all of them. Exact: that dimension divides. Empty where it cannot be cut so."""
    if shardable_dimension(shape, layout) is None:
        return {}
    return {d: n - n // layout.copies for d, n in bytes_per_device.items()}


def suggested_spec(shape: tuple, layout: Layout) -> str:
    """The PartitionSpec that cuts the array over the mesh axes it is copied over, added to the
    ``shardable_dimension``: ``P('d')``, ``P(None, ('a', 'b'))``; "" without mesh axes or such a
    dimension."""
    dim = shardable_dimension(shape, layout)
    if dim is None or not layout.free_axes:
        return ""
    free = tuple(name for name, size in layout.free_axes if size > 1)
    axes = [tuple(a) for a in layout.axes] + [()] * (len(shape) - len(layout.axes))
    axes[dim] = axes[dim] + free
    while axes and not axes[-1]:
        axes.pop()
    parts = ["None" if not a else repr(a[0]) if len(a) == 1 else f"({_quoted(a)})" for a in axes]
    return f"P({', '.join(parts)})"


def device_span(ids: list[int] | tuple[int, ...]) -> str:
    """Device ids in runs: ``0-7``, ``0-2, 4-7``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def per_device_summary(bytes_per_device: Mapping[int, int]) -> str:
    """Each device's bytes, short: ``0: 16.00 MiB`` on one device, ``8 × 16.00 MiB (0-7)`` where
    all hold the same, ``6 × 2.00 MiB, 2 × 1.00 MiB (0-7)`` for up to three sizes, else the
    range: ``8 devices, 1.00 KiB to 4.00 KiB (0-7)``."""
    if not bytes_per_device:
        return ""
    if len(bytes_per_device) == 1:
        ((device, n),) = bytes_per_device.items()
        return f"{device}: {format_bytes(n)}"
    sizes = Counter(bytes_per_device.values())
    span = f" ({device_span(list(bytes_per_device))})"
    if len(sizes) > 3:
        low, high = min(sizes), max(sizes)
        return f"{len(bytes_per_device)} devices, {format_bytes(low)} to {format_bytes(high)}{span}"
    ranked = sorted(sizes.items(), key=lambda kv: (-kv[1], -kv[0]))
    return ", ".join(f"{count} × {format_bytes(n)}" for n, count in ranked) + span


@dataclass(frozen=True)
class ShardingSaving:
    """A replicated array on one device, and what sharding it would take off that device.

    ``name``: how the user reaches it (``w_repl``), or its dtype and shape; ``assignable``: the
    name can be assigned to (not output history); ``copies``: the devices that hold its elements
    each; ``saving``: bytes less on the device; ``spec``: the PartitionSpec that would cut it
    (``suggested_spec``), "" where its sharding names no mesh axes."""

    name: str
    assignable: bool
    copies: int
    saving: int
    spec: str = ""
