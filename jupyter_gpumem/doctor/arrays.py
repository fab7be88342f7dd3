"""Which JAX arrays are alive, how big, made by which cell and line, and held by which names: ``%gpumem arrays``.

Sizes come from each array's sharding and abstract value; no buffer is read (see "Code that
runs on its own does no harm" in docs/architecture.md).
"""

from __future__ import annotations

import gc as _gc
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from jupyter_gpumem.core import sites
from jupyter_gpumem.core.layout import Layout, layout_words, per_device_summary
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor import arrays_map, mesh_arrays
from jupyter_gpumem.doctor.names import (
    WALK_SECONDS_COMMAND,
    NameWalk,
    current_shell,
    is_history_name,
    names_by_array,
    root_name,
    user_namespace,
)
from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME
from jupyter_gpumem.doctor.text import bytes_or_na, escape_html, pretty_as_text
from jupyter_gpumem.settings import apply as allocator_shim
from jupyter_gpumem.sources import array_survey, jax_arrays
from jupyter_gpumem.sources.jax_arrays import Footprint


@dataclass(slots=True)  # not frozen: %gpumem arrays builds tens of thousands, and frozen init is slow
class ArrayRecord:
    """One live JAX array: its footprint, the names that hold it, and where it was made.

    ``footprint`` is shared by the arrays made alike (``jax_arrays.Footprint``): its shape,
    dtype, ``bytes_per_device`` (a JAX device id to the device-memory bytes of its shards there),
    ``host_bytes`` (what it holds in a host memory kind, ``memory_kind`` says which, taking no
    device memory) and ``layout``. ``names`` are the user-namespace expressions that reach it
    (``params['w']``, ``Out[3]``, ``_``). ``allocation`` is all its traceback says
    (``sites.Allocation``): ``site``, where it was allocated (``cell [3] line 2 in f``,
    ``model.py:40 in init``: the first frame outside JAX and installed packages), and ``cell``,
    the execution count of the cell whose statement was running (the outermost frame in a
    cell), where known. Sizes come from the sharding: no buffer is read.
    """

    footprint: Footprint
    names: tuple[str, ...] = ()
    allocation: sites.Allocation = sites.NO_ALLOCATION

    @classmethod
    def of(
        cls,
        shape: tuple,
        dtype: str,
        bytes_per_device: Mapping[int, int],
        *,
        names: tuple[str, ...] = (),
        cell: int | None = None,
        site: str = sites.NO_TRACEBACK,
        host_bytes: int = 0,
        memory_kind: str | None = None,
        layout: Layout | None = None,
    ) -> ArrayRecord:
        """A record made from its parts (the census makes its records from footprints)."""
        fp = Footprint(dict(bytes_per_device), host_bytes, memory_kind, tuple(shape), dtype, layout or Layout())
        return cls(fp, tuple(names), sites.Allocation(site, (site,), cell))

    @property
    def shape(self) -> tuple:
        return self.footprint.shape

    @property
    def dtype(self) -> str:
        return self.footprint.dtype

    @property
    def bytes_per_device(self) -> Mapping[int, int]:
        return self.footprint.device_bytes

    @property
    def host_bytes(self) -> int:
        return self.footprint.host_bytes

    @property
    def memory_kind(self) -> str | None:
        return self.footprint.memory_kind

    @property
    def layout(self) -> Layout:
        return self.footprint.layout

    @property
    def cell(self) -> int | None:
        return self.allocation.cell

    @property
    def site(self) -> str:
        return self.allocation.site

    @property
    def device_bytes(self) -> int:
        return self.footprint.on_device

    @property
    def nbytes(self) -> int:
        """Every byte it holds: device memory and host memory."""
        return self.footprint.on_device + self.footprint.host_bytes

    @property
    def history_only(self) -> bool:
        """Held by name only through output history (Out, _, _N)."""
        return bool(self.names) and all(is_history_name(n) for n in self.names)

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
            "site": self.site,
            "layout": None
            if self.layout is None
            else {
                "words": layout_words(self.layout),
                "devices": self.layout.devices,
                "copies": self.layout.copies,
                "sharding_saves": sum(mesh_arrays.saving_of(self).values()),
            },
        }


@dataclass(frozen=True)
class ArrayCensus:
    """The live arrays (largest first) and what the walk of names could not see."""

    records: tuple[ArrayRecord, ...]
    walk: NameWalk
    seconds: float
    # Arrays whose computation failed (an OOM surfacing at block_until_ready()): never
    # allocated, so not in ``records``; sized from shape and dtype only.
    failed: tuple[ArrayRecord, ...] = ()
    counted: tuple[tuple[ArrayRecord, int], ...] = ()  # alike(records), made with them


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
    walk = names_by_array(user_namespace(shell), seconds=seconds)
    found = array_survey.survey(jax_arrays.live_arrays_newest_first())
    views: set[int] = set()
    for a, fp, _ in found.made:
        if len(fp.device_bytes) > 1:
            views.update(jax_arrays.shard_view_ids(a))
    names = walk.names
    views |= array_survey.cpu_alias_ids(found.made, names)
    made_at = sites.allocation_labeller(sites.cell_numbers(shell if shell is not None else current_shell()))
    records, counted = _ranked(found.made, views, names, made_at)
    never_made = tuple(ArrayRecord(fp, tuple(names.get(id(a), ())), made_at(a.traceback)) for a, fp in found.failed)
    return ArrayCensus(records, walk, time.perf_counter() - t0, never_made, counted)


def _ranked(
    made: list, left_out: set[int], names: Mapping[int, list], made_at: Callable[[Any], sites.Allocation]
) -> tuple[tuple[ArrayRecord, ...], tuple[tuple[ArrayRecord, int], ...]]:
    """The records of ``made`` (newest first) but ``left_out``, largest first, arrays of one rank
    kept newest first (what a stable sort by ``_rank_of`` gives), and ``alike`` of them, in one pass:
    records are put in one bucket per rank, found once per footprint, and counted there per
    footprint and allocation (at 50,000 arrays a sort by a key and a second pass cost tens of
    milliseconds)."""
    buckets: dict[tuple, tuple[list, dict]] = {}  # rank -> (records, kinds by footprint and allocation)
    of_footprint: dict[int, tuple[list, dict]] = {}
    no_names = ()
    for a, fp, _ in made:
        if id(a) in left_out:
            continue
        record = ArrayRecord(fp, tuple(names.get(id(a), no_names)), made_at(a.traceback))
        bucket = of_footprint.get(id(fp))
        if bucket is None:
            bucket = of_footprint[id(fp)] = buckets.setdefault(_rank_of(fp), ([], {}))
        bucket[0].append(record)
        key = (id(fp), id(record.allocation))
        kind = bucket[1].get(key)
        if kind is None:
            bucket[1][key] = [record, 1]
        else:
            kind[1] += 1
    order = sorted(buckets)
    records = tuple(r for rank in order for r in buckets[rank][0])
    counted = tuple((r, n) for rank in order for r, n in buckets[rank][1].values())
    return records, counted


def _rank_of(fp: Footprint) -> tuple:
    """Largest first, then by shape."""
    return (-(fp.on_device + fp.host_bytes), fp.shape)


def live_arrays(shell: Any = None) -> list[ArrayRecord]:
    """The live JAX arrays, largest first (``census(shell).records``)."""
    return list(census(shell).records)


def _group(records: list[ArrayRecord], by: str) -> list[tuple[str, int, int, int | None, str]]:
    """``(key, count, bytes, first cell, the line that allocated most of its bytes)`` per group,
    largest first."""
    groups: dict[str, list[ArrayRecord]] = {}
    # A line re-run in later cells is one site, named as its newest run names it.
    newest = sites.newest_labels(r.allocation for r in records if r.allocation is not None) if by == "line" else {}
    for r in records:
        if by == "shape":
            keys = [f"{r.dtype}{list(r.shape)}"]
        elif by == "dtype":
            keys = [r.dtype]
        elif by == "cell":
            keys = [f"cell {r.cell}" if r.cell is not None else "no cell (made outside the cells)"]
        elif by == "line":
            keys = [newest.get(r.allocation.line, r.site) if r.allocation is not None else r.site]
        else:  # name: the root name of its first holder, or unnamed
            keys = [root_name(r.names[0])] if r.names else [arrays_map.NO_NAME]
        for k in keys:
            groups.setdefault(k, []).append(r)
    out = [
        (
            k,
            len(v),
            sum(r.device_bytes for r in v),
            min((r.cell for r in v if r.cell is not None), default=None),
            _main_site(v),
        )
        for k, v in groups.items()
    ]
    return sorted(out, key=lambda g: (-g[2], g[0]))


def _main_site(records: list[ArrayRecord]) -> str:
    """The allocation site holding the most bytes among ``records``, and how many others there are."""
    by_site: dict[str, int] = {}
    for r in records:
        by_site[r.site] = by_site.get(r.site, 0) + r.device_bytes
    top = max(sorted(by_site), key=lambda site: by_site[site])
    return top + (f" (+{len(by_site) - 1} more)" if len(by_site) > 1 else "")


def alike(records: Iterable[ArrayRecord]) -> tuple[tuple[ArrayRecord, int], ...]:
    """One record per footprint and allocation, with how many records share both: arrays made
    alike (one line, one shape, one sharding) differ only in their names, so sums and checks
    over them are made once per kind (at 50,000 arrays each pass over all of them costs tens of
    milliseconds)."""
    kinds: dict[tuple[int, int], list] = {}
    for r in records:
        key = (id(r.footprint), id(r.allocation))
        kind = kinds.get(key)
        if kind is None:
            kinds[key] = [r, 1]
        else:
            kind[1] += 1
    return tuple((r, n) for r, n in kinds.values())


def growth_of(
    records: Iterable[ArrayRecord], counted: tuple[tuple[ArrayRecord, int], ...] | None = None
) -> list[sites.Growth]:
    """The lines whose live arrays come from two or more runs of one cell statement, largest
    first (``sites.growing``). ``counted``: ``alike(records)``, where the caller has it."""
    per: dict[int, list] = {}  # by allocation: records of one traceback share one object
    for r, n in alike(records) if counted is None else counted:
        made = per.get(id(r.allocation))
        if made is None:
            per[id(r.allocation)] = [r.allocation, n, n * r.device_bytes]
        else:
            made[1] += n
            made[2] += n * r.device_bytes
    return sites.growing(tuple(made) for made in per.values())


BY_CHOICES = ("shape", "dtype", "cell", "name", "line", "device")


@dataclass(frozen=True)
class ArraysReport:
    """What ``%gpumem arrays`` shows; ``records`` are all live arrays, largest first."""

    records: tuple[ArrayRecord, ...]
    top: int = 20
    by: str | None = None
    note: str = ""
    walk_note: str = ""  # what the walk of names could not see
    seconds: float | None = None  # how long the listing took
    failed: tuple[ArrayRecord, ...] = ()  # arrays whose computation failed: left out, hold nothing
    growth: tuple[sites.Growth, ...] = ()  # lines that keep arrays run after run (growth_of)
    counted: tuple[tuple[ArrayRecord, int], ...] | None = None  # alike(records), where known

    # The text and the HTML forms are both made for one display: each is worked out once (a
    # pass over 50,000 records costs tens of milliseconds), over arrays alike (``alike``).
    @cached_property
    def _counted(self) -> tuple[tuple[ArrayRecord, int], ...]:
        return alike(self.records) if self.counted is None else self.counted

    @cached_property
    def total_bytes(self) -> int:
        """Device-memory bytes of all live arrays."""
        return sum(r.device_bytes * n for r, n in self._counted)

    @cached_property
    def host_bytes(self) -> int:
        return sum(r.host_bytes * n for r, n in self._counted)

    @cached_property
    def _on_mesh(self) -> bool:
        return mesh_arrays.on_several_devices(r for r, _ in self._counted)

    def rows(self) -> list[tuple]:
        return list(self._rows)

    @cached_property
    def _rows(self) -> tuple[tuple, ...]:
        return tuple(self._make_rows())

    def _make_rows(self) -> list[tuple]:
        if self.by == "device":
            return mesh_arrays.device_rows(self.records, self.top)
        if self.by:
            groups = _group(list(self.records), self.by)[: self.top]
            if self.by == "line":
                return [(k, str(c), bytes_or_na(n), "" if cell is None else str(cell)) for k, c, n, cell, _ in groups]
            return [
                (k, str(c), bytes_or_na(n), "" if cell is None else str(cell), site) for k, c, n, cell, site in groups
            ]
        out = []
        mesh = self._on_mesh
        for r in self.records[: self.top]:
            per_dev = per_device_summary(r.bytes_per_device)
            if r.host_bytes:
                per_dev = f"host ({r.memory_kind}): {bytes_or_na(r.host_bytes)}"
            out.append(
                (
                    f"{r.dtype}{list(r.shape)}",
                    bytes_or_na(r.nbytes),
                    per_dev,
                    *((mesh_arrays.layout_cell(r),) if mesh else ()),
                    ", ".join(r.names) or "(no name)",
                    "" if r.cell is None else str(r.cell),
                    r.site,
                )
            )
        return out

    def headers(self) -> tuple[str, ...]:
        if self.by == "device":
            return mesh_arrays.DEVICE_HEADERS
        if self.by:
            return (self.by, "arrays", "bytes", "first cell") + (() if self.by == "line" else ("allocated at",))
        layout = ("layout",) if self._on_mesh else ()
        return ("array", "bytes", "per device", *layout, "held by", "cell", "allocated at")

    def summary(self) -> str:
        return self._summary

    @cached_property
    def _summary(self) -> str:
        if self.note:
            return self.note
        shown = min(self.top, len(self._rows) if self.by else len(self.records))
        what = f"grouped by {self.by}" if self.by else "largest first"
        host = f" and {bytes_or_na(self.host_bytes)} in host memory" if self.host_bytes else ""
        took = f" Listed in {self.seconds * 1e3:.0f} ms." if self.seconds is not None else ""
        where = mesh_arrays.memory_words(r for r, _ in self._counted)
        text = (
            f"{len(self.records)} live JAX arrays, {bytes_or_na(self.total_bytes)} {where}{host}; "
            f"{shown} shown, {what}.{took}"
        )
        mesh = mesh_arrays.replicated_sentence(self._counted)
        if self.by == "device":
            mesh += mesh_arrays.most_loaded_sentence(mesh_arrays.device_loads(self.records))
        notes = (" " + self.walk_note if self.walk_note else "") + self.growth_note() + self.failed_note()
        return text + mesh + notes

    def growth_note(self) -> str:
        """The lines that keep arrays run after run, the largest three; empty without any."""
        return " " + sites.growth_sentence(self.growth) if self.growth else ""

    def failed_note(self) -> str:
        """The arrays left out because their computation failed, named; empty without any."""
        if not self.failed:
            return ""
        shown = "; ".join(
            f"{r.dtype}{list(r.shape)} ({bytes_or_na(r.nbytes)} asked for)"
            + (f" held by {', '.join(r.names)}" if r.names else "")
            for r in self.failed[:5]
        )
        more = f"; and {len(self.failed) - 5} more" if len(self.failed) > 5 else ""
        n = len(self.failed)
        return (
            f" Left out: {n} {'array' if n == 1 else 'arrays'} whose computation failed, holding no "
            f"memory: {shown}{more}."
        )

    def __str__(self) -> str:
        lines = [self.summary()]
        rows = self._rows
        if rows:
            table = [self.headers(), *rows]
            widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
            for row in table:
                lines.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        return "\n".join(lines)

    _repr_pretty_ = pretty_as_text

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape_html(h)}</th>" for h in self.headers())
        body = "".join("<tr>" + "".join(f"<td>{escape_html(c)}</td>" for c in row) + "</tr>" for row in self._rows)
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>" if body else ""
        return f"<div class='jupyter-gpumem-arrays'><p>{escape_html(self.summary())}</p>{table}</div>"

    def to_json(self) -> dict:
        return {
            "records": [r.to_json() for r in self.records],
            "total_bytes": self.total_bytes,
            "host_bytes": self.host_bytes,
            "by": self.by,
            "walk_note": self.walk_note,
            "seconds": self.seconds,
            "growing": [{"site": g.site, "runs": g.runs, "arrays": g.arrays, "nbytes": g.nbytes} for g in self.growth],
        }


def not_started_note() -> str:
    return "JAX's backend has not started: there are no live arrays yet (listing them would start it)."


def _top(text: str) -> int:
    try:
        top = int(text)
    except ValueError:
        top = 0
    if top < 1:
        raise ValueError(f"--top takes a whole number of rows, 1 or more, got {text!r}")
    return top


ARRAYS_ARGS = Grammar(
    "%gpumem arrays",
    options=(
        Option("--top", "N", read=_top, default=20, help="rows to show"),
        Option("--by", choices=BY_CHOICES, help="group the rows"),
        Option("--map", help="draw live device memory by cell, line and name above the rows"),
    ),
)


@dataclass(frozen=True)
class ArraysMapped:
    """``%gpumem arrays --map``: the map of live device memory (``arrays_map``) above the report
    in words; where no array holds device memory, the words alone."""

    report: ArraysReport

    def figure(self) -> dict | None:
        """The map as plotly's JSON, or None where no array holds device memory."""
        nodes = arrays_map.map_nodes(self.report.records)
        if not nodes:
            return None
        root = nodes[0]
        where = mesh_arrays.memory_words(r for r, _ in self.report._counted)
        title = f"{bytes_or_na(root.nbytes)} {where} in {root.arrays:,} live arrays, by cell, line and name"
        return arrays_map.arrays_map(nodes, title)

    def __str__(self) -> str:
        return str(self.report)

    _repr_pretty_ = pretty_as_text

    def _ipython_display_(self) -> None:
        from IPython.display import display

        figure = self.figure()
        if figure is not None:
            said = "live device memory by cell, line and name (drawn with plotly); the report below says it in words"
            display({PLOTLY_MIME: figure, "text/plain": said}, raw=True)
        display({"text/plain": str(self.report), "text/html": self.report._repr_html_()}, raw=True)


def magic_arrays(argv: list[str], shell: Any) -> ArraysReport | ArraysMapped:
    """``%gpumem arrays [--top N] [--by shape|dtype|cell|name|line|device] [--map]``."""
    opts = ARRAYS_ARGS.parse(argv)
    report = _arrays_report(opts["top"], opts["by"], shell)
    return ArraysMapped(report) if opts["map"] else report


def _arrays_report(top: int, by: str | None, shell: Any) -> ArraysReport:
    if not allocator_shim.backend_started():
        return ArraysReport((), top, by, not_started_note())
    found = census(shell)
    return ArraysReport(
        found.records,
        top,
        by,
        walk_note=found.walk.note(),
        seconds=found.seconds,
        failed=found.failed,
        growth=tuple(growth_of(found.records, found.counted)),
        counted=found.counted,
    )
