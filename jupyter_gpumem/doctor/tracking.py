"""How much memory did a block of code (or a cell) add, and how high did it peak? ``track()``."""

from __future__ import annotations

import time
from typing import Any

from jupyter_gpumem.core.readings import (
    NotAvailable,
    Sample,
)
from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.text import bytes_or_na
from jupyter_gpumem.doctor.usage import MemoryNow, memory_now, sum_known, with_stats


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

    @property
    def noted_arrays(self) -> bool:
        """Whether ``start`` read the live arrays' bytes (no allocator statistics), which brings
        ``array_cells`` up to date."""
        return self._start is not None and self._start.measure == "live_arrays"

    def start(self) -> Track:
        self._start = memory_now()
        self._t0 = time.perf_counter()
        if self._start.measure == "allocator" and self.sample_interval:
            from jupyter_gpumem.sampling.sampler import get_sampler

            def on_sample(sample: Sample) -> None:
                if not isinstance(sample.jax, NotAvailable):
                    readings = with_stats(sample.jax)
                    total = sum_known(r.stats.bytes_in_use for r in readings)
                    if total is not None:
                        self._samples.append(total)
                    for r in readings:
                        if r.stats.bytes_in_use is not None:
                            seen = self._device_max.get(r.jax_id, 0)
                            self._device_max[r.jax_id] = max(seen, r.stats.bytes_in_use)

            self._sub = get_sampler().subscribe(on_sample, interval=self.sample_interval)
        return self

    def stop(self) -> Track:
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

    def __enter__(self) -> Track:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def line(self, label: str = "", caveat: bool = True) -> str:
        """One quiet line: change, peak (rise of peak_bytes_in_use and sampled max), pool growth.
        Without allocator statistics, ``caveat`` adds why peak and pool are missing."""
        head = f"gpumem: {label}: " if label else "gpumem: "
        if self.measure == "allocator":
            parts = [f"in use {_signed(self.delta)} (now {bytes_or_na(self.after)})"]
            parts.append(f"peak_bytes_in_use {_signed(self.peak_rise) if self.peak_rise is not None else 'n/a'}")
            parts.append(f"sampled max {bytes_or_na(self.sampled_max)}")
            parts.append(f"pool {_signed(self.pool_growth) if self.pool_growth is not None else 'n/a'}")
            return head + "; ".join(parts)
        text = head + f"live arrays {_signed(self.delta)} (now {bytes_or_na(self.after)})"
        if caveat:
            text += "; no allocator statistics here (CPU), so peak and pool growth are not measured"
        return text

    def to_json(self) -> dict:
        return {
            k: getattr(self, k)
            for k in (
                "measure",
                "before",
                "after",
                "delta",
                "peak",
                "peak_rise",
                "sampled_max",
                "pool_growth",
                "seconds",
            )
        }

    def __repr__(self) -> str:
        return f"<Track {self.line()}>"


def _signed(n: int | None) -> str:
    if n is None:
        return "n/a"
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def track(sample_interval: float | None = 0.05) -> Track:
    """A context manager measuring a block of code: ``with track() as t: ...; t.delta, t.peak``."""
    return Track(sample_interval)
