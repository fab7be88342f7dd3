"""How big is each live JAX array, where does it live, and which are there, read without touching a buffer.

Also the explicit operations the user asks for by name: clearing JAX's caches, compiling a call
to read its memory analysis, taking JAX's device memory profile, and moving a pytree through
the host (``defragment``).
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter
from typing import Any

from jupyter_gpumem.core.layout import Layout
from jupyter_gpumem.core.readings import CpuArraysReading
from jupyter_gpumem.sources.jax_backend import backend_started, started_default_client
from jupyter_gpumem.sources.jax_sharding import ArrayLayout, argument_layouts, layout_of, named_sharding, output_layouts


@dataclass(frozen=True)
class Footprint:
    """Where one array's bytes are, from its sharding alone.

    ``device_bytes`` maps a JAX device id to the bytes it holds in device memory; ``host_bytes``
    counts arrays placed in a host memory kind (``pinned_host``, ``unpinned_host``), which take
    no device memory; ``memory_kind`` is the sharding's, None where this JAX has none;
    ``layout``: how it lies over its devices (``layout_of``).
    """

    device_bytes: Mapping[int, int]
    host_bytes: int
    memory_kind: str | None
    shape: tuple = ()
    dtype: str = ""
    layout: Layout = Layout()

    @property
    def platform(self) -> str:
        return self.layout.platform

    @cached_property  # footprints are shared by the arrays made alike: summed once
    def on_device(self) -> int:
        return sum(self.device_bytes.values())


_DEVICE_KINDS = (None, "device")


_footprints: dict[tuple, Footprint] = {}
_default_kinds: dict[Any, str | None] = {}


def _default_memory_kind(device: Any) -> str | None:
    """The memory kind a device puts arrays in unless told otherwise: its own memory. It is
    ``device`` on GPUs, and on a CPU from jax 0.7 on; a CPU device of jax 0.4.30 to 0.6.2 has
    only ``unpinned_host`` (``Device.default_memory().kind`` and ``addressable_memories()``, read
    on the CPU wheels of 0.4.30, 0.4.38, 0.5.3, 0.6.2 and 0.7.2), so an array there is in the
    device's own memory, not moved to the host."""
    if device is None:
        return None
    if device not in _default_kinds:
        try:
            _default_kinds[device] = device.default_memory().kind
        except Exception:  # noqa: BLE001 - a JAX without memories: "device" and None cover it
            _default_kinds[device] = None
    return _default_kinds[device]


def _shard_sizes(sharding: Any, shape: tuple, devices: Any) -> dict[int, int]:
    """Elements per addressable device: a shard's shape, or the device's slice where shards differ."""
    try:
        per_shard = math.prod(sharding.shard_shape(shape))
        return {d.id: per_shard for d in devices}
    except (ValueError, NotImplementedError):  # uneven shardings (IndivisibleError); the index map is metadata too
        sizes = {}
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            sizes[device.id] = math.prod(len(range(*s.indices(n))) for s, n in zip(index, shape))
        return sizes


# Footprints by the sharding object's identity, then shape and dtype: arrays made alike share one
# sharding object, and hashing a sharding runs Python (``__hash__``/``__eq__`` in
# jax/_src/sharding_impls.py), a third of the cost at 50,000 arrays. Each entry keeps its
# sharding alive, so its id is not reused while the entry stands.
_by_sharding: dict[int, tuple[Any, dict[tuple, Footprint]]] = {}


def footprint(array: Any) -> Footprint:
    """The array's bytes per device and in host memory, without touching its buffers."""
    sharding, aval = array.sharding, array.aval
    entry = _by_sharding.get(id(sharding))
    if entry is None or entry[0] is not sharding:
        if len(_by_sharding) > 4096:
            _by_sharding.clear()
        entry = _by_sharding[id(sharding)] = (sharding, {})
    key = (aval.shape, aval.dtype)
    found = entry[1].get(key)
    if found is None:
        found = entry[1][key] = footprint_of(sharding, aval)
    return found


def footprint_of(sharding: Any, aval: Any) -> Footprint:
    """:func:`footprint` of an array with this sharding and abstract value (shape, dtype)."""
    key = (sharding, aval.shape, aval.dtype)
    known = _footprints.get(key)
    if known is not None:
        return known
    nbytes = _aval_bytes(aval)  # the global array's bytes, as ArrayImpl.nbytes counts them
    devices = sharding.addressable_devices
    kind = getattr(sharding, "memory_kind", None)
    if len(sharding.device_set) == 1:
        (device,) = devices
        per_device = {device.id: nbytes}
    else:
        total = math.prod(aval.shape)
        per_device = {
            d: (nbytes * n // total if total else 0) for d, n in _shard_sizes(sharding, aval.shape, devices).items()
        }
    shape, dtype = tuple(aval.shape), str(aval.dtype)
    layout = layout_of(sharding, shape, next(iter(devices), None))
    if kind in _DEVICE_KINDS or kind == _default_memory_kind(next(iter(devices), None)):
        found = Footprint(per_device, 0, kind, shape, dtype, layout)
    else:
        found = Footprint({}, sum(per_device.values()), kind, shape, dtype, layout)
    if len(_footprints) > 4096:  # shapes come and go; a few thousand distinct ones is plenty
        _footprints.clear()
    _footprints[key] = found
    return found


def live_arrays_newest_first() -> list:
    """``jax.live_arrays()``, newest first; [] before the backend starts (listing would start it).

    JAX lists from the head of the client's array list, where each new array is linked
    (jaxlib py_array.cc, PyArray_Storage); tests/test_do_no_harm.py checks this order.
    """
    if not backend_started():
        return []
    import jax

    return jax.live_arrays()


def cpu_arrays() -> CpuArraysReading | None:
    """The bytes and number of JAX's live arrays where JAX's default backend is the CPU; None
    before JAX has started (asking would start it) or where it runs on another platform.

    Reads the client's list of live arrays (what ``jax.live_arrays()`` returns, jax/_src/api.py,
    without its backend lookup, which can wait on JAX's start lock) and each array's ``aval``:
    metadata only, no buffer is read, waited on or made. The list is dropped as soon as the
    metadata is copied, so an array the user deletes meanwhile is not kept alive for long.
    With one CPU device, an array's bytes are its shape times its itemsize; with several
    (``--xla_force_host_platform_device_count``) each device's copy or shard counts
    (``footprint_of``).
    """
    client = started_default_client()
    if client is None or getattr(client, "platform", None) != "cpu":
        return None
    listed = client.live_arrays()  # deleted arrays are not listed (jaxlib PyClient::LiveArrays)
    if len(client.local_devices()) == 1:
        avals = list(map(_aval_of, listed))
        del listed
        counts = Counter(avals)
        total = sum(_aval_bytes(aval) * n for aval, n in counts.items())
        return CpuArraysReading(bytes=total, arrays=len(avals))
    pairs = [(a.sharding, a.aval) for a in listed]
    del listed
    counts = Counter(pairs)
    total = sum(_held_bytes(footprint_of(sharding, aval)) * n for (sharding, aval), n in counts.items())
    return CpuArraysReading(bytes=total, arrays=len(pairs))


_aval_of = attrgetter("aval")


def _held_bytes(found: Footprint) -> int:
    return found.on_device + found.host_bytes  # on a CPU both are the host's memory


# What asking an array about itself raises: jaxlib's RuntimeError (JaxRuntimeError, the
# computation's own error; a deleted array), ValueError (a sharded array has no one address),
# AttributeError/TypeError (an object that only looks like an array).
ASK_ERRORS = (AttributeError, RuntimeError, TypeError, ValueError)


def failed(array: Any, live: bool = False) -> bool | None:
    """Whether the computation that makes ``array`` failed (an out-of-memory error surfacing at
    ``block_until_ready()``): None while it is pending, not known without waiting. Asks only a
    ready array (``is_ready()`` does not wait; it is True for a value or an error), and asks it
    as the user's own code does: ``block_until_ready()`` then returns at once, or raises the
    error (jaxlib PyArray::BlockUntilReady). The buffer itself is never read: asking a failed
    CPU buffer for its address aborts the process (xla CpuRawBuffer, "Check failed:
    buffer_.IsConcrete()", jaxlib 0.10.2). ``live``: the caller has just seen that the array is
    not deleted, and it is not asked again."""
    try:
        if (not live and array.is_deleted()) or not array.is_ready():
            return None
    except ASK_ERRORS:
        return None
    try:
        array.block_until_ready()
    except ASK_ERRORS:
        return True
    return False


_POINTER_MAKES_NO_ARRAY: bool | None = None


def pointer_makes_no_array() -> bool:
    """Whether ``unsafe_buffer_pointer()`` leaves ``jax.live_arrays()`` as it was. On jaxlib up to
    0.9.2 it goes through the array's per-device Arrays, made on first use, so the user's
    ``jax.live_arrays()`` lists one more array after it (seen on CPU JAX 0.7.2, 0.8.3 and 0.9.2:
    1 array before the call, 2 after; 0.10.2 keeps 1). The method is in jaxlib's C++, so the
    installed release is what can be checked."""
    global _POINTER_MAKES_NO_ARRAY
    if _POINTER_MAKES_NO_ARRAY is None:
        import jax

        try:
            major, minor = (int(part) for part in jax.__version__.split(".")[:2])
            _POINTER_MAKES_NO_ARRAY = (major, minor) >= (0, 10)
        except ValueError:
            _POINTER_MAKES_NO_ARRAY = False
    return _POINTER_MAKES_NO_ARRAY


def cpu_buffer_key(array: Any, found: Footprint | None = None) -> tuple[int, int] | None:
    """(device id, buffer address) of a single-device array on a CPU device that is ready and
    did not fail (``failed``); None for anything else. On the CPU a jax.Array's numpy value is a
    zero-copy view of its buffer, and JAX keeps another Array of that same buffer alive as the
    view's owner: after ``repr`` of an array, ``jax.live_arrays()`` lists one more, with the same
    ``unsafe_buffer_pointer()`` (JAX 0.10.2, jax/_src/array.py ``ArrayImpl._value`` ->
    ``_single_device_array_to_np_array_did_copy``, which keeps no copy on the CPU). Arrays with
    one key are one allocation. None on a JAX whose ``unsafe_buffer_pointer()`` would add an array
    the user sees (``pointer_makes_no_array``): such arrays are counted one by one there.

    ``found``: the array's footprint, given by a caller that has already seen that the array
    is ready and did not fail; its one device and platform are then taken from it, and the
    array is not asked again (at 50,000 arrays each question costs tens of milliseconds)."""
    try:
        if found is not None:
            if len(found.device_bytes) != 1 or found.platform != "cpu" or not pointer_makes_no_array():
                return None
            (device_id,) = found.device_bytes
        else:
            devices = array.sharding.device_set
            if len(devices) != 1:
                return None
            (device,) = devices
            if device.platform != "cpu" or not pointer_makes_no_array() or failed(array) is not False:
                return None
            device_id = device.id
        pointer = array.unsafe_buffer_pointer()
    except ASK_ERRORS:
        return None
    return (device_id, pointer) if pointer else None


def shard_view_ids(array: Any) -> tuple[int, ...]:
    """ids of the per-shard arrays that ``array.addressable_shards`` made and JAX caches on the
    array (jax/_src/array.py): views of the same buffers, which are not arrays of their own."""
    try:
        shards = vars(array).get("addressable_shards")
    except TypeError:
        return ()
    if not isinstance(shards, list):
        return ()
    return tuple(id(s.data) for s in shards if getattr(s, "data", None) is not None)


concrete_array_types: set[type] = set()  # types seen to be jax.Array and not a tracer


def is_jax_array(obj: Any) -> bool:
    """Whether ``obj`` is a jax.Array (False, cheaply, when jax is not imported).

    Asks ``isinstance``, which a user's object can make raise (a ``__class__`` property): the
    caller that walks user objects guards that.
    """
    if type(obj) in concrete_array_types:
        return True
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    array_type = getattr(jax, "Array", None)
    found = array_type is not None and isinstance(obj, array_type) and not _is_tracer(obj)
    if found and type(obj).__name__ == "ArrayImpl":
        concrete_array_types.add(type(obj))
    return found


def _is_tracer(obj: Any) -> bool:
    core = sys.modules.get("jax._src.core")
    tracer = getattr(core, "Tracer", None)
    return tracer is not None and isinstance(obj, tracer)


def device_memory_profile() -> bytes | None:
    """JAX's device memory profile: a gzipped pprof protocol buffer of the live arrays and
    executables with the Python stack that allocated each (``jax.profiler.device_memory_profile``,
    jax/_src/profiler.py, 0.10.2). None before the backend starts: taking one would start it."""
    if not backend_started():
        return None
    import jax.profiler

    return jax.profiler.device_memory_profile()


def clear_caches() -> bool:
    """``jax.clear_caches()`` where jax is imported: drops compiled programs. True if it ran."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    jax.clear_caches()
    return True


@dataclass(frozen=True)
class CompiledMemory:
    """What a compiled call needs, from ``Compiled.memory_analysis()`` (bytes, per device: the
    SPMD-partitioned module each device runs). ``inputs`` and ``outputs`` give each array's
    shape on one device; ``layouts`` and ``output_layouts`` its global shape and sharding too
    (``sources.jax_sharding``); ``devices``: how many devices the program spans."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    code_bytes: int
    peak_bytes: int | None  # XLA's own peak where this JAX reports it
    jitted: bool  # False: the callee was not jitted and was compiled as jax.jit(callee)
    # (shape, dtype, bytes, donated) per array argument, and (shape, dtype, bytes) per output
    inputs: tuple[tuple[tuple, str, int, bool], ...] = ()
    outputs: tuple[tuple[tuple, str, int], ...] = ()
    hlo: str = ""  # the optimised module's text (``Compiled.as_text()``), where asked for
    layouts: tuple[ArrayLayout, ...] = ()
    output_layouts: tuple[ArrayLayout, ...] = ()

    @property
    def devices(self) -> int:
        return max((x.devices for x in self.layouts + self.output_layouts), default=1)

    @property
    def total_bytes(self) -> int:
        """Arguments, outputs and temporaries less what outputs write into donated arguments."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes


def compile_memory(callee: Any, args: tuple, kwargs: Mapping[str, Any], with_hlo: bool = False) -> CompiledMemory:
    """Lower and compile ``callee(*args, **kwargs)`` without running it, and read its memory;
    ``with_hlo``: its optimised module's text too (``Compiled.as_text()``: one device's module
    for a sharded program; from JAX 0.8 it holds the stack-frame tables its metadata points
    into), or "" where this JAX cannot print it.

    A callee without ``.lower`` is wrapped in ``jax.jit``, with only the arguments that hold
    arrays traced: the rest (shapes, dtypes, Python numbers, flags) are passed as they are, as a
    plain call would, so ``jnp.ones((1 << 20,))`` compiles. Raises ValueError, with JAX's
    message, when it cannot be lowered or compiled (JAX raises TypeError, ValueError or
    OverflowError while tracing, and jaxlib's XlaRuntimeError, a RuntimeError, while
    compiling); anything else the callee raises while traced reaches the caller as it is.
    """
    return _compiled(callee, args, kwargs, None, with_hlo)[0]


def _compiled(
    callee: Any, args: tuple, kwargs: Mapping[str, Any], compiler_options: dict | None, with_hlo: bool = False
) -> tuple[CompiledMemory, Any, tuple[Any, ...]]:
    """``(memory, lowered, positions)``: ``positions[i]`` is the callee's own position (or
    keyword) of the i-th traced argument."""
    import jax

    jitted = hasattr(callee, "lower")
    if jitted:
        fn, args, kwargs = callee, tuple(args), dict(kwargs)
        positions: tuple[Any, ...] = tuple(range(len(args))) + tuple(kwargs)
    else:
        fn, args, kwargs, positions = _jit_traced_only(jax, callee, tuple(args), dict(kwargs))
    try:
        lowered = fn.lower(*args, **kwargs)
        compiled = lowered.compile() if compiler_options is None else lowered.compile(compiler_options=compiler_options)
        analysis = compiled.memory_analysis()
    except (TypeError, ValueError, OverflowError, RuntimeError) as err:
        raise ValueError(f"could not compile it for these arguments: {type(err).__name__}: {err}") from None
    if analysis is None:
        raise ValueError("this backend gives no memory analysis for compiled programs")
    if isinstance(analysis, (list, tuple)):  # older JAX: one per device
        analysis = analysis[0]

    def get(name: str) -> int:
        value = getattr(analysis, name, 0)
        return int(value) if isinstance(value, int) and value >= 0 else 0

    peak = getattr(analysis, "peak_memory_in_bytes", None)
    infos = [a for a in jax.tree_util.tree_leaves(getattr(lowered, "args_info", ())) if hasattr(a, "_aval")]
    layouts = argument_layouts(compiled, lowered, positions)
    outs = [o for o in jax.tree_util.tree_leaves(getattr(lowered, "out_info", ())) if hasattr(o, "shape")]
    out_layouts = output_layouts(compiled, lowered)
    memory = CompiledMemory(
        argument_bytes=get("argument_size_in_bytes"),
        output_bytes=get("output_size_in_bytes"),
        temp_bytes=get("temp_size_in_bytes"),
        alias_bytes=get("alias_size_in_bytes"),
        code_bytes=get("generated_code_size_in_bytes"),
        peak_bytes=int(peak) if isinstance(peak, int) and peak > 0 else None,
        jitted=jitted,
        # per device: donation pairs an output with an argument of the same per-device shape
        inputs=tuple((x.device_shape, x.dtype, x.device_bytes, bool(a.donated)) for x, a in zip(layouts, infos))
        if len(layouts) == len(infos)
        else tuple((tuple(a.shape), str(a.dtype), _aval_bytes(a), bool(a.donated)) for a in infos),
        outputs=tuple((x.device_shape, x.dtype, x.device_bytes) for x in out_layouts)
        if len(out_layouts) == len(outs)
        else tuple((tuple(o.shape), str(o.dtype), _aval_bytes(o)) for o in outs),
        hlo=_module_text(compiled) if with_hlo else "",
        layouts=layouts,
        output_layouts=out_layouts,
    )
    return memory, lowered, positions


def _module_text(compiled: Any) -> str:
    try:
        text = compiled.as_text()
    except (RuntimeError, NotImplementedError, ValueError):  # jaxlib's XlaRuntimeError is a RuntimeError
        return ""  # a backend or JAX that cannot print its program: the caller goes without
    return text if isinstance(text, str) else ""


@dataclass(frozen=True)
class CompiledDump:
    """A call compiled with XLA's dump on, not run: its ``memory`` (``memory_analysis()``), the
    texts XLA wrote (``buffer_assignment``: ``*buffer-assignment.txt`` with, where this XLA
    writes them apart, ``*buffer-assignment-values.txt`` and ``*-live-range.txt``; ``hlo``: the
    optimised module, ``*after_optimizations.txt``), the names of the files it wrote,
    ``seconds`` to lower and compile, and per argument of the callee ``(position or keyword,
    bytes, donated, (shape, dtype) of each array)``."""

    memory: CompiledMemory
    buffer_assignment: str
    hlo: str
    files: tuple[str, ...]
    seconds: float
    arguments: tuple[tuple[Any, int, bool, tuple[tuple[tuple, str], ...]], ...] = ()


_DUMP_PARTS = ("buffer-assignment.txt", "buffer-assignment-values.txt", "live-range.txt")


def compile_with_dump(callee: Any, args: tuple, kwargs: Mapping[str, Any]) -> CompiledDump:
    """Lower and compile ``callee(*args, **kwargs)`` without running it, with
    ``compiler_options={"xla_dump_to": DIR}`` in a temporary folder removed before returning.

    The options are part of JAX's key for compiled programs (``_cached_compilation`` in
    jax/_src/interpreters/pxla.py keys on ``compiler_options_kvs``, 0.10.2), and the folder is new
    each time, so this compile neither reuses nor replaces the program a call of ``callee``
    compiles, and a jitted callee's own cache of programs is not added to. Raises ValueError as
    :func:`compile_memory` does, and where this JAX's ``Lowered.compile`` takes no compiler
    options or XLA wrote no buffer assignment."""
    import inspect
    import tempfile
    import time

    import jax

    probe = getattr(jax.stages.Lowered, "compile", None)
    if probe is None or "compiler_options" not in inspect.signature(probe).parameters:
        raise ValueError(
            "this JAX's Lowered.compile takes no compiler options, so XLA cannot be asked for its buffer assignment"
        )
    with tempfile.TemporaryDirectory(prefix="gpumem-peak-") as folder:
        start = time.perf_counter()
        memory, lowered, positions = _compiled(callee, args, kwargs, {"xla_dump_to": folder})
        seconds = time.perf_counter() - start
        names = sorted(os.listdir(folder))
        modules = sorted({n.split(".", 1)[0] for n in names if n.endswith("buffer-assignment.txt")})
        if not modules:
            raise ValueError(f"XLA wrote no buffer assignment for this program (files: {', '.join(names) or 'none'})")
        module = modules[-1]

        def read(suffixes: tuple[str, ...]) -> str:
            return "\n".join(
                _read_text(os.path.join(folder, n))
                for n in names
                if n.startswith(module + ".") and n.endswith(suffixes)
            )

        buffer_assignment = read(_DUMP_PARTS)
        hlo = read(("after_optimizations.txt",))
    return CompiledDump(
        memory, buffer_assignment, hlo, tuple(names), seconds, _arguments(jax, lowered, positions, memory)
    )


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _arguments(jax: Any, lowered: Any, positions: tuple[Any, ...], memory: CompiledMemory) -> tuple:
    """Per traced argument: ``(position or keyword, bytes, all donated, ((shape, dtype), ...))``
    on one device (``memory.layouts``), else from ``Lowered.args_info`` (``(args, kwargs)`` of
    ``stages.ArgInfo``) where this JAX gives no shardings."""
    if memory.layouts and len(memory.layouts) == len(memory.inputs):
        grouped: dict[Any, list] = {}
        for layout, (shape, dtype, size, donated) in zip(memory.layouts, memory.inputs):
            grouped.setdefault(layout.position, []).append((shape, dtype, size, donated))
        return tuple(
            (name, sum(x[2] for x in xs), all(x[3] for x in xs), tuple((x[0], x[1]) for x in xs))
            for name, xs in grouped.items()
        )
    info = getattr(lowered, "args_info", None)
    if not isinstance(info, tuple) or len(info) != 2:
        return ()
    given, keywords = info
    trees = list(given) + [keywords[k] for k in sorted(keywords)] if isinstance(keywords, dict) else list(given)
    names = list(positions[: len(given)]) + (sorted(keywords) if isinstance(keywords, dict) else [])
    found = []
    for name, tree in zip(names, trees):
        leaves = [a for a in jax.tree_util.tree_leaves(tree) if hasattr(getattr(a, "_aval", None), "shape")]
        if leaves:
            found.append(
                (
                    name,
                    sum(_aval_bytes(a) for a in leaves),
                    all(bool(a.donated) for a in leaves),
                    tuple((tuple(a.shape), str(a.dtype)) for a in leaves),
                )
            )
    return tuple(found)


def _aval_bytes(aval: Any) -> int:
    return math.prod(aval.shape) * aval.dtype.itemsize


def abstract_arrays(tree: Any) -> Any:
    """``tree`` with each jax.Array leaf replaced by a ShapeDtypeStruct of its shape and dtype,
    and its sharding where the array is committed to it: what lowering needs, read without
    touching a buffer (a donated, pending or failed array lowers the same). An uncommitted array
    (``jnp.ones`` on the default device) lowers as one without a sharding, so the program is the
    one the call compiled and JAX answers from its cache (a sharding there compiles anew)."""
    import jax

    def shape_of(leaf: Any) -> Any:
        if is_jax_array(leaf):
            committed = getattr(leaf, "_committed", True)  # jax/_src/array.py ArrayImpl
            return jax.ShapeDtypeStruct(
                leaf.shape,
                leaf.dtype,
                sharding=leaf.sharding if committed else None,
                weak_type=bool(getattr(leaf, "weak_type", False)),
            )
        return leaf

    return jax.tree_util.tree_map(shape_of, tree)


def _holds_arrays(value: Any) -> bool:
    """Whether any leaf of the pytree ``value`` is an array (or an abstract one) to trace."""
    import jax
    import numpy as np

    kinds = (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)
    return any(isinstance(leaf, kinds) for leaf in jax.tree_util.tree_leaves(value))


def _jit_traced_only(
    jax: Any, callee: Any, args: tuple, kwargs: dict, donate: tuple = ()
) -> tuple[Any, tuple, dict, tuple]:
    """``jax.jit`` of ``callee`` over the arguments that hold arrays, with those arguments and
    their positions (and keywords) in the call; the others are bound as they are (closed over, so
    they need not be hashable as ``static_argnums`` would require). ``donate``: the callee's
    positions and keywords to donate."""
    traced = [i for i, a in enumerate(args) if _holds_arrays(a)]
    traced_kw = [k for k, v in kwargs.items() if _holds_arrays(v)]
    donated = {
        "donate_argnums": tuple(n for n, i in enumerate(traced) if i in donate),
        "donate_argnames": tuple(k for k in traced_kw if k in donate),
    }

    def bound(*arrays: Any, **arrays_kw: Any) -> Any:
        full = list(args)
        for i, a in zip(traced, arrays):
            full[i] = a
        return callee(*full, **{**kwargs, **arrays_kw})

    fn = jax.jit(bound, **{k: v for k, v in donated.items() if v})
    return fn, tuple(args[i] for i in traced), {k: kwargs[k] for k in traced_kw}, (*traced, *traced_kw)


def compile_variant(
    callee: Any, args: tuple, kwargs: Mapping[str, Any], donate: tuple = (), reshard: Mapping | None = None
) -> CompiledMemory:
    """The call compiled again over its arguments' shapes and shardings (``abstract_arrays``: no
    buffer is read), never run, as a fix would change it: the arguments at ``donate`` (the
    callee's positions or keywords) donated, and each array ``reshard`` names (``(position,
    leaf index) -> (ArrayLayout, spec tuple)``) laid out as ``NamedSharding(its mesh,
    P(*spec))``. A jitted callee is called inside a ``jax.jit`` that donates and takes the new
    layouts; its own options stay. Raises ValueError as :func:`compile_memory` does."""
    import jax

    given, named = list(abstract_arrays(tuple(args))), dict(abstract_arrays(dict(kwargs)))
    for (position, leaf), (layout, spec) in (reshard or {}).items():
        holder = given if isinstance(position, int) else named
        leaves, tree = jax.tree_util.tree_flatten(holder[position])
        old = leaves[leaf]
        sharding = named_sharding(layout.mesh, spec)
        leaves[leaf] = jax.ShapeDtypeStruct(old.shape, old.dtype, sharding=sharding)
        holder[position] = jax.tree_util.tree_unflatten(tree, leaves)
    try:
        fn, traced, traced_kw, _ = _jit_traced_only(jax, callee, tuple(given), named, tuple(donate))
    except (TypeError, ValueError) as err:  # an option jax.jit refuses (a keyword it cannot donate)
        raise ValueError(f"could not compile it so: {type(err).__name__}: {err}") from None
    with warnings.catch_warnings():  # "Some donated buffers were not usable": the answer is read, not shown
        warnings.simplefilter("ignore", UserWarning)
        return _compiled(fn, traced, traced_kw, None)[0]


def host_round_trip(tree: Any) -> tuple[Any, int, int]:
    """Copy every jax.Array leaf of ``tree`` to the host, delete its device buffers, and put it
    back with the same sharding; returns ``(new_tree, arrays_moved, bytes_moved)``.

    All leaves are on the host before any is put back, so the allocator places them into a pool
    with the old buffers gone. Deleting is what frees: any other reference to these arrays sees
    a deleted array afterwards.
    """
    import jax
    import numpy as np

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    moved = []
    for i, leaf in enumerate(leaves):
        if is_jax_array(leaf) and not leaf.is_deleted():
            moved.append((i, leaf.sharding, np.asarray(jax.device_get(leaf))))
    total = sum(int(host.nbytes) for _, _, host in moved)
    for i, _, _ in moved:
        leaves[i].delete()
    for i, sharding, host in moved:
        leaves[i] = jax.device_put(host, sharding)
    for i, _, _ in moved:
        leaves[i].block_until_ready()
    return jax.tree_util.tree_unflatten(treedef, leaves), len(moved), total
