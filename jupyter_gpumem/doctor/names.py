"""Which names in the user's namespace reach which JAX array? A total, time-boxed walk.

The walk never raises: an object that raises while being looked at is skipped and counted.
Mappings that are not in memory (shelve, h5py, zarr...) are not iterated, since iterating them
does I/O or builds arrays.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.doctor.session import SESSION
from jupyter_gpumem.sources import jax_arrays

HISTORY_SINGLE = ("_", "__", "___")


def root_name(name: str) -> str:
    """The namespace name a holder expression starts from: ``params`` for ``params[0]['w']`` or
    ``params.w``."""
    return name.split("[", 1)[0].split(".", 1)[0]


def is_history_name(name: str) -> bool:
    root = root_name(name)
    return root == "Out" or root in HISTORY_SINGLE or (root.startswith("_") and root[1:].isdigit())


_SKIP_TYPES = (str, bytes, bytearray, int, float, complex, bool, type(None), type, type(os), type(len), range)


# Mappings walked through their items: in-memory containers only. Any other Mapping may read a
# disk or a network when iterated (shelve, dbm, h5py, zarr) or build arrays as it does.
_MAPPING_MODULES = (
    "builtins",
    "collections",
    "types",
    "flax",
    "haiku",
    "equinox",
    "immutabledict",
    "frozendict",
    "ml_collections",
    "jax",
)


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
            parts.append(
                f"the walk of your variables stopped after {self.seconds:.1f} s, so some arrays "
                "show no name though a variable may hold them"
            )
        if self.skipped:
            parts.append(
                f"{self.skipped} object{'s' if self.skipped != 1 else ''} in your variables could not be "
                "read and were skipped"
            )
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
            if jax_arrays.is_jax_array(value):
                self.record(value, path)
                return
            if depth <= 0 or id(value) in self.seen:
                return
            self.seen.add(id(value))
            if type(value) in (list, tuple):
                items = list(value)
            else:
                items = None
                children = self._children(value)
        except Exception:
            self.found.skipped += 1
            return
        if items is not None:
            self._walk_items(items, path, depth)
            return
        for form, key, child in children:
            try:
                child_path = path + form.format(key)  # a key's repr is user code too
                leaf = jax_arrays.is_jax_array(child)  # and so is its isinstance (a __class__ property)
            except Exception:
                self.found.skipped += 1
                continue
            if leaf:  # the common leaf, without a call level
                self.record(child, child_path)
                if self.out_of_time():
                    return
                continue
            self.walk(child, child_path, depth - 1)
            if self.found.unfinished:
                return

    def _walk_items(self, items: list, path: str, depth: int) -> None:
        """A plain list's or tuple's items: their keys are whole numbers, so naming them runs no
        user code (the common case of thousands of arrays in one list, without a tuple per item).
        An array is recorded and the clock looked at here, without a call each (``record``,
        ``out_of_time``): at 50,000 arrays each call costs milliseconds."""
        is_array = jax_arrays.is_jax_array
        known = jax_arrays.concrete_array_types
        names = self.found.names
        for i, child in enumerate(items):
            try:
                leaf = type(child) in known or is_array(child)  # isinstance may run user code
            except Exception:
                self.found.skipped += 1
                continue
            if leaf:
                child_path = f"{path}[{i}]"
                paths = names.get(id(child))
                if paths is None:
                    names[id(child)] = [child_path]
                elif child_path not in paths:
                    paths.append(child_path)
                self.visits += 1
                if self.visits & 255 == 0 and time.perf_counter() > self.deadline:
                    self.found.unfinished = True
                    return
                continue
            self.walk(child, f"{path}[{i}]", depth - 1)
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


def user_namespace(shell: Any) -> dict:
    if shell is None:
        shell = SESSION.shell or current_shell()
    ns = getattr(shell, "user_ns", None)
    return ns if isinstance(ns, dict) else {}


def current_shell() -> Any:
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()


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
