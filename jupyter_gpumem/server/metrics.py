"""What jupyter_server's own ``/metrics`` says about GPU memory: per GPU, and per kernel on a GPU.

One collector per process, registered once in prometheus_client's default registry (the
registry is global; tests start many servers in one process). It exports the latest snapshot
the service gave it, built from one reading and the kernel list; a kernel or device not in the
snapshot has no series, so series of kernels that went away disappear with the next reading.
Seconds since a kernel's last activity are computed at scrape time. A scrape also tells the
shared sampler that someone is watching: it starts the reader when none runs and keeps it alive.
A snapshot older than its ``max_age`` (the reader went idle) is not exported. Replayed traces
are never exported: they are not this machine's state. Metric names and labels: docs/server.md.

Labels carry no identity: which hub user and server a series belongs to is added by the scrape
(Prometheus's discovery, from the hub), never taken from the server's own environment, which
its user controls. A kernel is named by ``kernel``, a key that keeps its series apart but says
nothing (an HMAC of the kernel id under a secret of this process); its id and notebook path
are exported only to a scrape that authenticated (``kernel_names``), or where the operator
asked for them on the metrics listener (``GpuMem.metrics_kernel_names``). Every label value is
at most MAX_LABEL_CHARS characters (``capped``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily

from jupyter_gpumem.server.kernels import KernelInfo

_lock = threading.Lock()
_gauges: GpuMemGauges | None = None

DEVICE_LABELS = ("index", "uuid", "name")
KERNEL_LABELS = ("kernel", "index", "uuid")
KERNEL_NAME_LABELS = ("kernel_id", "notebook_path")  # only where the scrape may see them
# A label value longer than this is cut, and ends with "…" and 16 hex digits of its SHA-256,
# so two long values stay two series (a notebook path can be as long as its user likes).
MAX_LABEL_CHARS = 256
_HASH_CHARS = 16
_KERNEL_KEY_SECRET = secrets.token_bytes(32)


def capped(value: str, limit: int = MAX_LABEL_CHARS) -> str:
    """``value`` if at most ``limit`` characters, else its start, "…" and a hash of the whole,
    ``limit`` characters in all."""
    if len(value) <= limit:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return value[: limit - _HASH_CHARS - 1] + "…" + digest


def kernel_key(kernel_id: str) -> str:
    """The ``kernel`` label: the same for one kernel while this server runs, unrelated to its id."""
    return hmac.new(_KERNEL_KEY_SECRET, kernel_id.encode(), hashlib.sha256).hexdigest()[:12]


@dataclass(frozen=True)
class KernelOnGpu:
    """One kernel's memory on one GPU, with what the alerts need to know about the kernel."""

    labels: tuple[str, ...]  # KERNEL_LABELS
    names: tuple[str, ...]  # KERNEL_NAME_LABELS: kernel id, notebook path
    used: float
    state: str  # jupyter_server's execution_state, "unknown" when it has none
    last_activity: float | None  # POSIX seconds
    preallocated: bool | None
    preallocated_source: str | None = None  # device_report.PREALLOCATED_SOURCES
    reserved: float | None = None  # bytes the kernel's settings reserved (fraction x total)


@dataclass(frozen=True)
class DeviceRow:
    labels: tuple[str, ...]  # DEVICE_LABELS
    readable: bool
    used: float | None = None
    total: float | None = None
    idle_kernel_bytes: float = 0.0


@dataclass
class Snapshot:
    """What one reading says, ready to export; built by ``snapshot_from``."""

    t: float
    state: str  # the report's state: ok, no_driver, no_library, no_permission, error
    synthetic: bool
    devices: list[DeviceRow] = field(default_factory=list)
    kernels: list[KernelOnGpu] = field(default_factory=list)
    made_at: float = field(default_factory=time.monotonic)
    max_age: float = float("inf")  # seconds after made_at that it may be exported


def snapshot_from(
    report: dict,
    kernels: Iterable[KernelInfo],
    *,
    idle_after: float = 600.0,
    now: float | None = None,
    max_age: float = float("inf"),
) -> Snapshot | None:
    """The snapshot of a /devices report (notebook-independent), or None for a replay.

    A kernel counts towards a device's idle-kernel bytes when jupyter_server says it is
    ``idle`` and its last activity is at least ``idle_after`` seconds old at ``now``.
    """
    if report["source"] != "nvml":
        return None
    now = time.time() if now is None else now
    snap = Snapshot(t=report["t"], state=report["state"], synthetic=bool(report["synthetic"]), max_age=max_age)
    if report["state"] != "ok":
        return snap
    by_id = {k.kernel_id: k for k in kernels}
    for dev in report["devices"]:
        labels = (str(dev["index"]), capped(dev["uuid"] or ""), capped(dev["name"] or ""))
        if not dev["readable"]:
            snap.devices.append(DeviceRow(labels, readable=False))
            continue
        held: dict[str, list] = {}  # kernel id -> [bytes, its process row that says most]
        for proc in dev["processes"]:
            if proc["kind"] == "kernel" and proc["kernel_id"] in by_id:
                entry = held.setdefault(proc["kernel_id"], [0, proc])
                entry[0] += proc["used"] or 0
                if proc["preallocated"] and not entry[1]["preallocated"]:
                    entry[1] = proc
        idle_bytes = 0.0
        for kid, (used, row) in held.items():
            kernel = by_id[kid]
            active = kernel.last_activity.timestamp() if kernel.last_activity is not None else None
            state = kernel.execution_state or "unknown"
            if state == "idle" and active is not None and now - active >= idle_after:
                idle_bytes += used
            snap.kernels.append(
                KernelOnGpu(
                    labels=(kernel_key(kid), labels[0], labels[1]),
                    names=(capped(kid), capped(kernel.notebook_path or "")),
                    used=used,
                    state=state,
                    last_activity=active,
                    preallocated=row["preallocated"],
                    preallocated_source=row.get("preallocated_source"),
                    reserved=row.get("reserved_bytes"),
                )
            )
        snap.devices.append(DeviceRow(labels, True, dev["used"], dev["total"], idle_bytes))
    return snap


class GpuMemGauges:
    """The collector; ``update`` swaps in a new snapshot, ``collect`` exports it."""

    # On jupyter_server's /metrics: True only while ServerApp.authenticate_prometheus is on.
    kernel_names = False

    def __init__(self) -> None:
        self.touch: Callable[[], None] | None = None
        self._snapshot: Snapshot | None = None
        REGISTRY.register(self)

    def update(self, snapshot: Snapshot | None) -> None:
        self._snapshot = snapshot

    def clear(self) -> None:
        self._snapshot = None

    def describe(self) -> list:
        return []  # collected on every scrape, never at registration

    def collect(self) -> list:
        return self.collect_for(self.kernel_names)

    def collect_for(self, kernel_names: bool) -> list:
        touch = self.touch
        if touch is not None:
            touch()  # SharedSampler.touch: never raises, even once the IOLoop has closed
        snap = self._snapshot
        if snap is None or time.monotonic() - snap.made_at > snap.max_age:
            return []
        return families(snap, time.time(), kernel_names=kernel_names)


def families(snap: Snapshot, now: float, kernel_names: bool = True) -> list[GaugeMetricFamily]:
    """Every metric family of a snapshot, seconds since last activity taken at ``now``; kernels
    with their id and notebook path only with ``kernel_names``."""
    up = GaugeMetricFamily(
        "jupyter_gpumem_nvml_up", "1 when NVML answered the last reading, else 0 (state says why)", labels=["state"]
    )
    up.add_metric([snap.state], 1.0 if snap.state == "ok" else 0.0)
    when = GaugeMetricFamily("jupyter_gpumem_reading_timestamp_seconds", "When the exported GPU readings were taken")
    when.add_metric([], snap.t)
    synthetic = GaugeMetricFamily(
        "jupyter_gpumem_readings_synthetic", "1 when the readings come from a fake NVML world (synthetic data), else 0"
    )
    synthetic.add_metric([], 1.0 if snap.synthetic else 0.0)
    if snap.state != "ok":
        return [up, when, synthetic]
    return [up, when, synthetic, *_device_families(snap), *_kernel_families(snap, now, kernel_names)]


def _device_families(snap: Snapshot) -> list[GaugeMetricFamily]:
    """Per GPU: readable, used, total, and what idle kernels hold."""
    readable = GaugeMetricFamily(
        "jupyter_gpumem_device_readable",
        "1 when NVML can read the GPU, 0 when it lists it but cannot",
        labels=list(DEVICE_LABELS),
    )
    used = GaugeMetricFamily(
        "jupyter_gpumem_device_used_bytes", "GPU memory in use, as NVML reports it", labels=list(DEVICE_LABELS)
    )
    total = GaugeMetricFamily(
        "jupyter_gpumem_device_total_bytes", "GPU memory in total, as NVML reports it", labels=list(DEVICE_LABELS)
    )
    idle = GaugeMetricFamily(
        "jupyter_gpumem_device_idle_kernel_bytes",
        "GPU memory held by this server's kernels that are idle and have had no activity for GpuMem.idle_after seconds",
        labels=list(DEVICE_LABELS),
    )
    for dev in snap.devices:
        readable.add_metric(dev.labels, 1.0 if dev.readable else 0.0)
        if dev.readable:
            used.add_metric(dev.labels, dev.used)
            total.add_metric(dev.labels, dev.total)
            idle.add_metric(dev.labels, dev.idle_kernel_bytes)
    return [readable, used, total, idle]


def _kernel_families(snap: Snapshot, now: float, kernel_names: bool) -> list[GaugeMetricFamily]:
    """Per kernel on a GPU: its bytes, idle seconds, execution state, preallocation and reservation;
    with their id and notebook path only with ``kernel_names``."""
    kernel_labels = [*KERNEL_LABELS, *KERNEL_NAME_LABELS] if kernel_names else list(KERNEL_LABELS)
    k_bytes = GaugeMetricFamily(
        "jupyter_gpumem_kernel_gpu_bytes",
        "GPU memory NVML attributes to a kernel of this server, per GPU",
        labels=kernel_labels,
    )
    k_idle = GaugeMetricFamily(
        "jupyter_gpumem_kernel_idle_seconds",
        "Seconds since jupyter_server last saw a message from the kernel (its last_activity)",
        labels=kernel_labels,
    )
    k_state = GaugeMetricFamily(
        "jupyter_gpumem_kernel_execution_state",
        "1 for the kernel's execution state as jupyter_server knows it (idle, busy, starting, ...)",
        labels=[*kernel_labels, "state"],
    )
    k_pre = GaugeMetricFamily(
        "jupyter_gpumem_kernel_preallocated",
        "1 when the kernel's JAX preallocated its pool on the GPU, 0 when it did not; absent when "
        "not known. source: kernel_settings (the settings the kernel published), reading (it holds "
        "GpuMem.preallocated_fraction of the GPU or more) or launch_environment",
        labels=[*kernel_labels, "source"],
    )
    k_reserved = GaugeMetricFamily(
        "jupyter_gpumem_kernel_reserved_bytes",
        "GPU memory the kernel's published settings reserved when JAX started (fraction x total); "
        "absent where they do not say it preallocated",
        labels=kernel_labels,
    )
    for k in snap.kernels:
        labels = (*k.labels, *k.names) if kernel_names else k.labels
        k_bytes.add_metric(labels, k.used)
        if k.last_activity is not None:
            k_idle.add_metric(labels, max(0.0, now - k.last_activity))
        k_state.add_metric([*labels, k.state], 1.0)
        if k.preallocated is not None:
            k_pre.add_metric([*labels, k.preallocated_source or ""], 1.0 if k.preallocated else 0.0)
        if k.reserved is not None:
            k_reserved.add_metric(labels, k.reserved)
    return [k_bytes, k_idle, k_state, k_pre, k_reserved]


def gauges() -> GpuMemGauges:
    """The process's collector, created and registered on first use."""
    global _gauges
    with _lock:
        if _gauges is None:
            _gauges = GpuMemGauges()
        return _gauges


def set_touch(touch: Callable[[], None] | None) -> None:
    gauges().touch = touch


class _ListenerView:
    """The process's gauges as the metrics listener exports them."""

    def __init__(self, kernel_names: bool) -> None:
        self.kernel_names = kernel_names

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        return gauges().collect_for(self.kernel_names)


def listener_exposition(kernel_names: bool) -> bytes:
    """What the metrics listener (``metrics_listener.py``) answers: only this extension's gauges
    and its culled-kernels counter, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ListenerView(kernel_names))
    registry.register(_culled_kernels)
    return generate_latest(registry)


# Registered once per process in the default registry, like the collector above; exported as
# jupyter_gpumem_culled_kernels_total (prometheus_client adds the suffix).
_culled_kernels = Counter(
    "jupyter_gpumem_culled_kernels",
    "Kernels this server shut down for holding GPU memory while idle (GpuMem.cull_idle_after)",
)


def count_culled_kernel(_pending: object = None) -> None:
    """One more kernel culled (``culling.Culler``'s ``on_cull``)."""
    _culled_kernels.inc()
