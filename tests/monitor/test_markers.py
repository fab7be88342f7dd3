"""Named markers (``record.mark(name)``) on the monitor's plot: which events are drawn, as what
label and hover, and what the figure sends, live and replayed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from jupyter_gpumem.core.readings import Event
from jupyter_gpumem.monitor.markers import HOVER_CHARS, LABEL_CHARS, marker_text, named_markers
from jupyter_gpumem.monitor.widget import Monitor

from doubles import StubSampler, bfc_sample

RECORDED = Path(__file__).parents[1] / "data" / "traces"


def marker(t: float, name, **data) -> Event:
    return Event(t, "marker", {"name": name, **data})


@pytest.fixture
def stub():
    return StubSampler()


# --- which events, as what text ------------------------------------------------------------


def test_a_marker_event_is_drawn_at_its_time_with_its_name_as_label_and_hover():
    assert named_markers([marker(10.0, "holding 1 GiB more")]) == [(10.0, "holding 1 GiB more", "holding 1 GiB more")]


def test_only_marker_events_are_named_markers_and_they_come_oldest_first():
    events = [
        marker(12.0, "second"),
        Event(10.5, "cell_start", {"execution_count": 1}),
        Event(11.0, "oom", {"message": "RESOURCE_EXHAUSTED"}),
        marker(11.5, "first"),
    ]
    assert [(t, label) for t, label, _ in named_markers(events)] == [(11.5, "first"), (12.0, "second")]


def test_the_recorders_own_start_and_end_are_left_out_and_a_script_error_is_drawn():
    events = [
        marker(1.0, "script_start", script="job.py"),
        marker(2.0, "script_error", error="ValueError: x"),
        marker(3.0, "script_end", script="job.py"),
    ]
    assert [label for _, label, _ in named_markers(events)] == ["script_error"]


def test_since_leaves_out_markers_at_or_before_that_time():
    events = [marker(10.0, "a"), marker(15.0, "b"), marker(20.0, "c")]
    assert [label for _, label, _ in named_markers(events, since=15.0)] == ["c"]


def test_a_name_is_escaped_so_plotly_draws_its_tags_as_text():
    # plotly.js 3.8.2 (src/lib/svg_text_utils.js) reads <b>, <br>, <a href> and &amp; &lt; &gt; in
    # text; it has no &quot;, so quotes stay as they are.
    label, hover = marker_text('<b>big</b> & "x" <a href="javascript:alert(1)">')
    assert hover == '&lt;b&gt;big&lt;/b&gt; &amp; "x" &lt;a href="javascript:alert(1)"&gt;'
    assert "<" not in label and ">" not in label


def test_a_long_name_is_cut_in_the_label_and_whole_in_the_hover():
    name = "sixteen 256 MiB arrays then every other one freed"
    label, hover = marker_text(name)
    # 23 characters and the "…": the space the cut fell on is not kept
    assert label == "sixteen 256 MiB arrays…"
    assert len(marker_text("x" * 100)[0]) == LABEL_CHARS
    assert hover == name


def test_a_label_is_cut_before_it_is_escaped_so_no_entity_is_cut_in_half():
    label, _ = marker_text("&" * 40)
    assert label == "&amp;" * (LABEL_CHARS - 1) + "…"


def test_the_hover_of_a_long_name_is_wrapped_into_lines():
    name = " ".join(["word"] * 30)  # 149 characters
    _, hover = marker_text(name)
    lines = hover.split("<br>")
    assert len(lines) == 3 and all(len(line) <= 60 for line in lines)
    assert " ".join(lines) == name


def test_a_name_longer_than_the_hover_allows_is_cut_there():
    _, hover = marker_text("x" * 10_000)
    assert hover.replace("<br>", "") == "x" * (HOVER_CHARS - 1) + "…"


def test_newlines_tabs_and_control_characters_become_single_spaces():
    assert marker_text("freed\n\teverything\x00\u202enow") == ("freed everything now", "freed everything now")


def test_a_marker_with_no_name_or_a_non_string_name_is_still_drawn():
    events = [Event(1.0, "marker", {}), marker(2.0, 42), marker(3.0, "")]
    assert [label for _, label, _ in named_markers(events)] == ["(unnamed)", "42", "(unnamed)"]


# --- in the figure ---------------------------------------------------------------------------


def test_a_replay_of_the_h100_trace_draws_its_markers_and_not_the_recorders():
    m = Monitor(replay=str(RECORDED / "cuda_async_growing.jsonl"))
    figure = m._views[0].figure()
    # tests/data/traces/cuda_async_growing.jsonl, as bench/gpu_proof_jobs/allocation_story.py marked it
    assert [label for _, label, _ in figure["markers"]] == [
        "backend started",
        "holding 1 GiB more",
        "holding 2 GiB more",
        "holding 4 GiB more",
        "freed the 2 GiB array",
        "sixteen 256 MiB arrays",
        "freed every other 256 M…",
        "1 GiB array after the h…",
        "freed everything",
    ]
    assert figure["markers"][6][2] == "freed every other 256 MiB array"
    assert figure["markers"][0][0] == 1795706360.8425064
    m.close()


def test_a_marker_added_live_is_sent_once_as_a_markers_message(stub):
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    view = m._views[0]
    sent: list[dict] = []
    view.fig.send = lambda content, buffers=None: sent.append(content)
    stub.timeline.add_event(marker(1000.5, "step 1"))
    stub.push(bfc_sample(t=1001.0))
    stub.push(bfc_sample(t=1002.0))
    assert [msg["kind"] for msg in sent] == ["append", "markers", "append"]
    assert sent[1]["markers"] == [[1000.5, "step 1", "step 1"]]
    m.close()


def test_a_marker_before_the_first_sample_drawn_is_not_drawn(stub):
    stub.timeline.add_event(marker(990.0, "before"))
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    stub.timeline.add_event(marker(1000.5, "after"))
    stub.push(bfc_sample(t=1001.0))
    assert [label for _, label, _ in m._views[0].figure()["markers"]] == ["after"]
    m.close()


def test_a_marker_older_than_the_window_drops_out_like_a_cell(stub):
    m = Monitor(sampler=stub, window=1)  # one minute
    stub.push(bfc_sample(t=1000.0))
    stub.timeline.add_event(marker(1000.5, "old"))
    stub.timeline.add_event(Event(1000.5, "cell_start", {"execution_count": 1}))
    stub.push(bfc_sample(t=1001.0))
    stub.timeline.add_event(marker(1030.0, "new"))
    stub.push(bfc_sample(t=1031.0))
    assert [label for _, label, _ in m._views[0].figure()["markers"]] == ["old", "new"]
    stub.push(bfc_sample(t=1061.0))  # the window now starts at 1001
    figure = m._views[0].figure()
    assert [label for _, label, _ in figure["markers"]] == ["new"]
    assert figure["cells"] == []
    m.close()


# --- in the browser (monitor_plot.js, run in node) -------------------------------------------

_PLOT_JS = Path(__file__).parents[2] / "jupyter_gpumem" / "monitor" / "monitor_plot.js"


def in_view(tmp_path: Path, function: str, figure: dict, *args: object) -> list[dict]:
    """monitor_plot.js's ``function`` (markersInView, cellLabelsInView) for the store a figure
    makes and ``args``, run in node."""
    module = tmp_path / "monitor_plot.mjs"
    shutil.copy(_PLOT_JS, module)
    call_args = "".join(f", {json.dumps(a)}" for a in args)
    script = (
        f"import {{ {function}, storeFrom }} from {json.dumps(module.as_uri())};"
        f"process.stdout.write(JSON.stringify({function}(storeFrom({json.dumps(figure)}){call_args})));"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def markers_in_view(tmp_path: Path, figure: dict) -> list[dict]:
    return in_view(tmp_path, "markersInView", figure)


@pytest.mark.skipif(shutil.which("node") is None, reason="the browser's side runs in node")
def test_the_browser_labels_markers_no_closer_than_a_sixtieth_of_the_span_and_hovers_the_rest(tmp_path):
    # 60 s drawn: a label needs 1 s from the last one shown. 10.5 is too close to 10.0; 11.0 is not.
    markers = [[t, f"m{t}", f"m{t}"] for t in (10.0, 10.5, 11.0, 11.2, 30.0)]
    drawn = markers_in_view(tmp_path, {"t": [0.0, 60.0], "markers": markers})
    assert [(m["t"], m["shown"]) for m in drawn] == [
        (10.0, True),
        (10.5, False),
        (11.0, True),
        (11.2, False),
        (30.0, True),
    ]


@pytest.mark.skipif(shutil.which("node") is None, reason="the browser's side runs in node")
def test_the_browser_draws_no_marker_from_before_its_first_point(tmp_path):
    markers = [[5.0, "before", "before"], [15.0, "after", "after"]]
    drawn = markers_in_view(tmp_path, {"t": [10.0, 20.0], "markers": markers})
    assert [m["label"] for m in drawn] == ["after"]


def cell_labels_in_view(tmp_path: Path, figure: dict, width_px: int) -> list[dict]:
    return in_view(tmp_path, "cellLabelsInView", figure, width_px)


@pytest.mark.skipif(shutil.which("node") is None, reason="the browser's side runs in node")
def test_the_browser_never_draws_cell_labels_over_each_other_and_keeps_the_newest(tmp_path):
    # 60 s over 600 px: 10 px a second. "[9]" and "[10]" need 3.5 chars of 6 px and 4 px apart,
    # 25 px, 2.5 s. Cells 7, 9, 11, 12 ran within 2 s at the right edge: "[7][9][1[1]2]" before.
    cells = [[t, n, 0.1] for t, n in ((30.0, 5), (56.0, 7), (57.0, 9), (57.5, 11), (58.0, 12))]
    drawn = cell_labels_in_view(tmp_path, {"t": [0.0, 60.0], "cells": cells}, 600)
    assert [(c["t"], c["label"], c["shown"]) for c in drawn] == [
        (30.0, "[5]", True),
        (56.0, "[7]", False),
        (57.0, "[9]", False),
        (57.5, "[11]", False),
        (58.0, "[12]", True),
    ]
    # Twice as wide, twice the room: [7] now stands clear of [12] (2 s is 40 px).
    wide = cell_labels_in_view(tmp_path, {"t": [0.0, 60.0], "cells": cells}, 1200)
    assert [c["label"] for c in wide if c["shown"]] == ["[5]", "[7]", "[12]"]
