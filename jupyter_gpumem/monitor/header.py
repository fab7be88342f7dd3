"""What the monitor says above its plots, besides the numbers: where a recording came from,
the settings in effect, in the words ``%gpumem status`` uses ("preallocate off · fraction
0.4 · allocator default (bfc)"), and each device's notes, a note shared by several GPUs said once.
"""

from __future__ import annotations

import html
import os
from typing import Any

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.monitor.series import BANDS, CPU_KEY, in_view_order, view_name

_SETTING_WORDS = {"async_prealloc": "async-prealloc"}


def settings_words(shown: list[tuple[str, str]]) -> str:
    """Settings as ``%gpumem status`` shows them, on one line: "preallocate off · fraction 0.4"."""
    return " · ".join(f"{_SETTING_WORDS.get(name, name)} {value}" for name, value in shown)


def _trace_settings_words(env: dict) -> str:
    """The settings a trace was recorded under, from the variables its header kept, read as
    JAX reads them (no create options: a trace does not record them)."""
    from jupyter_gpumem.settings.client_create_options import parse
    from jupyter_gpumem.settings.effective import effective, show

    values = effective({str(k): str(v) for k, v in env.items()}, parse(None))
    return settings_words([(name, show(name, value)) for name, value in values.items()])


def recording_block(header: dict, path: str | None, error: Any) -> str:
    """Where a recorded timeline came from: the trace's name, host, jax and settings."""
    bits = [f"trace {html.escape(os.path.basename(path))}"] if path else []
    if header.get("host"):
        bits.append(f"host {html.escape(str(header['host']))}")
    if header.get("jax_version"):
        bits.append(f"jax {html.escape(str(header['jax_version']))}")
    settings = header.get("settings")
    if isinstance(settings, dict) and isinstance(settings.get("env"), dict):
        bits.append(html.escape(_trace_settings_words(settings["env"])))
    block = "<div style='opacity:.8'>" + " · ".join(bits) + "</div>" if bits else ""
    if error is not None:
        block += f"<div style='color:#b35806'>⚠ trace read up to an error: {html.escape(str(error))}</div>"
    return block


def status_block(report: Any) -> str:
    """A live monitor's settings line (a ``StatusReport``'s settings in one line, its table and
    backend unfolding below) and its warnings."""
    words = settings_words([(s.name, s.shown) for s in report.settings])
    block = f"<details><summary>{html.escape(words)}</summary>" + report._repr_html_() + "</details>"
    block += "".join(f"<div style='color:#b35806'>⚠ {html.escape(str(w))}</div>" for w in report.warnings)
    return block


def grouped_notes(notes_by_gpu: dict[int, list[str]]) -> list[str]:
    """Each device's notes as header lines, a note that several GPUs share said once for all of
    them ("GPUs 0, 1, 2: JAX has not started yet ..."), in the order the notes first appear; the
    CPU view's (``CPU_KEY``) after the GPUs'."""
    gpus_of: dict[str, list[int]] = {}
    for key in in_view_order(notes_by_gpu):
        for note in notes_by_gpu[key]:
            gpus_of.setdefault(note, []).append(key)
    lines = []
    for note, keys in gpus_of.items():
        if len(keys) == 1 or CPU_KEY in keys:
            who = ", ".join(view_name(k) for k in keys)
        else:
            who = "GPUs " + ", ".join(str(k) for k in keys)
        lines.append(f"{who}: {note}")
    return lines


def _amount(n: float | None) -> str:
    return "n/a" if n is None else format_bytes(int(n))


# What a GPU view's numbers line shows, in order: (label, series).
_GPU_NUMBERS = (
    ("JAX arrays", "jax_in_use"),
    ("pool unused", "pool_unused"),
    ("outside JAX", "outside_jax"),
    ("other processes", "other_processes"),
    ("host pids", "host_pids"),
    ("unattributed", "unattributed"),
    ("free", "free"),
    ("of", "total"),
    ("limit", "bytes_limit"),
    ("peak", "peak_in_use"),
    ("fragmentation", "fragmentation"),
    ("largest free block", "largest_free_block"),
    ("headroom", "headroom"),
    ("CUDA pool reserved", "pool_reserved"),
    ("used", "pool_used"),
)


def label_tags(labels: list[str]) -> str:
    """Labels ("replay", "synthetic") as the header shows them after a title: capitals, in orange."""
    if not labels:
        return ""
    tags = " ".join(f"<span class='jupyter-gpumem-label'>{html.escape(x.upper())}</span>" for x in labels)
    return f" <span style='color:#b35806;font-weight:bold'>{tags}</span>"


# A small used-of-total bar after a GPU's used figure, styled by figure.TAB_CSS.
USED_BAR_CLASS = "jupyter-gpumem-used"
# From this many GPU views the header marks the fullest (with fewer, each line is read anyway).
MARK_FULLEST_FROM = 4


def used_of_total(latest: dict) -> tuple[float, float] | None:
    """A GPU view's (used, total) bytes: the bands below "free" add up to NVML's used; None
    while the total is not known."""
    total = latest.get("total")
    if not total:
        return None
    return sum(latest.get(b) or 0 for b in BANDS if b not in ("free", "cpu_arrays")), total


def fullest_gpu(latests: dict[int, dict]) -> int | None:
    """The GPU view whose used share of its total is largest (the lowest key among equals);
    None with fewer than ``MARK_FULLEST_FROM`` GPU views or nothing used."""
    shares = {}
    for key in in_view_order(latests):
        pair = used_of_total(latests[key]) if key != CPU_KEY else None
        if pair is not None and pair[0] > 0:
            shares[key] = pair[0] / pair[1]
    if len([k for k in latests if k != CPU_KEY]) < MARK_FULLEST_FROM or not shares:
        return None
    return max(shares, key=lambda k: (shares[k], -k))


def _used_words(latest: dict, fullest: bool) -> str | None:
    """ "used 74.0 GiB / 79.6 GiB (93%)", a small bar, and "fullest" where it is."""
    pair = used_of_total(latest)
    if pair is None:
        return None
    used, total = pair
    share = min(max(used / total, 0.0), 1.0)
    full = " data-full='true'" if share >= 0.9 else ""
    bar = f"<span class='{USED_BAR_CLASS}'{full}><span style='width:{share * 100:.0f}%'></span></span>"
    mark = " <span style='color:#b35806;font-weight:bold'>fullest</span>" if fullest else ""
    return f"used <b>{_amount(used)} / {_amount(total)} ({share * 100:.0f}%)</b> {bar}{mark}"


def numbers_line(
    key: int,
    title: str,
    latest: dict,
    arrays: int | None = None,
    tags: str = "",
    *,
    tab: int | None = None,
    fullest: bool = False,
) -> str:
    """A view's latest numbers on one line, after its title: a GPU's used of total (with a small
    bar, and "fullest" where ``fullest``), then its bands and lines (a number that is not known is
    left out; "unattributed" only when there is some); for the CPU view (``CPU_KEY``), the host
    memory JAX's live arrays hold and, where known, how many. ``tags`` (``label_tags``) follow the
    title: the view's own labels. ``tab``: the view's tab, which a click on the title shows
    (``monitor_plot.js``)."""
    opening = (
        "<span>" if tab is None else f"<span data-gpumem-tab='{tab}' style='cursor:pointer' title='Show its chart'>"
    )
    if key == CPU_KEY:
        held = latest.get("cpu_arrays")
        count = (
            f" in {arrays:,} live array{'' if arrays == 1 else 's'}" if arrays is not None and held is not None else ""
        )
        return (
            f"{opening}{html.escape(title)}{tags}:</span> <b>{_amount(held)}</b>{count}, in host memory (not a GPU's)"
        )
    used = _used_words(latest, fullest)
    parts = [used] if used else []
    for label, name in _GPU_NUMBERS:
        value = latest.get(name)
        if value is None or (name == "unattributed" and not value):
            continue
        shown = f"{value * 100:.0f}%" if name == "fragmentation" else _amount(value)
        parts.append(f"{label} <b>{shown}</b>")
    return f"{opening}{html.escape(title)}{tags}:</span> " + " · ".join(parts)


def view_lines(views: list[tuple[int, str, list[str], dict]], shared: list[str], arrays: int | None) -> list[str]:
    """Each view's numbers line, for ``(key, title, labels, latest)`` in the order the tabs show
    them: its own labels (those not in ``shared``) after its title, the fullest GPU marked, and,
    with more than one view, its title a link to its tab."""
    fullest = fullest_gpu({key: latest for key, _, _, latest in views})
    many = len(views) > 1
    return [
        numbers_line(
            key,
            title,
            latest,
            arrays,
            label_tags([x for x in labels if x not in shared]),
            tab=tab if many else None,
            fullest=key == fullest,
        )
        for tab, (key, title, labels, latest) in enumerate(views)
    ]
