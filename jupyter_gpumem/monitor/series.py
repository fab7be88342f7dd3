"""The monitor's data path: Samples turned into named series per device, bounded and decimated.

Pure: no plotly, no ipywidgets, no threads. ``widget.py`` draws what this module computes, so
every number on screen can be checked here against a hand-computed Sample.

Where a device's memory is, as stacked bands that add up to NVML's used + free:

- ``jax_in_use``        JAX arrays (``bytes_in_use``)
- ``pool_unused``       preallocated or pooled but unused (pool - in use)
- ``outside_jax``       this process outside JAX's allocator (process's NVML bytes - pool), less
                        PyTorch's caching allocator where that is read:
- ``torch_allocated``   PyTorch tensors (``allocated_bytes``), where torch has started CUDA
- ``torch_cached``      PyTorch's cache: reserved from CUDA, not in tensors (reserved - allocated)
- ``other_processes``   other processes (device used - this process)
- ``host_pids``         processes NVML lists by pids that are not processes here, when it cannot
                        tell which of them is this process (containers: NVML lists the host's
                        pids, ``attribution.py``); None when it can
- ``unattributed``      used bytes NVML cannot attribute to a process (MIG, memory per process
                        not reported); None when it can
- ``free``              free

Where JAX runs on the CPU, a view of its own (key ``CPU_KEY``) draws one band, the host memory
JAX's live arrays hold (``cpu_arrays``, from ``Sample.cpu_arrays``), beside any GPU views.
"""

from __future__ import annotations

import math
import os
import sys
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from jupyter_gpumem.core.attribution import BY_ELIMINATION, CANNOT_TELL, attribute_in_sample
from jupyter_gpumem.core.metrics import fragmentation, headroom, held_bytes, outside_allocator_bytes, unused_pool_bytes
from jupyter_gpumem.core.readings import (
    NOT_STARTED,
    AllocatorStats,
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    Event,
    NotAvailable,
    Sample,
    TorchDeviceReading,
)

__all__ = [
    "SeriesSpec",
    "SERIES",
    "SERIES_NAMES",
    "BANDS",
    "series_values",
    "row_for",
    "device_keys",
    "view_keys",
    "jax_view",
    "in_view_order",
    "view_name",
    "CPU_KEY",
    "nothing_to_show",
    "notes_for",
    "decimate_rows",
    "DeviceSeries",
    "Chunk",
    "cell_markers",
    "csv_rows",
    "MAX_POINTS",
]

# No trace draws more than this many points (the "about 2,000").
MAX_POINTS = 2000


@dataclass(frozen=True)
class SeriesSpec:
    name: str
    label: str
    kind: str  # "band" (stacked), "line", "bfc", "pool"
    unit: str  # "bytes" or "fraction"


SERIES: tuple[SeriesSpec, ...] = (
    SeriesSpec("jax_in_use", "JAX arrays (in use)", "band", "bytes"),
    SeriesSpec("pool_unused", "JAX pool, unused", "band", "bytes"),
    SeriesSpec("outside_jax", "this process, outside JAX", "band", "bytes"),
    SeriesSpec("torch_allocated", "PyTorch tensors (allocated)", "band", "bytes"),
    SeriesSpec("torch_cached", "PyTorch cache (reserved, unused)", "band", "bytes"),
    SeriesSpec("other_processes", "other processes", "band", "bytes"),
    SeriesSpec("host_pids", "host pids", "band", "bytes"),
    SeriesSpec("unattributed", "used, not attributable", "band", "bytes"),
    SeriesSpec("free", "free", "band", "bytes"),
    SeriesSpec("bytes_limit", "bytes_limit", "line", "bytes"),
    SeriesSpec("peak_in_use", "peak in use", "line", "bytes"),
    SeriesSpec("total", "total", "line", "bytes"),
    SeriesSpec("fragmentation", "fragmentation", "bfc", "fraction"),
    SeriesSpec("largest_free_block", "largest free block", "bfc", "bytes"),
    SeriesSpec("headroom", "headroom (limit - pool)", "bfc", "bytes"),
    SeriesSpec("pool_reserved", "CUDA pool reserved", "pool", "bytes"),
    SeriesSpec("pool_used", "CUDA pool used", "pool", "bytes"),
    SeriesSpec("cpu_arrays", "JAX live arrays (CPU)", "band", "bytes"),
)
SERIES_NAMES: tuple[str, ...] = tuple(s.name for s in SERIES)
BANDS: tuple[str, ...] = tuple(s.name for s in SERIES if s.kind == "band")
_INDEX = {name: i for i, name in enumerate(SERIES_NAMES)}

Values = tuple  # one float-or-None per SERIES_NAMES entry


# --- one sample -> numbers -------------------------------------------------------------------


def device_keys(sample: Sample) -> list[int]:
    """The devices a sample has something to draw for: readable NVML devices, by index.

    Without NVML, JAX GPU devices with allocator stats are keyed by their JAX id.
    """
    keys: list[int] = []
    if not isinstance(sample.devices, NotAvailable):
        keys = [d.index for d in sample.devices if isinstance(d, DeviceReading)]
    if keys or isinstance(sample.jax, NotAvailable):
        return keys
    return [j.jax_id for j in sample.jax if isinstance(j.stats, AllocatorStats) and j.platform != "cpu"]


# The key of the CPU view: no NVML index or JAX GPU id is negative.
CPU_KEY = -1


def view_keys(sample: Sample) -> list[int]:
    """The views a sample has something for: its GPUs (``device_keys``), then ``CPU_KEY`` where
    JAX's live arrays on the CPU were read (or could not be, which the view says)."""
    keys = device_keys(sample)
    return keys + [CPU_KEY] if sample.cpu_arrays is not None else keys


def in_view_order(keys: Iterable[int]) -> list[int]:
    """Keys as the views are shown: GPUs by index, the CPU last."""
    return sorted(keys, key=lambda k: (k == CPU_KEY, k))


def jax_view(sample: Sample | None) -> int | None:
    """The view of the device this kernel's JAX uses: the first GPU it runs on, or ``CPU_KEY``
    where it runs on the CPU; None before JAX starts, or when its GPU is not known to NVML."""
    if sample is None or isinstance(sample.jax, NotAvailable):
        return None
    gpus = [j.nvml_index for j in sample.jax if j.platform == "gpu" and j.nvml_index is not None]
    if gpus:
        return min(gpus)
    return CPU_KEY if any(j.platform == "cpu" for j in sample.jax) else None


def view_name(key: int) -> str:
    return "CPU" if key == CPU_KEY else f"GPU {key}"


def view_fields(key: int) -> tuple[str, ...]:
    """The sample fields a view is drawn from: a GPU's from NVML's, JAX's and PyTorch's
    readings; the CPU view's from JAX's live CPU arrays alone."""
    return ("cpu_arrays",) if key == CPU_KEY else ("devices", "jax", "pids_not_here", "torch")


def view_labels(key: int, made_up: Collection[str], replay: bool) -> list[str]:
    """How a view is marked: "replay" when drawn from a recording, and "synthetic" where a field
    it is drawn from is made up (``core.synthetic``)."""
    labels = ["replay"] if replay else []
    return labels + ["synthetic"] if set(view_fields(key)) & set(made_up) else labels


def _jax_for(sample: Sample, key: int):
    if isinstance(sample.jax, NotAvailable):
        return None
    if not isinstance(sample.devices, NotAvailable) and sample.devices:
        return sample.jax_for(key)
    for j in sample.jax:
        if j.jax_id == key:
            return j
    return None


def series_values(sample: Sample, key: int) -> dict[str, float | None]:
    """Every series' value for device ``key`` at this sample, in bytes (fragmentation 0..1).

    None where the number is not known: JAX not started, no allocator stats, pids hidden.
    """
    out: dict[str, float | None] = dict.fromkeys(SERIES_NAMES)
    if key == CPU_KEY:
        arrays = sample.cpu_arrays
        out["cpu_arrays"] = arrays.bytes if isinstance(arrays, CpuArraysReading) else None
        return out
    dev = sample.device(key)
    dev = dev if isinstance(dev, DeviceReading) else None
    jdev = _jax_for(sample, key)
    stats = jdev.stats if jdev is not None and isinstance(jdev.stats, AllocatorStats) else None
    cuda_pool = jdev.cuda_pool if jdev is not None and isinstance(jdev.cuda_pool, CudaPoolReading) else None

    # What the allocator took from CUDA (under cuda_async, the driver pool's reserved bytes).
    held = held_bytes(stats, cuda_pool)
    if stats is not None:
        out["jax_in_use"] = stats.bytes_in_use
        out["pool_unused"] = unused_pool_bytes(stats, cuda_pool)
        out["bytes_limit"] = stats.bytes_limit
        out["peak_in_use"] = stats.peak_bytes_in_use
        out["fragmentation"] = fragmentation(stats, cuda_pool)  # BFC only, like the next two
        out["largest_free_block"] = stats.largest_free_block_bytes
        out["headroom"] = headroom(stats, cuda_pool)
    if cuda_pool is not None:
        out["pool_reserved"] = cuda_pool.reserved_bytes
        out["pool_used"] = cuda_pool.used_bytes

    if dev is not None:
        out["total"] = dev.total_bytes
        out["free"] = dev.free_bytes
        who = attribute_in_sample(sample, key)
        mine = who.own_bytes if who is not None else dev.process_bytes(sample.pid)
        if who is not None and who.how == CANNOT_TELL:
            # Host pids (a container): JAX's part is known, the rest may be this process or not.
            others = sum(p.used_bytes for p in who.others + who.gone if isinstance(p.used_bytes, int))
            out["other_processes"] = others
            out["host_pids"] = max(0, dev.used_bytes - (held or 0) - others)
        elif isinstance(mine, NotAvailable):
            # NVML cannot say whose the used bytes are: show JAX's part and leave the rest unnamed.
            out["unattributed"] = max(0, dev.used_bytes - (held or 0))
        else:
            outside = outside_allocator_bytes(mine, stats, cuda_pool)
            out["outside_jax"] = mine if outside is None else outside  # JAX not started: all of it
            out["other_processes"] = max(0, dev.used_bytes - mine)
            torch = _torch_for(sample, jdev)
            if torch is not None:
                out["torch_allocated"] = torch.allocated_bytes
                out["torch_cached"] = max(0, torch.reserved_bytes - torch.allocated_bytes)
                out["outside_jax"] = max(0, out["outside_jax"] - torch.reserved_bytes)
        out["free"] = _free_left(out, dev)
    return out


def _free_left(out: dict, dev: DeviceReading) -> int:
    """NVML's free bytes, less what the in-process readings hold beyond NVML's count.

    NVML and the allocator are read one after the other, not at one instant: a pool taken in
    between (cuda_async reserving its whole pool, tests/data/traces/cuda_async_preallocated.jsonl
    sample 13: NVML 3.4 MB used, the driver pool 59.4 GiB reserved) is in JAX's bands and still
    in NVML's free. The newer reading wins, so the stack never passes the device's total."""
    below = sum(out[b] or 0 for b in BANDS if b != "free")
    return max(0, min(dev.free_bytes, dev.total_bytes - below))


def _torch_for(sample: Sample, jdev) -> TorchDeviceReading | None:
    """PyTorch's reading for the CUDA device JAX's ``jdev`` is (torch and JAX count CUDA devices
    alike); None without one, or where JAX is not on that GPU to say which device it is."""
    torch = sample.torch
    if isinstance(torch, NotAvailable) or jdev is None or jdev.cuda_ordinal is None:
        return None
    return next((t for t in torch if t.cuda_ordinal == jdev.cuda_ordinal), None)


def row_for(sample: Sample, key: int) -> Values:
    """``series_values`` as a tuple in SERIES_NAMES order, the shape the chart series store."""
    values = series_values(sample, key)
    return tuple(values[name] for name in SERIES_NAMES)


# --- nothing to show, and why ----------------------------------------------------------------


def nothing_to_show(sample: Sample | None) -> str | None:
    """Why there is nothing to draw (a sentence for the empty state), or None if there is."""
    if sample is None:
        return "Waiting for the first reading."
    if view_keys(sample):
        return None
    parts = []
    if isinstance(sample.devices, NotAvailable):
        parts.append(f"No NVIDIA GPU can be read: {sample.devices.reason}.")
    else:
        parts.append("NVML lists no readable GPU.")
    parts.append(_jax_sentence(sample))
    return " ".join(p for p in parts if p)


def _jax_sentence(sample: Sample) -> str:
    jax = sample.jax
    if isinstance(jax, NotAvailable):
        if jax.code == NOT_STARTED:
            return "JAX has not started yet: the allocator view will start when JAX does."
        return f"JAX allocator statistics are not available: {jax.reason}."
    if jax and all(j.platform == "cpu" for j in jax):
        return "JAX is running on the CPU, which keeps no allocator statistics."
    return ""


def _jax_placement_notes(sample: Sample, key: int) -> list[str]:
    """Where JAX is not on the GPUs drawn: on the CPU beside them (on each GPU), or a JAX GPU
    device that is none of them that could be told (once, on the first GPU)."""
    if isinstance(sample.jax, NotAvailable) or isinstance(sample.devices, NotAvailable) or not sample.jax:
        return []
    if all(j.platform == "cpu" for j in sample.jax):
        # No pointer to a warning: a recording's view has none below it.
        return ["JAX runs on the CPU, not on this GPU: none of its memory here is JAX's."]
    if device_keys(sample)[:1] != [key]:
        return []
    return [
        f"JAX device {j.jax_id} is drawn on no GPU: {j.nvml_unmatched}."
        for j in sample.jax
        if j.platform == "gpu" and j.nvml_index is None and j.nvml_unmatched
    ]


# The CPU view's heading, above its plot: what its one band is, said in full (its tab title is short).
CPU_VIEW_HEADING = (
    "JAX's live arrays on the CPU, in the host's memory (not a GPU's): their shapes times their dtypes' "
    "sizes, summed. The process's other memory is not drawn."
)


def _cpu_arrays_notes(arrays: CpuArraysReading | NotAvailable | None) -> list[str]:
    if isinstance(arrays, NotAvailable):
        return [f"JAX's live arrays could not be read: {arrays.reason}."]
    return []


CANNOT_TELL_NOTE = (
    "NVML lists pids that are not processes here (a container sees the host's pids) and cannot tell "
    "which of them, if any, is this process: their memory is drawn as host pids, not as other processes."
)


def notes_for(sample: Sample | None, key: int) -> list[str]:
    """Short notes for a device that is drawn but partly unknown (JAX not started or elsewhere,
    pids hidden)."""
    if sample is None:
        return []
    if key == CPU_KEY:
        return _cpu_arrays_notes(sample.cpu_arrays)
    notes = []
    jdev = _jax_for(sample, key)
    if isinstance(sample.jax, NotAvailable) and sample.jax.code == NOT_STARTED:
        notes.append("JAX has not started yet: its bands will start when JAX does.")
    elif jdev is not None and isinstance(jdev.stats, NotAvailable):
        notes.append(f"No allocator statistics: {jdev.stats.reason}.")
    notes.extend(_jax_placement_notes(sample, key))
    shared = shared_pool_note(sample, key)
    if shared:
        notes.append(shared)
    dev = sample.device(key)
    if isinstance(dev, DeviceReading) and isinstance(dev.processes, NotAvailable):
        notes.append(f"Per-process memory is hidden ({dev.processes.reason}); used bytes are shown unattributed.")
    who = attribute_in_sample(sample, key)
    if who is not None and who.how == CANNOT_TELL:
        # The same words on every GPU it applies to, so the header says it once for all of them
        # (monitor_header.grouped_notes); the pids are in the OOM report and the hover.
        notes.append(CANNOT_TELL_NOTE)
    elif who is not None and who.how == BY_ELIMINATION:
        notes.append(_sentence(who.reason))
    return notes


# Modules whose async allocators also draw from CUDA's default pool. TensorFlow's cuda_malloc_async
# (tensorflow/core/common_runtime/gpu/gpu_cudamallocasync_allocator.cc) and XLA's cuda_async
# (xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc) both call cuDeviceGetDefaultMemPool and
# set that pool's release threshold; CuPy's MemoryAsyncPool uses the current (default) pool.
DEFAULT_POOL_USERS = (
    ("tensorflow", "TensorFlow (TF_GPU_ALLOCATOR=cuda_malloc_async)"),
    ("cupy", "CuPy (MemoryAsyncPool)"),
)


def shared_pool_note(
    sample: Sample, key: int, modules: Iterable[str] | None = None, pid: int | None = None
) -> str | None:
    """A note when JAX's cuda_async pool in this live process may hold another framework's bytes:
    JAX uses cuda_async and TensorFlow or CuPy is imported (``modules``: default sys.modules,
    never imported here). None for replays, which were read in another process."""
    jdev = _jax_for(sample, key)
    if jdev is None or not isinstance(jdev.stats, AllocatorStats) or jdev.stats.allocator != "cuda_async":
        return None
    if sample.pid != (os.getpid() if pid is None else pid):
        return None
    loaded = set(sys.modules if modules is None else modules)
    users = [label for module, label in DEFAULT_POOL_USERS if module in loaded]
    if not users:
        return None
    return (
        f"{' and '.join(users)} imported here: if it allocates asynchronously it uses CUDA's default pool, "
        "the same pool as JAX's cuda_async. Then 'JAX pool, unused' and the CUDA pool lines include its "
        "bytes, and whichever set the pool's release threshold last decides when memory goes back."
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


# --- decimation that keeps extremes ----------------------------------------------------------


def _bucket_picks(rows: Sequence[Values], lo: int, hi: int, columns: Sequence[int]) -> set[int]:
    picks = set()
    for c in columns:
        best_min = best_max = None
        for i in range(lo, hi):
            v = rows[i][c]
            if v is None:
                continue
            if best_min is None or v < rows[best_min][c]:
                best_min = i
            if best_max is None or v > rows[best_max][c]:
                best_max = i
        if best_min is not None:
            picks.add(best_min)
            picks.add(best_max)
    return picks


def decimate_rows(rows: Sequence[Values], max_rows: int) -> list[int]:
    """Indices of the rows to draw: at most ``max_rows``, keeping every bucket's extremes.

    Rows are split into equal buckets; from each, the rows holding each column's minimum and
    maximum are kept (real rows, so stacked bands stay consistent at every x). The first and
    last rows are always kept. A column's peak therefore never disappears. The live plot's
    browser side thins by the same rule (``extremeRows`` in ``monitor_plot.js``).
    """
    n = len(rows)
    width = len(rows[0]) if rows else 0
    if max_rows < 2 + 2 * width:
        raise ValueError(f"max_rows must be at least 2 + 2 per column ({2 + 2 * width}), got {max_rows}")
    if n <= max_rows:
        return list(range(n))
    columns = [c for c in range(width) if any(r[c] is not None for r in rows)]
    buckets = max(1, (max_rows - 2) // 2)
    while True:
        picks = {0, n - 1}
        for b in range(buckets):
            lo, hi = b * n // buckets, (b + 1) * n // buckets
            picks |= _bucket_picks(rows, lo, hi, columns)
        if len(picks) <= max_rows or buckets == 1:
            return sorted(picks)
        # Too many distinct extremes: fewer, wider buckets (the fewest is 1, which keeps at
        # most 2 per column plus the ends).
        buckets = max(1, buckets * max_rows // len(picks) - 1)


# --- one device's rows, sealed into chunks as time passes ------------------------------------


@dataclass(frozen=True)
class Chunk:
    """A sealed stretch of one device's rows, already decimated; never changes once made.

    ``kind`` is "span" (a whole span of the window) or "mini" (a few rows of the current span).
    ``replaces`` names the chunks this one stands in for, which the drawing removes.
    """

    id: int
    start: float
    end: float
    times: tuple[float, ...]
    rows: tuple[Values, ...]
    kind: str = "span"
    replaces: tuple[int, ...] = ()


class DeviceSeries:
    """One device's rows within a time window, kept as sealed chunks plus a short live tail:
    what a whole figure is drawn from (a replay, a new window, a page reloaded).

    - The window is split into ``chunks`` spans. When a span ends, its rows are decimated once
      into a "span" chunk; it replaces the span's minis.
    - Within the current span, every ``tail_rows`` rows become a "mini" chunk. When the minis
      hold more than a chunk's budget they are merged into one, decimated.
    - Chunks older than the window are dropped.

    Memory and points per series stay bounded whatever the run length or rate: at most
    ``max_points`` per series.
    """

    def __init__(self, window_s: float, max_points: int = MAX_POINTS, chunks: int = 16, tail_rows: int = 16):
        if not (window_s > 0 and math.isfinite(window_s)):
            raise ValueError(f"window must be a positive number of seconds, got {window_s!r}")
        self.window_s = float(window_s)
        self.span_s = self.window_s / chunks
        self.per_chunk = max(2 + 2 * len(SERIES_NAMES), max_points // (chunks + 1))
        self.tail_rows = max(2, tail_rows)
        self.chunks: deque[Chunk] = deque()
        self.minis: list[Chunk] = []
        self._span_t: list[float] = []  # every row of the current span, for its final decimation
        self._span_rows: list[Values] = []
        self._tail_from = 0  # rows of the span before this index are in minis
        self._span: int | None = None
        self._carry: tuple[float, Values] | None = None  # last row of the previous span
        self._next_id = 0
        self.last_t: float | None = None
        self.latest: dict[str, float | None] | None = None
        self._seen: set[str] | None = set()  # series with a known value; None: recount

    def add(self, t: float, values: Values) -> list[Chunk]:
        """Add one row; returns the chunks this sealed, in order (usually none)."""
        span = int(t // self.span_s)
        sealed = []
        if self._span is not None and span != self._span and self._span_rows:
            sealed.append(self._seal_span())
        self._span = span
        self._span_t.append(t)
        self._span_rows.append(values)
        self.last_t = t
        self.latest = dict(zip(SERIES_NAMES, values))
        if self._seen is not None:
            self._seen.update(n for n, v in self.latest.items() if v is not None)
        if len(self._span_rows) - self._tail_from >= self.tail_rows:
            sealed.append(self._seal_mini())
        return sealed

    def _make(self, times: Sequence[float], rows: Sequence[Values], budget: int, kind: str, replaces=()) -> Chunk:
        keep = decimate_rows(rows, budget)
        chunk = Chunk(
            id=self._next_id,
            start=times[0],
            end=times[-1],
            times=tuple(times[i] for i in keep),
            rows=tuple(rows[i] for i in keep),
            kind=kind,
            replaces=tuple(replaces),
        )
        self._next_id += 1
        return chunk

    def _joined(self, start: int) -> tuple[list[float], list[Values]]:
        """Span rows from ``start``, led by the row before them so lines join up."""
        if start > 0:
            return self._span_t[start - 1 :], self._span_rows[start - 1 :]
        if self._carry is None:
            return self._span_t, self._span_rows
        return [self._carry[0]] + self._span_t, [self._carry[1]] + self._span_rows

    def _seal_mini(self) -> Chunk:
        times, rows = self._joined(self._tail_from)
        self._tail_from = len(self._span_rows)
        if sum(len(m.rows) for m in self.minis) + len(rows) <= self.per_chunk:
            mini = self._make(times, rows, self.per_chunk, "mini")
            self.minis.append(mini)
            return mini
        # The minis outgrew a chunk's budget: one decimated mini replaces them all.
        times, rows = self._joined(0)
        merged = self._make(
            times,
            rows,
            max(2 + 2 * len(SERIES_NAMES), self.per_chunk // 2),
            "mini",
            replaces=[m.id for m in self.minis],
        )
        self.minis = [merged]
        return merged

    def _seal_span(self) -> Chunk:
        times, rows = self._joined(0)
        chunk = self._make(times, rows, self.per_chunk, "span", replaces=[m.id for m in self.minis])
        self.chunks.append(chunk)
        self.minis = []
        self._carry = (self._span_t[-1], self._span_rows[-1])
        self._span_t, self._span_rows, self._tail_from = [], [], 0
        return chunk

    def tail(self) -> tuple[list[float], list[Values]]:
        """The rows not yet in a chunk, led by the last sealed row (at most ``tail_rows``)."""
        if self._tail_from >= len(self._span_rows):
            return [], []
        times, rows = self._joined(self._tail_from)
        return list(times), list(rows)

    def expire(self, now: float | None = None) -> list[Chunk]:
        """Drop and return the chunks that ended before the window; ``now`` defaults to the last row."""
        now = self.last_t if now is None else now
        gone: list[Chunk] = []
        if now is None:
            return gone
        while self.chunks and self.chunks[0].end < now - self.window_s:
            gone.append(self.chunks.popleft())
        if gone:
            self._seen = None  # a series may have left with them
        return gone

    def drawn_chunks(self) -> list[Chunk]:
        return [*self.chunks, *self.minis]

    def active_series(self) -> list[str]:
        """The series with at least one known value in what is drawn now, in SERIES order."""
        if self._seen is None:
            seen: set[str] = set()
            rows: Iterable[Values] = [r for c in self.drawn_chunks() for r in c.rows] + self._span_rows
            for row in rows:
                seen.update(n for n, v in zip(SERIES_NAMES, row) if v is not None)
            self._seen = seen
        return [n for n in SERIES_NAMES if n in self._seen]

    def points_per_series(self) -> int:
        return sum(len(c.rows) for c in self.drawn_chunks()) + len(self.tail()[0])


# --- cell markers ----------------------------------------------------------------------------


def cell_markers(events: Iterable[Event], since: float | None = None) -> list[tuple[float, int | None, float | None]]:
    """``(start time, execution count, duration or None)`` for each cell run, oldest first.

    A cell still running has no duration yet. Only runs starting after ``since`` are returned.
    """
    out: list[list] = []
    running: dict = {}  # execution count -> its open entry
    for event in sorted(events, key=lambda e: e.t):
        count = event.data.get("execution_count") if event.data else None
        if event.name == "cell_start":
            entry = [event.t, count, None]
            out.append(entry)
            running[count] = entry
        elif event.name == "cell_end" and count in running:
            entry = running.pop(count)
            entry[2] = event.t - entry[0]
    return [tuple(e) for e in out if since is None or e[0] > since]


# --- CSV export ------------------------------------------------------------------------------


def csv_rows(samples: Iterable[Sample], keys: Sequence[int] | None = None) -> list[list]:
    """Rows for a CSV export: a header, then one row per sample and device, in bytes.

    Columns: ``t`` (seconds since the epoch), ``time`` (UTC, ISO 8601), ``device`` (a GPU's
    index, or ``cpu``), then every series; an unknown value is an empty cell.
    """
    out: list[list] = [["t", "time", "device", *SERIES_NAMES]]
    for sample in samples:
        present = view_keys(sample)
        for key in keys if keys is not None else present:
            if key not in present:
                continue
            when = datetime.fromtimestamp(sample.t, timezone.utc).isoformat(timespec="milliseconds")
            values = row_for(sample, key)
            device = "cpu" if key == CPU_KEY else key
            out.append([sample.t, when, device, *("" if v is None else v for v in values)])
    return out
