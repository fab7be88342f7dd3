"""Gauges on jupyter_server's own ``/metrics`` (prometheus_client's default registry).

Registered once per process (the registry is global; tests start many servers in one process).
Updated from the shared sampler's readings; label sets of devices or kernels that went away are
removed. Replayed traces are never exported: they are not this machine's state.
"""

from __future__ import annotations

import threading
from typing import Callable

from prometheus_client import REGISTRY, Gauge

_lock = threading.Lock()
_gauges: "GpuMemGauges | None" = None


class _TouchCollector:
    """Exports nothing; tells the shared sampler that someone is watching (a scrape)."""

    def __init__(self) -> None:
        self.touch: Callable[[], None] | None = None

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        touch = self.touch
        if touch is not None:
            touch()  # SharedSampler.touch: never raises, even once the IOLoop has closed
        return []


class GpuMemGauges:
    def __init__(self) -> None:
        self.device_used = Gauge(
            "jupyter_gpumem_device_used_bytes", "GPU memory in use, as NVML reports it", ["index", "uuid", "name"]
        )
        self.device_total = Gauge(
            "jupyter_gpumem_device_total_bytes", "GPU memory in total, as NVML reports it", ["index", "uuid", "name"]
        )
        self.kernel_bytes = Gauge(
            "jupyter_gpumem_kernel_gpu_bytes",
            "GPU memory NVML attributes to a kernel of this server, per GPU",
            ["kernel_id", "notebook_path", "index"],
        )
        self.reading_time = Gauge(
            "jupyter_gpumem_reading_timestamp_seconds", "When the exported GPU readings were taken"
        )
        self.touch_collector = _TouchCollector()
        REGISTRY.register(self.touch_collector)
        self._devices: set[tuple[str, ...]] = set()
        self._kernels: set[tuple[str, ...]] = set()

    def update(self, report: dict) -> None:
        """Set every gauge from a /devices report; drop label sets no longer in it."""
        devices: set[tuple[str, ...]] = set()
        kernels: dict[tuple[str, ...], float] = {}
        if report["source"] == "nvml" and report["state"] == "ok":
            for dev in report["devices"]:
                if not dev["readable"]:
                    continue
                labels = (str(dev["index"]), dev["uuid"] or "", dev["name"] or "")
                devices.add(labels)
                self.device_used.labels(*labels).set(dev["used"])
                self.device_total.labels(*labels).set(dev["total"])
                for proc in dev["processes"]:
                    if proc["kind"] != "kernel":
                        continue
                    key = (proc["kernel_id"], proc["notebook_path"] or "", str(dev["index"]))
                    kernels[key] = kernels.get(key, 0) + (proc["used"] or 0)
            self.reading_time.set(report["t"])
        for key, value in kernels.items():
            self.kernel_bytes.labels(*key).set(value)
        with _lock:
            for stale in self._devices - devices:
                _remove(self.device_used, stale)
                _remove(self.device_total, stale)
            for stale in self._kernels - set(kernels):
                _remove(self.kernel_bytes, stale)
            self._devices, self._kernels = devices, set(kernels)

    def clear(self) -> None:
        self.update({"source": None, "state": None, "devices": []})


def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:
        pass


def gauges() -> GpuMemGauges:
    """The process's gauges, created and registered on first use."""
    global _gauges
    with _lock:
        if _gauges is None:
            _gauges = GpuMemGauges()
        return _gauges


def set_touch(touch: Callable[[], None] | None) -> None:
    gauges().touch_collector.touch = touch


