"""The sampler: one thread only while subscribed, never raising, cell events from IPython."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.magic_args import MagicUsageError
from jupyter_gpumem.core.readings import Timeline
from jupyter_gpumem.sampling.sampler import Sampler, get_sampler, register_cell_events, unregister_cell_events

DEVICES = (model.DeviceReading(0, "GPU", "GPU-1", 100, 40, 60),)


def _sampler(**kwargs) -> Sampler:
    kwargs.setdefault("interval", 0.01)
    return Sampler(lambda: DEVICES, lambda: (), **kwargs)


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "jupyter-gpumem-sampler"]


def _wait_for_samples(sampler: Sampler, n: int, cpu_arrays: bool = False) -> list:
    """Subscribe until ``n`` samples arrived; returns them (waits on an event, not a sleep)."""
    got, done = [], threading.Event()

    def callback(sample):
        got.append(sample)
        if len(got) >= n:
            done.set()

    sub = sampler.subscribe(callback, cpu_arrays=cpu_arrays)
    assert done.wait(10), "the sampler delivered too few samples"
    sub.close()
    return got


def test_sample_once_reads_both_sources_into_the_timeline():
    sampler = _sampler(clock=lambda: 42.0, pid=9)
    sample = sampler.sample_once()
    assert (sample.t, sample.pid, sample.devices, sample.jax) == (42.0, 9, DEVICES, ())
    assert sampler.timeline.latest() is sample


def test_failing_source_becomes_not_available_error():
    def broken():
        raise RuntimeError("driver went away")

    sample = Sampler(broken, lambda: (), interval=0.1).sample_once()
    assert sample.devices.code == model.ERROR and "driver went away" in sample.devices.reason


ARRAYS = model.CpuArraysReading(bytes=4096, arrays=1)


def test_a_sample_read_outside_the_thread_does_not_read_the_live_arrays():
    """``sample_once`` serves typed commands and checks; only a monitor's ticks read the arrays."""
    calls = []
    sampler = _sampler(read_cpu_arrays=lambda: calls.append(1) or ARRAYS)
    assert sampler.sample_once().cpu_arrays is None
    assert calls == []


def test_a_monitor_s_samples_carry_jax_s_live_arrays_on_the_cpu():
    sampler = _sampler(read_cpu_arrays=lambda: ARRAYS)
    assert _wait_for_samples(sampler, 2, cpu_arrays=True)[-1].cpu_arrays == ARRAYS


def test_a_subscriber_that_did_not_ask_for_live_arrays_never_has_them_read():
    """A recording or the doctor's sampling of cells subscribes too; only a monitor asks."""
    calls = []
    sampler = _sampler(read_cpu_arrays=lambda: calls.append(1) or ARRAYS)
    samples = _wait_for_samples(sampler, 3)
    assert [s.cpu_arrays for s in samples] == [None, None, None] and calls == []


def test_the_sampler_wants_live_arrays_only_while_a_subscriber_that_asked_is_open():
    sampler = _sampler(read_cpu_arrays=lambda: ARRAYS)
    recording = sampler.subscribe(lambda s: None)
    assert sampler.wants_cpu_arrays is False
    monitor = sampler.subscribe(lambda s: None, cpu_arrays=True)
    assert sampler.wants_cpu_arrays is True
    monitor.close()
    assert sampler.wants_cpu_arrays is False
    recording.close()


def test_live_arrays_that_fail_to_read_are_not_available_and_the_thread_goes_on():
    def broken():
        raise RuntimeError("client gone")

    samples = _wait_for_samples(_sampler(read_cpu_arrays=broken), 2, cpu_arrays=True)
    reading = samples[-1].cpu_arrays
    assert (
        reading.code == model.ERROR
        and "JAX's live arrays on the CPU failed: RuntimeError: client gone" in reading.reason
    )


def test_a_slow_live_arrays_read_is_reused_until_its_share_of_time_has_passed():
    """A read that took 50 ms is not repeated for 1 s (5%): the kernel keeps its GIL."""
    calls = []

    def slow():
        calls.append(time.monotonic())
        time.sleep(0.05)
        return model.CpuArraysReading(bytes=len(calls), arrays=len(calls))

    sampler = _sampler(read_cpu_arrays=slow)
    first = sampler.sample_once(cpu_arrays=True).cpu_arrays
    again = sampler.sample_once(cpu_arrays=True).cpu_arrays
    assert again is first and len(calls) == 1
    assert sampler._arrays_due - calls[0] >= 0.99  # 50 ms at most 5% of the time
    sampler._arrays_due = 0.0  # the share has passed
    assert sampler.sample_once(cpu_arrays=True).cpu_arrays.arrays == 2


def test_no_thread_before_anyone_subscribes():
    before = len(_sampler_threads())
    sampler = _sampler()
    sampler.sample_once()
    assert not sampler.running and len(_sampler_threads()) == before


def test_subscriber_receives_samples_on_the_sampler_thread():
    names = []
    sampler = _sampler()
    done = threading.Event()
    sub = sampler.subscribe(lambda s: (names.append(threading.current_thread().name), done.set()))
    assert done.wait(10)
    sub.close()
    assert names[0] == "jupyter-gpumem-sampler"


def test_thread_ends_when_the_last_subscription_closes():
    before = len(_sampler_threads())
    sampler = _sampler()
    subs = [sampler.subscribe(lambda s: None) for _ in range(2)]
    assert len(_sampler_threads()) == before + 1
    subs[0].close()
    assert sampler.running
    subs[1].close()
    assert not sampler.running and len(_sampler_threads()) == before


def test_stop_closes_every_subscription():
    before = len(_sampler_threads())
    sampler = _sampler()
    sampler.subscribe(lambda s: None)
    sampler.subscribe(lambda s: None)
    sampler.stop()
    assert sampler.subscribers == 0 and len(_sampler_threads()) == before


def test_resubscribing_after_close_starts_a_fresh_thread():
    sampler = _sampler()
    assert len(_wait_for_samples(sampler, 1)) == 1
    assert len(_wait_for_samples(sampler, 2)) == 2
    assert not sampler.running


def test_effective_interval_is_the_smallest_requested():
    sampler = _sampler(interval=0.5)
    a = sampler.subscribe(lambda s: None, interval=2.0)
    b = sampler.subscribe(lambda s: None, interval=0.2)
    try:
        assert sampler.effective_interval() == 0.2
    finally:
        a.close()
        b.close()
    assert sampler.effective_interval() == 0.5


def test_a_lone_slow_subscriber_is_not_sampled_at_the_faster_default():
    sampler = _sampler(interval=0.5)
    with sampler.subscribe(lambda s: None, interval=5.0):
        assert sampler.effective_interval() == 5.0


def test_bad_interval_is_refused_with_the_valid_range():
    with pytest.raises(MagicUsageError, match="from 0.01 to 3600"):
        _sampler().subscribe(lambda s: None, interval=-1)


def test_an_interval_below_the_shortest_is_refused_when_the_sampler_is_made():
    with pytest.raises(MagicUsageError, match="from 0.01 to 3600"):
        _sampler(interval=0.001)


def test_failing_subscriber_does_not_stop_the_others(caplog):
    sampler = _sampler()
    sampler.subscribe(lambda s: 1 / 0)
    got = _wait_for_samples(sampler, 3)
    sampler.stop()
    assert len(got) >= 3
    assert "subscriber failed" in caplog.text


def test_a_slow_source_is_read_one_reading_at_a_time_on_one_thread():
    gate = threading.Event()
    entered = threading.Semaphore(0)
    concurrent = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow():
        with lock:
            concurrent["now"] += 1
            concurrent["max"] = max(concurrent["max"], concurrent["now"])
        entered.release()
        gate.wait(10)
        with lock:
            concurrent["now"] -= 1
        return ()

    sampler = Sampler(slow, lambda: (), interval=0.01)
    sub = sampler.subscribe(lambda s: None)
    assert entered.acquire(timeout=10)
    before = len(_sampler_threads())
    gate.set()  # the reading took many intervals; no second reading started meanwhile
    assert entered.acquire(timeout=10)
    sub.close()
    assert concurrent["max"] == 1 and before == 1


def test_after_a_slow_reading_the_missed_ticks_are_skipped_not_caught_up():
    # One reading takes ten intervals. A sampler that queued the missed ticks would then read
    # back to back; this one waits for the next tick, so readings stay an interval apart.
    interval = 0.1
    starts: list[float] = []
    enough = threading.Event()

    def source():
        starts.append(time.monotonic())
        if len(starts) == 1:
            time.sleep(10 * interval)
        if len(starts) >= 5:
            enough.set()
        return ()

    sampler = Sampler(source, lambda: (), interval=interval)
    sub = sampler.subscribe(lambda s: None)
    assert enough.wait(10)
    sub.close()
    gaps = [b - a for a, b in zip(starts[1:], starts[2:5])]
    assert all(gap >= 0.5 * interval for gap in gaps), gaps


def test_add_event_goes_to_timeline_and_event_subscribers():
    sampler = _sampler(clock=lambda: 5.0)
    seen = []
    sub = sampler.subscribe_events(seen.append)
    event = sampler.add_event("marker", name="warmup")
    sub.close()
    sampler.add_event("marker", name="after")
    assert seen == [event] and event == model.Event(5.0, "marker", {"name": "warmup"})
    assert len(sampler.timeline.events()) == 2


def test_shared_timeline_is_used_when_given():
    timeline = Timeline(max_samples=3)
    sampler = _sampler(timeline=timeline)
    for _ in range(5):
        sampler.sample_once()
    assert len(timeline) == 3


def test_get_sampler_returns_one_sampler_per_process():
    assert get_sampler() is get_sampler()
    assert not get_sampler().running


# --- IPython cell events ---------------------------------------------------------------------------


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    yield sh
    unregister_cell_events(sh)


def test_cell_events_record_start_and_end_with_success(shell):
    sampler = _sampler()
    register_cell_events(shell, sampler)
    shell.run_cell("1 + 1")
    shell.run_cell("1 / 0")
    names = [(e.name, e.data.get("success")) for e in sampler.timeline.events()]
    assert names == [("cell_start", None), ("cell_end", True), ("cell_start", None), ("cell_end", False)]


def test_cell_events_carry_the_execution_count(shell):
    sampler = _sampler()
    register_cell_events(shell, sampler)
    result = shell.run_cell("2 + 2", store_history=True)
    start, end = sampler.timeline.events()
    assert start.data["execution_count"] == end.data["execution_count"] == result.execution_count


def test_registering_twice_adds_one_pair_of_events(shell):
    sampler = _sampler()
    register_cell_events(shell, sampler)
    register_cell_events(shell, sampler)
    shell.run_cell("3")
    assert len(sampler.timeline.events()) == 2


def test_unregister_stops_cell_events(shell):
    sampler = _sampler()
    register_cell_events(shell, sampler)
    unregister_cell_events(shell)
    shell.run_cell("4")
    assert sampler.timeline.events() == []


def test_importing_the_sampler_imports_nothing_heavy():
    code = (
        "import sys, jupyter_gpumem.sampling.sampler as s; s.get_sampler();"
        "heavy = [m for m in ('jax', 'pynvml', 'plotly', 'ipywidgets', 'numpy') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
