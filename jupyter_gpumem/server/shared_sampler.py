"""One sampler shared by every client of the server.

Requests read the latest cached reading. A request that finds the cache older than the poll
interval triggers one read, which concurrent requests share. While anyone asks, a loop on the
IOLoop keeps the cache fresh; it stops after ``idle_intervals`` intervals with no request.
Reads run on one worker thread, so a slow NVML call never stalls the IOLoop and there is never
more than one NVML read at a time, however many clients poll. The thread exists only while the
loop runs: it ends when the loop goes idle (a later request starts a fresh one) and on ``stop()``.
It is a daemon thread of our own, not an executor's: Python joins executor threads at exit
(concurrent/futures/thread.py, ``_python_exit``), so a read hung in the driver would hold the
server's exit until NVML returned, or for ever.

A first read that NVML does not answer within ``first_read_timeout`` becomes a kept "did not
answer" reading: every request after it is answered with it at once, not after another wait,
until NVML answers.

The sources answer NVML's and the trace's failures as ``NotAvailable`` readings themselves;
``_read_safely`` is the one place that catches the unexpected, so a bug in a source is a
reading that says so, never a dead loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any

from jupyter_gpumem.core.readings import ERROR, NotAvailable
from jupyter_gpumem.server.readings import DeviceSource, Reading

log = logging.getLogger(__name__)
# How long stop() waits for a read in progress before leaving its thread to end by itself (a
# read takes milliseconds; one still running is hung in the driver, and its thread is a daemon).
READER_JOIN_TIMEOUT = 0.5


class _Reader:
    """One daemon thread that runs the functions given to ``submit``, one at a time, in order."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: set[Future] = set()
        self.thread = threading.Thread(target=self._work, name="jupyter-gpumem-nvml", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        self._pending.add(future)
        self._jobs.put((fn, future))
        return future

    def shutdown(self, cancel_pending: bool = False) -> None:
        """No more jobs: the thread ends after the one it runs (and, unless cancelled, the queued ones)."""
        if cancel_pending:
            for future in list(self._pending):
                future.cancel()  # a running one is not cancelled
        self._jobs.put(None)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                self._pending.discard(future)
                continue
            try:
                result = fn()
            except BaseException as exc:  # handed to the waiting coroutine, as an executor does
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._pending.discard(future)


class SharedSampler:
    """Caches readings from ``source.read()``; see the module docstring."""

    def __init__(
        self,
        source: DeviceSource,
        interval: float = 2.0,
        idle_intervals: int = 10,
        on_reading: Callable[[Reading], Coroutine[Any, Any, None]] | None = None,
        first_read_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.interval = float(interval)
        self.idle_intervals = int(idle_intervals)
        self.on_reading = on_reading
        self.first_read_timeout = first_read_timeout
        self._clock = clock
        self._executor: _Reader | None = None
        self._unanswered: Reading | None = None  # the kept "did not answer" reading
        self._reader_threads: set[threading.Thread] = set()
        self._latest: Reading | None = None
        self._latest_at = -math.inf
        self._last_request = -math.inf
        self._inflight: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.reads = 0

    # --- what handlers call ------------------------------------------------------------------

    async def latest(self) -> Reading:
        """The latest reading, read now if the cache is older than the interval."""
        self._note_request()
        if self._latest is not None and self._clock() - self._latest_at <= self.interval:
            return self._latest
        if self._latest is not None and self._latest is self._unanswered:
            return self._latest  # NVML has still not answered: say so now, not after another wait
        if self._latest is None:
            try:
                return await asyncio.wait_for(asyncio.shield(self._refresh()), self.first_read_timeout)
            except asyncio.TimeoutError:
                return self._keep_unanswered()
        # A stale reading beats a hung request: wait one interval for the fresh one at most.
        try:
            return await asyncio.wait_for(asyncio.shield(self._refresh()), self.interval)
        except asyncio.TimeoutError:
            return self._latest

    def touch(self) -> None:
        """Note a watcher from any thread (a /metrics scrape): keeps or starts the loop.

        Before any request has run the loop is not known yet; jupyter_server answers /metrics
        on its IOLoop's thread (PrometheusMetricsHandler.get calls generate_latest, 2.21.1), so a
        scrape there finds the running loop and starts reading. Elsewhere, with no loop known,
        there is nothing to start."""
        loop = self._loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on a thread running a loop
                return
        if self._closed:
            return
        try:
            loop.call_soon_threadsafe(self._note_request)
        except RuntimeError:  # loop closed
            pass

    @property
    def nvml_calls(self) -> int:
        return self.source.calls

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """Stop the loop and the reader thread, waiting up to READER_JOIN_TIMEOUT for a read in progress."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._retire_reader(cancel_pending=True)
        for thread in list(self._reader_threads):
            if thread is not threading.current_thread():
                thread.join(READER_JOIN_TIMEOUT)
            if not thread.is_alive():
                self._reader_threads.discard(thread)

    # --- inside --------------------------------------------------------------------------

    def _note_request(self) -> None:
        if self._closed:
            return
        self._last_request = self._clock()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not self.running:
            self._task = self._loop.create_task(self._run())

    def _refresh(self) -> asyncio.Future:
        """The read in flight, or a new one: never two at once."""
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._read_once())
        return self._inflight

    def _reader(self) -> _Reader:
        if self._executor is None:
            self._executor = _Reader()
        return self._executor

    def _keep_unanswered(self) -> Reading:
        """The first read has not answered: keep a reading that says so, until one does."""
        if self._latest is None:
            reading = self._error_reading(f"NVML did not answer within {self.first_read_timeout:g} s")
            self._latest, self._latest_at, self._unanswered = reading, self._clock(), reading
            if self.on_reading is not None:
                task = asyncio.get_running_loop().create_task(self.on_reading(reading))
                task.add_done_callback(_log_failure)
        return self._latest

    def _retire_reader(self, cancel_pending: bool = False) -> None:
        """Shut the reader down; a read in progress finishes, then its thread ends."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(cancel_pending=cancel_pending)
        for thread in list(self._reader_threads):
            if not thread.is_alive():
                self._reader_threads.discard(thread)

    def _retire_after_read(self) -> None:
        """Retire the reader once no read is in flight, unless the loop has started again."""
        inflight = self._inflight
        if inflight is not None and not inflight.done():
            inflight.add_done_callback(lambda _: None if self.running or self._closed else self._retire_reader())
            return
        self._retire_reader()

    async def _read_once(self) -> Reading:
        loop = asyncio.get_running_loop()
        reading = await asyncio.wrap_future(self._reader().submit(self._read_safely))
        self._latest, self._latest_at, self._unanswered = reading, self._clock(), None
        self.reads += 1
        if self.on_reading is not None:
            # A coroutine function (the service's gauges update): its failures are logged by
            # _log_failure and never stop the loop.
            task = loop.create_task(self.on_reading(reading))
            task.add_done_callback(_log_failure)
        return reading

    def _read_safely(self) -> Reading:
        self._reader_threads.add(threading.current_thread())
        try:
            return self.source.read()
        except Exception as exc:  # the one catch-all for the unexpected: a bug, not NVML's failure
            log.exception("jupyter-gpumem: reading devices failed")
            return self._error_reading(f"reading devices failed: {type(exc).__name__}: {exc}")

    def _error_reading(self, reason: str) -> Reading:
        return Reading(t=time.time(), devices=NotAvailable(ERROR, reason), source=self.source.label)

    async def _run(self) -> None:
        try:
            while not self._closed and self._clock() - self._last_request <= self.interval * self.idle_intervals:
                wait = self._latest_at + self.interval - self._clock()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                await self._refresh()  # never raises: _read_safely answers every failure
        except asyncio.CancelledError:
            pass
        finally:
            if not self._closed:
                self._retire_after_read()  # idle: no thread waits for the next request


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("jupyter-gpumem: updating after a reading failed", exc_info=task.exception())
