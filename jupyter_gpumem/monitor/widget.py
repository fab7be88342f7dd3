"""The memory monitor: ipywidgets around one plot per device, drawn from a Timeline.

``%gpumem monitor`` and ``jupyter_gpumem.Monitor(...)`` both land here. A monitor draws one Timeline: the
sampler's, updated live, or one read from a trace file (``--replay``), drawn as it is and labelled "replay"
(and "synthetic" where the trace says so, or where live readings come from the fake NVML world). The numbers
come from ``series.py`` and the named markers from ``markers.py``; this module only draws them and wires the
controls. ipywidgets, anywidget and plotly.js load when a monitor is made, never on importing jupyter_gpumem.

Updates are append-only: each tick sends each device's new points and nothing else (``figure.py``),
and the browser sends nothing back, so an idle kernel stays idle; ``bench/bench_widget.py`` and
``bench/bench_browser_idle.py`` measure it.
"""

from __future__ import annotations

import contextlib
import html
import os
import threading
import time
import weakref
from typing import Any

from jupyter_gpumem.core import synthetic
from jupyter_gpumem.core.magic_args import MagicUsageError, check_interval
from jupyter_gpumem.core.readings import CpuArraysReading, Event, Sample, Timeline
from jupyter_gpumem.monitor.exports import export_name, write_csv, write_trace
from jupyter_gpumem.monitor.figure import STILL_COLORS, TABS_CLASS, DeviceView, current_cell_id, plotly_library
from jupyter_gpumem.monitor.header import grouped_notes, label_tags, recording_block, status_block, view_lines
from jupyter_gpumem.monitor.markers import named_markers
from jupyter_gpumem.monitor.options import (
    DEFAULT_INTERVAL_S,
    DEFAULT_WINDOW_MIN,
    INTERVALS,
    MONITOR_ARGS,
    WINDOWS_MIN,
    check_device,
    check_device_is_read,
    check_window,
    read_recording,
    span_minutes,
)
from jupyter_gpumem.monitor.series import (
    CPU_KEY,
    CPU_VIEW_HEADING,
    MAX_POINTS,
    cell_markers,
    in_view_order,
    jax_view,
    notes_for,
    nothing_to_show,
    row_for,
    view_keys,
    view_labels,
)
from jupyter_gpumem.monitor.still_output import LIVE_VIEW_CSS, MONITOR_CLASS, StillOutput, ended_bundle

__all__ = ["Monitor", "magic_monitor", "MONITOR_ARGS"]


_STATUS_EVERY_S = 10.0  # how often the header re-reads the status report
# A plot each costs the kernel milliseconds to make: a trace listing thousands of devices would
# block it for minutes. Eight GPUs split seven ways (MIG) is 56.
MAX_DRAWN_DEVICES = 64
# Short: a tab is as wide as its title (figure.TAB_CSS), and the view's heading
# (series.CPU_VIEW_HEADING) says it in full.
CPU_TITLE = "CPU: JAX arrays"


def _minutes(value: float) -> str:
    """A window's length as a person says it: ``57 s`` under a minute, else ``1.5 min``."""
    if value < 1:
        return f"{round(value * 60):d} s"
    return f"{round(value, 2):g} min"


_by_cell: weakref.WeakValueDictionary[str, Monitor] = weakref.WeakValueDictionary()


def magic_monitor(argv: list[str], shell: Any) -> Monitor:
    """``%gpumem monitor ...``: a Monitor to display. Bad options raise MagicUsageError."""
    return Monitor(**MONITOR_ARGS.parse(argv))


class Monitor:
    """A view of where each GPU's memory is, and why. Display it in a notebook.

    It draws one Timeline. By default that is the process's shared sampler's (or ``sampler``'s),
    updated every ``interval`` seconds; ``replay`` (a trace file) or ``timeline`` draw a
    recording as it is, with no live updates. ``window`` minutes of history are shown: 10 for
    live readings, the whole recording otherwise. ``device`` is an NVML index or "all".
    ``close()`` stops updates; re-running the cell that made a monitor closes the old one.
    """

    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL_S,
        window: float | None = None,
        device: int | str | None = "all",
        replay: str | os.PathLike | None = None,
        *,
        timeline: Timeline | None = None,
        sampler: Any = None,
        max_points: int = MAX_POINTS,
    ):
        if (replay is not None) + (timeline is not None) + (sampler is not None) > 1:
            raise MagicUsageError("a monitor draws one timeline: give replay, timeline or sampler, not more than one")
        self.interval = check_interval(interval)
        self.device = check_device(device)
        self.max_points = int(max_points)
        self.replay_path = os.fspath(replay) if replay is not None else None
        read_error = None
        if self.replay_path is not None:
            timeline, read_error = read_recording(self.replay_path)
        if timeline is None:
            if sampler is None:
                from jupyter_gpumem.sampling.sampler import get_sampler

                sampler = get_sampler()
            timeline = sampler.timeline
        if self.device is not None:
            check_device_is_read(self.device, timeline, sampler)
        self.sampler = sampler  # None: the timeline is a recording, drawn as it is
        self.timeline: Timeline = timeline
        if window is None:
            window = DEFAULT_WINDOW_MIN if self.live else span_minutes(timeline)
        self.window_min = check_window(window)

        import ipywidgets as W

        self._W = W
        self._lock = threading.RLock()
        self._closed = False
        self._paused = False
        self._since: float | None = None  # "clear" hides what came before
        self._views: dict[int, DeviceView] = {}
        self._not_drawn: set[int] = set()  # GPUs in the readings beyond MAX_DRAWN_DEVICES
        self._latest: Sample | None = None
        self._first_t: float | None = None  # the first sample drawn: the x axis starts there
        self._events: list[Event] = []
        # Live: the status report, re-read now and then. A recording: where it came from.
        self._about_html = (
            "" if self.live else recording_block(timeline.trace_header or {}, self.replay_path, read_error)
        )
        self._status_at, self._sub, self._view_shown = 0.0, None, False
        self.updates = 0  # draws done; wait_for_update() waits on it
        self._updated = threading.Condition()

        self._still = StillOutput(self._still_picture)  # for pages where the widget does not draw
        self._build_widgets()
        self._load_history()
        if self.live:
            self._subscribe()
        self._replace_previous_in_cell()

    # --- setup ---------------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """True when a sampler updates the timeline; False for a recording."""
        return self.sampler is not None

    @property
    def drawn_devices(self) -> list[int]:
        """The views drawn now: GPUs by index, then ``CPU_KEY`` for JAX's CPU device; empty while
        the view says why it has nothing to draw."""
        return in_view_order(self._views)

    @property
    def drawn_gpus(self) -> list[int]:
        """The GPUs drawn now, by index."""
        return [k for k in self.drawn_devices if k != CPU_KEY]

    @property
    def draws_cpu(self) -> bool:
        """Whether the view of JAX's CPU device (its live arrays in host memory) is drawn."""
        return CPU_KEY in self._views

    def made_up_fields(self) -> frozenset[str]:
        """The sample fields whose readings are made up: for a recording, as its header says; live,
        NVML's in the fake world (JAX's readings beside it are real)."""
        header = self.timeline.trace_header
        if header is not None:
            return synthetic.made_up_fields(header)
        from jupyter_gpumem.sources import nvml

        return frozenset(nvml.made_up_fields() if self.live else ())

    def labels_of(self, key: int) -> list[str]:
        """How view ``key`` is marked: "replay" when drawn from a trace, and "synthetic" where a
        reading it is drawn from is made up: the fake world's GPUs are, the real JAX arrays on
        the CPU beside them are not."""
        return view_labels(key, self.made_up_fields(), replay=self.timeline.trace_header is not None)

    @property
    def labels(self) -> list[str]:
        """How the whole drawing is marked: the labels every drawn view has (a GPU view's while
        none is drawn). A view's own further labels are shown beside it."""
        keys = list(self._views) or [0]
        each = [self.labels_of(k) for k in keys]
        return [x for x in each[0] if all(x in other for other in each[1:])]

    @property
    def window_s(self) -> float:
        return self.window_min * 60.0

    def _build_widgets(self) -> None:
        W = self._W
        plotly_library(with_text=current_cell_id() is not None)  # here, in the cell: not on the sampler thread
        # Full width with no side margins: ipywidgets' default 2 px margins on a 100% width made
        # the monitor 4 px wider than its cell, and the cell scrolled sideways.
        self.header = W.HTML(layout=W.Layout(width="100%", margin="2px 0px"))
        self.status_box = W.HTML(layout=W.Layout(width="100%", margin="2px 0px"))
        self.empty = W.HTML(layout=W.Layout(width="100%", margin="2px 0px"))
        self.tabs = W.Tab()
        self.tabs.add_class(TABS_CLASS)  # each tab as wide as its title (figure.TAB_CSS)
        # The tabs open once on the device this kernel's JAX uses, unless the user picks one first.
        self._tab_settled = self._choosing_tab = False
        self.tabs.observe(self._on_tab_picked, names="selected_index")
        self.body = W.VBox([self.empty])
        controls = self._build_controls()
        hide_still = W.HTML(LIVE_VIEW_CSS, layout=W.Layout(display="none"))  # for as long as this view is shown
        self.root = W.VBox([self.header, self.status_box, controls, self.body, hide_still])
        self.root.add_class(MONITOR_CLASS)

    def _build_controls(self) -> Any:
        """The row of controls: pause, interval, window, the exports, clear and a message."""
        W = self._W
        self.pause_button = W.ToggleButton(
            value=False, description="Pause", icon="pause", tooltip="Pause or resume updates"
        )
        intervals = sorted(set(INTERVALS) | {self.interval})
        self.interval_box = W.Dropdown(
            options=[(f"{v:g} s", v) for v in intervals],
            value=self.interval,
            description="every",
            layout=W.Layout(width="150px"),
        )
        windows = sorted(set(WINDOWS_MIN) | {self.window_min})
        self.window_box = W.Dropdown(
            options=[(_minutes(v), v) for v in windows],
            value=self.window_min,
            description="window",
            layout=W.Layout(width="170px"),
        )
        self.csv_button = W.Button(description="CSV", icon="download", tooltip="Export the window as CSV")
        self.trace_button = W.Button(
            description="trace", icon="download", tooltip="Export the window as a trace file (JSON Lines)"
        )
        self.clear_button = W.Button(description="Clear", icon="eraser", tooltip="Clear the view")
        self.message = W.HTML()
        for w in (self.pause_button, self.csv_button, self.trace_button, self.clear_button):
            w.layout = W.Layout(width="auto")
        if not self.live:  # a recording has nothing to pause and no interval
            self.pause_button.disabled = self.interval_box.disabled = True
        self.pause_button.observe(self._on_pause, names="value")
        self.interval_box.observe(self._on_interval, names="value")
        self.window_box.observe(self._on_window, names="value")
        self.csv_button.on_click(lambda _: self._export(self.export_csv))
        self.trace_button.on_click(lambda _: self._export(self.export_trace))
        self.clear_button.on_click(lambda _: self.clear())
        controls = W.HBox(
            [
                self.pause_button,
                self.interval_box,
                self.window_box,
                self.csv_button,
                self.trace_button,
                self.clear_button,
                self.message,
            ],
            layout=W.Layout(flex_flow="row wrap", align_items="center"),
        )
        return controls

    def _replace_previous_in_cell(self) -> None:
        cell = current_cell_id()
        if cell is None:
            return
        old = _by_cell.get(cell)
        if old is not None and old is not self:
            old.close()
        _by_cell[cell] = self

    def _subscribe(self) -> None:
        self._sub = self.sampler.subscribe(self._on_sample, interval=self.interval, cpu_arrays=True)

    def _window_start(self, end: Sample | None) -> float | None:
        """Where the window that ends at ``end`` starts (and "clear" moves it up)."""
        start = end.t - self.window_s if end is not None else None
        if self._since is not None:
            start = self._since if start is None else max(start, self._since)
        return start

    def _source_samples(self) -> list[Sample]:
        return self.timeline.samples(self._window_start(self.timeline.latest()))

    def _source_events(self) -> list[Event]:
        return self.timeline.events(self._since)

    def _load_history(self) -> None:
        """Draw what the timeline already holds, in one go."""
        with self._lock:
            # A new window draws new plots; the old ones close once no open widget names them
            # (a page reloaded cannot draw a widget naming a closed one: "widget model not found").
            replaced = list(self._views.values())
            self._views.clear()
            self._not_drawn = set()
            self._events = self._source_events()
            self._latest = self._first_t = None
            for sample in self._source_samples():
                self._ingest(sample)
            for view in self._views.values():
                view.series.expire()
            marks = self._marks()
            for view in self._views.values():
                view.redraw(*marks)
            self._refresh_layout()
            for view in replaced:
                view.close()

    # --- data in -------------------------------------------------------------------------

    def _wanted(self, sample: Sample) -> list[int]:
        keys = view_keys(sample)
        return keys if self.device is None else [k for k in keys if k == self.device]

    def _ingest(self, sample: Sample) -> tuple[dict, bool]:
        """Add a sample to each device's series; returns the new point per device and whether
        a new device appeared."""
        self._latest = sample
        if self._first_t is None:
            self._first_t = sample.t
        points = {}
        new_device = False
        for key in self._wanted(sample):
            view = self._views.get(key)
            if view is None and len(self._views) >= MAX_DRAWN_DEVICES:
                self._not_drawn.add(key)
                continue
            if view is None:
                dev = sample.device(key)
                name = (dev.name if dev is not None else "") or "JAX device"
                title = CPU_TITLE if key == CPU_KEY else f"GPU {key}: {name}"
                heading = CPU_VIEW_HEADING if key == CPU_KEY else None
                view = DeviceView(key, title, self.window_s, self.max_points, self.labels_of(key), self._lock, heading)
                self._views[key] = view
                new_device = True
            row = row_for(sample, key)
            view.series.add(sample.t, row)
            points[key] = (sample.t, row)
        return points, new_device

    def _marks(self) -> tuple[list, list]:
        """Cell runs and named markers to draw: those after the window's start and after the first
        sample drawn (older ones would stand in an empty strip before the readings)."""
        since = self._window_start(self._latest)
        if self._first_t is not None:
            since = self._first_t if since is None else max(since, self._first_t)
        return cell_markers(self._events, since=since), named_markers(self._events, since=since)

    def _on_sample(self, sample: Sample) -> None:
        """Runs on the sampler thread; must never raise (a closed front end included)."""
        if self._closed or self._paused:
            return
        try:
            with self._lock:
                if self._closed:
                    return
                if self._dead():
                    self.close()
                    return
                last = self._latest.t if self._latest is not None else None
                self._events.extend(self.timeline.events(last if last is not None else sample.t - self.interval))
                self._trim_events()
                self._apply([sample])
        except Exception:
            # A front end that went away (notebook closed, kernel shutting down) ends the monitor.
            self.close()

    def _apply(self, samples: list[Sample]) -> None:
        points_all: dict = {}
        appeared = False
        for sample in samples:
            points, new_device = self._ingest(sample)
            appeared |= new_device
            for key, point in points.items():
                points_all.setdefault(key, []).append(point)
        marks = self._marks()
        for key, view in self._views.items():
            view.series.expire()
            if not view.drawn:
                view.redraw(*marks)
            else:
                view.update(points_all.get(key, []), *marks)
        if appeared or not self._views:
            self._refresh_layout()  # also keeps the empty state's reason current
        else:
            self._open_on_jax()  # JAX may start after its device's tab was drawn
        self._refresh_header()
        with self._updated:
            self.updates += 1
            self._updated.notify_all()

    def wait_for_update(self, after: int, timeout: float = 10.0) -> bool:
        """Wait until more than ``after`` updates have been drawn; False on timeout."""
        with self._updated:
            return self._updated.wait_for(lambda: self.updates > after, timeout=timeout)

    def _trim_events(self) -> None:
        if self._latest is None:
            return
        cutoff = self._latest.t - self.window_s
        if self._events and self._events[0].t < cutoff:
            self._events = [e for e in self._events if e.t >= cutoff]

    def _dead(self) -> bool:
        return getattr(self.root, "comm", True) is None

    # --- what is on screen ---------------------------------------------------------------

    def _refresh_layout(self) -> None:
        views = [self._views[k] for k in in_view_order(self._views)]
        reason = nothing_to_show(self._latest) if not views else None
        if len(views) < 2 and self.tabs.children:
            self.tabs.children = ()  # not shown now: it names no plot that may close
        if not views:
            self.empty.value = self._empty_html(reason)
            self.body.children = (self.empty,)
        elif len(views) == 1:
            if self.body.children != (views[0].widget,):
                self.body.children = (views[0].widget,)
        else:
            self._choosing_tab = True  # new children move the selected tab: not the user's pick
            self.tabs.children = tuple(v.widget for v in views)
            # All titles in one assignment: set_title per tab copies and re-validates the whole
            # list each time (ipywidgets 8.1 Tab.set_title), quadratic in devices.
            self.tabs.titles = tuple(v.title for v in views)
            self._choosing_tab = False
            self.body.children = (self.tabs,)
        self._open_on_jax()
        self._refresh_header()

    def _open_on_jax(self) -> None:
        """Shows the tab of the device this kernel's JAX uses (``jax_view``), once it is drawn,
        unless the user picked a tab before."""
        key = jax_view(self._latest)
        if self._tab_settled or key not in self._views or len(self._views) < 2:
            return
        self._tab_settled = self._choosing_tab = True
        self.tabs.selected_index = in_view_order(self._views).index(key)
        self._choosing_tab = False

    def _on_tab_picked(self, change: dict) -> None:
        if not self._choosing_tab:
            self._tab_settled = True

    def _empty_html(self, reason: str | None) -> str:
        if reason is None and self.device is not None:
            reason = f"GPU {self.device} is not in the readings; choose another with --device N, or --device all."
        reason = reason or "Nothing to show yet."
        hint = ""
        if self.live:
            hint = "<div style='opacity:.75'>The view fills in by itself once there is something to draw.</div>"
        return (
            "<div class='jupyter-gpumem-empty' style='padding:12px;border:1px dashed var(--jp-border-color1,#bbb);"
            "border-radius:4px'><b>Nothing to draw.</b> " + html.escape(reason) + hint + "</div>"
        )

    def _refresh_header(self) -> None:
        now = time.time()
        if self.live and now - self._status_at > _STATUS_EVERY_S:
            self._status_at = now
            self._about_html = self._status_block()
        value = self.header_html()
        if self.header.value != value:
            self.header.value = value
        if self.status_box.value != self._about_html:
            self.status_box.value = self._about_html  # changes rarely: kept out of the per-tick header

    def _status_block(self) -> str:
        from jupyter_gpumem.settings.status import status

        return status_block(status())  # each source inside answers NotAvailable rather than raising

    def header_html(self) -> str:
        """The header: labels and state, the latest numbers per device, settings and warnings."""
        shared = self.labels
        title = f"<b>{self._title()}</b>{label_tags(shared)} <span style='opacity:.75'>({self._state()})</span>"
        lines = [title]
        arrays = self._latest.cpu_arrays if self._latest is not None else None
        count = arrays.arrays if isinstance(arrays, CpuArraysReading) else None
        views = [self._views[k] for k in in_view_order(self._views)]
        lines.extend(view_lines([(v.key, v.title, v.labels, v.series.latest or {}) for v in views], shared, count))
        if self._not_drawn:
            lines.append(
                f"<div style='color:#b35806'>{len(self._not_drawn):,} more GPUs in the readings are not drawn "
                f"(at most {MAX_DRAWN_DEVICES} at once): choose one with --device N</div>"
            )
        if self._latest is not None:
            notes = {key: notes_for(self._latest, key) for key in self._views}
            lines.extend(f"<div style='opacity:.8'>{html.escape(line)}</div>" for line in grouped_notes(notes))
        return (
            "<div class='jupyter-gpumem-header' style='line-height:1.5'>"
            + "".join(f"<div>{x}</div>" if not x.startswith("<div") else x for x in lines if x)
            + "</div>"
        )

    def _title(self) -> str:
        return "JAX memory on the CPU" if list(self._views) == [CPU_KEY] else "GPU memory"

    def _state(self) -> str:
        live = "stopped" if self._closed else "paused" if self._paused else f"live, every {self.interval:g} s"
        state = [live] if self.live else []
        return ", ".join([*state, f"window {_minutes(self.window_min)}"])

    def _still_picture(self) -> tuple[str, list, dict]:
        """What the still draws: its title, each view's window, the series' colours."""
        with self._lock:
            shared = self.labels  # said once in the title; a view's own after its name
            views = [self._views[k].still_view(shared) for k in in_view_order(self._views)]
            tags = "".join(f" [{x.upper()}]" for x in shared)
            return f"{self._title()}{tags} ({self._state()})", views, STILL_COLORS

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = self.root._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = f"jupyter_gpumem monitor: {self._title()}, a live widget ({self._state()})"
        return bundle

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # With a display id: once stopped, the output says so instead of naming closed widgets.
        display(self._repr_mimebundle_(), raw=True, display_id=self._still.display_id + "-view")
        self._view_shown = True
        self._still.show()  # the last window, where the widget does not draw

    # --- controls ------------------------------------------------------------------------

    def _on_pause(self, change: dict) -> None:
        self.pause() if change["new"] else self.resume()

    def pause(self) -> None:
        """Stop drawing; the sampler keeps recording, so resume() catches up."""
        self._paused = True
        self.pause_button.value = True
        self.pause_button.description, self.pause_button.icon = "Resume", "play"
        with self._lock:
            self._refresh_header()

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            self.pause_button.value = False
            self.pause_button.description, self.pause_button.icon = "Pause", "pause"
            if self.live and self._latest is not None:
                missed = self.timeline.samples(self._latest.t)
                self._events.extend(self.timeline.events(self._latest.t))
                if missed:
                    self._apply(missed)
            self._refresh_header()

    def _on_interval(self, change: dict) -> None:
        self.set_interval(change["new"])

    def set_interval(self, seconds: float) -> None:
        self.interval = check_interval(seconds)
        if self.interval_box.value != self.interval:
            self.interval_box.value = self.interval
        if self._sub is not None and not self._closed:
            self._sub.close()
            self._subscribe()
        with self._lock:
            self._refresh_header()

    def _on_window(self, change: dict) -> None:
        self.set_window(change["new"])

    def set_window(self, minutes: float) -> None:
        self.window_min = check_window(minutes)
        if self.window_box.value != self.window_min:
            self.window_box.value = self.window_min
        self._load_history()

    def clear(self) -> None:
        """Forget what is drawn; the view restarts from the next reading."""
        with self._lock:
            self._since = self._latest.t if self._latest is not None else time.time()
            self._load_history()

    def _export(self, fn) -> None:
        try:
            path = fn()
            self.message.value = f"saved <code>{html.escape(path)}</code>"
        except Exception as exc:
            self.message.value = f"<span style='color:#b35806'>export failed: {html.escape(str(exc))}</span>"

    def export_csv(self, path: str | os.PathLike | None = None) -> str:
        """Write the window's samples as CSV (bytes; see series.csv_rows); returns the path."""
        keys = in_view_order(self._views) if self._views else None
        return write_csv(path or export_name("csv"), self._source_samples(), keys)

    def export_trace(self, path: str | os.PathLike | None = None) -> str:
        """Write the window's samples and events as a trace file (JSON Lines); returns the path."""
        samples, events = self._source_samples(), self._source_events()
        return write_trace(path or export_name("jsonl"), samples, events, self.timeline.trace_header)

    # --- shutdown ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop updates and close the widgets. Idempotent; leaves no thread behind."""
        if self._closed:
            return
        self._closed = True
        sub, self._sub = self._sub, None
        if sub is not None:
            sub.close()
        self._still.stop()
        with contextlib.suppress(Exception):  # the still keeps the last window; a kernel going away may refuse it
            self._still.update()
        if self._view_shown:
            from IPython.display import update_display

            with contextlib.suppress(Exception):
                update_display(ended_bundle(self._title()), raw=True, display_id=self._still.display_id + "-view")
        # Every widget it made, not the root alone: an open tab naming a closed plot cannot be drawn.
        for widget in self._own_widgets():
            with contextlib.suppress(Exception):
                widget.close()

    def _own_widgets(self) -> list[Any]:
        """Every widget this monitor made: the root's tree, the views, and those not shown now."""
        found: dict[int, Any] = {}
        todo = [self.root, self.tabs, self.body, self.empty]
        todo += [w for view in self._views.values() for w in (view.widget, view.fig)]
        while todo:
            widget = todo.pop()
            if id(widget) not in found:
                found[id(widget)] = widget
                todo.extend(getattr(widget, "children", ()))
        return list(found.values())

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed and self._sub is not None:
                self._sub.close()
