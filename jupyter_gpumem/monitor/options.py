"""What ``%gpumem monitor`` and ``Monitor(...)`` take: the interval, the window, the device and
a recording to replay (``read_recording``), each checked with a message that names what is valid.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_gpumem.core.magic_args import Grammar, MagicUsageError, Option, as_number, check_interval
from jupyter_gpumem.core.readings import Timeline
from jupyter_gpumem.monitor.series import device_keys

INTERVALS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


WINDOWS_MIN = (1.0, 5.0, 10.0, 30.0, 60.0)

DEFAULT_INTERVAL_S = 1.0
DEFAULT_WINDOW_MIN = 10.0  # for live readings; a recording is shown whole
MAX_WINDOW_MIN = 1440.0


def check_window(value: Any) -> float:
    """Minutes of history, from a number or its text."""
    number = as_number(value)
    if number is None or not 0 < number <= MAX_WINDOW_MIN:
        raise MagicUsageError(
            f"window must be a number of minutes above 0 and at most {MAX_WINDOW_MIN:g} (e.g. 10), got {value!r}"
        )
    return number


def check_device(value: Any) -> int | None:
    """A GPU index, or None for every GPU ("all")."""
    if value is None or value == "all":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise MagicUsageError(f"device must be a GPU index (0, 1, ...) or 'all', got {value!r}")


MONITOR_ARGS = Grammar(
    "%gpumem monitor",
    options=(
        Option("--interval", "S", read=check_interval, default=DEFAULT_INTERVAL_S, help="seconds between updates"),
        Option("--window", "MINUTES", read=check_window, help="minutes of history shown"),
        Option("--device", "N|all", read=check_device, default=None, help="one GPU by index, or all"),
        Option(
            "--replay",
            "PATH|NAME",
            help="a trace file (.jsonl), or the name of a demo trace the package ships, "
            "to draw instead of live readings",
        ),
    ),
)


def check_device_is_read(device: int, timeline: Timeline, sampler: Any) -> None:
    """Refuses a GPU index the readings do not have (a monitor of it would never draw), naming
    those they have. Nothing is refused where no GPU can be read at all: the view says why."""
    if sampler is None:
        samples = timeline.samples()
    else:
        latest = timeline.latest() or (sampler.sample_once() if hasattr(sampler, "sample_once") else None)
        samples = [latest] if latest is not None else []
    keys = sorted({k for s in samples for k in device_keys(s)})
    if keys and device not in keys:
        valid = ", ".join(map(str, keys)) if len(keys) <= 20 else f"{len(keys):,} GPUs from {keys[0]} to {keys[-1]}"
        raise MagicUsageError(f"--device {device}: there is no GPU {device} in the readings; valid: {valid} or all")


def read_recording(path: str) -> tuple[Timeline, Any]:
    """The Timeline of the trace file at ``path`` (or of the shipped demo trace of that bare
    name), and the error reading stopped at (or None)."""
    from jupyter_gpumem import demo_traces
    from jupyter_gpumem.core.tracefile import read_trace
    from jupyter_gpumem.sources.replay import timeline_from_trace

    path = demo_traces.resolve(path)
    if not os.path.isfile(path):
        raise MagicUsageError(
            f"--replay: no trace file at {path!r}; give the path of a .jsonl trace, or the name of "
            f"one the package ships: {', '.join(demo_traces.names())}"
        )
    try:
        trace = read_trace(path)
    except OSError as err:  # over the size limit (tracefile.MAX_TRACE_BYTES), unreadable
        raise MagicUsageError(f"--replay: cannot read {path!r}: {err.strerror or err}") from None
    if not trace.samples:
        why = trace.error or "it has no samples"
        raise MagicUsageError(f"--replay: cannot draw {path!r}: {why}")
    return timeline_from_trace(trace), trace.error


def span_minutes(timeline: Timeline) -> float:
    """Minutes from a timeline's first sample to its last, and a second more."""
    samples = timeline.samples()
    if not samples:
        return DEFAULT_WINDOW_MIN
    return min(MAX_WINDOW_MIN, (samples[-1].t - samples[0].t + 1.0) / 60.0)
