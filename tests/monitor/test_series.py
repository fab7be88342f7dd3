"""The monitor's data path: which series get which numbers, decimation, bounds, cells, CSV.

Every expected number below is worked out by hand from the sample it is read from.
"""

from __future__ import annotations

import glob
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpumem import demo_traces
from jupyter_gpumem.core.readings import (
    ERROR,
    NO_DRIVER,
    NO_STATS,
    NOT_STARTED,
    PIDS_HIDDEN,
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    DeviceUnreadable,
    Event,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
    normalise_stats,
)
from jupyter_gpumem.core.synthetic import NVML_FIELDS, SAMPLE_FIELDS
from jupyter_gpumem.monitor.series import (
    BANDS,
    CANNOT_TELL_NOTE,
    CPU_KEY,
    CPU_VIEW_HEADING,
    SERIES_NAMES,
    DeviceSeries,
    cell_markers,
    csv_rows,
    decimate_rows,
    device_keys,
    in_view_order,
    notes_for,
    nothing_to_show,
    row_for,
    series_values,
    view_fields,
    view_keys,
    view_labels,
    view_name,
)

# bfc_sample and cuda_async_sample spell out the numbers the expectations below are worked out from.
from doubles import PID, bfc_sample, cpu_sample, cuda_async_sample

GiB = 1 << 30


def test_bfc_sample_puts_each_byte_in_its_band():
    v = series_values(bfc_sample(), 0)
    assert v["jax_in_use"] == 6 * GiB
    assert v["pool_unused"] == 10 * GiB  # 16 pool - 6 in use
    assert v["outside_jax"] == 4 * GiB  # 20 this process - 16 pool
    assert v["other_processes"] == 30 * GiB  # 50 used - 20 this process
    assert v["unattributed"] is None  # NVML names every process here
    assert v["free"] == 30 * GiB


def test_bands_add_up_to_the_device_total():
    v = series_values(bfc_sample(), 0)
    assert sum(v[b] or 0 for b in BANDS) == 80 * GiB


def test_bfc_sample_lines_and_fragmentation():
    v = series_values(bfc_sample(), 0)
    assert (v["bytes_limit"], v["peak_in_use"], v["total"]) == (60 * GiB, 9 * GiB, 80 * GiB)
    assert v["fragmentation"] == pytest.approx(0.6)  # (10 free - 4 largest) / 10 free
    assert v["largest_free_block"] == 4 * GiB
    assert v["headroom"] == 44 * GiB  # 60 limit - 16 pool
    assert v["pool_reserved"] is None and v["pool_used"] is None


def test_cuda_async_pool_comes_from_the_driver():
    v = series_values(cuda_async_sample(), 0)
    assert v["jax_in_use"] == 3 * GiB
    assert v["pool_unused"] == 5 * GiB  # 8 reserved - 3 in use
    assert v["outside_jax"] == 1 * GiB  # 9 this process - 8 pool
    assert (v["pool_reserved"], v["pool_used"]) == (8 * GiB, 3 * GiB)
    assert v["fragmentation"] is None and v["bytes_limit"] is None


def test_cuda_async_preallocated_draws_its_limit_but_no_headroom():
    # bytes_limit 60 GiB is the driver pool's release threshold, not a cap: no headroom band
    dev = DeviceReading(0, "GPU", "GPU-0", 80 * GiB, 61 * GiB, 19 * GiB, processes=(ProcessReading(PID, 61 * GiB),))
    stats = normalise_stats(
        {"bytes_in_use": 20 * GiB, "bytes_limit": 60 * GiB, "largest_free_block_bytes": 0}, "cuda_async"
    )
    pool = CudaPoolReading(
        reserved_bytes=60 * GiB, reserved_high_bytes=60 * GiB, used_bytes=20 * GiB, used_high_bytes=20 * GiB
    )
    v = series_values(Sample(1.0, PID, (dev,), (JaxDeviceReading(0, "gpu", "GPU", 0, stats, pool),)), 0)
    assert (v["bytes_limit"], v["headroom"]) == (60 * GiB, None)
    assert (v["pool_unused"], v["outside_jax"]) == (40 * GiB, 1 * GiB)  # 60 - 20; 61 - 60


def test_a_driver_pool_reading_beside_bfc_like_stats_draws_no_fragmentation_or_headroom():
    """A trace may pair a driver pool reading with an allocator it does not name and BFC's
    fields (core/tracefile.py reads ``cuda_pool`` beside any allocator; only "cuda_async" drops
    the largest free block in ``normalise_stats``): the pool is the driver's, which no fraction
    caps and which reports no largest free block, so neither band is drawn from BFC's fields."""
    dev = DeviceReading(0, "GPU", "GPU-0", 80 * GiB, 9 * GiB, 71 * GiB, processes=(ProcessReading(PID, 9 * GiB),))
    stats = normalise_stats(
        {"bytes_in_use": 3 * GiB, "pool_bytes": 4 * GiB, "bytes_limit": 60 * GiB, "largest_free_block_bytes": GiB},
        "unknown",
    )
    pool = CudaPoolReading(
        reserved_bytes=8 * GiB, reserved_high_bytes=8 * GiB, used_bytes=3 * GiB, used_high_bytes=3 * GiB
    )
    v = series_values(Sample(1.0, PID, (dev,), (JaxDeviceReading(0, "gpu", "GPU", 0, stats, pool),)), 0)
    assert (v["fragmentation"], v["headroom"]) == (None, None)
    assert v["pool_reserved"] == 8 * GiB


def test_hidden_pids_leave_the_rest_unattributed():
    s = bfc_sample()
    dev = DeviceReading(
        0, "GPU", "GPU-0", 80 * GiB, 50 * GiB, 30 * GiB, processes=NotAvailable(PIDS_HIDDEN, "in a container")
    )
    v = series_values(Sample(s.t, PID, (dev,), s.jax), 0)
    assert v["unattributed"] == 34 * GiB  # 50 used - 16 pool
    assert v["outside_jax"] is None and v["other_processes"] is None
    assert "hidden" in " ".join(notes_for(Sample(s.t, PID, (dev,), s.jax), 0))


def test_jax_not_started_draws_nvml_bands_only():
    s = bfc_sample()
    v = series_values(Sample(s.t, PID, s.devices, NotAvailable(NOT_STARTED, "not yet")), 0)
    assert v["jax_in_use"] is None and v["pool_unused"] is None
    assert v["outside_jax"] == 20 * GiB and v["other_processes"] == 30 * GiB


def test_no_driver_and_jax_not_started_explains_both():
    s = Sample(0.0, PID, NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded"), NotAvailable(NOT_STARTED, "x"))
    reason = nothing_to_show(s)
    assert "the NVIDIA driver is not loaded" in reason
    assert "will start when JAX does" in reason


def test_jax_on_cpu_explains_no_allocator_stats():
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    s = Sample(0.0, PID, NotAvailable(NO_DRIVER, "no driver"), (cpu,))
    assert device_keys(s) == []
    assert "JAX is running on the CPU, which keeps no allocator statistics" in nothing_to_show(s)


def test_a_readable_device_leaves_nothing_to_explain():
    assert nothing_to_show(bfc_sample()) is None


def test_before_the_first_reading_the_monitor_says_it_waits():
    assert nothing_to_show(None) == "Waiting for the first reading."


def test_no_driver_and_jax_not_started_are_said_whole_in_that_order():
    s = Sample(0.0, PID, NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded"), NotAvailable(NOT_STARTED, "x"))
    assert nothing_to_show(s) == (
        "No NVIDIA GPU can be read: the NVIDIA driver is not loaded. "
        "JAX has not started yet: the allocator view will start when JAX does."
    )


def test_no_gpu_listed_and_jax_on_the_cpu_are_said_whole():
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    assert nothing_to_show(Sample(0.0, PID, (), (cpu,))) == (
        "NVML lists no readable GPU. JAX is running on the CPU, which keeps no allocator statistics."
    )


def test_no_gpu_listed_and_no_jax_device_says_only_that():
    assert nothing_to_show(Sample(0.0, PID, (), ())) == "NVML lists no readable GPU."


def test_a_sample_without_jax_devices_has_no_jax_on_the_cpu_note():
    s = bfc_sample()
    assert [n for n in notes_for(Sample(s.t, PID, s.devices, ()), 0) if "CPU" in n] == []


def with_jax(*jax) -> Sample:
    s = bfc_sample()
    return Sample(s.t, PID, s.devices, jax)


def test_the_note_while_jax_has_not_started_is_its_only_note():
    s = bfc_sample()
    notes = notes_for(Sample(s.t, PID, s.devices, NotAvailable(NOT_STARTED, "synthetic")), 0)
    assert notes == ["JAX has not started yet: its bands will start when JAX does."]


def test_a_jax_gpu_without_statistics_notes_why():
    no_stats = NotAvailable(NO_STATS, "the platform allocator reports no memory statistics")
    assert notes_for(with_jax(JaxDeviceReading(0, "gpu", "H100", 0, no_stats)), 0) == [
        "No allocator statistics: the platform allocator reports no memory statistics."
    ]


def test_jax_on_the_cpu_beside_a_gpu_notes_none_of_the_gpu_is_jaxs():
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    assert notes_for(with_jax(cpu), 0) == ["JAX runs on the CPU, not on this GPU: none of its memory here is JAX's."]


def test_a_jax_gpu_on_no_nvml_gpu_is_noted_once_on_the_first_gpu():
    s = bfc_sample()
    second = DeviceReading(1, "NVIDIA H100 80GB HBM3", "GPU-1", 80 * GiB, 0, 80 * GiB)
    lost = JaxDeviceReading(
        0, "gpu", "H100", None, normalise_stats({"bytes_in_use": 0}, "bfc"), nvml_unmatched="synthetic: no UUID"
    )
    sample = Sample(s.t, PID, (s.devices[0], second), (lost,))
    assert (notes_for(sample, 0), notes_for(sample, 1)) == (
        ["JAX device 0 is drawn on no GPU: synthetic: no UUID."],
        [],
    )


def test_a_host_pid_found_by_elimination_is_noted_with_the_reason():
    host = ProcessReading(812_345, 30 * GiB)
    s = bfc_sample()
    dev = DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, 30 * GiB, 50 * GiB, processes=(host,))
    sample = Sample(s.t, PID, (dev,), s.jax, pids_not_here=frozenset({812_345}))
    assert notes_for(sample, 0) == [
        "NVML lists this process as pid 812345: the only pid on this GPU that is not a process here "
        "(a container sees the host's pids), and JAX runs on this GPU."
    ]


def test_two_host_pids_get_the_cannot_tell_note():
    hosts = (ProcessReading(812_345, 10 * GiB), ProcessReading(812_399, 20 * GiB))
    s = bfc_sample()
    dev = DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, 30 * GiB, 50 * GiB, processes=hosts)
    sample = Sample(s.t, PID, (dev,), s.jax, pids_not_here=frozenset({812_345, 812_399}))
    assert notes_for(sample, 0) == [CANNOT_TELL_NOTE]


def test_devices_are_keyed_by_nvml_index_when_nvml_reads_them():
    s = bfc_sample()
    third = DeviceReading(3, "NVIDIA H100 80GB HBM3", "GPU-3", 80 * GiB, 0, 80 * GiB)
    assert device_keys(Sample(s.t, PID, (third,), s.jax)) == [3]


def test_without_nvml_the_jax_gpus_with_statistics_are_keyed_by_jax_id():
    stats = normalise_stats({"bytes_in_use": 0}, "bfc")
    jax = (
        JaxDeviceReading(0, "cpu", "cpu", None, stats),
        JaxDeviceReading(1, "gpu", "H100", None, stats),
        JaxDeviceReading(2, "gpu", "H100", None, NotAvailable(NO_STATS, "synthetic")),
    )
    assert device_keys(Sample(0.0, PID, NotAvailable(NO_DRIVER, "synthetic"), jax)) == [1]


def test_with_neither_nvml_nor_jax_there_is_no_device():
    none = NotAvailable(NO_DRIVER, "synthetic")
    assert device_keys(Sample(0.0, PID, none, NotAvailable(NOT_STARTED, "synthetic"))) == []


def test_the_series_drawn_are_those_with_a_known_value_in_series_order():
    series = DeviceSeries(window_s=60)
    later, earlier = [None] * len(SERIES_NAMES), [None] * len(SERIES_NAMES)
    later[3], earlier[1] = 5, 7
    series.add(1.0, tuple(later))
    series.add(2.0, tuple(earlier))
    series.add(3.0, (None,) * len(SERIES_NAMES))
    assert series.active_series() == [SERIES_NAMES[1], SERIES_NAMES[3]]


# --- decimation ----------------------------------------------------------------------------

values = st.one_of(st.none(), st.integers(min_value=0, max_value=10**12))


@st.composite
def tables(draw):
    width = draw(st.integers(1, 4))
    rows = draw(st.lists(st.tuples(*[values] * width), min_size=1, max_size=400))
    max_rows = draw(st.integers(2 + 2 * width, 60))
    return rows, max_rows


@settings(max_examples=150, deadline=None)
@given(tables())
def test_decimation_keeps_every_columns_peak_and_trough(table):
    rows, max_rows = table
    keep = decimate_rows(rows, max_rows)
    assert len(keep) <= max(max_rows, 0) and keep == sorted(set(keep))
    kept = [rows[i] for i in keep]
    for c in range(len(rows[0])):
        col = [r[c] for r in rows if r[c] is not None]
        if col:
            assert max(col) in [r[c] for r in kept]
            assert min(col) in [r[c] for r in kept]


@settings(max_examples=50, deadline=None)
@given(tables())
def test_decimation_keeps_first_and_last_rows(table):
    rows, max_rows = table
    keep = decimate_rows(rows, max_rows)
    assert keep[0] == 0 and keep[-1] == len(rows) - 1


def test_decimation_refuses_a_budget_below_two_per_column():
    with pytest.raises(ValueError, match="at least 2 \\+ 2 per column"):
        decimate_rows([(1, 2)] * 10, 5)


def test_decimation_of_no_rows_keeps_none():
    assert decimate_rows([], 2) == []


def test_decimation_keeps_every_row_when_there_are_exactly_as_many_as_the_budget():
    assert decimate_rows([(5,)] * 4, 4) == [0, 1, 2, 3]


def test_decimation_refusal_says_the_least_budget_for_the_columns_given():
    with pytest.raises(ValueError) as err:
        decimate_rows([(1, 2, 3)] * 10, 7)
    assert str(err.value) == "max_rows must be at least 2 + 2 per column (8), got 7"


_PLOT_JS = Path(__file__).parents[2] / "jupyter_gpumem" / "monitor" / "monitor_plot.js"


@pytest.mark.skipif(shutil.which("node") is None, reason="the browser's thinning runs in node")
def test_the_browser_thins_a_live_plot_by_the_same_rule(tmp_path):
    # monitor_plot.js's extremeRows, run in node on the tables decimate_rows is given: the same rows.
    rng = random.Random(7)
    cases = []
    for _ in range(60):
        width = rng.randint(1, 4)
        spread = rng.choice([3, 10**12])  # few distinct values: ties must break the same way
        rows = [
            tuple(None if rng.random() < 0.1 else rng.randint(0, spread) for _ in range(width))
            for _ in range(rng.randint(1, 400))
        ]
        cases.append((rows, rng.randint(2 + 2 * width, 60)))
    module = tmp_path / "monitor_plot.mjs"
    shutil.copy(_PLOT_JS, module)
    script = (
        f"import {{ extremeRows }} from {json.dumps(module.as_uri())};"
        "let text = ''; for await (const c of process.stdin) text += c;"
        "const out = JSON.parse(text).map(([cols, n, max]) => extremeRows(cols, 0, n, max));"
        "process.stdout.write(JSON.stringify(out));"
    )
    given_js = [[[list(col) for col in zip(*rows)], len(rows), max_rows] for rows, max_rows in cases]
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        input=json.dumps(given_js),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(done.stdout) == [decimate_rows(rows, max_rows) for rows, max_rows in cases]


def test_one_hour_at_10hz_draws_at_most_2000_points_and_keeps_a_one_sample_spike():
    series = DeviceSeries(window_s=3600, max_points=2000)
    base = row_for(bfc_sample(), 0)
    spike_at = 17_777
    col = SERIES_NAMES.index("jax_in_use")
    for i in range(36_000):
        row = list(base)
        row[col] = 70 * GiB if i == spike_at else (i % 7) * GiB
        series.add(1_000_000.0 + i / 10, tuple(row))
        series.expire()
    assert series.points_per_series() <= 2000
    drawn = [r[col] for c in series.chunks for r in c.rows] + [r[col] for r in series.tail()[1]]
    assert max(drawn) == 70 * GiB


def test_chunks_older_than_the_window_are_dropped():
    series = DeviceSeries(window_s=60, chunks=4)
    row = row_for(bfc_sample(), 0)
    for i in range(600):  # 10 minutes at 1 Hz
        series.add(float(i), row)
        series.expire()
    # 15 s spans; the window reaches back from the last row (599) to 539. The chunk that ended at
    # 539 is still in it, the one that ended at 524 is not.
    assert [(c.start, c.end) for c in series.chunks] == [(524.0, 539.0), (539.0, 554.0), (554.0, 569.0), (569.0, 584.0)]


def test_sealed_chunk_starts_where_the_previous_one_ended():
    series = DeviceSeries(window_s=40, chunks=4)  # 10 s spans
    row = row_for(bfc_sample(), 0)
    for i in range(25):
        series.add(float(i), row)
    first, second = series.chunks[0], series.chunks[1]
    assert second.times[0] == first.times[-1]


def test_a_sealed_whole_span_is_a_span_chunk():
    series = DeviceSeries(window_s=40, chunks=4)  # 10 s spans
    row = row_for(bfc_sample(), 0)
    for i in range(25):
        series.add(float(i), row)
    assert [c.kind for c in series.chunks] == ["span", "span"]


def test_expire_at_a_given_time_drops_what_ended_before_its_window():
    series = DeviceSeries(window_s=40, chunks=4)
    row = row_for(bfc_sample(), 0)
    for i in range(25):  # spans sealed at 9 and 19
        series.add(float(i), row)
    # at 55 the window reaches back to 15: the span that ended at 9 goes, the one that ended at 19 stays
    assert [c.end for c in series.expire(now=55.0)] == [9.0]


def test_rows_not_yet_sealed_are_the_points_drawn():
    series = DeviceSeries(window_s=40, chunks=4)
    row = row_for(bfc_sample(), 0)
    for i in range(3):
        series.add(float(i), row)
    assert series.points_per_series() == 3


# --- cells ---------------------------------------------------------------------------------


def test_cell_markers_pair_starts_and_ends_by_execution_count():
    events = [
        Event(10.0, "cell_start", {"execution_count": 3}),
        Event(12.5, "cell_end", {"execution_count": 3, "success": True}),
        Event(20.0, "cell_start", {"execution_count": 4}),
    ]
    assert cell_markers(events) == [(10.0, 3, 2.5), (20.0, 4, None)]


def test_a_cell_end_without_its_start_is_left_out():
    events = [Event(5.0, "cell_end", {"execution_count": 2}), Event(10.0, "cell_start", {"execution_count": 3})]
    assert cell_markers(events) == [(10.0, 3, None)]


def test_cell_markers_since_leaves_out_a_run_that_starts_at_that_time():
    events = [Event(10.0, "cell_start", {"execution_count": 3}), Event(20.0, "cell_start", {"execution_count": 4})]
    assert [m[1] for m in cell_markers(events, since=10.0)] == [4]


def test_cell_markers_since_leaves_out_older_runs():
    events = [Event(10.0, "cell_start", {"execution_count": 3}), Event(20.0, "cell_start", {"execution_count": 4})]
    assert [m[1] for m in cell_markers(events, since=15.0)] == [4]


# --- JAX on the CPU -----------------------------------------------------------------------


def test_jax_on_the_cpu_with_its_live_arrays_read_gets_the_cpu_view():
    assert view_keys(cpu_sample()) == [CPU_KEY]
    assert nothing_to_show(cpu_sample()) is None


def test_the_cpu_view_draws_the_live_arrays_bytes_and_nothing_else():
    values = series_values(cpu_sample(arrays=CpuArraysReading(bytes=3 << 20, arrays=2)), CPU_KEY)
    assert values["cpu_arrays"] == 3 << 20
    assert [name for name, v in values.items() if v is not None] == ["cpu_arrays"]


def test_a_gpu_view_never_draws_the_cpu_band():
    assert series_values(bfc_sample(), 0)["cpu_arrays"] is None


def test_without_a_live_arrays_reading_jax_on_the_cpu_still_has_nothing_to_draw():
    sample = cpu_sample(arrays=None)
    assert view_keys(sample) == []
    assert "JAX is running on the CPU, which keeps no allocator statistics" in nothing_to_show(sample)


def test_gpus_beside_jax_on_the_cpu_keep_their_views_and_the_cpu_view_comes_last():
    gpus = bfc_sample().devices + (DeviceReading(1, "GPU", "GPU-1", 80 * GiB, 0, 80 * GiB),)
    assert view_keys(cpu_sample(devices=gpus)) == [0, 1, CPU_KEY]
    assert in_view_order([CPU_KEY, 2, 0]) == [0, 2, CPU_KEY]


def test_the_cpu_view_s_heading_says_it_is_host_memory_held_by_jax_arrays_not_a_gpu():
    assert "JAX's live arrays on the CPU, in the host's memory (not a GPU's)" in CPU_VIEW_HEADING


def test_the_cpu_view_has_no_header_note_while_its_arrays_are_read():
    # Its heading says what it draws; a note would say it again (notes are for what is unknown).
    assert notes_for(cpu_sample(), CPU_KEY) == []


def test_live_arrays_that_could_not_be_read_keep_the_view_blank_and_say_why():
    sample = cpu_sample(arrays=NotAvailable(ERROR, "reading JAX's live arrays on the CPU failed: RuntimeError: x"))
    assert view_keys(sample) == [CPU_KEY]
    assert series_values(sample, CPU_KEY)["cpu_arrays"] is None
    assert notes_for(sample, CPU_KEY) == [
        "JAX's live arrays could not be read: reading JAX's live arrays on the CPU failed: RuntimeError: x."
    ]


def test_csv_rows_name_the_cpu_view_cpu():
    header, row = csv_rows([cpu_sample(t=0.0)])
    named = dict(zip(header, row))
    assert named["device"] == "cpu" and named["cpu_arrays"] == 3 << 20 and named["free"] == ""


# --- CSV -----------------------------------------------------------------------------------


def test_csv_rows_give_bytes_per_device_and_blank_unknowns():
    rows = csv_rows([bfc_sample(t=0.0)])
    header, row = rows
    assert header[:3] == ["t", "time", "device"] and header[3:] == list(SERIES_NAMES)
    named = dict(zip(header, row))
    assert named["time"] == "1970-01-01T00:00:00.000+00:00"
    assert named["jax_in_use"] == 6 * GiB and named["pool_unused"] == 10 * GiB
    assert named["pool_reserved"] == ""


def test_csv_rows_are_for_the_devices_asked_that_the_sample_has():
    rows = csv_rows([bfc_sample(t=0.0)], keys=[7, 0])
    assert [row[2] for row in rows[1:]] == [0]


def test_csv_rows_for_no_device_are_the_header_alone():
    assert csv_rows([bfc_sample(t=0.0)], keys=[]) == [["t", "time", "device", *SERIES_NAMES]]


# --- replayed traces -----------------------------------------------------------------------

# the demo traces the package ships, and any recorded ones kept as test data
TRACES = sorted(
    glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces", "*.jsonl"))
    + [str(p) for p in demo_traces.FOLDER.glob("*.jsonl")]
)
assert TRACES, "the package ships its demo traces in jupyter_gpumem/demo_traces/"


@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_replayed_trace_bands_never_exceed_the_device_total(path):
    from jupyter_gpumem.core.tracefile import read_trace

    trace = read_trace(path)
    checked = 0
    for sample in trace.samples:
        for key in device_keys(sample):
            v = series_values(sample, key)
            if v["total"] is None:
                continue
            assert sum(v[b] or 0 for b in BANDS) <= v["total"] * 1.001
            checked += 1
    assert checked > 0


def test_the_live_tail_stays_short_while_a_span_fills():
    series = DeviceSeries(window_s=600, chunks=4, tail_rows=16)  # 150 s spans
    row = row_for(bfc_sample(), 0)
    longest = 0
    for i in range(140):
        series.add(float(i), row)
        longest = max(longest, len(series.tail()[0]))
    assert longest <= 17  # 16 rows and the row it joins on to


def test_minis_that_outgrow_the_budget_are_merged_into_one():
    series = DeviceSeries(window_s=3600, max_points=2000, chunks=16, tail_rows=16)  # 225 s spans
    row = row_for(bfc_sample(), 0)
    merged = []
    for i in range(2000):  # 200 s at 10 Hz, inside one span
        merged += [c for c in series.add(i / 10, row) if c.replaces]
    assert merged and len(series.minis) < 8
    assert sum(len(m.rows) for m in series.minis) <= series.per_chunk


# --- a device's series: budgets, ids and the rows of each chunk --------------------------------


def _rows(n: int, start: float = 0.0) -> list[tuple[float, tuple]]:
    """``n`` rows one second apart, each with its own time as the JAX arrays' bytes."""
    col = SERIES_NAMES.index("jax_in_use")
    out = []
    for i in range(n):
        row = [None] * len(SERIES_NAMES)
        row[col] = start + i
        out.append((start + i, tuple(row)))
    return out


def test_a_window_of_less_than_a_second_is_a_window():
    assert DeviceSeries(window_s=0.5, chunks=4).span_s == 0.125


@pytest.mark.parametrize("window_s", [0, -1.0, float("inf"), float("nan")])
def test_a_window_that_is_not_a_positive_number_of_seconds_is_refused(window_s):
    with pytest.raises(ValueError) as err:
        DeviceSeries(window_s=window_s)
    assert str(err.value) == f"window must be a positive number of seconds, got {window_s!r}"


def test_the_window_is_split_into_sixteen_spans_by_default():
    assert DeviceSeries(window_s=160).span_s == 10.0


def test_a_chunks_budget_shares_the_points_between_the_spans_and_the_live_one():
    assert DeviceSeries(window_s=60).per_chunk == 2000 // 17
    assert DeviceSeries(window_s=60, max_points=500, chunks=4).per_chunk == 100


def test_a_chunks_budget_is_never_below_two_rows_per_series_and_the_ends():
    assert DeviceSeries(window_s=60, max_points=100, chunks=4).per_chunk == 2 + 2 * len(SERIES_NAMES)


def test_the_live_tail_is_sealed_every_sixteen_rows_by_default_and_never_under_two():
    assert DeviceSeries(window_s=60).tail_rows == 16
    assert DeviceSeries(window_s=60, tail_rows=1).tail_rows == 2


def test_a_new_series_has_no_latest_row_and_nothing_to_expire():
    series = DeviceSeries(window_s=60)
    assert (series.last_t, series.latest) == (None, None)
    assert series.expire() == []
    assert series.tail() == ([], [])


def test_adding_a_row_keeps_it_as_the_latest_values_by_name():
    series = DeviceSeries(window_s=60)
    ((t, row),) = _rows(1, start=5.0)
    assert series.add(t, row) == []
    assert series.last_t == 5.0
    assert series.latest == dict(zip(SERIES_NAMES, row))


def test_every_tail_rows_rows_become_a_mini_chunk_joined_to_the_row_before():
    series = DeviceSeries(window_s=1000, chunks=1, tail_rows=4)  # one 1000 s span
    sealed = [c for t, row in _rows(8) for c in series.add(t, row)]
    first, second = sealed
    assert (first.id, first.kind, first.start, first.end, first.times, first.replaces) == (
        0,
        "mini",
        0.0,
        3.0,
        (0.0, 1.0, 2.0, 3.0),
        (),
    )
    assert (second.id, second.start, second.end, second.times) == (1, 3.0, 7.0, (3.0, 4.0, 5.0, 6.0, 7.0))
    assert [r[SERIES_NAMES.index("jax_in_use")] for r in second.rows] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert series.minis == [first, second]


def test_the_tail_is_the_rows_after_the_last_mini_led_by_its_last_row():
    series = DeviceSeries(window_s=1000, chunks=1, tail_rows=4)
    for t, row in _rows(6):
        series.add(t, row)
    times, rows = series.tail()
    assert times == [3.0, 4.0, 5.0]
    assert [r[SERIES_NAMES.index("jax_in_use")] for r in rows] == [3.0, 4.0, 5.0]
    assert series.points_per_series() == 4 + 3


def test_minis_over_the_budget_merge_into_one_mini_of_every_row_that_replaces_them():
    # 38-row budget; minis of 4, then 5 rows (each led by the row before): 4 + 5 * 6 = 34, and the
    # eighth (34 + 5 > 38) merges all 32 rows, which fit its own budget of 38 undecimated.
    series = DeviceSeries(window_s=1000, max_points=38, chunks=1, tail_rows=4)
    sealed = [c for t, row in _rows(32) for c in series.add(t, row)]
    merged = sealed[-1]
    assert [len(c.rows) for c in sealed[:-1]] == [4, 5, 5, 5, 5, 5, 5]
    assert (merged.id, merged.kind, merged.replaces) == (7, "mini", (0, 1, 2, 3, 4, 5, 6))
    assert merged.times == tuple(float(i) for i in range(32))
    assert series.minis == [merged]


def test_merged_minis_are_thinned_to_half_a_chunks_budget():
    # per_chunk 100; minis of 12, then 13 rows: 12 + 13 * 6 = 90, and the eighth (90 + 13 > 100)
    # merges all 96 rows into at most 50: 24 buckets of 4 equal rows keep each one's first row,
    # and the last row is kept too (25).
    series = DeviceSeries(window_s=1000, max_points=200, chunks=1, tail_rows=12)
    row = row_for(bfc_sample(), 0)
    sealed = [c for i in range(96) for c in series.add(float(i), row)]
    merged = [c for c in sealed if c.replaces]
    assert len(merged) == 1 and len(merged[0].rows) == 25


def test_a_mini_that_exactly_fills_a_chunks_budget_is_kept_as_it_is():
    # 39-row budget: minis of 4, then 5 rows: the eighth brings them to 4 + 5 * 7 = 39, not over it.
    series = DeviceSeries(window_s=1000, max_points=78, chunks=1, tail_rows=4)
    sealed = [c for t, row in _rows(32) for c in series.add(t, row)]
    assert [len(c.rows) for c in sealed] == [4, 5, 5, 5, 5, 5, 5, 5]
    assert [c.replaces for c in sealed] == [()] * 8


def test_right_after_a_mini_is_sealed_the_tail_is_empty():
    series = DeviceSeries(window_s=1000, chunks=1, tail_rows=4)
    for t, row in _rows(4):
        series.add(t, row)
    assert series.tail() == ([], [])


def test_a_sealed_span_replaces_its_minis_and_leads_the_next_span_with_its_last_row():
    series = DeviceSeries(window_s=20, chunks=2, tail_rows=4)  # 10 s spans
    sealed = [c for t, row in _rows(14) for c in series.add(t, row)]
    minis, span, next_mini = sealed[:2], sealed[2], sealed[3]
    assert (span.kind, span.times, span.replaces) == ("span", tuple(float(i) for i in range(10)), (0, 1))
    assert [m.id for m in minis] == [0, 1] and span.id == 2
    # the next span's first mini: its 4 rows, led by the last row of the span before
    assert (next_mini.id, next_mini.kind, next_mini.times) == (3, "mini", (9.0, 10.0, 11.0, 12.0, 13.0))
    assert [r[SERIES_NAMES.index("jax_in_use")] for r in next_mini.rows] == [9.0, 10.0, 11.0, 12.0, 13.0]


def test_merged_minis_of_a_later_span_are_led_by_the_last_row_of_the_span_before():
    # span 0 holds one row; in span 1 the minis are 5 rows each (4 and the row before): the eighth
    # (35 + 5 > 38) merges the carried row and all 32 rows, 33 in all, within a budget of 38.
    series = DeviceSeries(window_s=2000, max_points=114, chunks=2, tail_rows=4)  # 1000 s spans
    series.add(0.0, _rows(1)[0][1])
    sealed = [c for t, row in _rows(32, start=1000.0) for c in series.add(t, row)]
    merged = sealed[-1]
    assert merged.replaces and merged.times == (0.0, *(1000.0 + i for i in range(32)))


def test_a_merged_mini_never_holds_more_rows_than_two_per_series_and_the_ends():
    # 38-row budget, 72 rows merged (a mini of 36, then 37 more): 18 buckets of 4 rows keep each
    # one's first and last (a rising column), and three columns known at one row each add rows
    # 1, 5 and 9: 39 rows, one over. 16 wider buckets then keep 32 and rows 1 and 5 (row 9
    # starts a bucket): 34.
    series = DeviceSeries(window_s=1000, max_points=38, chunks=1, tail_rows=36)
    rising = SERIES_NAMES.index("jax_in_use")
    once = {1: SERIES_NAMES.index("pool_unused"), 5: SERIES_NAMES.index("outside_jax"), 9: SERIES_NAMES.index("free")}
    sealed = []
    for i in range(72):
        row = [None] * len(SERIES_NAMES)
        row[rising] = i
        if i in once:
            row[once[i]] = 1
        sealed += series.add(float(i), tuple(row))
    merged = sealed[-1]
    assert merged.replaces == (0,) and len(merged.rows) == 34
    assert {1.0, 5.0, 9.0} <= set(merged.times)


def test_a_series_no_longer_drawn_after_its_chunks_expire_is_no_longer_active():
    series = DeviceSeries(window_s=40, chunks=4)  # 10 s spans
    early, late = SERIES_NAMES.index("pool_unused"), SERIES_NAMES.index("jax_in_use")
    for i in range(61):
        row = [None] * len(SERIES_NAMES)
        row[early if i < 10 else late] = 1
        series.add(float(i), tuple(row))
    assert series.active_series() == ["jax_in_use", "pool_unused"]
    # at 60 the window reaches back to 20: the spans that ended at 9 and 19 (led by row 9) go
    assert [c.end for c in series.expire()] == [9.0, 19.0]
    assert series.active_series() == ["jax_in_use"]


def test_views_are_named_gpu_by_index_and_cpu():
    assert (view_name(0), view_name(3), view_name(CPU_KEY)) == ("GPU 0", "GPU 3", "CPU")


def test_a_cell_event_without_data_is_marked_with_no_execution_count():
    assert cell_markers([Event(10.0, "cell_start", None)]) == [(10.0, None, None)]


def test_without_nvml_a_jax_gpu_drawn_by_its_id_gets_no_drawn_on_no_gpu_note():
    """sources/device_identity.py's match gives a GPU "NVML cannot be read: ..." as why_not
    when NVML is out; the view is then keyed by the JAX id, so the GPU is drawn."""
    gpu = JaxDeviceReading(
        1,
        "gpu",
        "H100",
        None,
        normalise_stats({"bytes_in_use": 0}, "bfc"),
        nvml_unmatched="NVML cannot be read: synthetic",
    )
    sample = Sample(0.0, PID, NotAvailable(NO_DRIVER, "synthetic"), (gpu,))
    assert device_keys(sample) == [1]
    assert notes_for(sample, 1) == []


# --- bands where NVML cannot name this process's bytes -----------------------------------------


def _gpu(used: int, processes) -> DeviceReading:
    return DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, used, 80 * GiB - used, processes=processes)


def test_without_nvml_only_jaxs_own_numbers_are_drawn_for_a_gpu_keyed_by_its_id():
    stats = normalise_stats({"bytes_in_use": 2 * GiB, "pool_bytes": 4 * GiB}, "bfc")
    sample = Sample(0.0, PID, NotAvailable(NO_DRIVER, "synthetic"), (JaxDeviceReading(1, "gpu", "H100", None, stats),))
    values = series_values(sample, 1)
    assert (values["jax_in_use"], values["pool_unused"]) == (2 * GiB, 2 * GiB)
    assert [values[n] for n in ("total", "free", "outside_jax", "other_processes", "unattributed")] == [None] * 5


def test_when_nvml_lists_no_gpu_a_jax_gpu_keyed_by_its_id_draws_jaxs_numbers():
    stats = normalise_stats({"bytes_in_use": 2 * GiB, "pool_bytes": 4 * GiB}, "bfc")
    sample = Sample(0.0, PID, (), (JaxDeviceReading(1, "gpu", "H100", None, stats),))
    assert device_keys(sample) == [1]
    assert (series_values(sample, 1)["jax_in_use"], series_values(sample, 1)["pool_unused"]) == (2 * GiB, 2 * GiB)


def test_a_gpu_nvml_cannot_read_draws_jaxs_numbers_and_no_nvml_bands():
    s = bfc_sample()
    lost = DeviceUnreadable(0, NotAvailable(ERROR, "synthetic: GPU is lost"))
    values = series_values(Sample(s.t, PID, (lost,), s.jax), 0)
    assert values["jax_in_use"] == 6 * GiB
    assert [values[n] for n in ("total", "free", "outside_jax", "other_processes", "unattributed")] == [None] * 5


def test_hidden_pids_under_cuda_async_leave_the_used_bytes_beyond_the_driver_pool_unattributed():
    # 9 GiB used, of which the driver pool JAX allocates from reserves 8 GiB (3 GiB in use)
    s = cuda_async_sample()
    sample = Sample(s.t, PID, (_gpu(9 * GiB, NotAvailable(PIDS_HIDDEN, "synthetic")),), s.jax)
    assert series_values(sample, 0)["unattributed"] == 1 * GiB


def test_hidden_pids_with_every_used_byte_in_jaxs_pool_leave_nothing_unattributed():
    s = cuda_async_sample()
    sample = Sample(s.t, PID, (_gpu(8 * GiB, NotAvailable(PIDS_HIDDEN, "synthetic")),), s.jax)
    assert series_values(sample, 0)["unattributed"] == 0


def test_hidden_pids_before_jax_starts_leave_every_used_byte_unattributed():
    sample = Sample(0.0, PID, (_gpu(7 * GiB, NotAvailable(PIDS_HIDDEN, "synthetic")),), NotAvailable(NOT_STARTED, "x"))
    assert series_values(sample, 0)["unattributed"] == 7 * GiB


def test_two_host_pids_put_the_used_bytes_beyond_jaxs_pool_and_the_other_processes_in_their_band():
    # 35 GiB used: JAX's BFC pool 16 GiB, pid 999 (a process here) 5 GiB, the rest 14 GiB
    hosts = (ProcessReading(812_345, 10 * GiB), ProcessReading(812_399, 20 * GiB), ProcessReading(999, 5 * GiB))
    s = bfc_sample()
    sample = Sample(s.t, PID, (_gpu(35 * GiB, hosts),), s.jax, pids_not_here=frozenset({812_345, 812_399}))
    values = series_values(sample, 0)
    assert (values["host_pids"], values["other_processes"]) == (14 * GiB, 5 * GiB)


def test_the_host_pids_band_is_never_below_zero():
    # 20 GiB used, less than JAX's 16 GiB pool and pid 999's 5 GiB together (readings taken apart)
    hosts = (ProcessReading(812_345, 10 * GiB), ProcessReading(812_399, 20 * GiB), ProcessReading(999, 5 * GiB))
    s = bfc_sample()
    sample = Sample(s.t, PID, (_gpu(20 * GiB, hosts),), s.jax, pids_not_here=frozenset({812_345, 812_399}))
    assert series_values(sample, 0)["host_pids"] == 0


def test_a_host_pid_before_jax_starts_puts_every_used_byte_in_the_host_pids_band():
    sample = Sample(
        0.0,
        PID,
        (_gpu(10 * GiB, (ProcessReading(812_345, 10 * GiB),)),),
        NotAvailable(NOT_STARTED, "x"),
        pids_not_here=frozenset({812_345}),
    )
    assert series_values(sample, 0)["host_pids"] == 10 * GiB


# --- cuda_async beside another user of CUDA's default pool ------------------------------------
# Source: tensorflow/core/common_runtime/gpu/gpu_cudamallocasync_allocator.cc (and XLA's twin) take the device's
# default pool (cuDeviceGetDefaultMemPool) and sets its CU_MEMPOOL_ATTR_RELEASE_THRESHOLD; the
# same class serves TensorFlow's TF_GPU_ALLOCATOR=cuda_malloc_async (its error texts name it).


def _async_sample(pid: int, allocator: str = "cuda_async"):
    from jupyter_gpumem.core.readings import AllocatorStats, JaxDeviceReading, NotAvailable, Sample

    stats = AllocatorStats(allocator, bytes_in_use=1 << 30)
    return Sample(0.0, pid, NotAvailable("no_nvml", "no NVML"), (JaxDeviceReading(0, "gpu", "GPU", 0, stats),))


def test_cuda_async_with_tensorflow_imported_notes_the_shared_default_pool():
    from jupyter_gpumem.monitor.series import shared_pool_note

    note = shared_pool_note(_async_sample(41), 0, modules={"jax", "tensorflow"}, pid=41)
    assert note == (
        "TensorFlow (TF_GPU_ALLOCATOR=cuda_malloc_async) imported here: if it allocates asynchronously it "
        "uses CUDA's default pool, the same pool as JAX's cuda_async. Then 'JAX pool, unused' and the CUDA "
        "pool lines include its bytes, and whichever set the pool's release threshold last decides when "
        "memory goes back."
    )


def test_the_shared_pool_note_names_every_framework_imported():
    from jupyter_gpumem.monitor.series import shared_pool_note

    note = shared_pool_note(_async_sample(41), 0, modules={"jax", "tensorflow", "cupy"}, pid=41)
    assert note.startswith("TensorFlow (TF_GPU_ALLOCATOR=cuda_malloc_async) and CuPy (MemoryAsyncPool) imported here:")


def test_shared_pool_note_is_absent_for_bfc_replays_and_lone_jax():
    from jupyter_gpumem.monitor.series import shared_pool_note

    assert shared_pool_note(_async_sample(41, "bfc"), 0, modules={"tensorflow"}, pid=41) is None
    assert shared_pool_note(_async_sample(7), 0, modules={"tensorflow"}, pid=41) is None  # a replay
    assert shared_pool_note(_async_sample(41), 0, modules={"jax", "torch"}, pid=41) is None


def test_shared_pool_note_reaches_the_monitor_notes():
    import os

    from jupyter_gpumem.monitor.series import notes_for

    sample = _async_sample(os.getpid())
    import sys

    had = "cupy" in sys.modules
    sys.modules.setdefault("cupy", type(sys)("cupy"))
    try:
        assert any("CuPy (MemoryAsyncPool)" in n for n in notes_for(sample, 0))
    finally:
        if not had:
            del sys.modules["cupy"]


# --- which views are made up (core/synthetic.py) -------------------------------------------------


def test_a_gpu_view_is_drawn_from_nvml_jax_and_torch_and_the_cpu_view_from_live_cpu_arrays_alone():
    assert view_fields(0) == ("devices", "jax", "pids_not_here", "torch")
    assert view_fields(CPU_KEY) == ("cpu_arrays",)


def test_on_the_fake_nvml_world_only_gpu_views_are_labelled_synthetic():
    assert view_labels(0, NVML_FIELDS, replay=False) == ["synthetic"]
    assert view_labels(CPU_KEY, NVML_FIELDS, replay=False) == []


def test_a_replay_is_labelled_replay_first_and_synthetic_where_its_fields_are_made_up():
    assert view_labels(CPU_KEY, SAMPLE_FIELDS, replay=True) == ["replay", "synthetic"]
    assert view_labels(1, (), replay=True) == ["replay"]
    assert view_labels(1, ("torch",), replay=False) == ["synthetic"]
