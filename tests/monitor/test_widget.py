"""The monitor widget: what it draws from a sample, recordings, options, controls, and shutdown."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jupyter_gpumem import demo_traces
from jupyter_gpumem.core.magic_args import MagicUsageError
from jupyter_gpumem.core.readings import NO_DRIVER, NOT_STARTED, CpuArraysReading, Event, NotAvailable, Sample
from jupyter_gpumem.core.tracefile import TraceWriter, read_trace
from jupyter_gpumem.monitor.series import CPU_KEY
from jupyter_gpumem.monitor.widget import CPU_TITLE, MONITOR_ARGS, Monitor, magic_monitor
from jupyter_gpumem.sampling.sampler import Sampler
from jupyter_gpumem.sources.replay import timeline_from_trace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "bench"))
from comm_bytes import measure_comm_bytes  # noqa: E402  (a bench tool, measured here too)

from doubles import PID, StubSampler, bfc_sample, cpu_sample

TRACES = str(demo_traces.FOLDER)
SYNTHETIC = sorted(glob.glob(os.path.join(TRACES, "synthetic_*.jsonl")))
assert SYNTHETIC, (
    "jupyter_gpumem/demo_traces/synthetic_*.jsonl are committed; regenerate them with tests/data/make_synthetic_traces.py"
)


def drawn_y(monitor: Monitor, label: str, key: int = 0):
    """The values a device's plot draws for the series labelled ``label`` (GiB or percent)."""
    figure = monitor._views[key].figure()
    for spec in figure["series"]:
        if spec["label"] == label:
            return figure["y"][spec["name"]]
    raise AssertionError(f"no series labelled {label!r}")


def sent_messages(view) -> list[dict]:
    """Record the custom messages a device's plot widget sends to the browser from now on."""
    sent: list[dict] = []
    view.fig.send = lambda content, buffers=None: sent.append(content)
    return sent


@pytest.fixture
def stub():
    return StubSampler()


# --- options -------------------------------------------------------------------------------


def test_options_parse_to_monitor_arguments():
    assert MONITOR_ARGS.parse(["--interval", "0.5", "--window=5", "--device", "1"]) == {
        "interval": 0.5,
        "window": 5.0,
        "device": 1,
        "replay": None,
    }


def test_no_options_leave_the_monitor_its_defaults():
    assert MONITOR_ARGS.parse([]) == {"interval": 1.0, "window": None, "device": None, "replay": None}


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(MagicUsageError, match="--interval, --window, --device, --replay"):
        MONITOR_ARGS.parse(["--rate", "2"])


def test_bad_device_names_the_valid_values():
    with pytest.raises(MagicUsageError, match="GPU index .* or 'all'"):
        MONITOR_ARGS.parse(["--device", "first"])


def test_bad_interval_names_the_valid_range():
    with pytest.raises(MagicUsageError, match="from 0.01 to 3600"):
        MONITOR_ARGS.parse(["--interval", "fast"])


def test_the_python_api_refuses_a_bad_interval_in_the_same_words():
    with pytest.raises(MagicUsageError, match="from 0.01 to 3600"):
        Monitor(interval=0, sampler=StubSampler())


def test_replay_of_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(MagicUsageError, match="no trace file"):
        magic_monitor(["--replay", str(tmp_path / "nope.jsonl")], shell=None)


def test_a_bad_option_starts_no_monitor(stub, monkeypatch):
    import jupyter_gpumem.sampling.sampler as sampler_mod

    monkeypatch.setattr(sampler_mod, "get_sampler", lambda: stub)
    with pytest.raises(MagicUsageError, match="window must be"):
        magic_monitor(["--window", "0"], shell=None)
    assert stub.subscriptions == []


def test_a_monitor_draws_one_timeline(stub):
    with pytest.raises(MagicUsageError, match="one timeline"):
        Monitor(replay=SYNTHETIC[0], sampler=stub)


# --- what a live sample draws ----------------------------------------------------------------


def test_live_sample_draws_each_band_in_gib(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    assert drawn_y(m, "JAX arrays (in use)") == [6.0]
    assert drawn_y(m, "JAX pool, unused") == [10.0]
    assert drawn_y(m, "this process, outside JAX") == [4.0]
    assert drawn_y(m, "other processes") == [30.0]
    assert drawn_y(m, "fragmentation") == [60.0]
    m.close()


def test_bands_stack_from_jax_arrays_at_the_bottom_to_free_at_the_top(stub):
    # Plotly stacks a stackgroup's traces in the order the figure lists them, first at the bottom
    # (the browser draws figure["series"] in order); docs/monitor.md's band table gives this order.
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    bands = [s for s in m._views[0].figure()["series"] if s["kind"] == "band"]
    assert [s["label"] for s in bands] == [
        "JAX arrays (in use)",
        "JAX pool, unused",
        "this process, outside JAX",
        "other processes",
        "free",
    ]
    assert [s["rank"] for s in bands] == sorted(s["rank"] for s in bands)  # the legend in the same order
    m.close()


def test_the_monitor_docs_list_the_bands_in_the_order_they_stack():
    from jupyter_gpumem.monitor.series import SERIES

    docs = (Path(__file__).parents[2] / "docs" / "monitor.md").read_text()
    table = docs.split("| band | what it is | from |", 1)[1].split("\n\n", 1)[0]
    documented = [label.strip() for row in table.splitlines()[2:] for label in row.split("|")[1].split(" / ")]
    assert documented == [s.label for s in SERIES if s.kind == "band"]


def test_header_shows_the_live_numbers_in_human_units(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    assert "JAX arrays <b>6.00 GiB</b>" in m.header.value
    assert "fragmentation <b>60%</b>" in m.header.value
    assert "headroom <b>44.00 GiB</b>" in m.header.value
    m.close()


def test_every_drawn_trace_has_as_many_x_as_y(stub):
    m = Monitor(sampler=stub)
    for i in range(50):
        stub.push(bfc_sample(t=1000.0 + i * 20))
    figure = m._views[0].figure()
    assert figure["y"]
    for name, ys in figure["y"].items():
        assert len(ys) == len(figure["t"]), name
    m.close()


def test_cell_start_is_marked_with_its_execution_count(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    stub.timeline.add_event(Event(1000.5, "cell_start", {"execution_count": 7}))
    stub.push(bfc_sample(t=1001.0))
    assert [c[1] for c in m._views[0].figure()["cells"]] == [7]
    m.close()


def test_no_driver_and_jax_not_started_shows_the_explained_empty_state(stub):
    m = Monitor(sampler=stub)
    stub.push(
        Sample(1.0, PID, NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded"), NotAvailable(NOT_STARTED, "x"))
    )
    assert m.body.children == (m.empty,)
    assert "the NVIDIA driver is not loaded" in m.empty.value
    assert "will start when JAX does" in m.empty.value
    m.close()


def test_three_gpus_from_the_fake_nvml_world_get_three_tabs():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        source = NvmlSource()
        sample = Sample(1.0, PID, source.read(), NotAvailable(NOT_STARTED, "x"))
    stub = StubSampler()
    m = Monitor(sampler=stub)
    stub.push(sample)
    assert m.body.children == (m.tabs,)
    assert len(m.tabs.children) == 3
    assert m.tabs.get_title(2).startswith("GPU 2")
    m.close()


def test_device_option_draws_only_that_gpu():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = Sample(1.0, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x"))
    stub = StubSampler()
    m = Monitor(sampler=stub, device=1)
    stub.push(sample)
    assert list(m._views) == [1]
    m.close()


# --- JAX on the CPU ------------------------------------------------------------------------


def test_a_live_monitor_asks_the_sampler_for_jax_s_live_cpu_arrays(stub):
    m = Monitor(sampler=stub)
    assert [sub.cpu_arrays for sub in stub.subscriptions] == [True]
    m.close()


def test_jax_on_the_cpu_draws_its_live_arrays_in_mib_instead_of_nothing(stub):
    m = Monitor(sampler=stub)
    stub.push(cpu_sample(arrays=CpuArraysReading(bytes=3 << 20, arrays=2)))
    assert m.drawn_devices == [CPU_KEY] and m.drawn_gpus == [] and m.draws_cpu
    assert m.body.children == (m._views[CPU_KEY].widget,)
    assert m._views[CPU_KEY].widget.children[1] is m._views[CPU_KEY].fig
    assert drawn_y(m, "JAX live arrays (CPU)", CPU_KEY) == [3.0]
    assert m._views[CPU_KEY].figure()["unit"] == "MiB"
    m.close()


def test_the_cpu_view_s_header_line_says_host_memory_once(stub):
    m = Monitor(sampler=stub)
    stub.push(cpu_sample(arrays=CpuArraysReading(bytes=3 << 20, arrays=2)))
    header = m.header.value
    assert "<b>JAX memory on the CPU</b>" in header
    assert "<span>CPU: JAX arrays:</span> <b>3.00 MiB</b> in 2 live arrays, in host memory (not a GPU's)" in header
    assert header.count("host") == 1
    m.close()


def test_the_cpu_tab_title_is_short_and_its_view_s_heading_explains_it_in_full():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(cpu_sample(devices=NvmlSource().read()))
        m.close()
    assert m.tabs.titles[3] == CPU_TITLE == "CPU: JAX arrays"
    cpu_view = m.tabs.children[3]
    assert cpu_view is m._views[CPU_KEY].widget and cpu_view.children[1] is m._views[CPU_KEY].fig
    assert cpu_view.children[0].value == (
        "<div class='jupyter-gpumem-view-heading' style='line-height:1.4'>JAX&#x27;s live arrays on the CPU, in the host&#x27;s memory "
        "(not a GPU&#x27;s): their shapes times their dtypes&#x27; sizes, summed. The process&#x27;s other memory "
        "is not drawn.</div>"
    )
    assert all(child is m._views[i].fig for i, child in enumerate(m.tabs.children[:3]))


def three_gpus_sample(t: float = 1.0, jax_on: int | None = None) -> Sample:
    """The fake three-GPU world (synthetic) with JAX on the CPU, or, given ``jax_on``, on that GPU."""
    from jupyter_gpumem.core.readings import JaxDeviceReading, normalise_stats
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = cpu_sample(t=t, devices=NvmlSource().read())
    if jax_on is None:
        return sample
    stats = normalise_stats({"bytes_in_use": 0, "pool_bytes": 0, "bytes_limit": 30 * 2**30}, "bfc")
    gpu = JaxDeviceReading(0, "gpu", "NVIDIA A100-SXM4-40GB", jax_on, stats)
    return Sample(t=t, pid=PID, devices=sample.devices, jax=(gpu,), cpu_arrays=sample.cpu_arrays)


@pytest.mark.parametrize("jax_on, tab", [(None, 3), (1, 1)], ids=["jax-on-the-cpu", "jax-on-gpu-1"])
def test_the_monitor_opens_on_the_tab_of_the_device_this_kernel_s_jax_uses(jax_on, tab):
    stub = StubSampler()
    m = Monitor(sampler=stub)
    stub.push(three_gpus_sample(jax_on=jax_on))
    m.close()
    assert len(m.tabs.children) == 4 and m.tabs.selected_index == tab


def test_a_tab_the_user_picked_stays_when_jax_starts_later():
    stub = StubSampler()
    m = Monitor(sampler=stub)
    before = three_gpus_sample()
    stub.push(Sample(t=1.0, pid=PID, devices=before.devices, jax=NotAvailable(NOT_STARTED, "x"), cpu_arrays=None))
    assert m.tabs.selected_index == 0  # JAX has not started: the first GPU
    m.tabs.selected_index = 2  # as the front end sets it when the user clicks
    stub.push(three_gpus_sample(t=2.0, jax_on=1))
    m.close()
    assert m.tabs.selected_index == 2


def test_a_monitor_opened_before_jax_starts_moves_to_its_device_once_it_does():
    stub = StubSampler()
    m = Monitor(sampler=stub)
    before = three_gpus_sample()
    stub.push(Sample(t=1.0, pid=PID, devices=before.devices, jax=NotAvailable(NOT_STARTED, "x"), cpu_arrays=None))
    stub.push(three_gpus_sample(t=2.0, jax_on=2))
    m.close()
    assert m.tabs.selected_index == 2


def test_the_monitors_tabs_are_as_wide_as_their_titles():
    """ipywidgets gives each tab 144 px (--jp-widgets-horizontal-tab-width in @jupyter-widgets/
    jupyterlab-manager 5.0.16's widgets.css: ``flex: 0 1 var(...)``), which cut "GPU 0: NVIDIA
    A100-SXM4-40GB" to "GPU 0: NVIDIA A100". The monitor's tab bar is marked, and the plot's
    anywidget puts the rule that sizes it to its titles in the page (ui-tests' monitor.world spec
    checks every tab's title is drawn whole)."""
    from jupyter_gpumem.monitor.figure import plot_widget_class

    m = Monitor(sampler=StubSampler())
    m.close()
    assert "jupyter-gpumem-tabs" in m.tabs._dom_classes
    assert plot_widget_class()._css.startswith(".jupyter-gpumem-tabs { --jp-widgets-horizontal-tab-width: auto; }")


def test_the_cpu_view_follows_the_live_arrays_tick_by_tick(stub):
    m = Monitor(sampler=stub)
    for t, mib in ((1.0, 1), (2.0, 5), (3.0, 2)):
        stub.push(cpu_sample(t=t, arrays=CpuArraysReading(bytes=mib << 20, arrays=mib)))
    assert drawn_y(m, "JAX live arrays (CPU)", CPU_KEY) == [1.0, 5.0, 2.0]
    assert "<b>2.00 MiB</b> in 2 live arrays" in m.header.value
    stub.push(cpu_sample(t=4.0, arrays=CpuArraysReading(bytes=1 << 20, arrays=1)))
    assert "<b>1.00 MiB</b> in 1 live array, in host" in m.header.value
    m.close()


def test_gpus_beside_jax_on_the_cpu_keep_their_tabs_and_the_cpu_tab_is_added():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = cpu_sample(devices=NvmlSource().read())
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(sample)
        header = m.header.value
        m.close()
    assert m.drawn_devices == [0, 1, 2, CPU_KEY]
    assert m.drawn_gpus == [0, 1, 2] and m.draws_cpu
    assert m.tabs.titles[:3] == tuple(f"GPU {i}: {m._views[i].title.split(': ', 1)[1]}" for i in range(3))
    assert m.tabs.titles[3] == CPU_TITLE
    assert "<b>GPU memory</b>" in header
    assert "GPUs 0, 1, 2: JAX runs on the CPU, not on this GPU" in header


def test_a_device_option_draws_that_gpu_without_the_cpu_view():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = cpu_sample(devices=NvmlSource().read())
    stub = StubSampler()
    m = Monitor(sampler=stub, device=1)
    stub.push(sample)
    assert m.drawn_devices == [1]
    m.close()


def test_the_cpu_view_exports_as_csv_rows_of_device_cpu(stub, tmp_path):
    m = Monitor(sampler=stub)
    stub.push(cpu_sample(t=5.0))
    rows = open(m.export_csv(tmp_path / "cpu.csv")).read().strip().splitlines()
    header = rows[0].split(",")
    row = dict(zip(header, rows[1].split(",")))
    assert len(rows) == 2 and row["device"] == "cpu" and row["cpu_arrays"] == str(3 << 20)
    m.close()


def test_a_replayed_trace_of_jax_on_the_cpu_draws_the_cpu_view(stub, tmp_path):
    path = tmp_path / "cpu.jsonl"
    m = Monitor(sampler=stub)
    for t in (1.0, 2.0):
        stub.push(cpu_sample(t=t))
    m.export_trace(path)
    m.close()
    replay = Monitor(replay=str(path))
    assert replay.drawn_devices == [CPU_KEY]
    assert drawn_y(replay, "JAX live arrays (CPU)", CPU_KEY) == [3.0, 3.0]
    replay.close()


# --- incremental updates -------------------------------------------------------------------


def test_a_tick_sends_a_small_fraction_of_the_figure(stub):
    with measure_comm_bytes() as sizes:
        m = Monitor(sampler=stub, interval=0.5, window=2)
        for i in range(360):  # 3 minutes at 2 Hz: spans sealed, the oldest expired
            stub.push(bfc_sample(t=1_000_000.0 + i / 2))
        figure_bytes = len(json.dumps(m._views[0].figure()))
        before = len(sizes)
        stub.push(bfc_sample(t=1_000_000.0 + 360 / 2 + 0.01))
        tick = sum(sizes[before:])
    assert 0 < tick < figure_bytes / 10
    m.close()


def test_a_tick_sends_the_new_point_alone(stub):
    m = Monitor(sampler=stub)
    for i in range(30):
        stub.push(bfc_sample(t=1000.0 + i))
    sent = sent_messages(m._views[0])
    stub.push(bfc_sample(t=1030.0))
    assert [msg["kind"] for msg in sent] == ["append"]
    assert sent[0]["t"] == [1030.0]
    assert sent[0]["y"]["jax_in_use"] == [6.0] and all(len(v) == 1 for v in sent[0]["y"].values())
    m.close()


def test_cell_markers_are_sent_when_a_cell_starts_and_not_again(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    sent = sent_messages(m._views[0])
    stub.timeline.add_event(Event(1000.5, "cell_start", {"execution_count": 3}))
    stub.push(bfc_sample(t=1001.0))
    stub.push(bfc_sample(t=1002.0))
    assert [msg["kind"] for msg in sent] == ["append", "cells", "append"]
    assert sent[1]["cells"] == [[1000.5, 3, None]]
    m.close()


def test_cells_run_before_the_first_sample_drawn_are_not_marked(stub):
    stub.timeline.add_event(Event(990.0, "cell_start", {"execution_count": 1}))
    stub.timeline.add_event(Event(991.0, "cell_end", {"execution_count": 1}))
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    stub.timeline.add_event(Event(1000.5, "cell_start", {"execution_count": 2}))
    stub.push(bfc_sample(t=1001.0))
    figure = m._views[0].figure()
    assert figure["t"][0] == 1000.0
    assert [c[1] for c in figure["cells"]] == [2]
    m.close()


def test_a_page_reloaded_gets_the_figure_with_every_point_sent_since(stub):
    m = Monitor(sampler=stub)
    for i in range(5):
        stub.push(bfc_sample(t=1000.0 + i))
    state = m._views[0].fig.get_state()
    assert state["figure"]["t"] == [1000.0, 1001.0, 1002.0, 1003.0, 1004.0]
    m.close()


# --- recordings: a Timeline read from a trace --------------------------------------------------


def figure_labels(monitor: Monitor) -> list[str]:
    """The label line each device's plot draws above itself (the browser joins them with ' · ')."""
    return [" · ".join(v.figure()["labels"]).upper() for v in monitor._views.values() if v.figure()["labels"]]


def test_replay_of_a_synthetic_trace_is_labelled_replay_and_synthetic():
    m = Monitor(replay=SYNTHETIC[0])
    assert "REPLAY" in m.header.value and "SYNTHETIC" in m.header.value
    assert "class='jupyter-gpumem-label'" in m.header.value  # upper-casing must not touch the markup
    assert any("REPLAY" in t and "SYNTHETIC" in t for t in figure_labels(m))
    m.close()


def test_a_trace_recorded_on_a_real_gpu_is_labelled_replay_only(tmp_path):
    path = tmp_path / "real.jsonl"
    with TraceWriter(path, {"synthetic": False}) as writer:
        for sample in read_trace(SYNTHETIC[0]).samples[:5]:
            writer.write_sample(sample)
    m = Monitor(replay=path)
    assert "REPLAY" in m.header.value and "SYNTHETIC" not in m.header.value
    assert figure_labels(m) and all(t == "REPLAY" for t in figure_labels(m))
    m.close()


def test_live_readings_carry_no_replay_label(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    assert "REPLAY" not in m.header.value and figure_labels(m) == []
    m.close()


@contextlib.contextmanager
def three_gpu_monitor():
    """A live monitor given one reading of the fake world's three GPUs, JAX not started; the
    fake pynvml stays in place while it is used (the synthetic label reads which one is)."""
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = Sample(1.0, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x"))
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(sample)
        yield m
        m.close()


def test_live_readings_from_the_fake_nvml_world_are_labelled_synthetic():
    with three_gpu_monitor() as m:
        assert m.labels == ["synthetic"]
        assert "SYNTHETIC" in m.header.value and "REPLAY" not in m.header.value
        assert figure_labels(m) == ["SYNTHETIC"] * 3


@contextlib.contextmanager
def fake_world_with_jax_on_the_cpu():
    """A live monitor on the fake three-GPU world (synthetic NVML) beside JAX's real CPU arrays."""
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(cpu_sample(devices=NvmlSource().read()))
        yield m, stub
        m.close()


def header_line_of(monitor: Monitor, title: str) -> str:
    """The header's line that starts with a view's title."""
    plain = re.sub(r"<span data-gpumem-tab=[^>]*>", "<span>", monitor.header.value)  # a title is a link to its tab
    lines = [x for x in plain.split("<div>") if x.startswith(f"<span>{title}")]
    assert len(lines) == 1, monitor.header.value
    return lines[0]


def test_on_the_fake_world_the_gpu_views_are_synthetic_and_the_cpu_view_of_real_arrays_is_not():
    with fake_world_with_jax_on_the_cpu() as (m, _):
        assert [m.labels_of(k) for k in m.drawn_devices] == [["synthetic"]] * 3 + [[]]
        assert [m._views[k].figure()["labels"] for k in m.drawn_devices] == [["synthetic"]] * 3 + [[]]
        assert m.labels == []  # nothing shared by every view: the title carries no label
        title = m.header.value.split("</div>")[0]
        assert "SYNTHETIC" not in title
        for i in range(3):
            assert "SYNTHETIC" in header_line_of(m, f"GPU {i}: ")
        assert "SYNTHETIC" not in header_line_of(m, "CPU: JAX arrays")


def test_a_trace_exported_on_the_fake_world_says_only_nvml_was_made_up_and_replays_so(tmp_path):
    path = tmp_path / "world.jsonl"
    with fake_world_with_jax_on_the_cpu() as (m, stub):
        stub.push(cpu_sample(t=2.0, devices=m._latest.devices))
        m.export_trace(path)
    header = read_trace(path).header
    assert header["synthetic"] is True and header["synthetic_fields"] == ["devices", "pids_not_here"]
    replay = Monitor(replay=str(path))
    assert [replay.labels_of(k) for k in replay.drawn_devices] == [["replay", "synthetic"]] * 3 + [["replay"]]
    assert replay.labels == ["replay"]
    assert "SYNTHETIC" not in header_line_of(replay, "CPU: JAX arrays")
    replay.close()


def test_a_synthetic_trace_that_names_no_fields_marks_its_cpu_view_synthetic_too(tmp_path):
    path = tmp_path / "made_up.jsonl"
    with TraceWriter(str(path), {"synthetic": True}) as writer:
        writer.write_sample(cpu_sample(t=1.0))
    m = Monitor(replay=str(path))
    assert m.drawn_devices == [CPU_KEY] and m.labels == m.labels_of(CPU_KEY) == ["replay", "synthetic"]
    assert "SYNTHETIC" in m.header.value.split("</div>")[0]
    m.close()


def test_a_replay_header_reads_its_settings_as_status_does(tmp_path):
    path = tmp_path / "t.jsonl"
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".4"}
    with TraceWriter(str(path), {"synthetic": True, "settings": {"env": env}}) as writer:
        writer.write_sample(bfc_sample(t=1000.0))
    m = Monitor(replay=str(path))
    assert "preallocate off · fraction 0.4 · allocator default (bfc) · async-prealloc not set" in m.status_box.value
    assert "{" not in m.status_box.value and "XLA_" not in m.status_box.value
    m.close()


def test_the_live_settings_line_reads_as_status_does(stub, monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    assert "<summary>preallocate off · fraction 0.75 · allocator default (bfc)" in m.status_box.value
    m.close()


def test_a_timeline_read_from_a_trace_draws_as_the_replay_option_does():
    by_path, by_timeline = Monitor(replay=SYNTHETIC[0]), Monitor(timeline=timeline_from_trace(SYNTHETIC[0]))
    assert by_timeline.labels == by_path.labels == ["replay", "synthetic"]
    assert drawn_y(by_timeline, "JAX arrays (in use)") == drawn_y(by_path, "JAX arrays (in use)")
    by_path.close()
    by_timeline.close()


def test_a_recording_is_shown_whole_and_has_nothing_to_pause():
    trace = read_trace(SYNTHETIC[0])
    m = Monitor(replay=SYNTHETIC[0])
    assert m.window_s >= trace.samples[-1].t - trace.samples[0].t
    assert len(m._source_samples()) == len(trace.samples)
    assert m.pause_button.disabled and m.interval_box.disabled and not m.window_box.disabled
    assert "live" not in m.header.value
    m.close()


def test_a_window_under_a_minute_reads_in_seconds():
    from jupyter_gpumem.monitor.widget import _minutes

    assert [_minutes(v) for v in (0.95, 0.25, 1.0, 1.5, 60.0)] == ["57 s", "15 s", "1 min", "1.5 min", "60 min"]


def test_a_replay_shorter_than_a_minute_offers_its_window_in_seconds():
    m = Monitor(replay=SYNTHETIC[0], window=0.95)
    assert ("57 s", 0.95) in m.window_box.options and "57 s" in m.header.value + m.status_box.value
    m.close()


def test_a_window_on_a_recording_shows_its_last_minutes():
    trace = read_trace(SYNTHETIC[0])
    m = Monitor(replay=SYNTHETIC[0], window=0.25)
    shown = m._source_samples()
    assert shown[-1] == trace.samples[-1] and shown[0].t > trace.samples[-1].t - 15 >= trace.samples[0].t
    m.close()


@pytest.mark.parametrize("path", SYNTHETIC, ids=os.path.basename)
def test_replay_never_draws_more_than_2000_points_per_series(path):
    m = Monitor(replay=path)
    assert m._views, "the trace drew no device"
    for view in m._views.values():
        figure = view.figure()
        assert figure["y"] and 0 < len(figure["t"]) <= 2000
    m.close()


def test_exported_trace_reads_back_with_every_sample(tmp_path):
    m = Monitor(replay=SYNTHETIC[0])
    out = m.export_trace(tmp_path / "out.jsonl")
    back, original = read_trace(out), read_trace(SYNTHETIC[0])
    assert len(back.samples) == len(original.samples) and back.synthetic
    m.close()


def test_exported_csv_has_a_row_per_sample_and_device(tmp_path):
    m = Monitor(replay=SYNTHETIC[0])
    out = m.export_csv(tmp_path / "out.csv")
    trace = read_trace(SYNTHETIC[0])
    rows = open(out).read().strip().splitlines()
    devices = len(m._views)
    assert len(rows) == 1 + len(trace.samples) * devices
    m.close()


def _fail_after(n, fn, calls):
    """Wrap fn so the (n+1)-th call raises, as a disk filling up midway would."""

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) > n:
            raise OSError(28, "No space left on device")
        return fn(*args, **kwargs)

    return wrapped


def test_csv_export_failing_midway_keeps_the_previous_file(tmp_path, monkeypatch):
    import jupyter_gpumem.monitor.exports as exports_mod

    target = tmp_path / "out.csv"
    target.write_text("previous export\n")
    rows_written = []
    original = exports_mod.csv_rows

    def rows_then_failure(*args, **kwargs):
        for i, row in enumerate(original(*args, **kwargs)):
            if i == 3:
                raise OSError(28, "No space left on device")
            rows_written.append(row)
            yield row

    monkeypatch.setattr(exports_mod, "csv_rows", rows_then_failure)
    m = Monitor(replay=SYNTHETIC[0])
    with pytest.raises(OSError, match="No space"):
        m.export_csv(target)
    m.close()
    assert len(rows_written) == 3, "the failure should come after some rows were written"
    assert target.read_text() == "previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_trace_export_failing_midway_leaves_no_file(tmp_path, monkeypatch):
    from jupyter_gpumem.core.tracefile import TraceWriter

    calls: list = []
    monkeypatch.setattr(TraceWriter, "write_sample", _fail_after(5, TraceWriter.write_sample, calls))
    target = tmp_path / "out.jsonl"
    m = Monitor(replay=SYNTHETIC[0])
    with pytest.raises(OSError, match="No space"):
        m.export_trace(target)
    m.close()
    assert len(calls) == 6, "the failure should come after some samples were written"
    assert list(tmp_path.iterdir()) == []


def test_trace_export_failing_midway_keeps_the_previous_file(tmp_path, monkeypatch):
    from jupyter_gpumem.core.tracefile import TraceWriter

    target = tmp_path / "out.jsonl"
    first = Monitor(replay=SYNTHETIC[0])
    first.export_trace(target)
    first.close()
    before = target.read_bytes()
    monkeypatch.setattr(TraceWriter, "write_sample", _fail_after(5, TraceWriter.write_sample, []))
    m = Monitor(replay=SYNTHETIC[0])
    with pytest.raises(OSError, match="No space"):
        m.export_trace(target)
    m.close()
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


# --- controls and shutdown -----------------------------------------------------------------


def test_pause_stops_drawing_and_resume_catches_up(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    m.pause()
    stub.push(bfc_sample(t=1001.0))
    assert m._views[0].series.last_t == 1000.0
    m.resume()
    assert m._views[0].series.last_t == 1001.0
    m.close()


def test_clear_empties_the_view(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    m.clear()
    assert m._views == {}
    m.close()


def test_a_closed_front_end_ends_the_monitor_quietly(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    m.root.close()  # what a closed notebook or a dead comm looks like from the kernel
    stub.push(bfc_sample(t=1001.0))
    assert m.closed and stub.subscriptions == []


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "jupyter-gpumem-sampler"]


def test_two_monitors_share_one_sampler_thread_and_close_leaves_none():
    s0 = bfc_sample()
    sampler = Sampler(lambda: s0.devices, lambda: s0.jax, interval=0.05, pid=PID)
    a, b = Monitor(sampler=sampler, interval=0.05), Monitor(sampler=sampler, interval=0.05)
    assert a.wait_for_update(0) and b.wait_for_update(0)
    assert len(sampler_threads()) == 1
    a.close()
    b.close()
    assert sampler_threads() == [] and sampler.subscribers == 0


def test_importing_the_package_and_series_leaves_plotly_and_ipywidgets_unloaded():
    code = "import sys, jupyter_gpumem, jupyter_gpumem.monitor.series; print('plotly' in sys.modules, 'ipywidgets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_rerunning_a_cell_closes_the_monitor_it_made_before(stub, monkeypatch):
    import jupyter_gpumem.monitor.widget as widget

    monkeypatch.setattr(widget, "current_cell_id", lambda: "cell-1")
    first = Monitor(sampler=stub)
    second = Monitor(sampler=stub)
    assert first.closed and not second.closed
    assert len(stub.subscriptions) == 1
    second.close()


def test_a_new_window_closes_the_plots_it_replaces(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    old = m._views[0].fig
    m.set_window(5)
    assert old.comm is None and m._views[0].fig is not old and m._views[0].fig.comm is not None
    m.close()


def widget_ids() -> set[str]:
    from ipywidgets.widgets.widget import _instances

    return set(_instances)


def open_widgets_naming_closed_ones(made_before: set[str]) -> list[tuple[str, str]]:
    """``(widget, trait)`` for each open widget made since ``made_before`` whose synced state
    names a widget that is closed: a page reloaded restores every open widget, and the browser
    cannot find such a name ("widget model not found" in the console, a blank view there)."""
    from ipywidgets import Widget
    from ipywidgets.widgets.widget import _instances

    found = []
    for model_id, widget in list(_instances.items()):
        if model_id in made_before:
            continue
        for name in widget.keys:
            value = getattr(widget, name)
            named = value if isinstance(value, (tuple, list)) else (value,)
            found += [(type(widget).__name__, name) for w in named if isinstance(w, Widget) and w.comm is None]
    return found


def test_a_closed_monitor_leaves_no_open_widget_naming_its_closed_plots():
    stub, before = StubSampler(), widget_ids()
    m = Monitor(sampler=stub)
    stub.push(three_gpus_sample())  # three GPU tabs and the CPU's
    assert len(m.tabs.children) == 4
    m.close()
    assert open_widgets_naming_closed_ones(before) == []
    assert m.tabs.comm is None and m.header.comm is None and m.pause_button.comm is None


def test_a_cleared_monitor_s_tabs_name_no_plot_it_closed(stub):
    before = widget_ids()
    m = Monitor(sampler=stub)
    stub.push(three_gpus_sample(t=1.0))
    m.clear()  # the views close; nothing is drawn until the next reading
    assert m._views == {} and open_widgets_naming_closed_ones(before) == []
    m.set_window(5)
    assert open_widgets_naming_closed_ones(before) == []
    stub.push(three_gpus_sample(t=2.0))
    assert len(m.tabs.children) == 4 and open_widgets_naming_closed_ones(before) == []
    m.close()


def test_plotly_js_goes_to_the_browser_once_per_kernel_not_per_plot_and_only_when_asked(monkeypatch):
    import jupyter_gpumem.monitor.figure as monitor_figure
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    monkeypatch.setattr(monitor_figure, "_library", None)  # as in a fresh kernel

    with fake_nvml("three_gpus"):
        sample = Sample(1.0, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x"))
    with measure_comm_bytes() as sizes:
        first = Monitor(sampler=(stub := StubSampler()))
        stub.push(sample)
        unasked = sum(sizes)
        library = first._views[0].fig.library
        library._handle_custom_msg({"ask": "plotly_js"}, [])  # the first plot's browser side asks
        asked = sum(sizes) - unasked
        library._handle_custom_msg({"ask": "plotly_js"}, [])  # another plot, another page: sent already
        second = Monitor(sampler=stub)
        again = sum(sizes) - unasked - asked
    libraries = {id(v.fig.library) for m in (first, second) for v in m._views.values()}
    assert len(libraries) == 1 and len(first._views) == 3
    # A notebook run with no browser (nbconvert) keeps the widgets' state: no plotly.js in it.
    assert unasked < 200_000 and "plotly_js" in library.get_state() and len(library.plotly_js) > 4_000_000
    assert again < 200_000 < 4_000_000 < asked  # plotly.min.js is about 4.8 MB
    first.close()
    second.close()


def test_plotly_js_goes_with_the_widget_where_the_front_end_names_its_cells(monkeypatch):
    # JupyterLab names the running cell: the plot draws at once, even while the next cell runs
    # (an ask would wait for the kernel to be idle).
    import jupyter_gpumem.monitor.figure as monitor_figure
    import jupyter_gpumem.monitor.widget as widget

    monkeypatch.setattr(monitor_figure, "_library", None)
    monkeypatch.setattr(widget, "current_cell_id", lambda: "a-cell-id")
    m = Monitor(sampler=StubSampler())  # its plots come later, on the sampler thread
    assert len(monitor_figure.plotly_library().get_state()["plotly_js"]) > 4_000_000
    m.close()


def test_a_reloaded_page_asks_for_the_figure_only_between_ticks(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    got = threading.Event()
    with m._lock:  # a tick in progress on the sampler thread
        asker = threading.Thread(target=lambda: (m._views[0].fig.get_state(), got.set()))
        asker.start()
        assert not got.wait(0.2)
    assert got.wait(5)
    asker.join()
    m.close()


def test_a_note_every_gpu_shares_is_said_once_and_a_gpus_own_note_stays_its_own():
    from jupyter_gpumem.monitor.header import grouped_notes

    assert grouped_notes(
        {2: ["JAX not started."], 0: ["JAX not started.", "pid 7 hidden."], 1: ["JAX not started."]}
    ) == [
        "GPUs 0, 1, 2: JAX not started.",
        "GPU 0: pid 7 hidden.",
    ]
    assert grouped_notes({0: [], 1: []}) == []


def test_the_live_header_says_jax_has_not_started_once_for_three_gpus():
    with three_gpu_monitor() as m:
        header = m.header.value
    assert header.count("JAX has not started yet") == 1
    assert "GPUs 0, 1, 2: JAX has not started yet" in header


def test_a_device_the_readings_do_not_have_is_refused_naming_those_they_have():
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        sample = Sample(1.0, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x"))
    stub = StubSampler()
    stub.push(sample)
    with pytest.raises(MagicUsageError) as refused:
        Monitor(sampler=stub, device=7)
    assert str(refused.value) == "--device 7: there is no GPU 7 in the readings; valid: 0, 1, 2 or all"
    assert stub.subscriptions == []


def test_a_recording_refuses_a_device_it_never_read():
    with pytest.raises(MagicUsageError, match=r"^--device 3: there is no GPU 3 in the readings; valid: 0 or all$"):
        magic_monitor(["--replay", "synthetic_cuda_async", "--device", "3"], None)


def test_without_readable_gpus_a_device_is_not_refused_and_the_view_says_why():
    stub = StubSampler()
    stub.push(
        Sample(1.0, PID, NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded"), NotAvailable(NOT_STARTED, "x"))
    )
    m = Monitor(sampler=stub, device=2)
    assert "the NVIDIA driver is not loaded" in m.empty.value
    m.close()


def test_memory_under_host_pids_reads_as_a_label_before_its_number():
    """GPU 0 of the fake world: NVML lists pids 4200101 and 4200102 (32 GiB) that are no
    process here, so which, if any, is this kernel cannot be told."""
    from jupyter_gpumem.sampling.sampler import pids_not_here
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        devices = NvmlSource().read()
        sample = Sample(
            1.0,
            PID,
            devices,
            NotAvailable(NOT_STARTED, "x"),
            pids_not_here=pids_not_here(devices, lambda pid: pid == PID),
        )
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(sample)
        header = m.header.value
        m.close()
    assert (
        "GPU 0: NVIDIA A100-SXM4-40GB:</span> used <b>32.00 GiB / 40.00 GiB (80%)</b> "
        "<span class='jupyter-gpumem-used'><span style='width:80%'></span></span>"
        " · other processes <b>0 B</b> · host pids <b>32.00 GiB</b> · free" in header
    )


def dgx_monitor_header() -> str:
    """The header of a monitor on the fake dgx_h100 world (8 × H100 80GB, GPU 5 at 74 GiB)."""
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("dgx_h100"):
        stub = StubSampler()
        m = Monitor(sampler=stub)
        stub.push(Sample(1.0, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x")))
        header = m.header.value
        m.close()
    return header


def test_on_eight_gpus_each_header_line_says_used_of_total_and_its_share():
    header = dgx_monitor_header()
    # 60 GiB of 81,559 MiB (79.65 GiB) is 75%; GPU 5's 74 GiB is 93%; GPU 7 holds nothing.
    assert "GPU 0: NVIDIA H100 80GB HBM3:</span> used <b>60.00 GiB / 79.65 GiB (75%)</b>" in header
    assert "GPU 5: NVIDIA H100 80GB HBM3:</span> used <b>74.00 GiB / 79.65 GiB (93%)</b>" in header
    assert "GPU 7: NVIDIA H100 80GB HBM3:</span> used <b>0 B / 79.65 GiB (0%)</b>" in header


def test_on_eight_gpus_the_fullest_is_marked_once_and_its_bar_is_orange():
    header = dgx_monitor_header()
    assert header.count(">fullest</span>") == 1
    line = header_line_of_text(header, "GPU 5: ")
    assert ">fullest</span>" in line
    assert "<span class='jupyter-gpumem-used' data-full='true'><span style='width:93%'></span></span>" in line


def test_on_three_gpus_no_gpu_is_called_fullest():
    with three_gpu_monitor() as m:
        assert "fullest" not in m.header.value


def test_with_several_views_each_title_in_the_header_opens_its_tab():
    header = dgx_monitor_header()
    assert [int(n) for n in re.findall(r"data-gpumem-tab='(\d+)'", header)] == list(range(8))


def header_line_of_text(header: str, title: str) -> str:
    plain = re.sub(r"<span data-gpumem-tab=[^>]*>", "<span>", header)
    (line,) = [x for x in plain.split("<div>") if x.startswith(f"<span>{title}")]
    return line


def test_drawn_devices_are_the_gpus_drawn_and_none_while_the_view_says_why():
    stub = StubSampler()
    m = Monitor(sampler=stub)
    stub.push(
        Sample(1.0, PID, NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded"), NotAvailable(NOT_STARTED, "x"))
    )
    assert m.drawn_devices == []
    m.close()
    with three_gpu_monitor() as m:
        assert m.drawn_devices == [0, 1, 2]


def test_a_recording_of_jax_on_the_cpu_beside_gpus_points_at_no_warning_it_does_not_show():
    from jupyter_gpumem.core.readings import JaxDeviceReading, Timeline, normalise_stats
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    with fake_nvml("three_gpus"):
        timeline = Timeline()
        timeline.append(Sample(1.0, PID, NvmlSource().read(), (cpu,)))
        m = Monitor(timeline=timeline)
        header, about = m.header.value, m.status_box.value
        m.close()
    assert "GPUs 0, 1, 2: JAX runs on the CPU, not on this GPU: none of its memory here is JAX&#x27;s.</div>" in header
    assert "warning" not in header + about


def test_csv_export_onto_a_planted_link_is_refused_and_the_link_target_kept(tmp_path):
    (tmp_path / "private").write_text("secret")
    os.symlink(tmp_path / "private", tmp_path / "out.csv")
    m = Monitor(replay=SYNTHETIC[0])
    with pytest.raises(OSError, match="is a symbolic link"):
        m.export_csv(tmp_path / "out.csv")
    m.close()
    assert (tmp_path / "private").read_text() == "secret" and (tmp_path / "out.csv").is_symlink()


# --- traces from someone else --------------------------------------------------------------------


def _many_devices_trace(path, devices: int, times=(1.0, 2.0, 3.0)) -> str:
    """A made-up trace ("synthetic": true) whose samples list ``devices`` GPUs each."""
    with open(path, "w") as fh:
        fh.write(json.dumps({"kind": "header", "format": 1, "synthetic": True}) + "\n")
        for t in times:
            devs = [
                {
                    "index": i,
                    "name": "GPU",
                    "uuid": f"GPU-{i}",
                    "total_bytes": 1000,
                    "used_bytes": 10,
                    "free_bytes": 990,
                    "processes": [{"pid": 7, "used_bytes": 10}],
                }
                for i in range(devices)
            ]
            fh.write(json.dumps({"kind": "sample", "t": t, "pid": 1, "devices": devs, "jax": []}) + "\n")
    return str(path)


def test_a_trace_of_5000_devices_draws_64_at_once_says_so_and_keeps_the_kernel_free(tmp_path):
    """Before: one plot and one tab title per device, each title re-validating all the others
    (ipywidgets 8.1's Tab.set_title), and a linear device lookup per device: minutes."""
    import time

    from jupyter_gpumem.monitor.widget import MAX_DRAWN_DEVICES

    path = _many_devices_trace(tmp_path / "many.jsonl", 5000)
    started = time.perf_counter()
    m = Monitor(replay=path)
    took = time.perf_counter() - started
    assert m.drawn_devices == list(range(MAX_DRAWN_DEVICES)) and MAX_DRAWN_DEVICES == 64
    assert (
        "4,936 more GPUs in the readings are not drawn (at most 64 at once): choose one with --device N"
        in m.header_html()
    )
    assert len(m.tabs.titles) == 64 and m.tabs.titles[63] == "GPU 63: GPU"
    assert took < 15, f"{took:.1f} s"
    m.close()


def test_one_of_5000_devices_is_drawn_with_device_n(tmp_path):
    m = Monitor(replay=_many_devices_trace(tmp_path / "many.jsonl", 5000), device=4321)
    assert m.drawn_devices == [4321] and "not drawn" not in m.header_html()
    m.close()


def test_a_device_not_in_a_5000_device_trace_is_refused_in_one_short_line(tmp_path):
    with pytest.raises(MagicUsageError, match=r"valid: 5,000 GPUs from 0 to 4999 or all$"):
        Monitor(replay=_many_devices_trace(tmp_path / "many.jsonl", 5000, times=(1.0,)), device=6000)


def test_a_replay_whose_times_go_back_draws_what_came_before_and_says_why_it_stopped(tmp_path):
    """Before: the span from first to last sample was negative, and the monitor refused it
    with "window must be ... above 0, got -0.8"."""
    m = Monitor(replay=_many_devices_trace(tmp_path / "back.jsonl", 1, times=(100.0, 101.0, 50.0)))
    assert len(m.timeline.samples()) == 2
    assert (
        "trace read up to an error: line 4: sample.t is 50.0, earlier than the sample before it (101.0)"
        in m.status_box.value
    )
    m.close()


def test_a_replay_over_the_size_limit_is_a_usage_error_naming_the_size(tmp_path, monkeypatch):
    from jupyter_gpumem.core import tracefile

    path = _many_devices_trace(tmp_path / "t.jsonl", 1)
    monkeypatch.setattr(tracefile, "MAX_TRACE_BYTES", 100)
    with pytest.raises(MagicUsageError, match=r"--replay: cannot read .*over the limit of 100 bytes; nothing was read"):
        Monitor(replay=path)
