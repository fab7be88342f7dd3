"""Explain and fix: why a cell ran out of memory, what holds memory, and what can be released.

One module per job; importing this package imports none of them, so the cell hooks stay cheap.

- ``hooks``: the cell hooks (the OOM report, the per-cell line)
  and their switches, ``%gpumem doctor|cells on|off``
- ``array_cells``: the live arrays' device bytes, a tracked cell's new arrays, and live arrays per traceback
- ``oom_text``: is this exception an out-of-memory error, and how much did it ask for
- ``oom_rules``: ranked fixes from the numbers read at failure, one function per rule;
  ``oom_readings``: those numbers, and a fix, as data
- ``report``: the OOM report itself, text and HTML; ``oom_peak``: its section of what was live at
  the failing program's peak, by source line, and the failing program's picture
- ``names``, ``arrays``: ``%gpumem arrays``: live arrays, their names and cells; ``arrays_map``:
  ``--map``, their memory by cell, line and name as a picture;
  ``mesh_arrays``: their layouts on a mesh and ``--by device``; ``oom_mesh``: an OOM on one
  device of many
- ``snapshot``: ``%gpumem snapshot PATH``, JAX's device memory profile for pprof
- ``program_budget``: the failing jitted call in an OOM's traceback, and its compiled budget
- ``usage``, ``tracking``: memory now, and the change and peak of a block or a cell
- ``freeing``: ``%gpumem free``; ``last_error``: what keeps a failed cell's arrays alive, and
  letting go of it; ``estimating``: ``%gpumem estimate``; ``defragmenting``: ``defragment``
- ``peak_buffers``: what was live at a program's peak, by source line, from XLA's texts;
  ``peak_fixes``: the fixes it suggests; ``peak_trials``: donation and sharding, checked by compiling; ``hlo_sources``: each HLO instruction's source;
  ``peak_report``: ``%gpumem peak CALL``; ``peak_timeline`` and ``peak_figure``: its picture, bytes live over the program's order by line
- ``text``: how the reports read, as text and as HTML
- ``after_cell``: the work after a cell; ``session``: the switches ``%gpumem doctor|cells on|off``
  set, and the shell the hooks serve
"""

from typing import Any

# The doctor's public names, each imported from its module on first use.
_PUBLIC = {
    "install": "hooks",
    "uninstall": "hooks",
    "ArrayRecord": "arrays",
    "ArraysReport": "arrays",
    "census": "arrays",
    "live_arrays": "arrays",
    "magic_arrays": "arrays",
    "names_by_array": "names",
    "memory_now": "usage",
    "FreeReport": "freeing",
    "free": "freeing",
    "magic_free": "freeing",
    "Track": "tracking",
    "track": "tracking",
    "OomReport": "report",
    "oom_report": "report",
    "magic_doctor": "hooks",
    "magic_cells": "hooks",
    "EstimateReport": "estimating",
    "estimate": "estimating",
    "magic_estimate": "estimating",
    "DefragSummary": "defragmenting",
    "defragment": "defragmenting",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'jupyter_gpumem.doctor' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"jupyter_gpumem.doctor.{module}"), name)
