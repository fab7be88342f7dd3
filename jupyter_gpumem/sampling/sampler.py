"""One sampler per process: reads every source, keeps a bounded Timeline, notifies subscribers.

A single daemon thread runs only while somebody is subscribed; with no subscriber there is no
thread at all. Nothing here raises into the kernel: a source that fails becomes a
``NotAvailable(ERROR, ...)`` in that sample, and a subscriber that fails is logged and left out
of nothing else. Importing this module is cheap (no jax, pynvml, plotly or ipywidgets).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from jupyter_gpumem.core import sites
from jupyter_gpumem.core.attribution import pid_in_namespace
from jupyter_gpumem.core.magic_args import check_interval
from jupyter_gpumem.core.readings import ERROR, DeviceReading, Event, NotAvailable, Sample, Timeline
from jupyter_gpumem.sampling.cell_hooks import CellHooks
from jupyter_gpumem.sources.torch_memory import read_torch

log = logging.getLogger(__name__)
# How long closing the last subscription waits for a reading in progress to finish.
_JOIN_TIMEOUT = 10.0
# The most of the sampler thread's time that reading JAX's live CPU arrays may take: a read that
# took longer (many arrays) is reused until then, so the kernel keeps its GIL.
_ARRAYS_SHARE = 0.05

SampleCallback = Callable[[Sample], None]
EventCallback = Callable[[Event], None]


class Subscription:
    """A handle on a subscriber; ``close()`` stops its callbacks (idempotent)."""

    def __init__(self, sampler: Sampler, callback: Callable, interval: float | None, cpu_arrays: bool = False):
        self._sampler = sampler
        self.callback = callback
        self.interval = interval
        self.cpu_arrays = cpu_arrays  # its samples should carry JAX's live CPU arrays
        self.last_t: float | None = None
        self.closed = False

    def close(self) -> None:
        self._sampler._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _safely(read: Callable[[], Any], what: str) -> Any:
    try:
        return read()
    except Exception as exc:  # a source must never take the kernel down
        log.debug("reading %s failed", what, exc_info=True)
        return NotAvailable(ERROR, f"reading {what} failed: {type(exc).__name__}: {exc}")


class Sampler:
    """Samples ``read_devices`` (NVML) and ``read_jax`` (JAX allocators) into a Timeline.

    ``interval`` is the default period; each subscriber may ask for its own, and the thread
    runs at the smallest one asked for. An interval out of range raises MagicUsageError.
    ``read_cpu_arrays`` (JAX's live arrays where JAX runs on the CPU) is read only on the
    thread's ticks while a subscriber asked for them (a live monitor), and at most
    ``_ARRAYS_SHARE`` of the time.
    """

    def __init__(
        self,
        read_devices: Callable[[], Any],
        read_jax: Callable[[], Any],
        interval: float = 0.5,
        timeline: Timeline | None = None,
        clock: Callable[[], float] = time.time,
        *,
        pid: int | None = None,
        pid_exists: Callable[[int], bool] | None = None,
        read_cpu_arrays: Callable[[], Any] | None = None,
    ):
        self.read_devices = read_devices
        self.read_jax = read_jax
        self.read_cpu_arrays = read_cpu_arrays if read_cpu_arrays is not None else _read_cpu_arrays
        self._arrays_due = 0.0  # time.monotonic() from which live arrays are read again
        self._arrays_last: Any = None
        self.interval = check_interval(interval)
        self.timeline = timeline if timeline is not None else Timeline()
        self.clock = clock
        self.pid = os.getpid() if pid is None else pid
        self.pid_exists = pid_exists if pid_exists is not None else _pid_exists
        self._lock = threading.Lock()  # guards subscriptions and the thread handle
        self._sample_lock = threading.Lock()  # one reading at a time
        self._wake = threading.Event()
        self._subs: list[Subscription] = []
        self._event_subs: list[Subscription] = []
        self._thread: threading.Thread | None = None

    # --- reading ---------------------------------------------------------------------------

    def sample_once(self, *, cpu_arrays: bool = False) -> Sample:
        """Read every source now, append the Sample to the timeline and return it. JAX's live
        CPU arrays are read only with ``cpu_arrays`` (the thread's ticks)."""
        with self._sample_lock:
            devices = _safely(self.read_devices, "GPU devices (NVML)")
            not_here = _safely(lambda: pids_not_here(devices, self.pid_exists), "which NVML pids are processes here")
            jax = _safely(self.read_jax, "JAX devices")
            torch = _safely(read_torch, "PyTorch's CUDA allocator")
            sample = Sample(
                t=self.clock(),
                pid=self.pid,
                devices=devices,
                jax=jax,
                pids_not_here=None if isinstance(not_here, NotAvailable) else not_here,
                torch=torch,
                cpu_arrays=self._cpu_arrays_now() if cpu_arrays else None,
            )
            self.timeline.append(sample)
        return sample

    def _cpu_arrays_now(self) -> Any:
        """JAX's live CPU arrays, read again once the last read's share of time has passed."""
        started = time.monotonic()
        if started < self._arrays_due:
            return self._arrays_last
        self._arrays_last = _safely(self.read_cpu_arrays, "JAX's live arrays on the CPU")
        self._arrays_due = started + (time.monotonic() - started) / _ARRAYS_SHARE
        return self._arrays_last

    def add_event(self, name: str, /, **data: Any) -> Event:
        """Record an event now (cell start/end, OOM, settings, marker); cheap, never raises."""
        event = Event(t=self.clock(), name=name, data=data)
        self._publish_event(event)
        return event

    def _publish_event(self, event: Event) -> None:
        self.timeline.add_event(event)
        with self._lock:
            subs = list(self._event_subs)
        for sub in subs:
            _call(sub, event)

    # --- subscriptions ---------------------------------------------------------------------

    def subscribe(
        self, callback: SampleCallback, interval: float | None = None, *, cpu_arrays: bool = False
    ) -> Subscription:
        """Call ``callback(sample)`` on the sampler thread every ``interval`` seconds; with
        ``cpu_arrays`` the samples carry JAX's live arrays where JAX runs on the CPU.

        Starts the thread if it is not running. ``close()`` the returned Subscription to stop;
        the thread ends when the last one closes.
        """
        if interval is not None:
            interval = check_interval(interval)
        sub = Subscription(self, callback, interval, cpu_arrays)
        with self._lock:
            self._subs.append(sub)
            if self._thread is None:
                self._wake = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._wake,), name="jupyter-gpumem-sampler", daemon=True
                )
                self._thread.start()
            wake = self._wake
        wake.set()  # re-plan with the new interval
        return sub

    def subscribe_events(self, callback: EventCallback) -> Subscription:
        """Call ``callback(event)`` for every event, in the thread that adds it. Starts no thread."""
        sub = Subscription(self, callback, None)
        with self._lock:
            self._event_subs.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            sub.closed = True
            if sub in self._event_subs:
                self._event_subs.remove(sub)
                return
            if sub in self._subs:
                self._subs.remove(sub)
            thread = None
            if not self._subs and self._thread is not None:
                # Retire this thread now; a later subscribe starts a fresh one.
                thread, self._thread = self._thread, None
            wake = self._wake
        wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=_JOIN_TIMEOUT)

    @property
    def wants_cpu_arrays(self) -> bool:
        """Whether an open subscriber (a live monitor) asked for JAX's live CPU arrays: only then
        are they read, on the thread's ticks or in a sample a recording takes beside them."""
        with self._lock:
            return any(s.cpu_arrays for s in self._subs)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subs)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def effective_interval(self) -> float:
        """The period the thread runs at: the smallest any subscriber asked for (a subscriber
        that asked for none counts as the default ``interval``, as does having none)."""
        with self._lock:
            return min(
                (s.interval if s.interval is not None else self.interval for s in self._subs), default=self.interval
            )

    def stop(self) -> None:
        """Close every subscription and wait for the thread to end."""
        with self._lock:
            subs = list(self._subs) + list(self._event_subs)
        for sub in subs:
            sub.close()

    # --- the thread ------------------------------------------------------------------------

    def _run(self, wake: threading.Event) -> None:
        me = threading.current_thread()
        next_due = time.monotonic()
        while True:
            with self._lock:
                if self._thread is not me:
                    return
            interval = self.effective_interval()
            now = time.monotonic()
            if now < next_due:
                # Event-based wait: subscribe/close/stop wake it at once.
                wake.wait(next_due - now)
                wake.clear()
                continue
            started = time.monotonic()
            sample = self.sample_once(cpu_arrays=self.wants_cpu_arrays)
            with self._lock:
                if self._thread is not me:
                    return
                subs = list(self._subs)
            for sub in subs:
                if sub.closed:
                    continue
                every = sub.interval if sub.interval is not None else self.interval
                # A little slack so a 0.5 s subscriber is not skipped by jitter on a 0.5 s tick.
                if sub.last_t is None or sample.t - sub.last_t >= every * 0.9 or sample.t < sub.last_t:
                    sub.last_t = sample.t
                    _call(sub, sample)
            # A slow source skips ticks rather than queueing them.
            elapsed = time.monotonic() - started
            next_due = started + interval * max(1, math.ceil(elapsed / interval))


_pid_exists = pid_in_namespace


def pids_not_here(devices: Any, pid_exists: Callable[[int], bool]) -> frozenset[int]:
    """The pids NVML lists that are not processes in this PID namespace (a container sees the
    host's pids, NVIDIA/nvidia-docker#1483)."""
    if isinstance(devices, NotAvailable):
        return frozenset()
    listed = {
        p.pid
        for d in devices
        if isinstance(d, DeviceReading) and not isinstance(d.processes, NotAvailable)
        for p in d.processes
    }
    return frozenset(pid for pid in listed if not pid_exists(pid))


def _call(sub: Subscription, item: Any) -> None:
    try:
        sub.callback(item)
    except Exception:
        log.exception("a jupyter-gpumem subscriber failed; it stays subscribed, the others are unaffected")


# --- the process's sampler ---------------------------------------------------------------------

_sampler: Sampler | None = None
_sampler_lock = threading.Lock()


class _LazyNvml:
    """Creates the NVML source on first read, in the sampler thread, so import stays cheap."""

    def __init__(self) -> None:
        self._source: Any = None

    def __call__(self) -> Any:
        if self._source is None:
            from jupyter_gpumem.sources.nvml import NvmlSource

            self._source = NvmlSource()
        return self._source.read()


def _read_jax() -> Any:
    from jupyter_gpumem.settings.apply import read_jax_devices

    return read_jax_devices()


def _read_cpu_arrays() -> Any:
    from jupyter_gpumem.sources.jax_arrays import cpu_arrays

    return cpu_arrays()


def get_sampler() -> Sampler:
    """This process's sampler (created on first call; starts no thread by itself)."""
    global _sampler
    with _sampler_lock:
        if _sampler is None:
            _sampler = Sampler(_LazyNvml(), _read_jax)
        return _sampler


# --- IPython cell events -----------------------------------------------------------------------

_cell_hooks = CellHooks()


def register_cell_events(shell: Any, sampler: Sampler | None = None) -> None:
    """Add ``cell_start``/``cell_end`` events to the sampler's timeline for each cell run.

    Idempotent per shell. The hooks only append an event: no sampling, no imports. Once JAX's
    backend exists, the post-cell hook also notes which of the variables JAX read at its start
    the cell changed (``settings.started_with.after_cell``: a few ``os.environ`` reads).
    """
    if shell in _cell_hooks:
        return
    target = sampler if sampler is not None else get_sampler()

    # IPython 9.8+ counts the cell before pre_run_cell fires, earlier ones after the cell ran
    # (sites.counts_cells_first)
    def pre_run_cell(info: Any = None) -> None:
        count = sites.running_cell_number(shell, stored=getattr(info, "store_history", True))
        target.add_event("cell_start", execution_count=count)

    def post_run_cell(result: Any = None) -> None:
        count = sites.finished_cell_number(result)
        target.add_event("cell_end", execution_count=count, success=bool(getattr(result, "success", True)))
        if "jax._src.xla_bridge" in sys.modules:
            _note_late_settings(count)

    _cell_hooks.add(shell, pre_run_cell, post_run_cell)


def _note_late_settings(cell: int | None) -> None:
    try:
        from jupyter_gpumem.settings.started_with import after_cell

        after_cell(cell)
    except (ImportError, AttributeError, LookupError, TypeError, ValueError, RuntimeError, OSError):
        pass  # a nicety for status; never a traceback under a cell


def unregister_cell_events(shell: Any) -> None:
    """Remove the hooks ``register_cell_events`` added; a no-op if there are none."""
    _cell_hooks.remove(shell)
