"""The server's over-commit warning on a recorded trace of two processes sharing a GPU.

    python overcommit_warning.py TRACE.jsonl

Takes the trace's reading in which its first device's processes hold the most, lets those
processes stand for two kernels of a server (as a replay's placeholder pids do), and asks
``build_devices_report`` (server/device_report.py) for its warnings. Prints one
``GPU_PROOF_RESULT`` line: the warnings, and each process's share of the card; or, where the
server's modules cannot be imported, why.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import emit  # noqa: E402

from jupyter_gpumem.core.readings import DeviceReading  # noqa: E402
from jupyter_gpumem.core.tracefile import read_trace  # noqa: E402


def held(sample) -> int:
    """Bytes the processes of the sample's first device hold between them (0: none readable)."""
    devices = sample.devices if isinstance(sample.devices, tuple) else ()
    device = devices[0] if devices and isinstance(devices[0], DeviceReading) else None
    if device is None or not isinstance(device.processes, tuple) or len(device.processes) < 2:
        return 0
    return sum(p.used_bytes for p in device.processes if isinstance(p.used_bytes, int))


try:
    from jupyter_gpumem.server.device_report import build_devices_report
    from jupyter_gpumem.server.kernels import KernelInfo
    from jupyter_gpumem.server.readings import Reading
except ImportError as exc:
    emit(unavailable=f"{type(exc).__name__}: {exc}", platform="none")
    sys.exit(0)

trace = read_trace(sys.argv[1], strict=True)
busiest = max(trace.samples, key=held)
device = busiest.devices[0]
pids = tuple(p.pid for p in sorted(device.processes, key=lambda p: -(p.used_bytes or 0)))
kernels = [KernelInfo(f"kernel-{i}", "python3", i, f"two_processes_{i}.ipynb", "idle") for i in range(1, len(pids) + 1)]
report = build_devices_report(
    Reading(t=busiest.t, devices=busiest.devices, source="replay", placeholder_pids=pids), kernels, poll_interval=1.0
)
emit(
    platform="none",
    t=busiest.t,
    total=device.total_bytes,
    processes=[
        {"pid": p.pid, "used": p.used_bytes, "share": (p.used_bytes or 0) / device.total_bytes}
        for p in device.processes
    ],
    warnings=report["warnings"],
)
