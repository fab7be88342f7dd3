"""The shared sampler: one read for many requests, a loop that stops when idle."""

from __future__ import annotations

import asyncio
import threading
import time

from jupyter_gpumem.server.readings import Reading
from jupyter_gpumem.server.shared_sampler import READER_JOIN_TIMEOUT, SharedSampler

from awaiting import WITHIN, until


class CountingSource:
    label = "nvml"

    def __init__(self, gate: threading.Event | None = None):
        self.calls = 0
        self.gate = gate
        self.threads: set[str] = set()
        self.thread_objects: set[threading.Thread] = set()

    def read(self) -> Reading:
        self.threads.add(threading.current_thread().name)
        self.thread_objects.add(threading.current_thread())
        if self.gate is not None:
            self.gate.wait(WITHIN)  # a read hung until the test opens the gate
        self.calls += 1
        return Reading(t=time.time(), devices=(), source="nvml")


async def test_concurrent_requests_share_one_read():
    source = CountingSource()
    sampler = SharedSampler(source, interval=60)
    try:
        await asyncio.gather(*(sampler.latest() for _ in range(100)))
        assert source.calls == 1
    finally:
        sampler.stop()


async def test_fresh_cache_is_served_without_reading():
    source = CountingSource()
    sampler = SharedSampler(source, interval=60)
    try:
        first = await sampler.latest()
        assert await sampler.latest() is first
        assert source.calls == 1
    finally:
        sampler.stop()


async def test_reads_run_on_one_worker_thread_not_the_event_loop():
    source = CountingSource()
    sampler = SharedSampler(source, interval=0.05, idle_intervals=1)
    try:
        await sampler.latest()
        await asyncio.wait_for(sampler._task, WITHIN)
        assert source.threads and threading.current_thread().name not in source.threads
        assert len(source.threads) == 1
    finally:
        sampler.stop()


async def test_loop_stops_after_idle_intervals():
    source = CountingSource()
    sampler = SharedSampler(source, interval=0.05, idle_intervals=2)
    try:
        await sampler.latest()
        assert sampler.running
        await asyncio.wait_for(sampler._task, WITHIN)
        assert not sampler.running
        calls = source.calls
        assert 1 <= calls <= 4
    finally:
        sampler.stop()


async def test_slow_read_does_not_block_the_event_loop():
    gate = threading.Event()
    source = CountingSource(gate)
    sampler = SharedSampler(source, interval=60)
    try:
        pending = asyncio.ensure_future(sampler.latest())
        await asyncio.sleep(0.05)  # the loop still runs while the read is stuck
        assert not pending.done()
        gate.set()
        await asyncio.wait_for(pending, WITHIN)
        assert source.calls == 1
    finally:
        sampler.stop()


async def test_read_that_never_answers_becomes_an_error_reading():
    gate = threading.Event()
    sampler = SharedSampler(CountingSource(gate), interval=60, first_read_timeout=0.05)
    try:
        reading = await sampler.latest()
        assert reading.devices.code == "error" and "did not answer" in reading.devices.reason
    finally:
        gate.set()
        sampler.stop()


async def test_source_that_raises_becomes_an_error_reading():
    class Broken:
        label = "nvml"

        def read(self):
            raise OSError("bus error")

    sampler = SharedSampler(Broken(), interval=60)
    try:
        reading = await sampler.latest()
        assert "bus error" in reading.devices.reason
    finally:
        sampler.stop()


async def test_stop_leaves_no_reader_thread():
    source = CountingSource()
    sampler = SharedSampler(source, interval=60)
    await sampler.latest()
    (reader,) = source.thread_objects
    assert reader.is_alive()
    sampler.stop()
    assert not reader.is_alive()


async def test_reader_thread_ends_when_the_loop_goes_idle():
    source = CountingSource()
    sampler = SharedSampler(source, interval=0.05, idle_intervals=1)
    try:
        await sampler.latest()
        await asyncio.wait_for(sampler._task, WITHIN)
        assert source.thread_objects
        for reader in source.thread_objects:
            reader.join(WITHIN)  # shut down when the loop ended: the thread ends by itself
            assert not reader.is_alive()
    finally:
        sampler.stop()


async def test_a_request_after_the_idle_stop_reads_on_a_fresh_thread():
    source = CountingSource()
    sampler = SharedSampler(source, interval=0.05, idle_intervals=1)
    try:
        await sampler.latest()
        await asyncio.wait_for(sampler._task, WITHIN)
        first = set(source.thread_objects)
        calls = source.calls
        await sampler.latest()
        assert source.calls > calls and source.thread_objects - first
    finally:
        sampler.stop()


async def test_an_unanswered_first_read_is_kept_and_answered_at_once_until_nvml_answers():
    """A hung NVML: the first request waits first_read_timeout, the ones after it do not."""
    gate = threading.Event()
    seen = []

    async def on_reading(reading):
        seen.append(reading)

    sampler = SharedSampler(CountingSource(gate), interval=0.05, first_read_timeout=0.3, on_reading=on_reading)
    try:
        first = await sampler.latest()
        assert first.devices.code == "error" and "did not answer within 0.3 s" in first.devices.reason
        await asyncio.sleep(0.1)  # past the interval: the kept reading is older than a fresh one would be
        for _ in range(5):
            later = asyncio.ensure_future(sampler.latest())
            await asyncio.sleep(0)  # one turn of the loop: an answer that waited for NVML is not done
            assert later.done() and later.result() is first  # before: each waited 0.3 s
        assert seen and seen[0] is first  # the gauges say NVML is not answering
        gate.set()

        async def answered():
            reading = await sampler.latest()
            return reading if reading is not first else None

        reading = await until(answered, "NVML's reading", every=0.02)
        assert reading.devices == ()  # NVML answered: its reading replaces the kept one
    finally:
        gate.set()
        sampler.stop()


async def test_the_reader_thread_is_a_daemon_so_a_hung_read_never_holds_up_exit():
    """Python joins executor threads at exit (concurrent/futures/thread.py, _python_exit,
    CPython 3.11); a daemon thread it does not."""
    gate = threading.Event()
    source = CountingSource(gate)
    sampler = SharedSampler(source, interval=60, first_read_timeout=0.05)
    try:
        await sampler.latest()
        (reader,) = source.thread_objects
        assert reader.daemon
        started = time.monotonic()
        sampler.stop()
        # stop waited READER_JOIN_TIMEOUT for the read, not until it ends (the gate stays shut)
        assert time.monotonic() - started < READER_JOIN_TIMEOUT + 5 and reader.is_alive()
    finally:
        gate.set()
