"""A trace file served as if live, for the widget and the server; and whole-trace timelines.

``ReplaySource`` answers the same calls as the live sources (``read_devices()``,
``read_jax()``), so a ``Sampler`` can run on it unchanged: ``Sampler.from_replay(trace)``.
Anything drawn from it is labelled "replay", and "synthetic" when the trace's header says so.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from jupyter_gpumem.model import Event, Sample, Timeline
from jupyter_gpumem.tracefile import Trace, read_trace


def _load(trace: Trace | str | os.PathLike) -> Trace:
    if isinstance(trace, Trace):
        return trace
    return read_trace(trace)


class ReplaySource:
    """Serves a trace's samples in real time (scaled by ``speed``), times shifted to now.

    The replay clock starts at construction. With ``loop`` the trace starts over after its
    last sample; without, the last sample is served from then on (``finished`` is True).
    """

    label = "replay"

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
        self.synthetic = self.trace.synthetic
        samples = self.trace.samples
        self._t0 = samples[0].t
        self._offsets = [s.t - self._t0 for s in samples]
        gaps = [b - a for a, b in zip(self._offsets, self._offsets[1:]) if b > a]
        # The trace's own period: used as the sampler interval and the gap before looping.
        self.interval = max(0.001, min(3600.0, sorted(gaps)[len(gaps) // 2])) if gaps else 0.5
        self.duration = self._offsets[-1] + self.interval
        self.pid = self.trace.header.get("pid") or samples[0].pid
        self._started = clock()
        self._lock = threading.Lock()
        self._index = 0
        self._cycle = 0
        self._event_cycle = 0
        self._last_event_pos: float = -1.0  # trace-time offset of the last event handed out
        self._events = sorted(self.trace.events, key=lambda e: e.t)

    # --- where in the trace "now" is -----------------------------------------------------

    def _position(self, now: float) -> tuple[int, float]:
        """(loop cycle, offset into the trace in trace seconds) for wall time ``now``."""
        elapsed = max(0.0, (now - self._started) * self.speed)
        if not self.loop:
            return 0, min(elapsed, self._offsets[-1])
        cycle = int(elapsed // self.duration)
        return cycle, elapsed - cycle * self.duration

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
        with self._lock:
            self._cycle, offset = self._position(now)
            self._index = self._index_at(offset)
            original = self.trace.samples[self._index]
        return Sample(t=now, pid=original.pid, devices=original.devices, jax=original.jax)

    # --- the live sources' calls ---------------------------------------------------------

    def read_devices(self) -> Any:
        """The NVML reading due now. Also picks the sample ``read_jax`` answers for."""
        return self.current().devices

    def read_jax(self) -> Any:
        """The JAX reading of the sample ``read_devices`` last chose (the same instant)."""
        with self._lock:
            return self.trace.samples[self._index].jax

    def read_events(self) -> list[Event]:
        """Events whose time has come since the last call, with times shifted to now."""
        now = self.clock()
        out: list[Event] = []
        with self._lock:
            cycle, offset = self._position(now)
            if cycle != self._event_cycle:
                self._event_cycle = cycle
                self._last_event_pos = -1.0
            for event in self._events:
                pos = event.t - self._t0
                if self._last_event_pos < pos <= offset:
                    out.append(Event(t=now - (offset - pos) / self.speed, name=event.name, data=event.data))
            self._last_event_pos = offset
        return out


def timeline_from_trace(trace: Trace | str | os.PathLike) -> Timeline:
    """A Timeline holding every sample and event of a trace, at their recorded times."""
    trace = _load(trace)
    timeline = Timeline(max_samples=max(1, len(trace.samples)), max_events=max(1, len(trace.events)))
    timeline.extend(trace.samples)
    timeline.extend(trace.events)
    return timeline
