"""How the monitor draws one device: a small widget (anywidget) whose browser side draws it with
plotly.js (``monitor_plot.js``), and the messages that keep it current.

The kernel sends the whole figure once (the ``figure`` trait: which series, their points, the
cell markers and named markers) and then only new points, and the markers when they change, as
custom messages. The browser keeps the window and
the point budget itself (thinning by ``series.decimate_rows``'s rule, so peaks stay), follows
JupyterLab's theme, and sends nothing back: an idle kernel with a live monitor handles no
message from it. plotly.js itself comes from the plotly package (``plotly.min.js``), so no
network is needed; its text goes to the browser once per kernel, in one widget every plot
refers to.
"""

from __future__ import annotations

import html
import threading
import uuid
from pathlib import Path
from typing import Any

from jupyter_gpumem.monitor.header import USED_BAR_CLASS
from jupyter_gpumem.monitor.series import CPU_KEY, SERIES, SERIES_NAMES, DeviceSeries, Values
from jupyter_gpumem.monitor.still import StillView

_SPEC = {s.name: s for s in SERIES}
_FRONTEND = Path(__file__).with_name("monitor_plot.js")
# ipywidgets gives every tab 144 px (--jp-widgets-horizontal-tab-width, jupyterlab-manager 5.0's
# widgets.css), which cuts "GPU 0: NVIDIA A100-SXM4-40GB" to "GPU 0: NVIDIA A100": the monitor's
# tabs take their titles' width instead, and still shrink where many share a narrow row.
TABS_CLASS = "jupyter-gpumem-tabs"
# The header's small used-of-total bars (header.USED_BAR_CLASS), orange from 90 % full.
TAB_CSS = (
    f".{TABS_CLASS} {{ --jp-widgets-horizontal-tab-width: auto; }}"
    f" .{USED_BAR_CLASS} {{ display: inline-block; width: 48px; height: 7px; margin: 0 2px; vertical-align: middle;"
    " background: var(--jp-layout-color3, #ddd); border-radius: 2px; overflow: hidden; }"
    f" .{USED_BAR_CLASS} > span {{ display: block; height: 100%; background: var(--jp-ui-font-color3, #999); }}"
    f" .{USED_BAR_CLASS}[data-full] > span {{ background: #b35806; }}"
)

# "fg": the theme's text colour, for lines that would vanish drawn black on a dark theme.
_STYLE = {
    "jax_in_use": dict(color="#1f77b4"),
    "pool_unused": dict(color="#9ecae1"),
    "outside_jax": dict(color="#ff7f0e"),
    "torch_allocated": dict(color="#8c564b"),
    "torch_cached": dict(color="#c49c94"),
    "other_processes": dict(color="#d62728"),
    "host_pids": dict(color="#e7969c"),
    "unattributed": dict(color="#bdbdbd"),
    "free": dict(color="#c7e9c0"),
    "bytes_limit": dict(color="fg", dash="dash"),
    "peak_in_use": dict(color="#6a3d9a", dash="dot"),
    "total": dict(color="fg"),
    "fragmentation": dict(color="#e31a1c"),
    "largest_free_block": dict(color="#33a02c"),
    "headroom": dict(color="#1b9e77", dash="dash"),
    "pool_reserved": dict(color="#8c510a"),
    "pool_used": dict(color="#e7298a"),
    "cpu_arrays": dict(color="#1f77b4"),
}

# The colours a still picture (still.py) draws each series in: those of the live plot, on white.
STILL_COLORS = {name: ("#333" if style["color"] == "fg" else style["color"]) for name, style in _STYLE.items()}

_LOWER = ("fragmentation", "largest_free_block", "headroom", "pool_reserved", "pool_used")

# Bytes per unit drawn: a GPU's memory in GiB; the CPU view's arrays, often a few MiB, in MiB.
_UNITS = {"GiB": float(1 << 30), "MiB": float(1 << 20)}


def bytes_or_na(n: float | None) -> str:
    if n is None:
        return "n/a"
    from jupyter_gpumem.core.units import format_bytes

    return format_bytes(int(n))


def _y(name: str, v: float | None, unit: str = "GiB") -> float | None:
    """A value as drawn: bytes in ``unit`` (GiB or MiB), percent for fractions."""
    if v is None:
        return None
    if _SPEC[name].unit == "fraction":
        return round(v * 100.0, 2)
    return round(v / _UNITS[unit], 4)


def _series_spec(name: str) -> dict:
    spec = _SPEC[name]
    style = _STYLE[name]
    axis = "y3" if name == "fragmentation" else "y2" if name in _LOWER else "y"
    return dict(
        name=name,
        label=spec.label,
        kind=spec.kind,
        axis=axis,
        rank=SERIES_NAMES.index(name) + 1,
        color=style["color"],
        dash=style.get("dash"),
    )


_widget_class: Any = None
_library: Any = None


def current_cell_id() -> str | None:
    """The id the front end gives the running cell (JupyterLab and Notebook 7 name it in the
    request's metadata; nbconvert does not), when there is a kernel to ask."""
    try:
        import sys

        ipython = sys.modules.get("IPython")
        shell = ipython.get_ipython() if ipython else None
        kernel = getattr(shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None else None
        return (parent or {}).get("metadata", {}).get("cellId")
    except Exception:
        return None


def _plotly_source() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def plotly_library(with_text: bool = False) -> Any:
    """The kernel's one widget holding plotly.js's text, which every plot's browser side runs
    once per page (made on first use; made again if it was closed).

    The text goes with the widget where ``with_text`` (a monitor made in a cell whose front end
    names it, ``current_cell_id``: JupyterLab, Notebook 7). Elsewhere (nbconvert, a plain client)
    it goes only to a browser that asks for it (a plot with no plotly.js asks once): a notebook
    run with no browser would otherwise keep 4.8 MB of plotly.js in its saved widget state. An
    ask waits for the kernel to be idle, so a front end that draws widgets gets the text at once.
    """
    global _library
    if _library is None or _library.comm is None:
        import ipywidgets
        import traitlets

        class PlotlyLibrary(ipywidgets.Widget):
            """plotly.min.js from the plotly package, as a plain widget model's state."""

            plotly_js = traitlets.Unicode().tag(sync=True)

            def answer(self, _widget: Any, content: Any, _buffers: Any) -> None:
                if content == {"ask": "plotly_js"} and not self.plotly_js:
                    self.plotly_js = _plotly_source().read_text(encoding="utf-8")

        _library = PlotlyLibrary()
        _library.on_msg(_library.answer)
    if with_text and not _library.plotly_js:
        _library.plotly_js = _plotly_source().read_text(encoding="utf-8")
    return _library


def plot_widget_class() -> Any:
    """The anywidget class of a device's plot, made on first use (anywidget and ipywidgets load
    only when a monitor is made)."""
    global _widget_class
    if _widget_class is not None:
        return _widget_class
    import anywidget
    import ipywidgets
    import traitlets

    class MonitorPlot(anywidget.AnyWidget):
        """One device's plot. ``figure`` is the whole drawing; ``append``/``cells``/``markers`` messages add to it."""

        _esm = _FRONTEND.read_text(encoding="utf-8")
        _css = TAB_CSS  # put in the page by anywidget with the first plot
        uid = traitlets.Unicode().tag(sync=True)
        figure = traitlets.Dict().tag(sync=True)
        library = traitlets.Instance(ipywidgets.Widget).tag(sync=True, **ipywidgets.widget_serialization)

        def get_state(self, key=None, drop_defaults=False):
            # A page reloaded asks for the state again: give the figure as it is now, with the
            # points sent as messages since the trait was last set.
            state = super().get_state(key, drop_defaults)
            current = getattr(self, "current_figure", None)
            if "figure" in state and current is not None:
                state["figure"] = current()
            return state

    _widget_class = MonitorPlot
    return MonitorPlot


class DeviceView:
    """One device's series, and the plot widget that draws them."""

    def __init__(
        self,
        key: int,
        title: str,
        window_s: float,
        max_points: int,
        labels: list[str],
        lock: Any = None,
        heading: str | None = None,
    ):
        self.key = key
        self.unit = "MiB" if key == CPU_KEY else "GiB"
        # The sampler thread adds rows while a page reloaded asks for the figure (kernel thread).
        self._lock = lock if lock is not None else threading.RLock()
        self.title = title
        self.window_s = window_s
        self.max_points = max_points
        self.labels = labels
        self.series = DeviceSeries(window_s, max_points=max_points)
        self.drawn: list[str] = []
        self.cells_drawn: tuple = ()
        self.markers_drawn: tuple = ()  # (time, label, hover), as markers.named_markers gives them
        self.fig = plot_widget_class()(uid=uuid.uuid4().hex, library=plotly_library())
        self.fig.current_figure = self.figure
        # What a tab or the body shows: the plot, under its heading where it has one.
        self.widget = self.fig
        if heading is not None:
            import ipywidgets as W

            self.heading = W.HTML(
                f"<div class='jupyter-gpumem-view-heading' style='line-height:1.4'>{html.escape(heading)}</div>",
                layout=W.Layout(width="100%", margin="2px 0px"),
            )
            self.widget = W.VBox([self.heading, self.fig], layout=W.Layout(width="100%"))

    def close(self) -> None:
        """Close the plot widget, and its heading where it has one."""
        self.fig.close()
        if self.widget is not self.fig:
            self.heading.close()
            self.widget.close()

    def _points(self) -> tuple[list[float], list[Values]]:
        """Every point drawn: the sealed chunks and the tail, each time once."""
        times: list[float] = []
        rows: list[Values] = []
        chunks = [(c.times, c.rows) for c in self.series.drawn_chunks()] + [self.series.tail()]
        for ts, rs in chunks:
            for t, r in zip(ts, rs):
                if not times or t > times[-1]:
                    times.append(t)
                    rows.append(r)
        return times, rows

    def _columns(self, rows: list[Values]) -> dict[str, list]:
        return {name: [_y(name, r[SERIES_NAMES.index(name)], self.unit) for r in rows] for name in self.drawn}

    def _top(self) -> float:
        """How high the cell and named markers reach: the GPU's total, or on the CPU the arrays' bytes."""
        latest = self.series.latest or {}
        top = latest.get("total") if latest.get("total") is not None else latest.get("cpu_arrays")
        return _y("total", top, self.unit) or 1.0

    def figure(self) -> dict:
        """The whole drawing as the browser receives it (times in epoch seconds)."""
        with self._lock:
            return self._figure()

    def _figure(self) -> dict:
        times, rows = self._points()
        return dict(
            series=[_series_spec(n) for n in self.drawn],
            t=[round(t, 3) for t in times],
            y=self._columns(rows),
            cells=[list(c) for c in self.cells_drawn],
            markers=[list(m) for m in self.markers_drawn],
            labels=list(self.labels),
            lower=any(n in _LOWER for n in self.drawn),
            top=self._top(),
            window_s=self.window_s,
            max_points=self.max_points,
            unit=self.unit,
        )

    def still_view(self, shared: list[str]) -> StillView:
        """The window as the still picture draws it (bytes, every point drawn now), with the
        labels this view has beyond the ``shared`` ones."""
        with self._lock:
            times, rows = self._points()
            own = tuple(x for x in self.labels if x not in shared)
            return StillView(self.title, self.unit, times, rows, own, tuple(self.cells_drawn))

    def redraw(self, cells: list, markers: list | tuple = ()) -> None:
        """Send the whole figure: when the set of series changes, and on window changes."""
        self.drawn = self.series.active_series()
        self.cells_drawn = tuple(cells)
        self.markers_drawn = tuple(markers)
        self.fig.figure = self.figure()

    def update(self, points: list[tuple[float, Values]], cells: list, markers: list | tuple = ()) -> None:
        """Send what is new: the points, and the cell or named markers when they changed."""
        if self.series.active_series() != self.drawn:
            self.redraw(cells, markers)
            return
        if points:
            self.fig.send(
                dict(
                    kind="append",
                    t=[round(t, 3) for t, _ in points],
                    y=self._columns([r for _, r in points]),
                    top=self._top(),
                )
            )
        if tuple(cells) != self.cells_drawn:
            self.cells_drawn = tuple(cells)
            self.fig.send(dict(kind="cells", cells=[list(c) for c in cells]))
        if tuple(markers) != self.markers_drawn:
            self.markers_drawn = tuple(markers)
            self.fig.send(dict(kind="markers", markers=[list(m) for m in markers]))
