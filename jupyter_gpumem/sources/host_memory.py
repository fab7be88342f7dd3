"""The host's RAM, for JAX on the CPU: its total, and what a new allocation could still get.

Both the OOM report and ``%gpumem estimate`` weigh a CPU program against the same number:
``MemAvailable`` from /proc/meminfo (what the kernel says can be had without swapping), not the
total less the live arrays, which counts the rest of the machine's use as free.
"""

from __future__ import annotations

import os


def total_bytes() -> int | None:
    """The host's physical memory in bytes; None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` in bytes; None where there is no /proc/meminfo (not Linux) or no such line."""
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
