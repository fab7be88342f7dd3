"""A monitor's last window as a still picture (SVG) and as words, for wherever the live widget
does not draw: a notebook saved or run by nbconvert, then read on GitHub, nbviewer, in VS Code
without a widget manager, or as a PDF.

Pure: strings from numbers. The picture stacks the same bands as the live plot, in the same
colours, with its lines (total, bytes_limit, peak in use) and the cell runs; one panel per
device, on a white ground so it reads on a dark page too. ``still_output.py`` puts it in the
notebook.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.monitor.series import SERIES, SERIES_NAMES, Values

__all__ = ["StillView", "still_svg", "still_text", "thinned", "STILL_CLASS", "STILL_POINTS"]

# The picture's root class: the live monitor's CSS hides a still beside a live view of it
# (figure.TAB_CSS), and the tests find it by it.
STILL_CLASS = "jupyter-gpumem-still"
# Readings drawn, all panels together (a panel is 680 px wide, so more would not show): the cost
# of drawing the still after each cell stays bounded whatever the number of devices.
STILL_POINTS = 400
_MIN_POINTS = 40

_WIDTH = 760
_PANEL_H = 184
_LEFT, _RIGHT = 64, 16
_TITLE_H, _LEGEND_H, _AXIS_H = 22, 34, 18  # the legend: two rows
_LABEL = {s.name: s.label for s in SERIES}
_BANDS = [s.name for s in SERIES if s.kind == "band"]
_LINES = ("total", "bytes_limit", "peak_in_use")
_UNITS = {"GiB": float(1 << 30), "MiB": float(1 << 20)}
_INDEX = {name: i for i, name in enumerate(SERIES_NAMES)}


@dataclass(frozen=True)
class StillView:
    """One device's window as drawn: ``rows`` hold bytes in ``SERIES_NAMES`` order, at ``times``
    (epoch seconds); ``cells`` are ``(start, execution count, duration)``."""

    title: str
    unit: str
    times: Sequence[float]
    rows: Sequence[Values]
    labels: Sequence[str] = ()
    cells: Sequence[tuple] = field(default_factory=tuple)


def _value(row: Values, name: str) -> float:
    v = row[_INDEX[name]]
    return float(v) if v is not None else 0.0


def _known(view: StillView, name: str) -> bool:
    i = _INDEX[name]
    return any(r[i] is not None for r in view.rows)


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S")


def _used(rows: Sequence[Values]) -> list[float]:
    """Each reading's memory in use: a GPU's total less free, the CPU view's arrays."""
    total, free, arrays = _INDEX["total"], _INDEX["free"], _INDEX["cpu_arrays"]
    return [(r[total] - r[free]) if r[total] is not None and r[free] is not None else (r[arrays] or 0.0) for r in rows]


def thinned(view: StillView, points: int) -> StillView:
    """At most about ``points`` readings: in each of ``points / 2`` equal stretches of time, the
    readings with the most and the least memory in use, so a spike stays drawn."""
    n = len(view.rows)
    if n <= points:
        return view
    used = _used(view.rows)
    t0, span, buckets = view.times[0], (view.times[-1] - view.times[0]) or 1.0, max(1, points // 2)
    best: dict[int, tuple[int, int]] = {}
    for i, t in enumerate(view.times):
        b = min(buckets - 1, int((t - t0) / span * buckets))
        lo, hi = best.get(b, (i, i))
        best[b] = (i if used[i] < used[lo] else lo, i if used[i] > used[hi] else hi)
    keep = sorted({0, n - 1} | {i for pair in best.values() for i in pair})
    return StillView(
        view.title, view.unit, [view.times[i] for i in keep], [view.rows[i] for i in keep], view.labels, view.cells
    )


class _Panel:
    """Where one device's numbers land in its panel."""

    def __init__(self, view: StillView, y0: float, names: list[str]):
        self.view, self.y0 = view, y0
        self.columns = {n: [_value(r, n) for r in view.rows] for n in names}
        self.known = {n: [r[_INDEX[n]] is not None for r in view.rows] for n in names}
        t0, span = view.times[0], max(view.times[-1] - view.times[0], 1e-9)
        self.t0, self.plot_top = t0, y0 + _TITLE_H
        self.plot_h = _PANEL_H - _TITLE_H - _LEGEND_H - _AXIS_H
        scale = (_WIDTH - _LEFT - _RIGHT) / span
        self.xs = [round(_LEFT + (t - t0) * scale) for t in view.times]  # whole pixels: short, quick to write
        self.top = 1.0

    def x(self, t: float) -> float:
        return round(_LEFT + (t - self.t0) / max(self.view.times[-1] - self.t0, 1e-9) * (_WIDTH - _LEFT - _RIGHT), 1)

    def y(self, v: float) -> float:
        return round(self.plot_top + self.plot_h * (1 - v / self.top), 1)

    def path(self, values: list[float], known: list[bool] | None = None) -> str:
        """Points for ``values``; where ``known`` is given, only at the readings that have one."""
        k, base = self.plot_h / self.top, self.plot_top + self.plot_h
        known = known or [True] * len(values)
        return " ".join([f"{x},{round(base - v * k)}" for x, v, ok in zip(self.xs, values, known) if ok])


def _band_polygons(panel: _Panel, bands: list[str], colors: dict[str, str]) -> list[str]:
    """The bands stacked: each drawn as the area under its running total, the highest first, so
    each lower one covers the part of it that is not its own."""
    totals, running = [], [0.0] * len(panel.xs)
    for name in bands:
        running = [a + b for a, b in zip(running, panel.columns[name])]
        totals.append((name, running))
    panel.top = max([max(running, default=0.0)] + [max(panel.columns[n]) for n in _LINES if n in panel.columns] + [1.0])
    bottom = panel.plot_top + panel.plot_h
    corners = f"{panel.xs[-1]},{bottom} {panel.xs[0]},{bottom}"
    return [
        f'<polygon points="{panel.path(values)} {corners}" fill="{colors.get(name, "#999")}">'
        f"<title>{html.escape(_LABEL[name])}</title></polygon>"
        for name, values in reversed(totals)
    ]


def _lines(panel: _Panel, colors: dict[str, str]) -> list[str]:
    out = []
    for name in _LINES:
        if name not in panel.columns:
            continue
        dash = ' stroke-dasharray="5,3"' if name != "total" else ""
        out.append(
            f'<polyline points="{panel.path(panel.columns[name], panel.known[name])}" fill="none" '
            f'stroke="{colors.get(name, "#333")}" stroke-width="1.5"{dash}/>'
        )
    return out


def _axes(panel: _Panel) -> list[str]:
    view, unit = panel.view, _UNITS[panel.view.unit]
    bottom = panel.plot_top + panel.plot_h
    out = [f'<line x1="{_LEFT}" y1="{bottom}" x2="{_WIDTH - _RIGHT}" y2="{bottom}" stroke="#888"/>']
    for frac in (0.5, 1.0):
        v = panel.top * frac
        y = panel.y(v)
        out.append(f'<line x1="{_LEFT}" y1="{y}" x2="{_WIDTH - _RIGHT}" y2="{y}" stroke="#ddd"/>')
        out.append(f'<text x="{_LEFT - 4}" y="{y + 4}" text-anchor="end">{v / unit:.3g} {view.unit}</text>')
    out.append(f'<text x="{_LEFT}" y="{bottom + 13}">{_clock(view.times[0])}</text>')
    out.append(f'<text x="{_WIDTH - _RIGHT}" y="{bottom + 13}" text-anchor="end">{_clock(view.times[-1])}</text>')
    for start, count, _duration in view.cells:
        if panel.t0 <= start <= view.times[-1]:
            x = panel.x(start)
            out.append(
                f'<line x1="{x}" y1="{panel.plot_top}" x2="{x}" y2="{bottom}" stroke="#555" stroke-dasharray="2,3"/>'
            )
            out.append(f'<text x="{x + 2}" y="{panel.plot_top + 10}">[{count if count is not None else "?"}]</text>')
    return out


def _legend(panel: _Panel, names: list[str], colors: dict[str, str]) -> list[str]:
    """The series' colours and names, in rows that wrap at the panel's width."""
    y = panel.y0 + _PANEL_H - _LEGEND_H + 10
    x, out = float(_LEFT), []
    for name in names:
        text = _LABEL[name]
        if x > _LEFT and x + 24 + 5.6 * len(text) > _WIDTH:
            x, y = float(_LEFT), y + 14
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colors.get(name, "#999")}"/>')
        out.append(f'<text x="{x + 13}" y="{y}">{html.escape(text)}</text>')
        x += 24 + 5.6 * len(text)  # about 5.6 px a character at 11 px sans-serif
    return out


def _panel(view: StillView, y0: float, colors: dict[str, str]) -> list[str]:
    tags = "".join(f" [{label.upper()}]" for label in view.labels)
    out = [f'<text x="{_LEFT}" y="{y0 + 15}" font-weight="bold">{html.escape(view.title + tags)}</text>']
    if not view.rows:
        return out + [f'<text x="{_LEFT}" y="{y0 + 50}">no readings in the window</text>']
    bands = [n for n in _BANDS if _known(view, n)]
    lines = [n for n in _LINES if _known(view, n)]
    panel = _Panel(view, y0, bands + lines)
    out += _band_polygons(panel, bands, colors) + _lines(panel, colors) + _axes(panel)
    return out + _legend(panel, bands + lines, colors)


def still_svg(title: str, views: Sequence[StillView], colors: dict[str, str]) -> str:
    """The picture: ``title`` over one panel per view, each stacking its bands over its window
    (``STILL_POINTS`` readings shared out among the views, at least ``_MIN_POINTS`` each; in each
    stretch of time the readings with the most and the least in use are kept)."""
    height = 28 + _PANEL_H * max(1, len(views))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="{STILL_CLASS}" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="11" fill="#222">',
        f'<rect width="{_WIDTH}" height="{height}" fill="#fff"/>',
        f'<text x="8" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>',
    ]
    if not views:
        parts.append('<text x="8" y="44">Nothing was drawn in the window.</text>')
    each = max(_MIN_POINTS, STILL_POINTS // max(1, len(views)))
    for i, view in enumerate(views):
        parts += _panel(thinned(view, each), 28 + i * _PANEL_H, colors)
    return "\n".join(parts + ["</svg>"]) + "\n"


def _view_words(view: StillView) -> list[str]:
    tags = "".join(f" [{label}]" for label in view.labels)
    if not view.rows:
        return [f"{view.title}{tags}: no readings in the window"]
    last = view.rows[-1]
    # The bands that hold something, then the lines; free is the total less the rest.
    known = [n for n in _BANDS if n != "free" and _value(last, n) > 0] + [n for n in _LINES if _known(view, n)]
    parts = [f"{_LABEL[n]} {format_bytes(int(_value(last, n)))}" for n in known]
    words = [f"{view.title}{tags}, at {_clock(view.times[-1])}: " + (", ".join(parts) or "no numbers")]
    for name in ("jax_in_use", "cpu_arrays"):
        if _known(view, name):
            peak = max(_value(r, name) for r in view.rows)
            words.append(f"  most {_LABEL[name]} in the window: {format_bytes(int(peak))}")
    return words


def still_text(title: str, views: Sequence[StillView]) -> str:
    """What the picture shows, in words: the window's span and readings, each device's last
    numbers and its most in use, and the cells that ran."""
    if not views or not any(v.rows for v in views):
        return f"{title}\nNothing was drawn in the window."
    first = min(v.times[0] for v in views if v.rows)
    last = max(v.times[-1] for v in views if v.rows)
    readings = max(len(v.rows) for v in views)
    lines = [title, f"window {_clock(first)} to {_clock(last)}, {readings} reading{'s' * (readings != 1)} drawn"]
    for view in views:
        lines += _view_words(view)
    counts = sorted({c[1] for v in views for c in v.cells if c[1] is not None})
    if counts:
        lines.append("cells run in the window: " + " ".join(f"[{c}]" for c in counts))
    return "\n".join(lines)
