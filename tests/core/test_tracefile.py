"""The JSON Lines trace format: round trips, the synthetic traces' invariants, and bad input."""

from __future__ import annotations

import json
import os
import pathlib
import socket
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpumem import demo_traces
from jupyter_gpumem.core import metrics
from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.readings import (
    AllocatorStats,
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    DeviceUnreadable,
    Event,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
)
from jupyter_gpumem.core.tracefile import (
    Trace,
    TraceError,
    TraceWriter,
    header_devices,
    read_trace,
    read_trace_bytes,
    sample_from_json,
    sample_to_json,
)

TRACES = demo_traces.FOLDER
SYNTHETIC = sorted(TRACES.glob("synthetic_*.jsonl"))
HEADER = {"kind": "header", "format": 1, "synthetic": True}
GiB = 1 << 30


def _bfc_sample(t: float = 100.0) -> Sample:
    raw = {
        "bytes_in_use": 1024,
        "pool_bytes": 4096,
        "bytes_limit": 8192,
        "largest_free_block_bytes": 2048,
        "peak_bytes_in_use": -1,
    }
    dev = DeviceReading(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-1",
        total_bytes=10_000,
        used_bytes=6_000,
        free_bytes=4_000,
        reserved_bytes=NotAvailable(model.NOT_SUPPORTED, "old driver"),
        utilization_percent=12,
        display_active=False,
        mig_mode=NotAvailable(model.NOT_SUPPORTED, "no MIG"),
        processes=(
            ProcessReading(pid=7, used_bytes=5_000),
            ProcessReading(pid=8, used_bytes=NotAvailable(model.PIDS_HIDDEN, "container")),
        ),
    )
    lost = DeviceUnreadable(
        index=1, why=NotAvailable(model.GPU_LOST, "fell off the bus"), name="NVIDIA A100", uuid="GPU-2"
    )
    jax = (
        JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, model.normalise_stats(raw, "bfc")),
        JaxDeviceReading(
            1,
            "gpu",
            "NVIDIA A100",
            1,
            NotAvailable(model.NOT_STARTED, "backend not started"),
            cuda_pool=CudaPoolReading(1, 2, 3, 4),
        ),
    )
    return Sample(t=t, pid=7, devices=(dev, lost), jax=jax)


def _write_lines(path: pathlib.Path, lines: list) -> pathlib.Path:
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return path


# --- round trips -----------------------------------------------------------------------------


def test_sample_round_trips_through_json():
    sample = _bfc_sample()
    assert sample_from_json(json.loads(json.dumps(sample_to_json(sample)))) == sample


def _cpu_sample(arrays) -> Sample:
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, model.normalise_stats(None, "bfc", platform="cpu"))
    return Sample(t=5.0, pid=7, devices=NotAvailable(model.NO_DRIVER, "no driver"), jax=(cpu,), cpu_arrays=arrays)


def test_jax_s_live_arrays_on_the_cpu_round_trip_through_json():
    sample = _cpu_sample(CpuArraysReading(bytes=3 << 20, arrays=2))
    data = sample_to_json(sample)
    assert data["cpu_arrays"] == {"bytes": 3 << 20, "arrays": 2}
    assert sample_from_json(json.loads(json.dumps(data))) == sample


def test_live_arrays_that_could_not_be_read_round_trip_as_not_available():
    sample = _cpu_sample(NotAvailable(model.ERROR, "reading JAX's live arrays on the CPU failed"))
    assert sample_from_json(json.loads(json.dumps(sample_to_json(sample)))) == sample


def test_a_sample_whose_live_arrays_were_not_read_writes_no_cpu_arrays_field():
    assert "cpu_arrays" not in sample_to_json(_cpu_sample(None))


def test_a_trace_written_before_cpu_arrays_existed_reads_as_before(tmp_path):
    # A sample line as this package wrote it before the field (the shipped demo traces too).
    old = (
        '{"kind": "sample", "t": 1.0, "pid": 7, "devices": {"na": "no_driver", "reason": "no driver"}, '
        '"jax": [{"id": 0, "platform": "cpu", "kind": "cpu", "nvml_index": null, "allocator": null, '
        '"memory_stats": null, "stats_na": {"na": "no_stats", "reason": "CPU"}, "cuda_pool": null}]}'
    )
    trace = read_trace(_write_lines(tmp_path / "old.jsonl", [HEADER, old]), strict=True)
    assert [s.cpu_arrays for s in trace.samples] == [None]
    shipped = read_trace(SYNTHETIC[0], strict=True)
    assert shipped.samples and all(s.cpu_arrays is None for s in shipped.samples)


def test_a_bad_cpu_arrays_count_names_the_field(tmp_path):
    bad = sample_to_json(_cpu_sample(CpuArraysReading(bytes=1, arrays=1)))
    bad["cpu_arrays"]["arrays"] = -1
    trace = read_trace(_write_lines(tmp_path / "t.jsonl", [HEADER, bad]))
    assert trace.error.message.startswith("sample.cpu_arrays.arrays must be an integer from 0")


def test_not_available_serialises_as_na_object():
    data = sample_to_json(Sample(t=1.0, pid=1, devices=NotAvailable(model.NO_DRIVER, "no driver"), jax=()))
    assert data["devices"] == {"na": "no_driver", "reason": "no driver"}


def test_raw_memory_stats_are_written_exactly_as_jax_gave_them():
    data = sample_to_json(_bfc_sample())
    assert data["jax"][0]["memory_stats"]["peak_bytes_in_use"] == -1


def test_stats_built_without_raw_dict_still_read_back():
    stats = AllocatorStats(allocator="bfc", bytes_in_use=512, pool_bytes=1024)
    sample = Sample(t=1.0, pid=1, devices=(), jax=(JaxDeviceReading(0, "gpu", "x", 0, stats),))
    back = sample_from_json(sample_to_json(sample)).jax[0].stats
    assert (back.bytes_in_use, back.pool_bytes) == (512, 1024)


def test_writer_and_reader_round_trip_samples_and_events(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"synthetic": True, "settings": {"env": {}}}) as writer:
        writer.write_sample(_bfc_sample(1.0))
        writer.write_event(Event(t=1.5, name="cell_start", data={"execution_count": 3}))
        writer.write_sample(_bfc_sample(2.0))
    trace = read_trace(path)
    assert (trace.error, trace.truncated) == (None, False)
    assert trace.samples == [_bfc_sample(1.0), _bfc_sample(2.0)]
    assert trace.events == [Event(t=1.5, name="cell_start", data={"execution_count": 3})]


def test_writer_fills_in_the_header(tmp_path):
    path = tmp_path / "t.jsonl"
    TraceWriter(path, {"synthetic": False}).close()
    header = json.loads(path.read_text().splitlines()[0])
    assert header["kind"] == "header" and header["format"] == 1 and header["synthetic"] is False
    assert header["tool"].startswith("jupyter-gpumem ") and isinstance(header["pid"], int)


def test_writer_refuses_a_header_without_synthetic(tmp_path):
    with pytest.raises(ValueError, match="synthetic"):
        TraceWriter(tmp_path / "t.jsonl", {"host": "x"})
    assert not (tmp_path / "t.jsonl").exists()


def test_writer_flushes_each_line_before_close(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = TraceWriter(path, {"synthetic": True})
    writer.write_sample(_bfc_sample())
    assert len(read_trace(path).samples) == 1
    writer.close()


# --- reading bad files -------------------------------------------------------------------------


def test_cut_last_line_counts_as_truncation_not_error(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, sample_to_json(_bfc_sample())])
    with open(path, "a") as fh:
        fh.write(json.dumps(sample_to_json(_bfc_sample(2.0)))[:57])
    trace = read_trace(path, strict=True)
    assert (trace.truncated, trace.error, len(trace.samples)) == (True, None, 1)


def test_garbage_line_names_its_line_number_and_keeps_earlier_lines(tmp_path):
    path = _write_lines(
        tmp_path / "t.jsonl", [HEADER, sample_to_json(_bfc_sample()), "not json {", sample_to_json(_bfc_sample())]
    )
    trace = read_trace(path)
    assert trace.error.line == 3 and "not valid JSON" in str(trace.error)
    assert len(trace.samples) == 1


def test_strict_reading_raises_with_the_partial_trace(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [HEADER, sample_to_json(_bfc_sample()), {"kind": "sample", "t": "soon"}])
    with pytest.raises(TraceError, match=r"line 3: sample.t must be a number") as info:
        read_trace(path, strict=True)
    assert len(info.value.partial.samples) == 1


def test_missing_header_is_an_error_on_line_1(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [sample_to_json(_bfc_sample())])
    assert read_trace(path).error.line == 1
    assert "header" in read_trace(path).error.message


def test_unknown_format_is_refused_by_name(tmp_path):
    path = _write_lines(tmp_path / "t.jsonl", [{**HEADER, "format": 2}])
    assert "format must be 1" in read_trace(path).error.message


def test_huge_number_is_a_clear_error(tmp_path):
    bad = sample_to_json(_bfc_sample())
    bad["devices"][0]["total_bytes"] = 10**30
    trace = read_trace(_write_lines(tmp_path / "t.jsonl", [HEADER, bad]))
    assert "devices[0].total_bytes must be an integer from 0 to 2**63-1" in trace.error.message


def test_wrong_type_names_the_field(tmp_path):
    bad = sample_to_json(_bfc_sample())
    bad["jax"][0]["cuda_pool"] = {"reserved_bytes": "lots"}
    trace = read_trace(_write_lines(tmp_path / "t.jsonl", [HEADER, bad]))
    assert trace.error.message.startswith("jax[0].cuda_pool.reserved_bytes must be an integer")


def test_nan_is_refused(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEADER) + '\n{"kind":"event","t":NaN,"name":"marker","data":{}}\n')
    assert "NaN" in read_trace(path).error.message


def test_empty_file_is_an_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"")
    assert read_trace(path).error.line == 1


def test_negative_one_in_raw_stats_reads_back_as_none(tmp_path):
    trace = read_trace(_write_lines(tmp_path / "t.jsonl", [HEADER, sample_to_json(_bfc_sample())]))
    assert trace.samples[0].jax[0].stats.peak_bytes_in_use is None


_json_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats() | st.text(max_size=8)
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _mutations():
    """A valid sample line with one field replaced by arbitrary JSON."""
    base = sample_to_json(_bfc_sample())
    paths = [
        ("t",),
        ("pid",),
        ("devices",),
        ("jax",),
        ("devices", 0, "processes"),
        ("devices", 0, "used_bytes"),
        ("devices", 0, "processes", 1, "used_bytes"),
        ("devices", 1, "unreadable"),
        ("jax", 0, "memory_stats"),
        ("jax", 0, "cuda_pool"),
        ("jax", 1, "stats_na"),
        ("jax", 0, "nvml_index"),
        ("devices", 0, "mig_mode"),
    ]
    return st.tuples(st.sampled_from(paths), _json).map(lambda pv: _mutate(base, *pv))


def _mutate(base: dict, path: tuple, value):
    obj = json.loads(json.dumps(base))
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


def _read_never_raises_unexpectedly(data: bytes) -> Trace:
    trace = read_trace_bytes(data)
    assert trace.error is None or (isinstance(trace.error, TraceError) and trace.error.line >= 1)
    return trace


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_any_mutated_sample_line_reads_or_fails_clearly(line):
    data = (json.dumps(HEADER) + "\n" + json.dumps(line, allow_nan=True) + "\n").encode()
    trace = _read_never_raises_unexpectedly(data)
    assert len(trace.samples) + (trace.error is not None) == 1


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_after_a_header_never_raise(tail):
    _read_never_raises_unexpectedly(json.dumps(HEADER).encode() + b"\n" + tail)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=600))
def test_truncating_a_good_trace_anywhere_keeps_the_full_lines(cut):
    good = (
        json.dumps(HEADER)
        + "\n"
        + "\n".join(json.dumps(sample_to_json(_bfc_sample(float(i)))) for i in range(3))
        + "\n"
    ).encode()
    data = good[: min(cut * 4, len(good))]
    trace = _read_never_raises_unexpectedly(data)
    complete_sample_lines = max(0, data.count(b"\n") - 1)
    if trace.error is None and trace.header:
        assert len(trace.samples) >= complete_sample_lines


# --- the synthetic traces ------------------------------------------------------------------------


def test_synthetic_traces_exist_and_are_small():
    names = {p.name for p in SYNTHETIC}
    assert {
        "synthetic_bfc_prealloc.jsonl",
        "synthetic_bfc_growth_fragmenting.jsonl",
        "synthetic_cuda_async.jsonl",
        "synthetic_two_kernels.jsonl",
        "synthetic_bfc_defragment.jsonl",
    } <= names
    assert all(p.stat().st_size < 200_000 for p in SYNTHETIC)


@pytest.mark.parametrize("path", SYNTHETIC, ids=lambda p: p.name)
def test_synthetic_trace_reads_cleanly_and_says_synthetic(path):
    trace = read_trace(path, strict=True)
    assert trace.synthetic and not trace.truncated and trace.samples and trace.events


@pytest.mark.parametrize("path", SYNTHETIC, ids=lambda p: p.name)
def test_synthetic_trace_numbers_obey_real_relationships(path):
    for sample in read_trace(path).samples:
        for dev in sample.devices:
            assert dev.used_bytes + dev.free_bytes == dev.total_bytes
            assert dev.used_bytes >= sum(p.used_bytes for p in dev.processes)
        for jdev in sample.jax:
            stats = jdev.stats
            if not isinstance(stats, AllocatorStats):
                continue
            assert stats.peak_bytes_in_use >= stats.bytes_in_use
            if stats.allocator == "bfc":
                assert stats.bytes_in_use % 256 == 0
                assert stats.bytes_in_use <= stats.pool_bytes <= stats.bytes_limit
                assert stats.largest_free_block_bytes <= stats.pool_bytes - stats.bytes_in_use
            if isinstance(jdev.cuda_pool, CudaPoolReading):
                assert stats.bytes_in_use <= jdev.cuda_pool.used_bytes <= jdev.cuda_pool.reserved_bytes
                assert jdev.cuda_pool.reserved_bytes <= jdev.cuda_pool.reserved_high_bytes
            used = sample.devices[0].process_bytes(sample.pid)
            assert used >= (stats.pool_bytes or 0)


def test_fragmenting_trace_ends_more_fragmented_than_it_starts():
    frags = [
        metrics.fragmentation(s.jax[0].stats)
        for s in read_trace(TRACES / "synthetic_bfc_growth_fragmenting.jsonl").samples
        if isinstance(s.jax[0].stats, AllocatorStats)
    ]
    assert frags[0] == 0.0 and max(frags[-10:]) > 0.8


def test_growth_trace_pool_only_grows():
    pools = [
        s.jax[0].stats.pool_bytes
        for s in read_trace(TRACES / "synthetic_bfc_growth_fragmenting.jsonl").samples
        if isinstance(s.jax[0].stats, AllocatorStats)
    ]
    assert pools == sorted(pools) and pools[-1] > 100 * pools[0]


def test_two_kernels_trace_has_an_oom_event_and_little_device_free():
    trace = read_trace(TRACES / "synthetic_two_kernels.jsonl")
    (oom,) = [e for e in trace.events if e.name == "oom"]
    last = trace.samples[-1]
    assert "RESOURCE_EXHAUSTED" in oom.data["message"]
    assert (
        metrics.largest_likely_request(last.jax[0].stats, device_free=last.devices[0].free_bytes)
        < oom.data["requested_bytes"]
    )


def _defragment_before_and_after(trace):
    """The last reading before the "defragment" marker and the first after its cell ended."""
    (mark,) = [e for e in trace.events if e.name == "marker" and e.data.get("name") == "defragment"]
    cell_end = min(e.t for e in trace.events if e.name == "cell_end" and e.t > mark.t)
    before = [s for s in trace.samples if s.t < mark.t][-1].jax[0].stats
    after = next(s for s in trace.samples if s.t > cell_end).jax[0].stats
    return before, after


def test_defragment_trace_lowers_fragmentation_across_the_marker_with_the_same_bytes_in_use():
    before, after = _defragment_before_and_after(read_trace(TRACES / "synthetic_bfc_defragment.jsonl"))
    assert after.bytes_in_use == before.bytes_in_use and after.pool_bytes == before.pool_bytes
    assert after.largest_free_block_bytes > before.largest_free_block_bytes
    assert metrics.fragmentation(after) < metrics.fragmentation(before)


def test_defragment_trace_leaves_a_hole_since_bfc_promises_no_adjacency():
    before, after = _defragment_before_and_after(read_trace(TRACES / "synthetic_bfc_defragment.jsonl"))
    assert 0 < metrics.fragmentation(after) < metrics.fragmentation(before) / 2
    assert after.largest_free_block_bytes < metrics.unused_pool_bytes(after)


def test_integer_too_long_to_parse_is_a_clear_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(HEADER) + '\n{"kind":"sample","t":1,"pid":' + "9" * 5000 + "}\n")
    assert read_trace(path).error.line == 2


# --- traces from someone else: size, FIFOs, time order -------------------------------------------


def test_a_20_gib_sparse_trace_is_refused_by_its_size_before_any_of_it_is_read(tmp_path):
    import time

    from jupyter_gpumem.core.files import UnsafePathError
    from jupyter_gpumem.core.tracefile import MAX_TRACE_BYTES

    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(20 * 2**30)  # sparse: 20 GiB long, nothing on disk
    started = time.perf_counter()
    with pytest.raises(UnsafePathError) as info:
        read_trace(path)
    assert time.perf_counter() - started < 1.0
    assert MAX_TRACE_BYTES == 256 * 2**20
    assert str(info.value) == f"'{path}' is 21,474,836,480 bytes, over the limit of 268,435,456 bytes; nothing was read"


def test_the_size_limit_can_be_raised_for_a_longer_recording(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"synthetic": True}) as writer:
        writer.write_sample(_bfc_sample(t=1.0))
    size = path.stat().st_size
    with pytest.raises(OSError, match=f"over the limit of {size - 1:,} bytes"):
        read_trace(path, max_bytes=size - 1)
    assert len(read_trace(path, max_bytes=size).samples) == 1


def test_a_fifo_named_as_a_trace_is_refused_without_waiting_for_a_writer(tmp_path):
    os.mkfifo(tmp_path / "t.jsonl")
    with pytest.raises(OSError, match="is a FIFO"):
        read_trace(tmp_path / "t.jsonl")


def test_a_sample_earlier_than_the_one_before_stops_reading_with_an_error_that_says_so(tmp_path):
    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"synthetic": True}) as writer:
        for t in (100.0, 101.0, 50.2, 102.0):
            writer.write_sample(_bfc_sample(t=t))
    trace = read_trace(path)
    assert [s.t for s in trace.samples] == [100.0, 101.0]
    assert str(trace.error) == (
        "line 4: sample.t is 50.2, earlier than the sample before it (101.0): samples must be "
        "in time order (was the clock set back?); the trace is read up to here"
    )


def test_samples_at_the_same_time_and_events_out_of_order_are_read():
    lines = [
        {"kind": "header", "format": 1, "synthetic": True},
        {"kind": "sample", "t": 5.0, "pid": 1, "devices": [], "jax": []},
        {"kind": "sample", "t": 5.0, "pid": 1, "devices": [], "jax": []},
        {"kind": "event", "t": 4.0, "name": "marker", "data": {}},
    ]
    trace = read_trace_bytes(("\n".join(json.dumps(x) for x in lines) + "\n").encode(), strict=True)
    assert len(trace.samples) == 2 and len(trace.events) == 1


def _event_error(event: dict) -> str:
    data = (json.dumps(HEADER) + "\n" + json.dumps({"kind": "event", **event}) + "\n").encode()
    return read_trace_bytes(data).error.message


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, "null"),
        (True, "a boolean"),
        (5, "the number 5"),
        (2.5, "the number 2.5"),
        (10**38, f"the number {10**38}"),  # 39 digits: still written out
        (10**39, "a huge number"),  # 40 digits
        ([], "a list"),
        ({}, "an object"),
    ],
)
def test_a_field_of_the_wrong_type_says_what_it_got(value, words):
    assert _event_error({"t": 1.0, "name": value}) == f"event.name must be a string, got {words}"


def test_an_event_with_an_empty_name_is_refused():
    assert _event_error({"t": 1.0, "name": ""}) == "event.name must not be empty"


def test_an_event_without_a_time_is_refused_naming_the_field():
    assert _event_error({"name": "marker"}) == "event.t is missing"


def test_an_event_whose_data_is_not_an_object_is_refused_naming_the_field():
    assert _event_error({"t": 1.0, "name": "marker", "data": [1]}) == "event.data must be an object, got a list"


def test_an_event_without_data_reads_with_empty_data():
    data = (json.dumps(HEADER) + "\n" + json.dumps({"kind": "event", "t": 2.5, "name": "marker"}) + "\n").encode()
    trace = read_trace_bytes(data)
    assert trace.error is None and trace.events == [Event(2.5, "marker", {})]


def _first_line(path: pathlib.Path) -> dict:
    return json.loads(path.read_text().splitlines()[0])


def test_the_writer_writes_the_header_whole_with_its_defaults(tmp_path):
    writer = TraceWriter(tmp_path / "t.jsonl", {"synthetic": True})
    writer.close()
    header = _first_line(tmp_path / "t.jsonl")
    assert header == {
        "kind": "header",
        "format": 1,
        "synthetic": True,
        "host": socket.gethostname(),
        "jax_version": None,
        "settings": {},
        "devices": [],
        "created": writer.header["created"],
        "pid": os.getpid(),
        "tool": writer.header["tool"],
    }
    assert datetime.fromisoformat(header["created"]).utcoffset() == timedelta(0)


def test_header_fields_cannot_change_the_kind_or_the_format(tmp_path):
    TraceWriter(tmp_path / "t.jsonl", {"synthetic": False, "kind": "sample", "format": 7}).close()
    header = _first_line(tmp_path / "t.jsonl")
    assert (header["kind"], header["format"], header["synthetic"]) == ("header", 1, False)


def test_writer_without_synthetic_says_what_to_give():
    with pytest.raises(ValueError) as err:
        TraceWriter("unused.jsonl", {"synthetic": "yes"})
    assert str(err.value) == "header_fields must give 'synthetic': true or false"


def test_header_devices_are_the_readable_gpus_index_name_uuid_and_total():
    ok = DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, 0, 80 * GiB)
    lost = DeviceUnreadable(1, NotAvailable("error", "synthetic"))
    assert header_devices((ok, lost)) == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "total_bytes": 80 * GiB}
    ]
    assert header_devices(NotAvailable("no_driver", "synthetic")) == []


def test_a_process_is_written_with_its_name_and_user_only_where_known():
    procs = (ProcessReading(7, 1 * GiB, name="python", user="ana"), ProcessReading(8, 2 * GiB))
    dev = DeviceReading(0, "GPU", "GPU-0", 80 * GiB, 3 * GiB, 77 * GiB, processes=procs)
    line = sample_to_json(Sample(1.0, 7, (dev,), NotAvailable("not_started", "synthetic")))
    assert line["devices"][0]["processes"] == [
        {"pid": 7, "used_bytes": 1 * GiB, "name": "python", "user": "ana"},
        {"pid": 8, "used_bytes": 2 * GiB},
    ]
    assert line["jax"] == {"na": "not_started", "reason": "synthetic"}


def test_hidden_processes_are_written_as_not_available_with_the_reason():
    dev = DeviceReading(0, "GPU", "GPU-0", 80 * GiB, 3 * GiB, 77 * GiB, processes=NotAvailable("pids_hidden", "MIG"))
    line = sample_to_json(Sample(1.0, 7, (dev,), ()))
    assert line["devices"][0]["processes"] == {"na": "pids_hidden", "reason": "MIG"}


def test_a_jax_device_without_statistics_is_written_with_null_allocator_and_stats_and_why():
    no_stats = NotAvailable("no_stats", "synthetic")
    pool = NotAvailable("error", "synthetic: pool unread")
    line = sample_to_json(Sample(1.0, 7, (), (JaxDeviceReading(0, "gpu", "H100", 0, no_stats, pool),)))
    assert line["jax"] == [
        {
            "id": 0,
            "platform": "gpu",
            "kind": "H100",
            "nvml_index": 0,
            "allocator": None,
            "memory_stats": None,
            "stats_na": {"na": "no_stats", "reason": "synthetic"},
            "cuda_pool": {"na": "error", "reason": "synthetic: pool unread"},
        }
    ]


def test_named_processes_hidden_processes_and_jax_not_started_read_back_as_written():
    named = DeviceReading(
        0, "GPU", "GPU-0", 80 * GiB, 3 * GiB, 77 * GiB, processes=(ProcessReading(7, 1 * GiB, "python", "ana"),)
    )
    hidden = DeviceReading(1, "GPU", "GPU-1", 80 * GiB, 3 * GiB, 77 * GiB, processes=NotAvailable("pids_hidden", "MIG"))
    sample = Sample(1.0, 7, (named, hidden), NotAvailable("not_started", "synthetic"))
    assert sample_from_json(sample_to_json(sample)) == sample


def test_a_device_written_without_name_uuid_or_processes_reads_with_empty_ones():
    line = {
        "kind": "sample",
        "t": 1.0,
        "pid": 7,
        "jax": [],
        "devices": [{"index": 0, "total_bytes": 8, "used_bytes": 3, "free_bytes": 5}],
    }
    assert sample_from_json(line).devices == (DeviceReading(0, "", "", 8, 3, 5),)


def _device_error(device: dict) -> str:
    line = {"kind": "sample", "t": 1.0, "pid": 7, "jax": [], "devices": [device]}
    data = (json.dumps(HEADER) + "\n" + json.dumps(line) + "\n").encode()
    return read_trace_bytes(data).error.message


GOOD_DEVICE = {"index": 0, "total_bytes": 8, "used_bytes": 3, "free_bytes": 5}


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ([], "devices[0] must be an object, got a list"),
        ({**GOOD_DEVICE, "index": "0"}, "devices[0].index must be an integer, got a string"),
        ({**GOOD_DEVICE, "name": 5}, "devices[0].name must be a string, got the number 5"),
        ({**GOOD_DEVICE, "used_bytes": None}, "devices[0].used_bytes must be an integer, got null"),
        ({**GOOD_DEVICE, "free_bytes": 1.5}, "devices[0].free_bytes must be an integer, got the number 1.5"),
        ({**GOOD_DEVICE, "processes": 5}, "devices[0].processes must be a list, got the number 5"),
        ({**GOOD_DEVICE, "processes": ["x"]}, "devices[0].processes[0] must be an object, got a string"),
        (
            {**GOOD_DEVICE, "processes": [{"pid": 1, "name": 2}]},
            "devices[0].processes[0].name must be a string, got the number 2",
        ),
        (
            {**GOOD_DEVICE, "processes": {"na": "pids_hidden", "reason": 1}},
            'devices[0].processes must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**GOOD_DEVICE, "processes": {"na": 1, "reason": "MIG"}},
            'devices[0].processes must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**GOOD_DEVICE, "processes": {"na": "pids_hidden", "reason": "MIG", "more": 1}},
            'devices[0].processes must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**GOOD_DEVICE, "processes": [{"pid": 1, "used_bytes": {"na": 1, "reason": "x"}}]},
            'devices[0].processes[0].used_bytes must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**GOOD_DEVICE, "processes": [{"pid": 1, "used_bytes": "1"}]},
            "devices[0].processes[0].used_bytes must be an integer, got a string",
        ),
    ],
)
def test_a_bad_device_field_is_named_with_what_it_got(device, message):
    assert _device_error(device) == message


def test_each_line_is_written_as_compact_json(tmp_path):
    with TraceWriter(tmp_path / "t.jsonl", {"synthetic": True}) as writer:
        writer.write_event(Event(1.0, "marker", {"a": 1}))
    assert (tmp_path / "t.jsonl").read_text().splitlines()[
        1
    ] == '{"kind":"event","t":1.0,"name":"marker","data":{"a":1}}'


def test_a_value_json_cannot_hold_is_refused_not_written(tmp_path):
    with TraceWriter(tmp_path / "t.jsonl", {"synthetic": True}) as writer:
        with pytest.raises(ValueError):
            writer.write_event(Event(1.0, "marker", {"a": float("nan")}))
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 1


def test_a_closed_writer_says_so_and_refuses_more_lines_naming_the_trace(tmp_path):
    writer = TraceWriter(tmp_path / "t.jsonl", {"synthetic": True})
    writer.close()
    writer.close()  # a second close changes nothing
    assert writer.closed
    with pytest.raises(ValueError) as err:
        writer.write_event(Event(1.0, "marker"))
    assert str(err.value) == f"trace {tmp_path / 't.jsonl'} is closed"


def test_a_jax_device_without_statistics_and_its_unread_pool_read_back_as_written():
    jax = JaxDeviceReading(0, "gpu", "H100", 0, NotAvailable("no_stats", "synthetic"), NotAvailable("error", "unread"))
    sample = Sample(1.0, 7, (), (jax,))
    assert sample_from_json(sample_to_json(sample)) == sample


def test_memory_stats_skip_flags_nulls_and_text_and_keep_the_largest_count():
    line = {
        "kind": "sample",
        "t": 1.0,
        "pid": 7,
        "devices": [],
        "jax": [
            {
                "id": 0,
                "platform": "gpu",
                "memory_stats": {"flag": True, "none": None, "text": "x", "bytes_in_use": 2**63 - 1},
            }
        ],
    }
    stats = sample_from_json(line).jax[0].stats
    assert (stats.allocator, stats.bytes_in_use) == ("unknown", 2**63 - 1)


def _jax_error(device: Any) -> str:
    line = {"kind": "sample", "t": 1.0, "pid": 7, "devices": [], "jax": [device]}
    data = (json.dumps(HEADER) + "\n" + json.dumps(line) + "\n").encode()
    return read_trace_bytes(data).error.message


GOOD_JAX = {"id": 0, "platform": "gpu"}


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("gpu", "jax[0] must be an object, got a string"),
        ({"id": 0, "platform": 1}, "jax[0].platform must be a string, got the number 1"),
        ({**GOOD_JAX, "allocator": 1}, "jax[0].allocator must be a string, got the number 1"),
        ({**GOOD_JAX, "memory_stats": []}, "jax[0].memory_stats must be an object, got a list"),
        (
            {**GOOD_JAX, "memory_stats": {"bytes_in_use": 2**63}},
            "jax[0].memory_stats['bytes_in_use'] must be a number no larger than 2**63-1, got the number 9223372036854775808",
        ),
        ({**GOOD_JAX, "stats_na": "x"}, "jax[0].stats_na must be a not-available value"),
        (
            {**GOOD_JAX, "stats_na": {"na": 1, "reason": "x"}},
            'jax[0].stats_na must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**GOOD_JAX, "cuda_pool": {"na": 1, "reason": "x"}},
            'jax[0].cuda_pool must be {"na": code, "reason": text} with two strings',
        ),
        ({**GOOD_JAX, "cuda_pool": 5}, "jax[0].cuda_pool must be an object, got the number 5"),
    ],
)
def test_a_bad_jax_device_field_is_named_with_what_it_got(device, message):
    assert _jax_error(device) == message
