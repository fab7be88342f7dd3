"""Trace files read back: a whole trace as a Timeline (what the monitor draws), and a trace
served as if live on a controlled clock (the server's replay mode)."""

from __future__ import annotations

import pytest

from jupyter_gpumem import demo_traces
from jupyter_gpumem.core.readings import Timeline
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.sources.replay import ReplaySource, timeline_from_trace

TRACE = demo_traces.path("synthetic_bfc_prealloc")


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def trace():
    return read_trace(TRACE, strict=True)


# --- a whole trace as a Timeline -------------------------------------------------------------


def test_timeline_from_trace_holds_every_sample_and_event(trace):
    timeline = timeline_from_trace(TRACE)
    assert timeline.samples() == trace.samples and timeline.events() == trace.events


def test_timeline_from_trace_keeps_the_header_that_says_synthetic(trace):
    timeline = timeline_from_trace(trace)
    assert timeline.trace_header == trace.header and timeline.trace_header["synthetic"] is True


def test_a_timeline_of_readings_taken_here_has_no_trace_header():
    assert Timeline().trace_header is None


# --- served as if live ------------------------------------------------------------------------


def test_first_sample_is_served_at_start_with_time_shifted_to_now(trace):
    clock = Clock()
    sample = ReplaySource(trace, clock=clock).current()
    assert sample.t == 1000.0 and sample.devices == trace.samples[0].devices


def test_sample_due_follows_the_recorded_spacing(trace):
    clock = Clock()
    source = ReplaySource(trace, clock=clock)
    offset = trace.samples[10].t - trace.samples[0].t
    clock.now += offset
    assert source.current().jax == trace.samples[10].jax


def test_speed_scales_time(trace):
    clock = Clock()
    source = ReplaySource(trace, speed=4.0, clock=clock)
    clock.now += (trace.samples[20].t - trace.samples[0].t) / 4
    assert source.current().jax == trace.samples[20].jax


def test_loop_starts_over_after_the_last_sample(trace):
    clock = Clock()
    source = ReplaySource(trace, clock=clock)
    clock.now += source.duration + 0.01
    assert source.current().jax == trace.samples[0].jax


def test_without_loop_the_last_sample_stays(trace):
    clock = Clock()
    source = ReplaySource(trace, loop=False, clock=clock)
    clock.now += 10 * source.duration
    assert source.finished and source.current().jax == trace.samples[-1].jax


def test_read_devices_answers_the_devices_of_the_sample_due_now(trace):
    clock = Clock()
    source = ReplaySource(trace, clock=clock)
    clock.now += trace.samples[30].t - trace.samples[0].t
    assert source.read_devices() == trace.samples[30].devices


def test_bad_speed_is_refused_with_the_valid_range(trace):
    with pytest.raises(ValueError, match="positive number"):
        ReplaySource(trace, speed=0)


def test_trace_without_samples_cannot_be_replayed(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text('{"kind":"header","format":1,"synthetic":true}\n')
    with pytest.raises(ValueError, match="no samples"):
        ReplaySource(path)


def test_the_server_serves_an_oversized_trace_as_an_error_state_at_once(tmp_path):
    """``c.GpuMem.replay`` naming a 20 GiB file: refused by its size before reading; /devices
    then answers the error state with the reason (server/readings.py ReplayDevices)."""
    import time

    from jupyter_gpumem.server.readings import ReplayDevices

    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(20 * 2**30)
    started = time.perf_counter()
    source = ReplayDevices(str(path))
    assert time.perf_counter() - started < 1.0
    assert source.read().devices.reason == (
        f"cannot replay {path}: '{path}' is 21,474,836,480 bytes, over the limit of 268,435,456 bytes; nothing was read"
    )
