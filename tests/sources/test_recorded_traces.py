"""Every trace recorded on a real GPU and kept in tests/data/traces/ (bench/gpu_proof.sh records
them; bench/README.md, "On a GPU") reads back strictly, says it is real, and replays.

With the folder empty each test is reported as skipped, saying so: never as passed.
``tests/monitor/test_series.py::test_replayed_trace_bands_never_exceed_the_device_total`` replays the
same files as drawn bands.
"""

from __future__ import annotations

import glob
import os

import pytest

from jupyter_gpumem.core.readings import NotAvailable
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.sources.replay import ReplaySource, timeline_from_trace

FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "traces")
RECORDED = sorted(glob.glob(os.path.join(FOLDER, "*.jsonl")))
NONE_YET = pytest.param(
    None,
    id="none-recorded",
    marks=pytest.mark.skip(
        reason="no trace recorded on a GPU in tests/data/traces/ yet: "
        "bench/gpu_proof.sh records them (bench/README.md, On a GPU)"
    ),
)


def _params(paths):
    return [pytest.param(p, id=os.path.basename(p)) for p in paths] or [NONE_YET]


def _on_gpu(sample) -> bool:
    return not isinstance(sample.jax, NotAvailable) and any(r.platform in ("gpu", "cuda") for r in sample.jax)


@pytest.mark.parametrize("path", _params(RECORDED))
def test_a_recorded_trace_reads_strictly_and_says_it_is_real(path):
    trace = read_trace(path, strict=True)
    assert trace.synthetic is False
    assert trace.header.get("jax_version") and trace.header.get("devices")
    assert len(trace.samples) >= 3


@pytest.mark.parametrize("path", _params(RECORDED))
def test_a_recorded_trace_holds_jax_readings_from_a_gpu(path):
    assert any(_on_gpu(s) for s in read_trace(path).samples)


@pytest.mark.parametrize("path", _params(RECORDED))
def test_a_recorded_trace_replays_as_a_timeline_and_as_if_live(path):
    trace = read_trace(path)
    timeline = timeline_from_trace(trace)
    assert timeline.samples() == trace.samples and timeline.events() == trace.events
    served = ReplaySource(trace, clock=lambda: 1000.0).current()
    assert served.t == 1000.0 and served.devices == trace.samples[0].devices


@pytest.mark.parametrize("path", _params([p for p in RECORDED if os.path.basename(p).startswith("oom_")]))
def test_a_recorded_oom_trace_keeps_the_oom_event(path):
    events = read_trace(path).events
    assert any(e.name == "oom" and "RESOURCE_EXHAUSTED" in e.data.get("message", "") for e in events)
