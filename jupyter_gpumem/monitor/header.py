"""What the monitor says above its plots, besides the numbers: where a recording came from,
the settings in effect, in the words ``%gpumem status`` uses ("preallocate off · fraction
0.4 · allocator default (bfc)"), and each device's notes, a note shared by several GPUs said once.
"""

from __future__ import annotations

import html
import os
from typing import Any

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
    them ("GPUs 0, 1, 2: JAX has not started yet ..."), in the order the notes first appear."""
    gpus_of: dict[str, list[int]] = {}
    for key in sorted(notes_by_gpu):
        for note in notes_by_gpu[key]:
            gpus_of.setdefault(note, []).append(key)
    lines = []
    for note, keys in gpus_of.items():
        who = f"GPU {keys[0]}" if len(keys) == 1 else "GPUs " + ", ".join(str(k) for k in keys)
        lines.append(f"{who}: {note}")
    return lines
