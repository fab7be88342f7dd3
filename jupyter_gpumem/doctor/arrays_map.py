"""``%gpumem arrays --map``'s picture: live device memory by the cell that was running, the line
that made each array and the name that holds it, as a plotly icicle (JSON: JupyterLab's and VS
Code's plotly renderers draw it; no plotly.js goes from the kernel).

Pure. ``map_nodes`` sums the records in one pass, keyed by objects the census already shares
(one ``Allocation`` per distinct traceback), so 50,000 arrays cost one dictionary update each;
each level keeps its largest children and sums the rest into one "more" node, so the figure
stays small whatever the number of arrays, lines or names. Sizes are bytes of device memory
(all devices together); arrays held only in host memory take none and are left out.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.doctor.names import root_name

__all__ = ["MapNode", "map_nodes", "arrays_map", "CELLS", "LINES", "HOLDERS", "NO_NAME", "NO_CELL"]

CELLS = 12  # cells drawn; the rest summed as one node
LINES = 10  # lines drawn per cell
HOLDERS = 8  # names drawn per line
NAMES = 3  # full names listed in a holder's hover
NO_NAME = "(no name: held elsewhere)"
NO_CELL = "outside the cells"
ROOT = "live"
_COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#332288")
_MORE = "#dddddd"


@dataclass(frozen=True)
class MapNode:
    """One box of the map: ``id`` (its path), ``parent`` (its parent's id, "" for the root),
    ``label``, ``nbytes`` (device memory of the arrays under it), ``arrays`` (how many) and
    ``names``: for a holder, the full expressions that hold its newest arrays (three)."""

    id: str
    parent: str
    label: str
    nbytes: int
    arrays: int
    names: tuple[str, ...] = ()


def _line_label(site: str, cell: str) -> str:
    """A line under its cell: ``line 2 in f`` where the site is in that very cell."""
    prefix = cell + " "
    return site[len(prefix) :] if site.startswith(prefix) else site


def _largest(items: dict, keep: int) -> tuple[list, list]:
    """``(kept, rest)`` of ``items`` (key -> [bytes, count, ...]), largest first."""
    ranked = sorted(items.items(), key=lambda kv: (-kv[1][0], str(kv[0])))
    return ranked[:keep], ranked[keep:]


def _more(parent: str, rest: list, what: str) -> MapNode:
    nbytes = sum(v[0] for _, v in rest)
    arrays = sum(v[1] for _, v in rest)
    return MapNode(f"{parent}/(more)", parent, f"{len(rest)} more {what}", nbytes, arrays)


def _tally(records: Iterable) -> dict:
    """cell label -> line site -> holder -> [bytes, arrays, names], in one pass."""
    per: dict[tuple[int, str], list] = {}
    allocations: dict[int, object] = {}
    for r in records:
        size = r.footprint.on_device
        names = r.names
        if not size:
            continue
        key = (id(r.allocation), root_name(names[0]) if names else NO_NAME)
        found = per.get(key)
        if found is not None:
            found[0] += size
            found[1] += 1
            if len(found[2]) < NAMES and names:
                found[2].append(names[0])
        else:
            per[key] = [size, 1, list(names[:1])]
            allocations[key[0]] = r.allocation
    cells: dict[str, dict] = {}
    for (made, holder), (size, count, names) in per.items():
        allocation = allocations[made]
        cell = NO_CELL if allocation.cell is None else f"cell [{allocation.cell}]"
        holder_of = cells.setdefault(cell, {}).setdefault(allocation.site, {})
        was = holder_of.setdefault(holder, [0, 0, []])
        was[0] += size
        was[1] += count
        was[2] += names[: NAMES - len(was[2])]
    return cells


def _summed(tree: dict) -> dict:
    """Each key -> [bytes, count, children] from its children's sums."""
    out = {}
    for key, child in tree.items():
        if isinstance(child, dict):
            inner = _summed(child)
            out[key] = [sum(v[0] for v in inner.values()), sum(v[1] for v in inner.values()), inner]
        else:
            out[key] = child
    return out


def map_nodes(records: Iterable) -> list[MapNode]:
    """The boxes of the map, parents before their children: the root, then per cell (the largest
    ``CELLS``), its lines (``LINES``), and per line its holders (``HOLDERS``, by the root of the
    first name holding each array: ``params`` for ``params['w']``); the rest of each level as one
    "N more" box. Empty where no array holds device memory."""
    cells = _summed(_tally(records))
    if not cells:
        return []
    total = sum(v[0] for v in cells.values())
    count = sum(v[1] for v in cells.values())
    nodes = [MapNode(ROOT, "", "all live arrays", total, count)]
    kept, rest = _largest(cells, CELLS)
    for cell, (size, n, lines) in kept:
        nodes.append(MapNode(f"{ROOT}/{cell}", ROOT, cell, size, n))
        kept_lines, rest_lines = _largest(lines, LINES)
        for site, (line_size, line_n, holders) in kept_lines:
            line_id = f"{ROOT}/{cell}/{site}"
            nodes.append(MapNode(line_id, f"{ROOT}/{cell}", _line_label(site, cell), line_size, line_n))
            kept_holders, rest_holders = _largest(holders, HOLDERS)
            for holder, (h_size, h_n, names) in kept_holders:
                nodes.append(MapNode(f"{line_id}/{holder}", line_id, holder, h_size, h_n, tuple(names)))
            if rest_holders:
                nodes.append(_more(line_id, rest_holders, "names"))
        if rest_lines:
            nodes.append(_more(f"{ROOT}/{cell}", rest_lines, "lines"))
    if rest:
        nodes.append(_more(ROOT, rest, "cells"))
    return nodes


def _hover(node: MapNode) -> str:
    arrays = f"{node.arrays:,} array" + ("" if node.arrays == 1 else "s")
    held = ""
    if node.names:
        more = ", ..." if node.arrays > len(node.names) else ""
        held = "<br>held as " + html.escape(", ".join(node.names)) + more
    return f"{format_bytes(node.nbytes)} ({node.nbytes:,} bytes) in {arrays}{held}"


def _color(node: MapNode, top: dict[str, int]) -> str:
    if node.id.endswith("/(more)"):
        return _MORE
    if node.parent == "":
        return "#ffffff"
    cell = node.id.split("/", 2)[1]
    return _COLORS[top.get(cell, 0) % len(_COLORS)]


def arrays_map(nodes: list[MapNode], title: str, kind: str = "icicle") -> dict:
    """The figure as plotly's JSON (``data`` and ``layout``) from ``map_nodes``; ``kind``:
    ``icicle`` or ``treemap``. Each box's size is its bytes; a cell's boxes share its colour."""
    top = {n.id.split("/", 2)[1]: i for i, n in enumerate(n for n in nodes if n.parent == ROOT)}
    trace = dict(
        type=kind,
        ids=[n.id for n in nodes],
        parents=[n.parent for n in nodes],
        labels=[html.escape(n.label) for n in nodes],
        values=[n.nbytes for n in nodes],
        branchvalues="total",
        customdata=[[format_bytes(n.nbytes), _hover(n)] for n in nodes],
        hovertemplate="<b>%{label}</b><br>%{customdata[1]}<br>%{percentRoot:.1%} of the live device memory"
        "<extra></extra>",
        texttemplate="<b>%{label}</b><br>%{customdata[0]}",
        marker=dict(colors=[_color(n, top) for n in nodes], line=dict(width=1, color="#ffffff")),
        sort=False,
        maxdepth=4,
    )
    if kind == "icicle":
        trace["tiling"] = dict(orientation="v")
    return {
        "data": [trace],
        "layout": dict(
            title=dict(text=html.escape(title), font=dict(size=14)),
            height=460,
            margin=dict(l=10, r=10, t=50, b=10),
        ),
    }
