"""The still of a monitor: its last window as an SVG and in words, shown under the live widget,
drawn again after each cell and when the monitor stops (for notebooks read without a widget
manager: nbconvert, GitHub, nbviewer, a PDF). The fake NVML world's readings are synthetic."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from jupyter_gpumem.core.readings import NOT_STARTED, Event, NotAvailable, Sample
from jupyter_gpumem.monitor import still_output
from jupyter_gpumem.monitor.series import SERIES_NAMES
from jupyter_gpumem.monitor.still import STILL_CLASS, STILL_POINTS, StillView, still_svg, still_text, thinned
from jupyter_gpumem.monitor.widget import Monitor

from doubles import PID, FakeShell, StubSampler, bfc_sample

SVG = "{http://www.w3.org/2000/svg}"


def world_sample(t: float) -> Sample:
    """A reading of the fake three-GPU world (synthetic), JAX not started."""
    from jupyter_gpumem.sources.nvml import NvmlSource

    return Sample(t, PID, NvmlSource().read(), NotAvailable(NOT_STARTED, "x"))


def texts(svg: str) -> list[str]:
    return [el.text or "" for el in ET.fromstring(svg).iter(f"{SVG}text")]


@pytest.fixture
def shown(monkeypatch):
    """A live monitor displayed, as a notebook would receive it: each display and update
    recorded, in a shell whose cells run the hooks. Gives the shell, what was displayed, the
    sampler and the monitor."""
    shell = FakeShell()
    got: list[tuple[str, dict, str | None]] = []
    monkeypatch.setattr(still_output, "_shell", lambda: shell)
    import IPython.display

    monkeypatch.setattr(
        IPython.display, "display", lambda obj, raw=False, display_id=None: got.append(("display", obj, display_id))
    )
    monkeypatch.setattr(
        IPython.display,
        "update_display",
        lambda obj, raw=False, display_id=None: got.append(("update", obj, display_id)),
    )
    stub = StubSampler()
    m = Monitor(sampler=stub)
    m._ipython_display_()
    yield shell, got, stub, m
    m.close()


def test_the_still_draws_a_panel_per_device_with_its_labels():
    from jupyter_gpumem.testing import fake_nvml

    stub = StubSampler()
    with fake_nvml("three_gpus"):
        m = Monitor(sampler=stub)
        for t in (1000.0, 1001.0, 1002.0):
            stub.push(world_sample(t))
        svg = m._still.bundle()["image/svg+xml"]
    root = ET.fromstring(svg)  # well-formed
    assert root.get("class") == STILL_CLASS
    assert texts(svg)[0] == "GPU memory [SYNTHETIC] (live, every 1 s, window 10 min)"
    titles = [x for x in texts(svg) if x.startswith("GPU ") and x[4].isdigit()]
    assert titles == [f"GPU {i}: NVIDIA A100-SXM4-40GB" for i in range(3)]
    assert len(root.findall(f"{SVG}polygon")) >= 3  # each device's bands
    m.close()


def test_the_still_says_in_words_what_it_showed_and_which_cells_ran():
    stub = StubSampler()
    m = Monitor(sampler=stub)
    stub.push(bfc_sample(t=1000.0))
    m.timeline.add_event(Event(1000.5, "cell_start", {"execution_count": 3}))
    stub.push(bfc_sample(t=1001.0))
    text = m._still.bundle()["text/plain"]
    lines = text.splitlines()
    assert lines[0] == "GPU memory (live, every 1 s, window 10 min)"
    assert "2 readings drawn" in lines[1]
    assert lines[2].startswith("GPU 0: ") and "JAX arrays (in use) " in lines[2] and "total " in lines[2]
    assert "most JAX arrays (in use) in the window: " in text
    assert lines[-1] == "cells run in the window: [3]"
    m.close()


def test_a_one_reading_spike_in_a_long_window_stays_in_the_still():
    total, free = SERIES_NAMES.index("total"), SERIES_NAMES.index("free")
    in_use = SERIES_NAMES.index("jax_in_use")

    def row(used: float) -> tuple:
        values = [None] * len(SERIES_NAMES)
        values[total], values[free], values[in_use] = 100.0, 100.0 - used, used
        return tuple(values)

    rows = [row(10.0)] * 5000
    rows[3217] = row(90.0)  # one reading of the spike
    view = StillView("GPU 0", "GiB", [float(i) for i in range(5000)], rows)
    thin = thinned(view, STILL_POINTS)
    assert len(thin.rows) <= STILL_POINTS + 2
    assert 3217.0 in thin.times and max(r[in_use] for r in thin.rows) == 90.0


def test_a_still_of_many_devices_draws_no_more_readings_than_one_of_a_few():
    view = StillView("GPU", "GiB", [float(i) for i in range(2000)], [bfc_row(i) for i in range(2000)])
    svg = still_svg("x", [view] * 8, {})
    points = sum(len(p.get("points").split()) for p in ET.fromstring(svg).iter(f"{SVG}polyline"))
    one = sum(len(p.get("points").split()) for p in ET.fromstring(still_svg("x", [view], {})).iter(f"{SVG}polyline"))
    assert points <= one * 1.5  # the readings are shared out between the panels


def bfc_row(i: int) -> tuple:
    from jupyter_gpumem.monitor.series import row_for

    return row_for(bfc_sample(t=1000.0 + i), 0)


def test_an_empty_window_says_so():
    assert still_text("GPU memory", []) == "GPU memory\nNothing was drawn in the window."
    assert "Nothing was drawn in the window." in texts(still_svg("GPU memory", [], {}))


def test_the_widgets_own_output_says_what_it_is_not_its_python_repr():
    m = Monitor(sampler=StubSampler())
    text = m._repr_mimebundle_()["text/plain"]
    assert text == "jupyter_gpumem monitor: GPU memory, a live widget (live, every 1 s, window 10 min)"
    m.close()


def test_the_still_is_shown_under_the_widget_and_drawn_again_after_each_cell(shown):
    shell, got, stub, m = shown
    widget, still = got
    assert "application/vnd.jupyter.widget-view+json" in widget[1]
    assert still[0] == "display" and still[2] == m._still.display_id and "2 readings" not in still[1]["text/plain"]
    stub.push(bfc_sample(t=1000.0))
    stub.push(bfc_sample(t=1001.0))
    shell.run_cell(5, lambda: None)
    kind, bundle, display_id = got[-1]
    assert (kind, display_id) == ("update", m._still.display_id)
    assert "2 readings drawn" in bundle["text/plain"] and bundle["image/svg+xml"].startswith("<svg ")


def test_a_stopped_monitor_leaves_its_last_window_and_no_hook(shown):
    shell, got, stub, m = shown
    stub.push(bfc_sample(t=1000.0))
    m.close()
    kind, bundle, _ = [g for g in got if g[2] == m._still.display_id][-1]
    assert kind == "update" and "1 reading drawn" in bundle["text/plain"]
    assert bundle["text/plain"].startswith("GPU memory (stopped, window 10 min)")
    assert shell.hooks["post_run_cell"] == []
    count = len(got)
    shell.run_cell(6, lambda: None)
    assert len(got) == count  # nothing more after the monitor stopped


def test_a_still_that_cannot_be_drawn_does_not_fail_the_cell(shown, monkeypatch):
    shell, _, _, m = shown

    def broken():
        raise RuntimeError("a view that cannot be read")

    monkeypatch.setattr(m._still, "_picture", broken)
    shell.run_cell(7, lambda: None)  # raises nothing
    assert shell.hooks["post_run_cell"] == []  # and stops trying


def test_a_line_is_drawn_only_where_it_has_readings_not_at_zero_before_them():
    limit = SERIES_NAMES.index("bytes_limit")
    rows = [list(bfc_row(i)) for i in range(6)]
    for row in rows[:2]:
        row[limit] = None  # JAX had not started: no bytes_limit yet
    view = StillView("GPU 0", "GiB", [1000.0 + i for i in range(6)], [tuple(r) for r in rows])
    lines = list(ET.fromstring(still_svg("x", [view], {"bytes_limit": "#123456"})).iter(f"{SVG}polyline"))
    (drawn,) = [p for p in lines if p.get("stroke") == "#123456"]
    assert len(drawn.get("points").split()) == 4


def test_a_stopped_monitor_s_widget_output_says_it_stopped_instead_of_naming_closed_widgets(shown):
    """A page reloaded (or the notebook opened later) cannot draw a closed widget: the console
    says "widget model not found" and the output is an error. Once stopped, the widget's own
    output says the monitor stopped, and the still under it keeps the last window."""
    shell, got, stub, m = shown
    widget = got[0]
    stub.push(bfc_sample(t=1000.0))
    m.close()
    ended = [g for g in got if g[0] == "update" and g[2] == widget[2]]
    assert widget[2] is not None and widget[2] != m._still.display_id
    assert len(ended) == 1 and set(ended[0][1]) == {"text/plain", "text/html"}
    assert ended[0][1]["text/plain"] == "GPU memory: this monitor has stopped; its last window is drawn below."
    assert "jupyter-gpumem-ended" in ended[0][1]["text/html"]
