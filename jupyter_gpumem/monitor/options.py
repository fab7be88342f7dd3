"""What ``%gpumem monitor`` and ``Monitor(...)`` take: the interval, the window, the device and
a recording to replay, each checked with a message that names what is valid.
"""

from __future__ import annotations

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
