"""The named markers the monitor draws on its time axis: "marker" events, which a script adds with
``jupyter_gpumem.record.mark(name)``, as the plot labels them.

Pure: no plotly, no ipywidgets. A name is user text, drawn by plotly.js, whose labels read a few
HTML tags (``<b>``, ``<br>``, ``<a href>``) and entities (plotly.js 3.8.2,
src/lib/svg_text_utils.js, ``convertToTspans``/``convertEntities``): each name is escaped here,
and its label cut short, so no name can restyle the plot or stretch it.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Iterable

from jupyter_gpumem.core.readings import Event

__all__ = ["MARKER_EVENT", "RECORDER_MARKERS", "LABEL_CHARS", "HOVER_CHARS", "marker_text", "named_markers"]

MARKER_EVENT = "marker"
# Written by ``python -m jupyter_gpumem.record --run`` itself around the script: its start falls on
# the recording's first reading and its end on the last, the plot's two edges, so a line there
# says nothing the axis does not. "script_error" is drawn: it says where the script failed.
RECORDER_MARKERS = frozenset({"script_start", "script_end"})
LABEL_CHARS = 24  # the visible label; the whole name is in the hover
HOVER_CHARS = 400  # a hover is a tooltip, not a page: a name longer than this is cut there
_HOVER_LINE_CHARS = 60


def _one_line(name: object) -> str:
    """The name as one line of printable text: newlines, tabs and control characters are spaces."""
    text = "".join(c if c.isprintable() else " " for c in str(name))
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def marker_text(name: object) -> tuple[str, str]:
    """``(label, hover)`` for a marker's name, both escaped for plotly.js's text: the label at most
    ``LABEL_CHARS`` characters (cut with "…"), the hover the whole name (to ``HOVER_CHARS``),
    wrapped into lines with ``<br>``. Quotes are left as they are: plotly.js decodes ``&amp;``,
    ``&lt;`` and ``&gt;`` but not ``&quot;``."""
    text = _one_line(name) or "(unnamed)"
    label = html.escape(_cut(text, LABEL_CHARS), quote=False)
    lines = textwrap.wrap(_cut(text, HOVER_CHARS), _HOVER_LINE_CHARS)
    hover = "<br>".join(html.escape(line, quote=False) for line in lines)
    return label, hover


def named_markers(events: Iterable[Event], since: float | None = None) -> list[tuple[float, str, str]]:
    """``(time, label, hover)`` for each "marker" event after ``since``, oldest first, with its
    name as ``marker_text`` gives it; the recorder's own start and end are left out."""
    out = []
    for event in sorted(events, key=lambda e: e.t):
        name = (event.data or {}).get("name")
        if event.name != MARKER_EVENT or name in RECORDER_MARKERS:
            continue
        if since is None or event.t > since:
            out.append((event.t, *marker_text("" if name is None else name)))
    return out
