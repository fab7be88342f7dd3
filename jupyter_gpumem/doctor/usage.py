"""How much device memory does JAX hold right now? Allocator statistics where there are any, the
live arrays' bytes where not (the CPU), with the measure named.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jupyter_gpumem.core.metrics import pool_bytes
from jupyter_gpumem.core.readings import AllocatorStats, NotAvailable
from jupyter_gpumem.doctor import array_cells
from jupyter_gpumem.settings import apply as allocator_shim


def jax_device_readings() -> tuple:
    readings = allocator_shim.read_jax_devices()
    return () if isinstance(readings, NotAvailable) else readings


def sum_known(values: Iterable[int | None]) -> int | None:
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
        return "live JAX array bytes (no allocator statistics here)"


def with_stats(readings: Iterable) -> list:
    return [r for r in readings if isinstance(r.stats, AllocatorStats)]


def memory_now() -> MemoryNow:
    readings = with_stats(jax_device_readings())
    stats = [r.stats for r in readings]
    in_use = sum_known(s.bytes_in_use for s in stats)
    if stats and in_use is not None:
        devices = tuple((r.jax_id, r.stats.bytes_in_use, r.stats.peak_bytes_in_use) for r in readings)
        return MemoryNow(
            "allocator",
            in_use,
            sum_known(s.peak_bytes_in_use for s in stats),
            sum_known(pool_bytes(r.stats, r.cuda_pool) for r in readings),
            devices,
        )
    # Brought up to date here, at the cost of the arrays made since the last update (and one listing).
    return MemoryNow("live_arrays", array_cells.device_bytes())
