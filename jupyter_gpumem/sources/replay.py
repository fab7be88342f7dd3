"""Trace files read back as readings: a whole trace as a Timeline, or a trace served as if live.

``timeline_from_trace`` is how a recording is drawn (``%gpumem monitor --replay``): every sample
and event at its recorded time, with the trace's header on the Timeline so faces label it
"replay", and "synthetic" where the header says so. ``ReplaySource`` serves a trace's device
readings in real time, for the server's replay mode (``c.GpuMem.replay``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from jupyter_gpumem.core.readings import Sample, Timeline
from jupyter_gpumem.core.tracefile import Trace, read_trace


def _load(trace: Trace | str | os.PathLike) -> Trace:
    if isinstance(trace, Trace):
        return trace
    return read_trace(trace)


def timeline_from_trace(trace: Trace | str | os.PathLike) -> Timeline:
    """A Timeline holding every sample and event of a trace, at their recorded times, with the
    trace's header as its ``trace_header``."""
    trace = _load(trace)
    timeline = Timeline(
        max_samples=max(1, len(trace.samples)),
        max_events=max(1, len(trace.events)),
        trace_header=trace.header,
    )
    timeline.extend(trace.samples)
    timeline.extend(trace.events)
    return timeline


class ReplaySource:
    """Serves a trace's samples in real time (scaled by ``speed``), times shifted to now.

    The replay clock starts at construction. With ``loop`` the trace starts over after its
    last sample; without, the last sample is served from then on (``finished`` is True).
    """

    def __init__(
        self,
        trace: Trace | str | os.PathLike,
        speed: float = 1.0,
        loop: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not 0 < speed <= 1e6:
            raise ValueError(f"speed must be a positive number (1.0 is real time), got {speed!r}")
        self.trace = _load(trace)
        if not self.trace.samples:
            why = self.trace.error or "it has no samples"
            raise ValueError(f"cannot replay this trace: {why}")
        self.speed = float(speed)
        self.loop = bool(loop)
        self.clock = clock
        samples = self.trace.samples
        self._offsets = [s.t - samples[0].t for s in samples]
        gaps = sorted(b - a for a, b in zip(self._offsets, self._offsets[1:]) if b > a)
        # The trace's own period (its median gap): the pause before the trace starts over.
        self.period = gaps[len(gaps) // 2] if gaps else 0.5
        self.duration = self._offsets[-1] + self.period
        self._started = clock()

    def _offset(self, now: float) -> float:
        """How far into the trace (in trace seconds) wall time ``now`` is."""
        elapsed = max(0.0, (now - self._started) * self.speed)
        if not self.loop:
            return min(elapsed, self._offsets[-1])
        return elapsed % self.duration

    def _index_at(self, offset: float) -> int:
        # Last sample at or before ``offset`` (binary search; traces can be long).
        lo, hi = 0, len(self._offsets) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._offsets[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    @property
    def finished(self) -> bool:
        if self.loop:
            return False
        return (self.clock() - self._started) * self.speed >= self._offsets[-1]

    def current(self) -> Sample:
        """The sample due now, with ``t`` set to now."""
        now = self.clock()
        original = self.trace.samples[self._index_at(self._offset(now))]
        return replace(original, t=now)

    def read_devices(self) -> Any:
        """The device readings due now, as a live source answers them."""
        return self.current().devices
