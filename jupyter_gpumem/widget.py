"""The public names of ``jupyter_gpumem.monitor.widget``, as ``jupyter_gpumem.widget`` where users and docs name them.

The memory monitor: ipywidgets around one plot per device, drawn from a Timeline.
"""

from jupyter_gpumem.monitor.widget import (
    DEFAULT_INTERVAL_S,
    DEFAULT_WINDOW_MIN,
    INTERVALS,
    MAX_WINDOW_MIN,
    MONITOR_ARGS,
    WINDOWS_MIN,
    Monitor,
    magic_monitor,
)

__all__ = [
    "INTERVALS",
    "WINDOWS_MIN",
    "DEFAULT_INTERVAL_S",
    "DEFAULT_WINDOW_MIN",
    "MAX_WINDOW_MIN",
    "MONITOR_ARGS",
    "magic_monitor",
    "Monitor",
]
