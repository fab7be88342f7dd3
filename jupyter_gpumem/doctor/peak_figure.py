"""``%gpumem peak``'s picture: bytes live over the program's order, stacked by source line, the
peak marked, as a plotly figure (JSON: JupyterLab's and VS Code's plotly renderers draw it; no
plotly.js goes from the kernel).

Pure: a dict from a ``peak_timeline.PeakTimeline``. Stacked areas, drawn as steps (the bytes
change only where a value starts or ends), the largest line at the peak at the bottom; a dashed
line and a point at the peak, whose hover lists the values live there (shape and dtype, what made
them, bytes); each band's hover names its line, its bytes at that step, and its largest values
at the peak.
"""

from __future__ import annotations

import html

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.peak_timeline import OTHER_LINES, PeakTimeline, PeakValue

__all__ = ["peak_figure", "PLOTLY_MIME", "HOVER_VALUES"]

PLOTLY_MIME = "application/vnd.plotly.v1+json"
HOVER_VALUES = 6  # values named in a hover
# Colour-blind-safe, and distinct from the monitor's bands.
_COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#332288")
_OTHER = "#dddddd"


def _unit(peak: int) -> tuple[str, float]:
    for name, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if peak >= size:
            return name, float(size)
    return "B", 1.0


def _value_text(v: PeakValue, with_line: bool) -> str:
    what = f"{html.escape(v.shape) or '?'} {format_bytes(v.size)}"
    made = html.escape(v.label) if v.label else ""
    line = f" at {html.escape(v.where)}" if with_line else ""
    return f"{what} ({made}{line})" if made or line else what


def _template(text: str) -> str:
    """``text`` as a plotly hover template with no field in it."""
    return text.replace("%", "%%").replace("{", "(").replace("}", ")") + "<extra></extra>"


def _band(timeline: PeakTimeline, i: int, unit: str, scale: float) -> dict:
    line = timeline.lines[i]
    color = _OTHER if line == OTHER_LINES else _COLORS[i % len(_COLORS)]
    return dict(
        type="scatter",
        mode="lines",
        name=line,
        x=list(timeline.steps),
        y=[round(b / scale, 6) for b in timeline.live[i]],
        stackgroup="live",
        line=dict(shape="hv", width=0.5, color=color),
        fillcolor=color,
        hovertemplate=_hover_template(timeline, line, unit),
    )


def _hover_template(timeline: PeakTimeline, line: str, unit: str) -> str:
    values = timeline.at_peak.get(line, ())
    named = "<br>".join(_value_text(v, line == OTHER_LINES) for v in values[:HOVER_VALUES])
    more = f"<br>and {len(values) - HOVER_VALUES} more" if len(values) > HOVER_VALUES else ""
    at_peak = f"<br>at the peak:<br>{named}{more}" if values else "<br>none of it live at the peak"
    head = _template(f"<b>{html.escape(line)}</b>").removesuffix("<extra></extra>")
    tail = _template(at_peak).removesuffix("<extra></extra>")
    return f"{head}<br>%{{y:.3f}} {unit} live at step %{{x}}{tail}<extra></extra>"


def _peak_point(timeline: PeakTimeline, unit: str, scale: float) -> dict:
    values = sorted((v for vs in timeline.at_peak.values() for v in vs), key=lambda v: -v.size)
    named = "<br>".join(_value_text(v, True) for v in values[: HOVER_VALUES * 2])
    more = f"<br>and {len(values) - HOVER_VALUES * 2} more" if len(values) > HOVER_VALUES * 2 else ""
    head = f"<b>peak {format_bytes(timeline.peak_bytes)} at step {timeline.peak_step}</b><br>live then:<br>"
    return dict(
        type="scatter",
        mode="markers",
        name="peak",
        x=[timeline.peak_step],
        y=[round(timeline.peak_bytes / scale, 6)],
        marker=dict(symbol="diamond", size=11, color="#000000"),
        hovertemplate=_template(head + named + more),
        showlegend=False,
    )


def peak_figure(timeline: PeakTimeline, title: str) -> dict:
    """The figure as plotly's JSON (``data`` and ``layout``), for ``PLOTLY_MIME``."""
    unit, scale = _unit(timeline.peak_bytes)
    top = timeline.peak_bytes / scale
    data = [_band(timeline, i, unit, scale) for i in range(len(timeline.lines))]
    data.append(_peak_point(timeline, unit, scale))
    layout = dict(
        title=dict(text=html.escape(title), font=dict(size=14)),
        height=420,
        margin=dict(l=60, r=20, t=50, b=50),
        hovermode="closest",
        legend=dict(traceorder="reversed", font=dict(size=11)),  # as the bands stack
        xaxis=dict(
            title=dict(text=f"program order (step of XLA's schedule, {timeline.length} steps)"), rangemode="tozero"
        ),
        yaxis=dict(title=dict(text=f"live ({unit})"), rangemode="tozero"),
        shapes=[
            dict(
                type="line",
                x0=timeline.peak_step,
                x1=timeline.peak_step,
                y0=0,
                y1=top,
                line=dict(color="#000000", dash="dash", width=1),
            )
        ],
        annotations=[
            dict(
                x=timeline.peak_step,
                y=top,
                text=f"peak {format_bytes(timeline.peak_bytes)}",
                showarrow=False,
                yshift=10,
            )
        ],
    )
    return {"data": data, "layout": layout}
