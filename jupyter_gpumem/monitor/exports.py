"""The monitor's exports: its window as CSV, or as a trace file (JSON Lines, the project's
trace format, ``docs/trace-format.md``)."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from datetime import datetime

from jupyter_gpumem.core import synthetic
from jupyter_gpumem.core.files import replaced_on_success
from jupyter_gpumem.core.readings import Event, Sample
from jupyter_gpumem.monitor.series import csv_rows

__all__ = ["export_name", "write_csv", "write_trace"]


def export_name(ext: str) -> str:
    """A file name for an export made now: ``gpumem-YYYYmmdd-HHMMSS.EXT``."""
    return datetime.now().strftime(f"gpumem-%Y%m%d-%H%M%S.{ext}")


def write_csv(path: str | os.PathLike, samples: Sequence[Sample], keys: Sequence[int] | None) -> str:
    """Write ``samples`` as CSV (bytes; see series.csv_rows); returns the path."""
    path = os.fspath(path)
    with replaced_on_success(path, encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(csv_rows(samples, keys))
    return path


def write_trace(
    path: str | os.PathLike, samples: Sequence[Sample], events: Sequence[Event], header: dict | None
) -> str:
    """Write ``samples`` and ``events`` as a trace file, under a recording's own ``header`` where
    they came from one; returns the path."""
    from jupyter_gpumem.core.tracefile import TraceWriter, header_devices
    from jupyter_gpumem.sources import nvml

    path = os.fspath(path)
    # A recording keeps its own header; readings taken here are made up only in the fake world,
    # and there only NVML's.
    fields = {k: v for k, v in (header or {}).items() if k not in ("kind", "format")}
    if "synthetic" not in fields:
        fields.update(synthetic.header_fields(nvml.made_up_fields()))
    if samples:
        fields.setdefault("devices", header_devices(samples[-1].devices))
    items: list = [*samples, *events]
    items.sort(key=lambda x: x.t)
    with replaced_on_success(path, encoding="utf-8") as fh, TraceWriter(path, fields, file=fh) as writer:
        for item in items:
            (writer.write_sample if isinstance(item, Sample) else writer.write_event)(item)
    return path
