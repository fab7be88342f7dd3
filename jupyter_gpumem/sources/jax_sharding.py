"""How arrays lie over a mesh: a live array's layout (``layout_of``), and a compiled program's:
each argument's and output's shape on one device, whether it is replicated, and the shardings a
fix would try.

A jitted program over several devices is one module that XLA's SPMD partitioner rewrote for
one device (``Compiled.as_text()``: ``main.N_spmd``, ``num_partitions=8``): its
``memory_analysis()`` counts one device's bytes, and its parameters have the per-device shapes
``Sharding.shard_shape(global_shape)`` gives (jax/_src/sharding.py, 0.4.38 to 0.10.2). The
shardings are ``Compiled.input_shardings`` (``(args, kwargs)``) and ``output_shardings``
(jax/_src/stages.py, the same in 0.4.38 and 0.10.2). jax is imported inside functions only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.core.layout import Layout

__all__ = [
    "ArrayLayout",
    "argument_layouts",
    "layout_of",
    "output_layouts",
    "named_sharding",
    "shard_specs",
    "spec_text",
]


@dataclass(frozen=True)
class ArrayLayout:
    """One array of a compiled program: ``position`` (the callee's argument position or keyword,
    None for an output), ``leaf`` (its index among that argument's arrays), its global shape,
    its shape and bytes on one device, dtype, ``spec`` (``P('x', None)``, "" where the sharding
    has no PartitionSpec), ``devices`` it spans, ``replicated`` (a whole copy on each of two or
    more devices), and the mesh's axes ``((name, size), ...)`` where its sharding names a mesh."""

    position: Any
    leaf: int
    global_shape: tuple
    device_shape: tuple
    dtype: str
    device_bytes: int
    spec: str
    devices: int
    replicated: bool
    mesh_axes: tuple[tuple[str, int], ...] = ()
    mesh: Any = field(default=None, compare=False, repr=False)  # the jax.sharding.Mesh, where one is named

    @property
    def global_bytes(self) -> int:
        return self.device_bytes * math.prod(self.global_shape) // max(1, math.prod(self.device_shape))


def spec_text(spec: Any) -> str:
    """A PartitionSpec as code: ``P('x', None)``, ``P()`` (the same text on every release: its
    repr is ``PartitionSpec(...)`` before 0.6)."""
    parts = []
    for entry in tuple(spec):
        if isinstance(entry, (tuple, list)):
            parts.append("(" + ", ".join(repr(e) for e in entry) + ("," if len(entry) == 1 else "") + ")")
        else:
            parts.append(repr(entry))
    return "P(" + ", ".join(parts) + ")"


def _mesh_axes(sharding: Any) -> tuple[tuple[str, int], ...]:
    mesh = getattr(sharding, "mesh", None)
    shape = getattr(mesh, "shape", None)
    return tuple((str(k), int(v)) for k, v in shape.items()) if hasattr(shape, "items") else ()


def _layout(position: Any, leaf: int, aval: Any, sharding: Any) -> ArrayLayout:
    shape = tuple(aval.shape)
    try:
        device_shape = tuple(sharding.shard_shape(shape))
        devices = len(sharding.device_set)
        replicated = bool(sharding.is_fully_replicated) and devices > 1
    except (AttributeError, TypeError, ValueError):  # a sharding this JAX cannot answer for: as one device
        device_shape, devices, replicated = shape, 1, False
    spec = getattr(sharding, "spec", None)
    return ArrayLayout(
        position,
        leaf,
        shape,
        device_shape,
        str(aval.dtype),
        math.prod(device_shape) * aval.dtype.itemsize,
        spec_text(spec) if spec is not None else "",
        devices,
        replicated,
        _mesh_axes(sharding),
        getattr(sharding, "mesh", None),
    )


def argument_layouts(compiled: Any, lowered: Any, positions: tuple[Any, ...]) -> tuple[ArrayLayout, ...]:
    """Each array argument's layout, in the order of ``Lowered.args_info`` (``positions[i]``:
    the callee's own position or keyword of the i-th traced argument); () where this JAX gives
    no shardings."""
    import jax

    info, shardings = getattr(lowered, "args_info", None), getattr(compiled, "input_shardings", None)
    if not (isinstance(info, tuple) and isinstance(shardings, tuple) and len(info) == len(shardings) == 2):
        return ()
    (given, keywords), (given_s, keywords_s) = info, shardings
    names = list(positions[: len(given)]) + sorted(keywords)
    trees = list(zip(given, given_s)) + [(keywords[k], keywords_s[k]) for k in sorted(keywords)]
    found = []
    for name, (tree, sharding_tree) in zip(names, trees):
        leaves = [a for a in jax.tree_util.tree_leaves(tree) if hasattr(getattr(a, "_aval", None), "shape")]
        sharding_leaves = jax.tree_util.tree_leaves(sharding_tree)
        if len(sharding_leaves) != len(leaves):
            return ()
        found += [_layout(name, i, a._aval, s) for i, (a, s) in enumerate(zip(leaves, sharding_leaves))]
    return tuple(found)


def output_layouts(compiled: Any, lowered: Any) -> tuple[ArrayLayout, ...]:
    """Each output's layout, in the order of ``Lowered.out_info``; () where they cannot be paired."""
    import jax

    avals = [o for o in jax.tree_util.tree_leaves(getattr(lowered, "out_info", ())) if hasattr(o, "shape")]
    shardings = jax.tree_util.tree_leaves(getattr(compiled, "output_shardings", ()))
    if len(avals) != len(shardings):
        return ()
    return tuple(_layout(None, i, a, s) for i, (a, s) in enumerate(zip(avals, shardings)))


def shard_specs(layout: ArrayLayout) -> list[tuple]:
    """The PartitionSpecs (as tuples) that would split a replicated array over its mesh's
    largest axis: one per dimension that axis's size divides, first dimension first."""
    axes = [(size, -i, name) for i, (name, size) in enumerate(layout.mesh_axes) if size > 1]
    if not layout.replicated or not axes:
        return []
    size, _, name = max(axes)
    rank = len(layout.global_shape)
    return [
        tuple(name if d == dim else None for d in range(rank))
        for dim in range(rank)
        if layout.global_shape[dim] % size == 0 and layout.global_shape[dim] >= size
    ]


def named_sharding(mesh: Any, spec: tuple) -> Any:
    """``NamedSharding(mesh, P(*spec))``."""
    import jax

    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def layout_of(sharding: Any, shape: tuple, device: Any = None) -> Layout:
    """How an array of ``shape`` lies over the devices of ``sharding``, read from the sharding
    alone: ``devices_indices_map`` gives each device's slice of the global array (metadata, all
    devices, not only this process's), so the parts per dimension are the distinct slices, and
    the copies are the devices per distinct slice. A ``NamedSharding`` names the mesh axes: its
    ``spec`` (a ``PartitionSpec``: per dimension None, an axis name, or a tuple of them) and
    ``mesh.shape`` (axis name to size); axes the spec does not use are those it is copied over.
    ``devices_indices_map`` is the base class's (jax/_src/sharding.py, JAX 0.4.38 to 0.10.2), so
    any sharding is read (``PositionalSharding`` too, where a JAX still has it); ``NamedSharding``
    is in jax/_src/named_sharding.py (0.10.2), jax/_src/sharding_impls.py in 0.4.38.
    ``device``: one of its devices, for the platform."""
    platform = str(getattr(device, "platform", ""))
    count = len(sharding.device_set)
    if count <= 1:
        return Layout(1, 1, tuple(1 for _ in shape), (), (), platform)
    spans_per_dim: list[set] = [set() for _ in shape]
    distinct = set()
    for index in sharding.devices_indices_map(tuple(shape)).values():
        spans = tuple(s.indices(n) for s, n in zip(index, shape))  # slices hash only from Python 3.12
        distinct.add(spans)
        for d, span in enumerate(spans):
            spans_per_dim[d].add(span)
    axes, free = _spec_axes(sharding, len(shape))
    ways = tuple(len(spans) for spans in spans_per_dim)
    return Layout(count, count // max(1, len(distinct)), ways, axes, free, platform)


def _spec_axes(sharding: Any, ndim: int) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, int], ...]]:
    """A NamedSharding's mesh axes per dimension, and the axes (name, size) it leaves to copies;
    ``((), ())`` for other shardings."""
    spec, mesh = getattr(sharding, "spec", None), getattr(sharding, "mesh", None)
    try:
        sizes = dict(mesh.shape) if spec is not None and mesh is not None else {}
        entries = list(spec)
    except (AttributeError, TypeError, ValueError):  # a mesh without sizes here: no names then
        return (), ()
    if not sizes:
        return (), ()
    axes = []
    for entry in entries[:ndim] + [None] * (ndim - len(entries)):
        names = (entry,) if isinstance(entry, str) else entry if isinstance(entry, tuple) else ()
        axes.append(tuple(n for n in names if isinstance(n, str)))
    used = {n for names in axes for n in names}
    return tuple(axes), tuple((str(n), int(s)) for n, s in sizes.items() if n not in used)
