"""How the live monitor draws one device: a plotly FigureWidget with a band per series, and the
small updates that extend it without resending what the browser already has.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence

from jupyter_gpumem.series import (
    SERIES,
    SERIES_NAMES,
    Chunk,
    DeviceSeries,
)

_SPEC = {s.name: s for s in SERIES}


_STYLE = {
    "jax_in_use": dict(color="#1f77b4"),
    "pool_unused": dict(color="#9ecae1"),
    "outside_jax": dict(color="#ff7f0e"),
    "other_processes": dict(color="#d62728"),
    "host_pids": dict(color="#e7969c"),
    "unattributed": dict(color="#bdbdbd"),
    "free": dict(color="#c7e9c0"),
    "bytes_limit": dict(color="#333333", dash="dash"),
    "peak_in_use": dict(color="#6a3d9a", dash="dot"),
    "total": dict(color="#000000"),
    "fragmentation": dict(color="#e31a1c"),
    "largest_free_block": dict(color="#33a02c"),
    "headroom": dict(color="#1b9e77", dash="dash"),
    "pool_reserved": dict(color="#8c510a"),
    "pool_used": dict(color="#e7298a"),
}


_LOWER = ("fragmentation", "largest_free_block", "headroom", "pool_reserved", "pool_used")


_GIB = float(1 << 30)


def _tz_offset_s() -> float:
    offset = datetime.now().astimezone().utcoffset()
    return offset.total_seconds() if offset else 0.0


def _fmt(n: float | None) -> str:
    if n is None:
        return "n/a"
    from jupyter_gpumem.units import format_bytes

    return format_bytes(int(n))


def _y(name: str, v: float | None) -> float | None:
    if v is None:
        return None
    if _SPEC[name].unit == "fraction":
        return round(v * 100.0, 2)
    return round(v / _GIB, 4)


def _trace(name: str, xs: list, ys: list, group: str, showlegend: bool, meta: str) -> dict:
    spec = _SPEC[name]
    style = _STYLE[name]
    trace: dict = dict(
        type="scatter",
        mode="lines",
        x=xs,
        y=ys,
        name=spec.label,
        legendgroup=name,
        showlegend=showlegend,
        meta=meta,
        legendrank=SERIES_NAMES.index(name) + 1,
        xaxis="x",
    )
    if spec.kind == "band":
        trace.update(
            stackgroup=group,
            line=dict(width=0.5, color=style["color"]),
            fillcolor=style["color"],
            yaxis="y",
            hovertemplate="%{y:.2f} GiB<extra>" + spec.label + "</extra>",
        )
    else:
        trace.update(line=dict(width=1.5, color=style["color"], dash=style.get("dash", "solid")))
        if name == "fragmentation":
            trace.update(yaxis="y3", hovertemplate="%{y:.1f}%<extra>fragmentation</extra>")
        else:
            trace.update(
                yaxis="y2" if name in _LOWER else "y",
                hovertemplate="%{y:.2f} GiB<extra>" + spec.label + "</extra>",
            )
        if spec.kind == "pool":
            trace["line_shape"] = "hv"  # each growth step shows as a step
    return trace


def _restyle_points(fig: Any, data: dict[str, list], indexes: list[int]) -> None:
    """Replace x/y of some traces with one restyle message.

    ``plotly_restyle`` validates every number again (about 20 ms a tick for a dozen traces);
    these lists are built here from numbers, so the figure's own dicts are updated and the
    message sent directly. Falls back to the public call if plotly's internals differ.
    """
    store = getattr(fig, "_data", None)
    send = getattr(fig, "_send_restyle_msg", None)
    if not isinstance(store, list) or send is None or max(indexes) >= len(store):
        fig.plotly_restyle(data, trace_indexes=indexes)
        return
    for k, i in enumerate(indexes):
        for prop, values in data.items():
            store[i][prop] = values[k]
    send(data, trace_indexes=indexes)


class _DeviceView:
    """One device's figure and the bookkeeping of which traces hold which chunk."""

    def __init__(self, key: int, title: str, window_s: float, max_points: int, go: Any, labels: list[str]):
        self.key = key
        self.title = title
        self.series = DeviceSeries(window_s, max_points=max_points)
        self.drawn: list[str] = []
        self.cells_drawn: tuple = ()
        # (meta, series) per trace, in figure order: reading them back from plotly is slow.
        self.index: list[tuple[str, str]] = []
        self.fig = go.FigureWidget(layout=self._layout(labels, lower=False))
        self._labels = labels

    @staticmethod
    def _layout(labels: list[str], lower: bool) -> dict:
        annotations = []
        if labels:
            annotations.append(
                dict(
                    text=" · ".join(labels).upper(),
                    xref="paper",
                    yref="paper",
                    x=0.0,
                    y=1.0,
                    xanchor="left",
                    yanchor="bottom",
                    showarrow=False,
                    font=dict(size=12, color="#b35806"),
                )
            )
        return dict(
            height=560 if lower else 440,
            margin=dict(l=60, r=60, t=24, b=10),
            template="plotly_white",
            hovermode="x",
            xaxis=dict(type="date", anchor="y2" if lower else "y", title=None),
            yaxis=dict(title="GiB", domain=[0.42, 1.0] if lower else [0.0, 1.0], rangemode="tozero"),
            yaxis2=dict(title="GiB", domain=[0.0, 0.3], rangemode="tozero", visible=lower),
            yaxis3=dict(title="fragmentation %", overlaying="y2", side="right", range=[0, 100], dtick=25, visible=lower, showgrid=False),
            # Below the plot: a notebook column is narrow, and the plot keeps its full width.
            legend=dict(orientation="h", x=0.0, y=-0.08, yanchor="top", font=dict(size=11)),
            annotations=annotations,
            uirevision="keep",  # zoom and legend clicks survive updates
        )

    def _x(self, times: Sequence[float], offset: float) -> list[int]:
        return [int((t + offset) * 1000) for t in times]

    def chunk_traces(self, chunk: Chunk, offset: float) -> list[dict]:
        xs = self._x(chunk.times, offset)
        out = []
        for name in self.drawn:
            col = SERIES_NAMES.index(name)
            ys = [_y(name, r[col]) for r in chunk.rows]
            out.append(_trace(name, xs, ys, f"c{chunk.id}", False, f"c{chunk.id}"))
        return out

    def redraw(self, offset: float, cells: list) -> None:
        """Replace every trace: used when the set of series changes, and on window changes."""
        self.drawn = self.series.active_series()
        lower = any(n in _LOWER for n in self.drawn)
        traces: list[dict] = []
        for chunk in self.series.drawn_chunks():
            traces.extend(self.chunk_traces(chunk, offset))
        times, rows = self.series.tail()
        xs = self._x(times, offset)
        for name in self.drawn:
            col = SERIES_NAMES.index(name)
            traces.append(_trace(name, xs, [_y(name, r[col]) for r in rows], "tail", True, "tail"))
        traces.append(self._cells_trace(cells, offset))
        with self.fig.batch_update():
            self.fig.data = ()
            self.fig.layout.update(self._layout(self._labels, lower))
        self.fig.add_traces(traces)
        self.index = [(t["meta"], t["legendgroup"]) for t in traces]
        self.cells_drawn = tuple(cells)

    def _cells_trace(self, cells: list, offset: float) -> dict:
        top = self.series.latest.get("total") if self.series.latest else None
        top = _y("total", top) if top else 1.0
        xs: list = []
        ys: list = []
        text: list = []
        for t, count, duration in cells:
            x = int((t + offset) * 1000)
            label = f"[{count}]" if count is not None else "[?]"
            took = f" ran {duration:.1f} s" if duration is not None else " running"
            xs += [x, x, None]
            ys += [0, top, None]
            text += [label + took, label, None]
        return dict(
            type="scatter",
            mode="lines+text",
            x=xs,
            y=ys,
            text=text,
            textposition="top center",
            texttemplate=["", "%{text}", ""] * len(cells),
            textfont=dict(size=10, color="#555555"),
            line=dict(width=1, color="rgba(80,80,80,0.55)", dash="dot"),
            name="cells",
            legendgroup="cells",
            legendrank=100,
            meta="cells",
            hovertemplate="cell %{text}<extra></extra>",
            xaxis="x",
            yaxis="y",
        )

    def update(self, sealed: list[Chunk], gone_ids: set[int], offset: float, cells: list) -> None:
        """Send what changed: new chunks once, removals, the tail's points, cell markers when
        they change. ``gone_ids``: chunks expired or replaced."""
        if self.series.active_series() != self.drawn:
            self.redraw(offset, cells)
            return
        gone = {f"c{i}" for i in gone_ids}
        if gone and any(meta in gone for meta, _ in self.index):
            keep = [i for i, (meta, _) in enumerate(self.index) if meta not in gone]
            data = self.fig.data
            self.fig.data = tuple(data[i] for i in keep)
            self.index = [self.index[i] for i in keep]
        if sealed:
            new: list[dict] = []
            for chunk in sealed:
                new.extend(self.chunk_traces(chunk, offset))
            self.fig.add_traces(new)
            self.index += [(t["meta"], t["legendgroup"]) for t in new]
        times, rows = self.series.tail()
        xs = self._x(times, offset)
        # One restyle message for the tail and, when they changed, the cell markers.
        indexes: list[int] = []
        data: dict[str, list] = {"x": [], "y": []}
        for i, (meta, name) in enumerate(self.index):
            if meta == "tail":
                col = SERIES_NAMES.index(name)
                indexes.append(i)
                data["x"].append(xs)
                data["y"].append([_y(name, r[col]) for r in rows])
        if indexes:
            _restyle_points(self.fig, data, indexes)
        if tuple(cells) != self.cells_drawn:
            fresh = self._cells_trace(cells, offset)
            for i, (meta, _) in enumerate(self.index):
                if meta == "cells":
                    self.fig.plotly_restyle(
                        {k: [fresh[k]] for k in ("x", "y", "text", "texttemplate")}, trace_indexes=[i]
                    )
            self.cells_drawn = tuple(cells)
