"""Explain and fix: the OOM report, what holds memory, memory per cell, estimates, defragment.

The face over ``oom.py`` (pure rules) and the sources (``allocator_shim``, the sampler's NVML
and JAX readings). Importing it does not import jax. Every reading that is not there (CPU has
no allocator statistics, no NVML) is said in words, and the measure used instead is named.

- ``install(shell)``: the cell hooks (OOM report, per-cell line, which cell made which buffer)
- ``census()``, ``live_arrays()``: live JAX arrays with names and cells, sized from their
  shardings (no buffer is read: see "Code that runs on its own" in docs/architecture.md)
- ``free(history=True, caches=True, gc=True)``: release what can be released safely
- ``track()``: memory change and peak of a block of code
- ``estimate(callee, *args, **kwargs)``: will a jitted call fit, before running it
- ``defragment(tree)``: move a pytree through the host so the allocator packs it
- ``magic_doctor/arrays/free/cells/estimate(argv, shell)``: the ``%gpumem`` subcommands
"""

from __future__ import annotations

import ast
import gc as _gc
import html
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from . import allocator_shim, array_cells, oom
from . import doctor_hooks
from .model import AllocatorStats, DeviceReading, NotAvailable, Sample, fragmentation, headroom
from .oom import Fix, OomError, OomReadings, OtherProcess
from .units import format_bytes

log = logging.getLogger(__name__)

__all__ = [
    "ArrayRecord",
    "OomReport",
    "ArraysReport",
    "FreeReport",
    "EstimateReport",
    "DefragSummary",
    "Track",
    "install",
    "uninstall",
    "live_arrays",
    "oom_report",
    "free",
    "track",
    "estimate",
    "defragment",
    "magic_doctor",
    "magic_arrays",
    "magic_free",
    "magic_cells",
    "magic_estimate",
]

# The switches live with the hooks, so that loading the extension need not import this module.
_state = doctor_hooks.state
install = doctor_hooks.install
uninstall = doctor_hooks.uninstall

_HISTORY_SINGLE = ("_", "__", "___")


def _b(n: int | None) -> str:
    return "n/a" if n is None else format_bytes(n)


def _action_label(action: str) -> str:
    """"Run" for a line of code to type, "Do" for an action in words."""
    code = action.startswith("%") or "(" in action.split(" ", 1)[0] or action.startswith(("jax.", "jupyter_gpumem."))
    return "Run" if code else "Do"


def _esc(value: Any) -> str:
    return html.escape(str(value))


# --- live arrays, and who holds them --------------------------------------------------------


def _pretty_as_text(self: Any, printer: Any, cycle: bool) -> None:
    printer.text(str(self))


class _TextReport:
    """A report made of ``lines()``: printed as those lines, shown in a notebook as text.

    A dataclass subclass sets ``_repr_pretty_ = _pretty_as_text`` itself: IPython prefers a
    class's own ``__repr__`` (which the dataclass writes) to an inherited ``_repr_pretty_``.
    """

    def lines(self) -> list[str]:
        raise NotImplementedError

    def __str__(self) -> str:
        return "\n".join(self.lines())


class _PreReport(_TextReport):
    """A text report shown in a notebook as its lines in a ``<pre>`` of ``_html_class``."""

    _html_class = ""

    def _repr_html_(self) -> str:
        return f"<pre class='{self._html_class}'>" + _esc(str(self)) + "</pre>"


@dataclass(slots=True)  # not frozen: %gpumem arrays builds tens of thousands, and frozen init is slow
class ArrayRecord:
    """One live JAX array.

    ``bytes_per_device`` maps a JAX device id to the device-memory bytes of its shards there;
    ``host_bytes`` is what it holds in a host memory kind (``memory_kind`` says which), which
    takes no device memory; ``names`` are the user-namespace expressions that reach it
    (``params['w']``, ``Out[3]``, ``_``); ``cell`` is the execution count of the cell that made
    it, where known. Sizes come from the sharding: no buffer is read.
    """

    shape: tuple
    dtype: str
    bytes_per_device: Mapping[int, int]
    names: tuple[str, ...] = ()
    cell: int | None = None
    host_bytes: int = 0
    memory_kind: str | None = None

    @property
    def device_bytes(self) -> int:
        return sum(self.bytes_per_device.values())

    @property
    def nbytes(self) -> int:
        """Every byte it holds: device memory and host memory."""
        return self.device_bytes + self.host_bytes

    @property
    def history_only(self) -> bool:
        """Held by name only through output history (Out, _, _N)."""
        return bool(self.names) and all(_is_history_name(n) for n in self.names)

    def to_json(self) -> dict:
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "nbytes": self.nbytes,
            "bytes_per_device": {str(k): v for k, v in self.bytes_per_device.items()},
            "host_bytes": self.host_bytes,
            "memory_kind": self.memory_kind,
            "names": list(self.names),
            "cell": self.cell,
        }


def _is_history_name(name: str) -> bool:
    root = name.split("[", 1)[0].split(".", 1)[0]
    return root == "Out" or root in _HISTORY_SINGLE or (root.startswith("_") and root[1:].isdigit())


# --- the namespace walk: which names reach which array ----------------------------------------

_SKIP_TYPES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, type(os), type(len), range)
# Mappings walked through their items: in-memory containers only. Any other Mapping may read a
# disk or a network when iterated (shelve, dbm, h5py, zarr) or build arrays as it does.
_MAPPING_MODULES = ("builtins", "collections", "types", "flax", "haiku", "equinox", "immutabledict",
                    "frozendict", "ml_collections", "jax")


@dataclass
class NameWalk:
    """What the walk of the user's namespace found.

    ``names`` maps ``id(array)`` to the expressions that reach it; ``skipped`` counts objects
    that raised when read (a closed shelf, a ``__getattr__`` that raises) or are not walked
    (a mapping that may do I/O); ``unfinished`` is True when the time budget ran out first.
    """

    names: dict[int, list[str]] = field(default_factory=dict)
    skipped: int = 0
    unfinished: bool = False
    seconds: float = 0.0

    def note(self) -> str:
        """One sentence on what the walk could not see, or ''."""
        parts = []
        if self.unfinished:
            parts.append(f"the walk of your variables stopped after {self.seconds:.1f} s, so some arrays "
                         "show no name though a variable may hold them")
        if self.skipped:
            parts.append(f"{self.skipped} object{'s' if self.skipped != 1 else ''} in your variables could not be "
                         "read and were skipped")
        return ("Names: " + "; ".join(parts) + ".") if parts else ""


class _Walker:
    def __init__(self, seconds: float):
        self.found = NameWalk()
        self.seen: set[int] = set()
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + seconds
        self.visits = 0

    def out_of_time(self) -> bool:
        self.visits += 1
        if self.visits & 255 == 0 and time.perf_counter() > self.deadline:
            self.found.unfinished = True
        return self.found.unfinished

    def record(self, array: Any, path: str) -> None:
        paths = self.found.names.setdefault(id(array), [])
        if path not in paths:
            paths.append(path)

    def walk(self, value: Any, path: str, depth: int) -> None:
        """Record ``path`` for every jax.Array reachable from ``value``. Any object may raise
        anything but an interrupt: it is skipped and counted."""
        if self.out_of_time():
            return
        try:
            if isinstance(value, _SKIP_TYPES):
                return
            if allocator_shim.is_jax_array(value):
                self.record(value, path)
                return
            if depth <= 0 or id(value) in self.seen:
                return
            self.seen.add(id(value))
            children = self._children(value)
        except Exception:
            self.found.skipped += 1
            return
        for form, key, child in children:
            try:
                child_path = path + form.format(key)  # a key's repr is user code too
            except Exception:
                self.found.skipped += 1
                continue
            if allocator_shim.is_jax_array(child):  # the common leaf, without a call level
                self.record(child, child_path)
                if self.out_of_time():
                    return
                continue
            self.walk(child, child_path, depth - 1)
            if self.found.unfinished:
                return

    def _children(self, value: Any) -> list[tuple[str, Any, Any]]:
        """``(path form, key, child)`` for each child, from a snapshot of the container."""
        if isinstance(value, dict):
            return [("[{!r}]", k, v) for k, v in list(value.items())]
        if isinstance(value, (list, tuple)):
            return [("[{}]", i, v) for i, v in enumerate(list(value))]
        if isinstance(value, Mapping):
            module = type(value).__module__.split(".", 1)[0]
            if module not in _MAPPING_MODULES:
                self.found.skipped += 1
                return []
            return [("[{!r}]", k, v) for k, v in list(value.items())]
        if callable(value) and not hasattr(value, "__dict__"):
            return []
        out: list[tuple[str, Any, Any]] = []
        attrs = getattr(value, "__dict__", None)
        if isinstance(attrs, dict) and type(value).__module__ != "builtins":
            out += [(".{}", k, v) for k, v in list(attrs.items()) if not str(k).startswith("__")]
        for cls in type(value).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if isinstance(slot, str) and not slot.startswith("__"):
                    try:
                        out.append((".{}", slot, object.__getattribute__(value, slot)))
                    except AttributeError:  # a slot never assigned
                        pass
        return out


def _user_namespace(shell: Any) -> dict:
    if shell is None:
        shell = _state.get("shell") or _current_shell()
    ns = getattr(shell, "user_ns", None)
    return ns if isinstance(ns, dict) else {}


def _current_shell() -> Any:
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:
        return None


_NS_SKIP = {"In", "_ih", "_oh", "_dh", "exit", "quit", "get_ipython", "_i", "_ii", "_iii"}

# Seconds for the walk of the user's variables: a command the user typed may take longer than
# the OOM report, which runs on its own.
WALK_SECONDS_COMMAND = 2.0
WALK_SECONDS_REPORT = 0.25


def names_by_array(namespace: Mapping[str, Any], depth: int = 4, seconds: float = WALK_SECONDS_COMMAND) -> NameWalk:
    """Which expressions reach each jax.Array in ``namespace``; total: never raises for what
    the objects do, and stops at ``seconds`` (the result says so)."""
    walker = _Walker(seconds)
    for name, value in list(namespace.items()):
        if name in _NS_SKIP or (name.startswith("_i") and name[2:].isdigit()):
            continue
        if name.startswith("__") and name not in ("__",):
            continue
        if name == "Out" and isinstance(value, dict):
            for n, v in list(value.items()):
                walker.walk(v, f"Out[{n}]", depth - 1)
        else:
            walker.walk(value, name, depth)
        if walker.found.unfinished:
            break
    walker.found.seconds = time.perf_counter() - walker.t0
    return walker.found


@dataclass(frozen=True)
class ArrayCensus:
    """The live arrays (largest first) and what the walk of names could not see."""

    records: tuple[ArrayRecord, ...]
    walk: NameWalk
    seconds: float


def census(shell: Any = None, seconds: float = WALK_SECONDS_COMMAND) -> ArrayCensus:
    """Every live, undeleted JAX array as a record, largest first; empty before JAX's backend
    starts (listing would start it). Sizes come from shardings and shapes; arrays that are
    only per-shard views of another live array (``addressable_shards``) are not listed twice.
    """
    t0 = time.perf_counter()
    # Tens of thousands of small objects would set off full collections over the user's heap.
    paused = _gc.isenabled()
    _gc.disable()
    try:
        return _census(shell, seconds, t0)
    finally:
        if paused:
            _gc.enable()


def _census(shell: Any, seconds: float, t0: float) -> ArrayCensus:
    walk = names_by_array(_user_namespace(shell), seconds=seconds)
    arrays = [a for a in allocator_shim.live_arrays_newest_first() if not _deleted(a)]
    views: set[int] = set()
    for a in arrays:
        try:
            if len(a.sharding.device_set) > 1:
                views.update(allocator_shim.shard_view_ids(a))
        except Exception:
            continue
    if arrays:
        array_cells.note_new_arrays()
    sized = []
    names, cell_of, footprint = walk.names, array_cells.cell_of, allocator_shim.footprint
    for a in arrays:
        if id(a) in views:
            continue
        try:
            fp = footprint(a)
        except Exception:  # deleted between listing and reading
            continue
        record = ArrayRecord(fp.shape, fp.dtype, fp.device_bytes, tuple(names.get(id(a), ())), cell_of(a),
                             fp.host_bytes, fp.memory_kind)
        sized.append((-(fp.on_device + fp.host_bytes), fp.shape, len(sized), record))
    sized.sort(key=lambda t: t[:3])
    records = [t[3] for t in sized]
    return ArrayCensus(tuple(records), walk, time.perf_counter() - t0)


def _deleted(array: Any) -> bool:
    try:
        return bool(array.is_deleted())
    except Exception:
        return True


def live_arrays(shell: Any = None) -> list[ArrayRecord]:
    """The live JAX arrays, largest first (``census(shell).records``)."""
    return list(census(shell).records)


def _group(records: list[ArrayRecord], by: str) -> list[tuple[str, int, int, int | None]]:
    """``(key, count, bytes, first cell)`` per group, largest first."""
    groups: dict[str, list[ArrayRecord]] = {}
    for r in records:
        if by == "shape":
            keys = [f"{r.dtype}{list(r.shape)}"]
        elif by == "dtype":
            keys = [r.dtype]
        elif by == "cell":
            keys = [f"cell {r.cell}" if r.cell is not None else "before tracking (unknown cell)"]
        else:  # name: the root name of each holder, or unnamed
            roots = []
            for n in r.names:
                root = n.split("[", 1)[0].split(".", 1)[0]
                if root not in roots:
                    roots.append(root)
            keys = roots[:1] or ["(no name: held elsewhere)"]
        for k in keys:
            groups.setdefault(k, []).append(r)
    out = [(k, len(v), sum(r.device_bytes for r in v), min((r.cell for r in v if r.cell is not None), default=None))
           for k, v in groups.items()]
    return sorted(out, key=lambda g: (-g[2], g[0]))


BY_CHOICES = ("shape", "dtype", "cell", "name")


@dataclass(frozen=True)
class ArraysReport:
    """What ``%gpumem arrays`` shows; ``records`` are all live arrays, largest first."""

    records: tuple[ArrayRecord, ...]
    top: int = 20
    by: str | None = None
    note: str = ""
    walk_note: str = ""  # what the walk of names could not see
    seconds: float | None = None  # how long the listing took

    @property
    def total_bytes(self) -> int:
        """Device-memory bytes of all live arrays."""
        return sum(r.device_bytes for r in self.records)

    @property
    def host_bytes(self) -> int:
        return sum(r.host_bytes for r in self.records)

    def rows(self) -> list[tuple]:
        if self.by:
            return [(k, str(c), _b(n), "" if cell is None else str(cell)) for k, c, n, cell in _group(list(self.records), self.by)[: self.top]]
        out = []
        for r in self.records[: self.top]:
            per_dev = ", ".join(f"{d}: {_b(n)}" for d, n in sorted(r.bytes_per_device.items()))
            if r.host_bytes:
                per_dev = f"host ({r.memory_kind}): {_b(r.host_bytes)}"
            out.append((f"{r.dtype}{list(r.shape)}", _b(r.nbytes), per_dev, ", ".join(r.names) or "(no name)",
                        "" if r.cell is None else str(r.cell)))
        return out

    def headers(self) -> tuple[str, ...]:
        if self.by:
            return (self.by, "arrays", "bytes", "first cell")
        return ("array", "bytes", "per device", "held by", "cell")

    def summary(self) -> str:
        if self.note:
            return self.note
        shown = min(self.top, len(self.rows()) if self.by else len(self.records))
        what = f"grouped by {self.by}" if self.by else "largest first"
        host = f" and {_b(self.host_bytes)} in host memory" if self.host_bytes else ""
        took = f" Listed in {self.seconds * 1e3:.0f} ms." if self.seconds is not None else ""
        text = (f"{len(self.records)} live JAX arrays, {_b(self.total_bytes)} in device memory{host}; "
                f"{shown} shown, {what}.{took}")
        return text + (" " + self.walk_note if self.walk_note else "")

    def __str__(self) -> str:
        lines = [self.summary()]
        rows = self.rows()
        if rows:
            table = [self.headers()] + rows
            widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
            for row in table:
                lines.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        return "\n".join(lines)

    _repr_pretty_ = _pretty_as_text

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{_esc(h)}</th>" for h in self.headers())
        body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in self.rows())
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if body else ""
        return f"<div class='jupyter-gpumem-arrays'><p>{_esc(self.summary())}</p>{table}</div>"

    def to_json(self) -> dict:
        return {"records": [r.to_json() for r in self.records], "total_bytes": self.total_bytes,
                "host_bytes": self.host_bytes, "by": self.by, "walk_note": self.walk_note, "seconds": self.seconds}


def _not_started_note() -> str:
    return "JAX's backend has not started: there are no live arrays yet (listing them would start it)."


def _parse_options(argv: list[str], spec: dict[str, str], command: str) -> dict[str, Any]:
    """``--name value`` and ``--flag`` options; ``spec`` maps an option to "flag" or "value"."""
    valid = ", ".join(f"--{k}" + (" VALUE" if v == "value" else "") for k, v in spec.items())
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, inline = word.partition("=")
        key = name[2:] if name.startswith("--") else None
        if key not in spec:
            raise ValueError(f"{command}: unknown argument {word!r}; valid: {valid}")
        if key in out:
            raise ValueError(f"{command}: --{key} is given twice")
        if spec[key] == "flag":
            if eq:
                raise ValueError(f"{command}: --{key} takes no value")
            out[key] = True
            i += 1
            continue
        if eq:
            out[key] = inline
            i += 1
        elif i + 1 < len(argv):
            out[key] = argv[i + 1]
            i += 2
        else:
            raise ValueError(f"{command}: --{key} needs a value")
    return out


def magic_arrays(argv: list[str], shell: Any) -> ArraysReport:
    """``%gpumem arrays [--top N] [--by shape|dtype|cell|name]``."""
    opts = _parse_options(argv, {"top": "value", "by": "value"}, "arrays")
    top = 20
    if "top" in opts:
        try:
            top = int(opts["top"])
        except ValueError:
            top = 0
        if top < 1:
            raise ValueError(f"arrays: --top takes a whole number of rows, 1 or more, got {opts['top']!r}")
    by = opts.get("by")
    if by is not None and by not in BY_CHOICES:
        raise ValueError(f"arrays: --by takes one of {', '.join(BY_CHOICES)}, got {by!r}")
    if not allocator_shim.backend_started():
        return ArraysReport((), top, by, _not_started_note())
    found = census(shell)
    return ArraysReport(found.records, top, by, walk_note=found.walk.note(), seconds=found.seconds)


# --- memory now: allocator stats where there are any, live-array bytes where not -------------


def _jax_readings() -> tuple:
    readings = allocator_shim.read_jax_devices()
    return () if isinstance(readings, NotAvailable) else readings


def _stats_list(readings: Iterable) -> list[AllocatorStats]:
    return [r.stats for r in readings if isinstance(r.stats, AllocatorStats)]


def _sum(values: Iterable[int | None]) -> int | None:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


@dataclass(frozen=True)
class MemoryNow:
    """Bytes in use now, and which measure gave them."""

    measure: str  # "allocator" (bytes_in_use, all devices) or "live_arrays"
    in_use: int
    peak: int | None = None
    pool: int | None = None
    # (jax_id, bytes_in_use, peak_bytes_in_use) of each device with statistics
    devices: tuple[tuple[int, int | None, int | None], ...] = ()

    @property
    def measure_words(self) -> str:
        if self.measure == "allocator":
            return "JAX allocator bytes in use, all devices"
        return ("live JAX array bytes (no allocator statistics here; on the CPU an array printed or handed "
                "to NumPy counts twice: JAX keeps a second array object on its buffer)")


def _with_stats(readings: Iterable) -> list:
    return [r for r in readings if isinstance(r.stats, AllocatorStats)]


def memory_now() -> MemoryNow:
    readings = _with_stats(_jax_readings())
    stats = [r.stats for r in readings]
    in_use = _sum(s.bytes_in_use for s in stats)
    if stats and in_use is not None:
        devices = tuple((r.jax_id, r.stats.bytes_in_use, r.stats.peak_bytes_in_use) for r in readings)
        return MemoryNow("allocator", in_use, _sum(s.peak_bytes_in_use for s in stats),
                         _sum(s.pool_bytes for s in stats), devices)
    # Kept current by the cell hooks at the cost of new arrays: O(1) here, whatever lives.
    return MemoryNow("live_arrays", array_cells.device_bytes())


# --- free ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FreeReport(_PreReport):
    """What ``%gpumem free`` released, measured before and after.

    ``actions`` are the steps that ran, ``failed`` the steps that raised (with why) and
    ``not_done`` the steps left when it stopped (an interrupt); each step is whole or not at all.
    """

    _html_class = "jupyter-gpumem-free"
    _repr_pretty_ = _pretty_as_text

    actions: tuple[str, ...]
    measure: str
    before: int
    after: int
    still_held: tuple[ArrayRecord, ...]
    failed: tuple[str, ...] = ()
    not_done: tuple[str, ...] = ()
    note: str = ""

    @property
    def freed(self) -> int:
        return max(0, self.before - self.after)

    def lines(self) -> list[str]:
        out = [f"Freed {_b(self.freed)}: {_b(self.before)} -> {_b(self.after)} ({self.measure})."]
        out += [f"  - {a}" for a in self.actions]
        out += [f"  - FAILED {a}" for a in self.failed]
        if self.not_done:
            out.append("Interrupted: not done: " + ", ".join(self.not_done) + ".")
        if self.still_held:
            out.append("Still held (largest):")
            for r in self.still_held:
                out.append(f"  {_b(r.nbytes):>11}  {r.dtype}{list(r.shape)}  {', '.join(r.names) or '(no name: held elsewhere)'}")
        if self.note:
            out.append(self.note)
        return out


def _holds_array(value: Any) -> bool:
    return bool(names_by_array({"v": value}, seconds=0.5).names)


def _clear_history(shell: Any) -> tuple[int, list[str]]:
    """Drop Out/_N/_ references to values that hold jax arrays. ``(count, names)``."""
    ns = _user_namespace(shell)
    # displayhook pushes _, __, ___ and _N into user_ns_hidden as well as user_ns.
    hidden = getattr(shell, "user_ns_hidden", None)
    hidden = hidden if isinstance(hidden, dict) else {}
    dropped: list[str] = []
    out = ns.get("Out")
    if isinstance(out, dict):
        for n in [n for n, v in list(out.items()) if _holds_array(v)]:
            del out[n]
            dropped.append(f"Out[{n}]")
            ns.pop(f"_{n}", None)
            hidden.pop(f"_{n}", None)
    # The previous cell's ExecutionResult keeps its value until this cell ends.
    last = getattr(shell, "last_execution_result", None)
    if last is not None and _holds_array(getattr(last, "result", None)):
        last.result = None
    hook = getattr(shell, "displayhook", None)
    for name in _HISTORY_SINGLE:
        if name in ns and _holds_array(ns[name]):
            ns[name] = ""
            dropped.append(name)
        if name in hidden and _holds_array(hidden[name]):
            hidden[name] = ""
        if hook is not None and _holds_array(getattr(hook, name, None)):
            setattr(hook, name, "")
    return len(dropped), dropped


def _history_step(shell: Any) -> str:
    count, names = _clear_history(shell)
    shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
    return f"output history: dropped {count} reference{'s' if count != 1 else ''} to arrays" + (f" ({shown})" if names else "")


def _caches_step() -> str:
    ran = allocator_shim.clear_caches()
    return "compiled-program caches: jax.clear_caches()" if ran else "compiled-program caches: JAX is not imported, nothing to clear"


def _gc_step() -> str:
    # The last error's traceback keeps its frames, and their arrays, alive (jax#14934).
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if hasattr(sys, name):
            try:
                delattr(sys, name)
            except AttributeError:
                pass
    found = _gc.collect()
    return f"garbage: the last error's traceback released; gc.collect() found {found} objects"


def free(history: bool = True, caches: bool = True, gc: bool = True, shell: Any = None) -> FreeReport:
    """Release what can be released safely: output-history references to arrays, compiled
    program caches (``jax.clear_caches()``), and garbage (with the last error's frames).

    Never raises part-way: a step that fails is reported as failed and the others still run;
    an interrupt stops it, and the report says which steps were done and which were not.
    """
    shell = shell if shell is not None else (_state.get("shell") or _current_shell())
    t0 = time.perf_counter()
    before = memory_now()
    steps = [(name, run) for name, wanted, run in (
        ("output history", history, lambda: _history_step(shell)),
        ("compiled-program caches", caches, _caches_step),
        ("garbage", gc, _gc_step),
    ) if wanted]
    actions: list[str] = []
    failed: list[str] = []
    not_done: list[str] = []
    for i, (name, run) in enumerate(steps):
        try:
            actions.append(run())
        except KeyboardInterrupt:
            not_done = [n for n, _ in steps[i:]]
            break
        except Exception as err:
            failed.append(f"{name}: {type(err).__name__}: {err}")
    still: tuple[ArrayRecord, ...] = ()
    after = memory_now()
    note = ""
    if not not_done and allocator_shim.backend_started():
        try:
            still = census(shell, seconds=WALK_SECONDS_REPORT).records[:5]
        except KeyboardInterrupt:
            note = "The list of what is still held was interrupted."
    measure = after.measure_words if after.measure == before.measure else "mixed measures"
    note = (note + " " if note else "") + f"Took {time.perf_counter() - t0:.2f} s."
    return FreeReport(tuple(actions), measure, before.in_use, after.in_use, still, tuple(failed), tuple(not_done), note)


def magic_free(argv: list[str], shell: Any) -> FreeReport:
    """``%gpumem free [--history] [--caches] [--gc]``; no option means all three."""
    opts = _parse_options(argv, {"history": "flag", "caches": "flag", "gc": "flag"}, "free")
    if not opts:
        opts = {"history": True, "caches": True, "gc": True}
    return free(history="history" in opts, caches="caches" in opts, gc="gc" in opts, shell=shell)


# --- track: memory per block of code, and per cell -------------------------------------------


class Track:
    """Memory change and peak of a block: ``with jupyter_gpumem.track() as t: ...``.

    After the block:

    - ``measure``: "allocator" (JAX's bytes_in_use, summed over devices) or "live_arrays" (on
      CPU and allocators without statistics: bytes of live arrays, counted at the ends only)
    - ``before``, ``after``, ``delta``: bytes in use at the ends, and the change
    - ``peak_rise``: how far ``peak_bytes_in_use`` rose (None without statistics). XLA's peak
      cannot be reset, so a peak below an earlier one does not show here
    - ``sampled_max``: the largest bytes_in_use the sampler saw during the block (None if none)
    - ``peak``: the best known peak during the block, summed over devices: a device whose
      ``peak_bytes_in_use`` rose gives its new peak, any other the most it was seen holding
      (a lifetime peak from before the block is left out); ``pool_growth``: change in pool bytes
    - ``seconds``
    """

    def __init__(self, sample_interval: float | None = 0.05):
        self.sample_interval = sample_interval
        self.measure = "live_arrays"
        self.before = self.after = self.delta = 0
        self.peak: int | None = None
        self.peak_rise: int | None = None
        self.sampled_max: int | None = None
        self.pool_growth: int | None = None
        self.seconds = 0.0
        self._start: MemoryNow | None = None
        self._sub: Any = None
        self._samples: list[int] = []
        self._device_max: dict[int, int] = {}
        self._t0 = 0.0

    def start(self) -> "Track":
        self._start = memory_now()
        self._t0 = time.perf_counter()
        if self._start.measure == "allocator" and self.sample_interval:
            from .sampler import get_sampler

            def on_sample(sample: Sample) -> None:
                if not isinstance(sample.jax, NotAvailable):
                    readings = _with_stats(sample.jax)
                    total = _sum(r.stats.bytes_in_use for r in readings)
                    if total is not None:
                        self._samples.append(total)
                    for r in readings:
                        if r.stats.bytes_in_use is not None:
                            seen = self._device_max.get(r.jax_id, 0)
                            self._device_max[r.jax_id] = max(seen, r.stats.bytes_in_use)

            self._sub = get_sampler().subscribe(on_sample, interval=self.sample_interval)
        return self

    def stop(self) -> "Track":
        if self._sub is not None:
            self._sub.close()
            self._sub = None
        end = memory_now()
        start = self._start or end
        self.seconds = time.perf_counter() - self._t0
        self.measure = end.measure
        self.before = start.in_use if start.measure == end.measure else 0
        self.after = end.in_use
        self.delta = self.after - self.before
        self.sampled_max = max(self._samples) if self._samples else None
        if end.measure == "allocator":
            if start.peak is not None and end.peak is not None:
                self.peak_rise = max(0, end.peak - start.peak)
                known = [self.before, self.after] + ([self.sampled_max] if self.sampled_max is not None else [])
                self.peak = max(known + [self._peak_by_device(start, end)])
            if start.pool is not None and end.pool is not None:
                self.pool_growth = end.pool - start.pool
        else:
            self.peak = max(self.before, self.after)
        return self

    def _peak_by_device(self, start: MemoryNow, end: MemoryNow) -> int:
        """Sum over devices of each one's best known peak during the block."""
        before = {jax_id: (in_use, peak) for jax_id, in_use, peak in start.devices}
        total = 0
        for jax_id, in_use, peak in end.devices:
            in_use_0, peak_0 = before.get(jax_id, (None, None))
            if peak is not None and peak_0 is not None and peak > peak_0:
                total += peak
            else:
                total += max(v for v in (in_use_0, in_use, self._device_max.get(jax_id), 0) if v is not None)
        return total

    def __enter__(self) -> "Track":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def line(self, label: str = "") -> str:
        """One quiet line: change, peak (rise of peak_bytes_in_use and sampled max), pool growth."""
        head = f"gpumem: {label}: " if label else "gpumem: "
        if self.measure == "allocator":
            parts = [f"in use {_signed(self.delta)} (now {_b(self.after)})"]
            parts.append(f"peak_bytes_in_use {_signed(self.peak_rise) if self.peak_rise is not None else 'n/a'}")
            parts.append(f"sampled max {_b(self.sampled_max)}")
            parts.append(f"pool {_signed(self.pool_growth) if self.pool_growth is not None else 'n/a'}")
            return head + "; ".join(parts)
        return (head + f"live arrays {_signed(self.delta)} (now {_b(self.after)}); no allocator statistics here "
                "(CPU), so peak and pool growth are not measured")

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("measure", "before", "after", "delta", "peak", "peak_rise",
                                               "sampled_max", "pool_growth", "seconds")}

    def __repr__(self) -> str:
        return f"<Track {self.line()}>"


def _signed(n: int | None) -> str:
    if n is None:
        return "n/a"
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def track(sample_interval: float | None = 0.05) -> Track:
    """A context manager measuring a block of code: ``with track() as t: ...; t.delta, t.peak``."""
    return Track(sample_interval)


# --- the OOM report --------------------------------------------------------------------------


def _host_memory_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _process_label(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "process"
    if "ipykernel" in cmd or "jupyter-kernel" in cmd:
        return "Jupyter kernel"
    first = cmd.split(" ", 1)[0]
    return os.path.basename(first) or "process"


@dataclass(frozen=True)
class DeviceState:
    """One device at the failure, for the report."""

    label: str
    in_use: int | None = None
    pool: int | None = None
    limit: int | None = None
    largest_free: int | None = None
    fragmentation: float | None = None
    headroom: int | None = None
    note: str = ""


@dataclass(frozen=True)
class OomReport(_TextReport):
    """The report shown when a cell fails for want of memory. Text in a terminal, HTML in a
    notebook, ``to_json()`` for tools."""

    _repr_pretty_ = _pretty_as_text

    error: OomError
    settings: tuple[tuple[str, str, str], ...]
    devices: tuple[DeviceState, ...]
    others: tuple[OtherProcess, ...]
    others_note: str
    arrays: tuple[ArrayRecord, ...]
    arrays_note: str
    readings: OomReadings
    fixes: tuple[Fix, ...]

    def requested_line(self) -> str:
        e = self.error
        if e.requested_bytes is None:
            return "Requested: the error does not say how much."
        approx = "" if e.exact else " (as printed, rounded)"
        return f"Requested: {_b(e.requested_bytes)} ({e.requested_bytes:,} bytes){approx}."

    def lines(self) -> list[str]:
        out = ["JAX ran out of memory (jupyter-gpumem doctor)" + (" [synthetic readings]" if self.readings.synthetic else ""),
               self.requested_line(), "", "Allocator settings in effect:"]
        out += [f"  {name:<15} {shown:<16} ({source})" for name, shown, source in self.settings]
        out += ["", "Device state at failure:"]
        for d in self.devices:
            if d.note:
                out.append(f"  {d.label}: {d.note}")
                continue
            frag = "n/a" if d.fragmentation is None else f"{d.fragmentation:.0%}"
            out.append(f"  {d.label}: in use {_b(d.in_use)}, pool {_b(d.pool)}, limit {_b(d.limit)}, "
                       f"largest free block {_b(d.largest_free)}, fragmentation {frag}, headroom {_b(d.headroom)}")
        out += ["", "Other processes on the device:"]
        if self.others:
            out += [f"  pid {p.pid} ({p.label}): {_b(p.used_bytes)}" for p in self.others]
        else:
            out.append(f"  {self.others_note or 'none'}")
        out += ["", "Largest live arrays:"]
        if self.arrays:
            out += [f"  {_b(r.nbytes):>11}  {r.dtype}{list(r.shape)}  held by {', '.join(r.names) or '(no name: held elsewhere)'}"
                    + (f"  (cell {r.cell})" if r.cell is not None else "") for r in self.arrays]
            if self.arrays_note:
                out.append(f"  {self.arrays_note}")
        else:
            out.append(f"  {self.arrays_note or 'none'}")
        out += ["", "What to do, best first:"]
        if not self.fixes:
            out.append("  No fix stands out from these numbers: make the program need less (smaller batch, "
                       "lower precision), or run `%gpumem arrays` to see what holds memory.")
        for i, f in enumerate(self.fixes, 1):
            out.append(f"  {i}. {f.title}.")
            out.append(f"     {_action_label(f.action)}: {f.action}")
            out += [f"     Or:  {a}" for a in f.extra_actions]
            out.append(f"     Why: {f.why}")
        out.append("(The error above is unchanged and still stops the run.)")
        return out

    def _repr_html_(self) -> str:
        settings = "".join(f"<tr><td>{_esc(n)}</td><td><b>{_esc(s)}</b></td><td>{_esc(src)}</td></tr>" for n, s, src in self.settings)
        devs = []
        for d in self.devices:
            if d.note:
                devs.append(f"<tr><td>{_esc(d.label)}</td><td colspan='6'>{_esc(d.note)}</td></tr>")
            else:
                frag = "n/a" if d.fragmentation is None else f"{d.fragmentation:.0%}"
                cells = [d.label, _b(d.in_use), _b(d.pool), _b(d.limit), _b(d.largest_free), frag, _b(d.headroom)]
                devs.append("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
        others = ("".join(f"<li>pid {p.pid} ({_esc(p.label)}): {_esc(_b(p.used_bytes))}</li>" for p in self.others)
                  or f"<li>{_esc(self.others_note or 'none')}</li>")
        arrays = ("".join(f"<tr><td>{_esc(_b(r.nbytes))}</td><td>{_esc(r.dtype)}{_esc(list(r.shape))}</td>"
                          f"<td>{_esc(', '.join(r.names) or '(no name)')}</td><td>{'' if r.cell is None else r.cell}</td></tr>"
                          for r in self.arrays)
                  + (f"<tr><td colspan='4'>{_esc(self.arrays_note)}</td></tr>" if self.arrays and self.arrays_note else "")
                  or f"<tr><td colspan='4'>{_esc(self.arrays_note or 'none')}</td></tr>")
        fixes = "".join(
            f"<li><b>{_esc(f.title)}</b><br>{_action_label(f.action)}: <code>{_esc(f.action)}</code>"
            + "".join(f"<br>Or: <code>{_esc(a)}</code>" for a in f.extra_actions)
            + f"<br><small>{_esc(f.why)}</small></li>"
            for f in self.fixes
        ) or "<li>No fix stands out from these numbers: make the program need less, or run <code>%gpumem arrays</code>.</li>"
        synthetic = " <i>(synthetic readings)</i>" if self.readings.synthetic else ""
        return (
            "<div class='jupyter-gpumem-oom' style='border-left:4px solid var(--jp-error-color1, #d32f2f);padding-left:8px'>"
            f"<p><b>JAX ran out of memory</b>{synthetic}. {_esc(self.requested_line())}</p>"
            f"<p>Allocator settings in effect:</p><table>{settings}</table>"
            "<p>Device state at failure:</p><table><thead><tr><th>device</th><th>in use</th><th>pool</th><th>limit</th>"
            f"<th>largest free block</th><th>fragmentation</th><th>headroom</th></tr></thead><tbody>{''.join(devs)}</tbody></table>"
            f"<p>Other processes on the device:</p><ul>{others}</ul>"
            "<p>Largest live arrays:</p><table><thead><tr><th>bytes</th><th>array</th><th>held by</th><th>cell</th></tr></thead>"
            f"<tbody>{arrays}</tbody></table>"
            f"<p>What to do, best first:</p><ol>{fixes}</ol>"
            "<p><small>The error above is unchanged and still stops the run.</small></p></div>"
        )

    def to_json(self) -> dict:
        return {
            "error": self.error.to_json(),
            "settings": [list(s) for s in self.settings],
            "devices": [d.__dict__ for d in self.devices],
            "others": [p.__dict__ for p in self.others],
            "arrays": [r.to_json() for r in self.arrays],
            "fixes": [f.to_json() for f in self.fixes],
            "synthetic": self.readings.synthetic,
        }


def _failing_device(error: OomError, jax_readings: tuple) -> Any:
    if not jax_readings:
        return None
    if error.ordinal is not None and 0 <= error.ordinal < len(jax_readings):
        return jax_readings[error.ordinal]
    with_stats = [r for r in jax_readings if isinstance(r.stats, AllocatorStats)]
    if with_stats:
        def room(r: Any) -> int:
            s = r.stats
            return max(s.largest_free_block_bytes or 0, headroom(s) or 0)
        return min(with_stats, key=room)
    return jax_readings[0]


def _device_state(r: Any) -> DeviceState:
    label = f"{r.platform} {r.jax_id}" + (f" ({r.kind})" if r.kind else "")
    s = r.stats
    if not isinstance(s, AllocatorStats):
        return DeviceState(label, note=f"{s.reason}; live-array bytes are used instead")
    return DeviceState(label, s.bytes_in_use, s.pool_bytes, s.bytes_limit, s.largest_free_block_bytes,
                       fragmentation(s), headroom(s))


def oom_report(
    exc: BaseException | OomError,
    shell: Any = None,
    sample: Sample | None = None,
    live: list[ArrayRecord] | None = None,
    synthetic: bool = False,
) -> OomReport | None:
    """The OOM report for ``exc`` (an exception or a recognised ``OomError``), read now; None
    when ``exc`` is not an out-of-memory error.

    ``sample`` and ``live`` replace the live device reading and live arrays (a trace replayed);
    ``synthetic`` marks the report as drawn from made-up readings.
    """
    error = exc if isinstance(exc, OomError) else oom.recognise(exc)
    if error is None:
        return None
    if sample is None:
        from .sampler import get_sampler

        sample = get_sampler().sample_once()
    jax_readings = () if isinstance(sample.jax, NotAvailable) else tuple(sample.jax)
    failing = _failing_device(error, jax_readings)
    stats = failing.stats if failing is not None and isinstance(failing.stats, AllocatorStats) else None
    platform = failing.platform if failing is not None else ("cpu" if error.form == "cpu" else "gpu")

    nvml_dev = None
    if failing is not None and failing.nvml_index is not None:
        dev = sample.device(failing.nvml_index)
        nvml_dev = dev if isinstance(dev, DeviceReading) else None
    others: tuple[OtherProcess, ...] = ()
    others_note = ""
    own = None
    if nvml_dev is not None:
        if isinstance(nvml_dev.processes, NotAvailable):
            others_note = nvml_dev.processes.reason
        else:
            others = tuple(OtherProcess(p.pid, p.used_bytes if isinstance(p.used_bytes, int) else None, _process_label(p.pid))
                           for p in nvml_dev.processes if p.pid != sample.pid)
            own_bytes = nvml_dev.process_bytes(sample.pid)
            own = own_bytes if isinstance(own_bytes, int) else None
    elif isinstance(sample.devices, NotAvailable):
        others_note = f"NVML: {sample.devices.reason}"
    else:
        others_note = "no NVIDIA device matches the failing JAX device" if platform == "gpu" else "the CPU is not a GPU: NVML does not list its users"

    settings = tuple((s.name, s.shown, s.source) for s in allocator_shim.settings_in_effect())
    values = {s.name: s.value for s in allocator_shim.settings_in_effect()}

    started = live is not None or allocator_shim.backend_started()
    walk_note = ""
    if live is not None:
        records = list(live)
    elif started:
        found = census(shell, seconds=WALK_SECONDS_REPORT)
        records, walk_note = list(found.records), found.walk.note()
    else:
        records = []
    device_id = failing.jax_id if failing is not None else None
    on_device = [r for r in records if device_id is None or device_id in r.bytes_per_device]
    live_bytes = sum(r.bytes_per_device.get(device_id, 0) if device_id is not None else r.device_bytes for r in on_device)
    history = sum(r.device_bytes for r in on_device if r.history_only)
    arrays_note = walk_note if records else ("no live JAX arrays" if started else _not_started_note())

    total = nvml_dev.total_bytes if nvml_dev is not None else (_host_memory_bytes() if platform == "cpu" else None)
    readings = OomReadings(
        requested=error.requested_bytes,
        device_total=total,
        device_free=nvml_dev.free_bytes if nvml_dev is not None else None,
        bytes_in_use=stats.bytes_in_use if stats else None,
        pool_bytes=stats.pool_bytes if stats else None,
        bytes_limit=stats.bytes_limit if stats else None,
        largest_free_block=stats.largest_free_block_bytes if stats else None,
        own_process_bytes=own,
        others=others,
        preallocate=values.get("preallocate") if isinstance(values.get("preallocate"), bool) else None,
        fraction=values.get("fraction") if isinstance(values.get("fraction"), float) else None,
        allocator=str(values.get("allocator")),
        remat=values.get("remat") if isinstance(values.get("remat"), bool) else None,
        live_bytes=live_bytes if started else None,
        history_bytes=history,
        platform=platform,
        synthetic=synthetic,
    )
    devices = tuple(_device_state(r) for r in jax_readings) or (DeviceState("JAX", note="no JAX device readings: " + getattr(sample.jax, "reason", "")),)
    return OomReport(error, settings, devices, others, others_note, tuple(records[:5]), arrays_note, readings,
                     tuple(oom.advise(readings)))


# --- the cell hooks --------------------------------------------------------------------------


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


def _on_error(error: BaseException | None, shell: Any) -> None:
    if error is None:
        return
    found = oom.recognise(error)
    if found is None:
        return
    try:
        from .sampler import get_sampler

        get_sampler().add_event("oom", requested_bytes=found.requested_bytes, form=found.form)
    except Exception:
        pass
    if _state["doctor"]:
        report = oom_report(found, shell)
        if report is not None:
            _display(report)


def after_cell(result: Any, shell: Any, tracker: "Track | None") -> None:
    """The doctor's work after a cell (called by ``doctor_hooks``, once the cell's arrays are
    noted): the per-cell line and the OOM report."""
    count = getattr(result, "execution_count", None)
    if tracker is not None and _state["cells"]:
        tracker.stop()
        print(tracker.line(f"cell {count}" if count is not None else "cell"))
    _on_error(getattr(result, "error_in_exec", None), shell)


def _switch(argv: list[str], what: str, key: str, shell: Any, on_text: str) -> str:
    if not argv:
        return f"gpumem: {what} is {'on' if _state[key] else 'off'}"
    if len(argv) != 1 or argv[0].lower() not in ("on", "off"):
        raise ValueError(f"{what} takes on or off, got {' '.join(argv)!r}")
    _state[key] = argv[0].lower() == "on"
    if shell is not None:
        install(shell)
    return f"gpumem: {what} {'on: ' + on_text if _state[key] else 'off'}"


class _Line(str):
    """A one-line answer shown as plain text."""

    _repr_pretty_ = _pretty_as_text


def magic_doctor(argv: list[str], shell: Any) -> _Line:
    """``%gpumem doctor on|off``: the OOM report after a failing cell (on by default)."""
    return _Line(_switch(argv, "doctor", "doctor", shell, "an out-of-memory error in a cell is followed by a report"))


def magic_cells(argv: list[str], shell: Any) -> _Line:
    """``%gpumem cells on|off``: one line of memory use after each cell."""
    return _Line(_switch(argv, "cells", "cells", shell, "one line of memory use after each cell"))


# --- estimate --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EstimateReport(_PreReport):
    """A compiled call's memory against what is free now."""

    _html_class = "jupyter-gpumem-estimate"
    _repr_pretty_ = _pretty_as_text

    expression: str
    memory: allocator_shim.CompiledMemory
    needed: int  # bytes the call allocates beyond its arguments: outputs + temporaries - aliased
    verdict: str  # "fits", "does not fit", "fits only after defragmenting", "unknown"
    measure: str
    largest_block: int | None
    total_free: int | None

    def lines(self) -> list[str]:
        m = self.memory
        out = [f"{self.expression}: {self.verdict}" + ("" if m.jitted else " (callee not jitted: estimated as jax.jit of it)"),
               f"  arguments {_b(m.argument_bytes)}, outputs {_b(m.output_bytes)}, temporaries {_b(m.temp_bytes)}, "
               f"aliased {_b(m.alias_bytes)}, code {_b(m.code_bytes)}" + (f", XLA peak {_b(m.peak_bytes)}" if m.peak_bytes else ""),
               f"  needs {_b(self.needed)} beyond its arguments; largest free block {_b(self.largest_block)}, "
               f"free in total {_b(self.total_free)} ({self.measure})"]
        return out



def _verdict(needed: int, largest_piece: int, largest_block: int | None, total_free: int | None) -> str:
    if largest_block is None or total_free is None:
        return "unknown"
    if needed <= total_free and largest_piece <= largest_block:
        return "fits"
    if needed <= total_free:
        return "fits only after defragmenting"
    return "does not fit"


def estimate(callee: Any, *args: Any, _expression: str = "", **kwargs: Any) -> EstimateReport:
    """Compile ``callee(*args, **kwargs)`` without running it and judge whether it fits now."""
    memory = allocator_shim.compile_memory(callee, args, kwargs)
    needed = max(0, memory.output_bytes + memory.temp_bytes - memory.alias_bytes)
    largest_piece = max(memory.output_bytes, memory.temp_bytes)
    stats = _stats_list(_jax_readings())
    if stats and stats[0].bytes_limit is not None:
        s = stats[0]
        room = headroom(s) or 0
        largest_block = max(s.largest_free_block_bytes or 0, room)
        total_free = max(0, (s.pool_bytes or s.bytes_in_use or 0) - (s.bytes_in_use or 0)) + room
        measure = "allocator statistics of device 0"
    else:
        largest_block = total_free = _available_host_bytes()
        measure = "host memory available (CPU: no allocator statistics)"
    verdict = _verdict(needed, largest_piece, largest_block, total_free)
    return EstimateReport(_expression or getattr(callee, "__name__", "call"), memory, needed, verdict, measure,
                          largest_block, total_free)


def _available_host_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def magic_estimate(argv: list[str], shell: Any) -> EstimateReport:
    """``%gpumem estimate f(x, y)``: the call is compiled for its arguments, never run."""
    if len(argv) != 1 or not argv[0].strip():
        raise ValueError("estimate takes one call expression, e.g. %gpumem estimate train_step(params, batch)")
    text = argv[0].strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"estimate: {text!r} is not a Python expression ({err.msg})") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ValueError(f"estimate takes a call such as train_step(params, batch), got {text!r}")
    ns = _user_namespace(shell)

    def value(node: ast.AST) -> Any:
        code = compile(ast.Expression(node), "<gpumem estimate>", "eval")
        try:
            return eval(code, ns)  # the user's own expression, in the user's namespace
        except Exception as err:
            raise ValueError(f"estimate: evaluating {ast.unparse(node)!r} failed: {type(err).__name__}: {err}") from None

    callee = value(call.func)
    if not callable(callee):
        raise ValueError(f"estimate: {ast.unparse(call.func)!r} is not callable")
    args: list[Any] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            args.extend(value(a.value))
        else:
            args.append(value(a))
    kwargs: dict[str, Any] = {}
    for k in call.keywords:
        if k.arg is None:
            kwargs.update(value(k.value))
        else:
            kwargs[k.arg] = value(k.value)
    return estimate(callee, *args, _expression=text, **kwargs)


# --- defragment ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DefragSummary(_TextReport):
    """Before and after moving a pytree through the host."""

    _repr_pretty_ = _pretty_as_text

    arrays_moved: int
    bytes_moved: int
    before: tuple[DeviceState, ...]
    after: tuple[DeviceState, ...]
    other_names: tuple[str, ...]  # user-namespace names that referred to the moved arrays
    note: str

    def lines(self) -> list[str]:
        out = [f"defragment: moved {self.arrays_moved} arrays ({_b(self.bytes_moved)}) through the host."]
        for b, a in zip(self.before, self.after):
            if b.note:
                out.append(f"  {b.label}: {b.note}")
                continue
            fb = "n/a" if b.fragmentation is None else f"{b.fragmentation:.0%}"
            fa = "n/a" if a.fragmentation is None else f"{a.fragmentation:.0%}"
            out.append(f"  {b.label}: fragmentation {fb} -> {fa}; largest free block {_b(b.largest_free)} -> {_b(a.largest_free)}")
        if self.other_names:
            out.append("  Names that referred to the moved arrays now hold deleted arrays; rebind each that is "
                       "not the tree you passed (and rebound to the result): " + ", ".join(self.other_names))
        if self.note:
            out.append("  " + self.note)
        return out


def defragment(tree: Any, shell: Any = None) -> tuple[Any, DefragSummary]:
    """Move ``tree``'s arrays to the host, free their device buffers, and put them back, so
    the BFC allocator can place them together: ``params, summary = defragment(params)``.

    What it cannot do: memory held by arrays outside ``tree`` stays where it is, and frees
    nothing that other references keep. The old arrays are deleted: any other name that
    referred to them (listed in the summary) now holds a deleted array and must be rebound.
    It needs host memory for the whole tree. Regions of a pool grown with preallocation off
    never coalesce, so the largest free block cannot exceed a region.
    """
    if not allocator_shim.backend_started():
        raise ValueError("defragment: JAX's backend has not started, so nothing is on a device yet")
    keys = set(names_by_array({"tree": tree}).names)
    namespace = _user_namespace(shell)
    holders = names_by_array(namespace).names if namespace else {}
    other = sorted({n for k in keys for n in holders.get(k, ())})
    before = tuple(_device_state(r) for r in _jax_readings())
    new_tree, moved, nbytes = allocator_shim.host_round_trip(tree)
    after = tuple(_device_state(r) for r in _jax_readings())
    note = ""
    if not any(isinstance(r.stats, AllocatorStats) for r in _jax_readings()):
        note = "No allocator statistics here (CPU): fragmentation cannot be measured; the arrays were moved all the same."
    return new_tree, DefragSummary(moved, nbytes, before, after, tuple(other), note)
