"""Typed readings and the bounded Timeline (the memory metrics over them are in ``metrics.py``).

Everything above the sources speaks in these types. No I/O lives here; trace files are in
``tracefile.py``. A reading that is missing is a ``NotAvailable`` value that says why, never an
exception.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Union

# --- "not available, because ..." -----------------------------------------------------------


@dataclass(frozen=True)
class NotAvailable:
    """A reading that is not there, with a reason a person can act on.

    ``code`` is stable and machine-readable (the UI and tests switch on it); ``reason`` is the
    sentence shown to the user. It is falsy, so ``reading or default`` reads naturally.
    """

    code: str
    reason: str

    def __bool__(self) -> bool:
        return False

    def to_json(self) -> dict:
        return {"na": self.code, "reason": self.reason}


# Codes in use. Sources may add their own; the UI falls back to the reason text.
NO_LIBRARY = "no_library"  # libnvidia-ml / libcuda cannot be loaded
NO_DRIVER = "no_driver"  # library present, driver missing or not loaded
NO_PERMISSION = "no_permission"
GPU_LOST = "gpu_lost"
PROCESS_GONE = "process_gone"
NOT_SUPPORTED = "not_supported"  # the device or driver does not report this
PIDS_HIDDEN = "pids_hidden"  # containers and MIG: NVML cannot map usage to pids
NOT_STARTED = "not_started"  # JAX's backend has not started yet
NO_STATS = "no_stats"  # the backend/allocator answers memory_stats() with None (CPU, platform)
NO_JAX = "no_jax"
ERROR = "error"  # anything else; the reason carries the original message

Maybe = Union[int, NotAvailable]


def is_available(value: Any) -> bool:
    return not isinstance(value, NotAvailable)


# --- NVML readings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessReading:
    """One compute process on a device, as the driver sees it."""

    pid: int
    used_bytes: Maybe
    # Filled in by faces that may show them (same user, or configured); never by nvml.py.
    name: str | None = None
    user: str | None = None


@dataclass(frozen=True)
class DeviceReading:
    """One GPU as NVML reports it at one instant."""

    index: int
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    reserved_bytes: Maybe = NotAvailable(NOT_SUPPORTED, "driver does not report reserved memory")
    utilization_percent: Maybe = NotAvailable(NOT_SUPPORTED, "driver does not report utilisation")
    display_active: bool | NotAvailable = NotAvailable(NOT_SUPPORTED, "display state not reported")
    mig_mode: bool | NotAvailable = NotAvailable(NOT_SUPPORTED, "MIG mode not reported")
    processes: tuple[ProcessReading, ...] | NotAvailable = ()

    def process_bytes(self, pid: int) -> Maybe:
        """Bytes the driver attributes to ``pid`` on this device (0 if it holds none)."""
        if isinstance(self.processes, NotAvailable):
            return self.processes
        total = 0
        for proc in self.processes:
            if proc.pid == pid:
                if isinstance(proc.used_bytes, NotAvailable):
                    return proc.used_bytes
                total += proc.used_bytes
        return total


@dataclass(frozen=True)
class DeviceUnreadable:
    """A device NVML lists but cannot read right now (lost GPU, a query that failed)."""

    index: int
    why: NotAvailable
    name: str = ""
    uuid: str = ""


# --- JAX allocator readings ------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorStats:
    """``Device.memory_stats()`` normalised across allocators.

    A stat the allocator does not report is None (XLA uses -1 for some of these; the normaliser
    maps that to None). ``raw`` keeps the dict exactly as JAX returned it, for traces.
    """

    allocator: str  # "bfc", "cuda_async", "tpu", ... as far as it can be known
    bytes_in_use: int | None = None
    peak_bytes_in_use: int | None = None
    bytes_limit: int | None = None
    pool_bytes: int | None = None
    peak_pool_bytes: int | None = None
    largest_free_block_bytes: int | None = None
    largest_alloc_size: int | None = None
    num_allocs: int | None = None
    bytes_reserved: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CudaPoolReading:
    """The CUDA memory pool behind the cuda_async allocator, read from the driver."""

    reserved_bytes: int
    reserved_high_bytes: int
    used_bytes: int
    used_high_bytes: int


@dataclass(frozen=True)
class JaxDeviceReading:
    """One JAX device's allocator state at one instant.

    ``cuda_ordinal``: the CUDA device number in this process (JAX's ``local_hardware_id``), the
    "device ordinal" XLA's messages name. ``nvml_unmatched``: for a GPU, why ``nvml_index`` is
    None (which NVML GPU it is could not be found).
    """

    jax_id: int
    platform: str  # "gpu", "cpu", "tpu"
    kind: str  # device_kind, e.g. "NVIDIA H100 80GB HBM3"
    nvml_index: int | None  # which NVML device this is, where it can be known
    stats: AllocatorStats | NotAvailable
    cuda_pool: CudaPoolReading | NotAvailable | None = None  # None: not a cuda_async device
    cuda_ordinal: int | None = None
    nvml_unmatched: str | None = None


@dataclass(frozen=True)
class TorchDeviceReading:
    """PyTorch's CUDA caching allocator on one device (``torch.cuda.memory_stats``):
    ``reserved_bytes`` held from CUDA, ``allocated_bytes`` of it in tensors."""

    cuda_ordinal: int
    reserved_bytes: int
    allocated_bytes: int


@dataclass(frozen=True)
class CpuArraysReading:
    """JAX's live arrays on its CPU devices: ``bytes`` of host memory they hold (from their
    shapes and dtypes, no buffer read) and how many ``arrays`` there are."""

    bytes: int
    arrays: int

    def to_json(self) -> dict:
        return {"bytes": self.bytes, "arrays": self.arrays}


# --- samples, events, timeline ---------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Everything read at one instant ``t`` (seconds since the epoch).

    ``pids_not_here``: the pids NVML listed that were not processes in this PID namespace when
    read (inside a container NVML lists the host's pids); None where nobody looked. ``torch``:
    PyTorch's caching allocator per CUDA device, where torch is imported and has started CUDA.
    ``cpu_arrays``: JAX's live arrays where JAX runs on the CPU, read while a monitor is live;
    None where they were not read.
    """

    t: float
    pid: int
    devices: tuple[DeviceReading | DeviceUnreadable, ...] | NotAvailable
    jax: tuple[JaxDeviceReading, ...] | NotAvailable
    pids_not_here: frozenset[int] | None = None
    torch: tuple[TorchDeviceReading, ...] | NotAvailable = ()  # empty: torch not using CUDA here
    cpu_arrays: CpuArraysReading | NotAvailable | None = None

    def device(self, index: int) -> DeviceReading | DeviceUnreadable | None:
        """The NVML reading of GPU ``index`` (the first, should a reading list it twice), or None."""
        return self._devices_by_index.get(index)

    def jax_for(self, nvml_index: int | None) -> JaxDeviceReading | None:
        """The JAX device on NVML GPU ``nvml_index`` (the first listed), or None."""
        return self._jax_by_nvml_index.get(nvml_index)

    # Looked up once per device per sample: a dict, so a sample of many devices stays linear.
    @functools.cached_property
    def _devices_by_index(self) -> dict[int, DeviceReading | DeviceUnreadable]:
        found: dict[int, DeviceReading | DeviceUnreadable] = {}
        if not isinstance(self.devices, NotAvailable):
            for dev in self.devices:
                found.setdefault(dev.index, dev)
        return found

    @functools.cached_property
    def _jax_by_nvml_index(self) -> dict[int | None, JaxDeviceReading]:
        found: dict[int | None, JaxDeviceReading] = {}
        if not isinstance(self.jax, NotAvailable):
            for dev in self.jax:
                found.setdefault(dev.nvml_index, dev)
        return found


@dataclass(frozen=True)
class Event:
    """Something that happened at ``t``: a cell start or end, an OOM, a settings change."""

    t: float
    name: str  # "cell_start", "cell_end", "oom", "settings", "marker"
    data: Mapping[str, Any] = field(default_factory=dict)


class Timeline:
    """A bounded, thread-safe ring buffer of samples and events.

    The sampler thread appends; faces read snapshots. Memory is bounded by ``max_samples`` and
    ``max_events`` whatever the run length. ``trace_header`` is the header of the trace file
    the readings were read from (faces label them "replay", and "synthetic" where it says so);
    None for readings taken in this process.
    """

    def __init__(
        self, max_samples: int = 36_000, max_events: int = 10_000, trace_header: Mapping[str, Any] | None = None
    ):
        self.trace_header = dict(trace_header) if trace_header is not None else None
        self._samples: deque[Sample] = deque(maxlen=max_samples)
        self._events: deque[Event] = deque(maxlen=max_events)
        self._lock = threading.Lock()
        self._version = 0  # bumps on every append and clear

    @property
    def max_samples(self) -> int:
        return self._samples.maxlen or 0

    @property
    def version(self) -> int:
        return self._version

    def append(self, sample: Sample) -> None:
        with self._lock:
            self._samples.append(sample)
            self._version += 1

    def add_event(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
            self._version += 1

    def extend(self, items: Iterable[Sample | Event]) -> None:
        with self._lock:
            for item in items:
                (self._samples if isinstance(item, Sample) else self._events).append(item)
            self._version += 1

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._events.clear()
            self._version += 1

    def samples(self, since: float | None = None) -> list[Sample]:
        """Samples with ``t > since`` (all of them when ``since`` is None), oldest first."""
        with self._lock:
            items = list(self._samples)
        if since is None:
            return items
        return [s for s in items if s.t > since]

    def events(self, since: float | None = None) -> list[Event]:
        with self._lock:
            items = list(self._events)
        if since is None:
            return items
        return [e for e in items if e.t > since]

    def latest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def __len__(self) -> int:
        return len(self._samples)


# --- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatorSettings:
    """What a user asks of JAX's allocator. None means "leave it alone".

    ``async_prealloc`` is a byte count, or -1 for the whole pool.
    """

    preallocate: bool | None = None
    fraction: float | None = None
    allocator: str | None = None
    async_prealloc: int | None = None
    remat: bool | None = None

    def given(self) -> dict[str, Any]:
        """The settings that are set, in a stable order."""
        out = {}
        for name in ("preallocate", "fraction", "allocator", "async_prealloc", "remat"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def merged(self, other: AllocatorSettings) -> AllocatorSettings:
        """These settings with ``other``'s given values on top."""
        return replace(self, **other.given())


# --- normalising memory_stats() --------------------------------------------------------------

STAT_KEYS = (
    "bytes_in_use",
    "peak_bytes_in_use",
    "bytes_limit",
    "pool_bytes",
    "peak_pool_bytes",
    "largest_free_block_bytes",
    "largest_alloc_size",
    "num_allocs",
    "bytes_reserved",
)


def _as_count(value: Any) -> int | None:
    """A non-negative byte count, or None for -1, garbage, floats that are not whole, bools."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not value.is_integer():  # False for NaN and the infinities too
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if value >= 0 else None


def normalise_stats(
    raw: Mapping[str, Any] | None, allocator: str, platform: str = "gpu"
) -> AllocatorStats | NotAvailable:
    """Turn ``Device.memory_stats()`` into ``AllocatorStats``; never raises.

    - CPU, and allocators without stats, answer None: a state to explain, not an error.
    - XLA reports some missing stats as -1; those become None.
    - cuda_async reports ``largest_free_block_bytes`` as 0 and, with preallocation off,
      ``bytes_limit`` as 0. Neither means what it says there, so both become None; the pool's
      real size comes from the CUDA driver (``CudaPoolReading``).
    """
    if raw is None:
        if platform == "cpu":
            return NotAvailable(NO_STATS, "JAX is running on the CPU, which keeps no allocator statistics")
        return NotAvailable(NO_STATS, f"the {allocator} allocator reports no memory statistics")
    if not isinstance(raw, Mapping):
        return NotAvailable(ERROR, f"memory_stats() returned {type(raw).__name__}, not a dict")
    values = {key: _as_count(raw.get(key)) for key in STAT_KEYS}
    if allocator == "cuda_async":
        values["largest_free_block_bytes"] = None
        if values["bytes_limit"] == 0:
            values["bytes_limit"] = None
    return AllocatorStats(allocator=allocator, raw=dict(raw), **values)
