"""A synthetic trace for demos and browser tests of the server's replay mode.

Two A100 40GB cards. On GPU 0 two placeholder kernels (pids 1 and 2, listed in the header's
``kernel_placeholder_pids``) hold 75% and 20% of the card, which trips the over-commit warning;
a process of no kernel holds 2 GiB on GPU 1. With ``c.GpuMem.replay`` pointing at it, the
server maps the placeholders to its own 1st and 2nd running kernels, so the panel shows a
replayed process joined to an open notebook. Everything in it is marked synthetic.

    python -m jupyter_gpumem.testing.demo_trace OUT.jsonl
"""

from __future__ import annotations

import sys

from jupyter_gpumem.core.readings import NOT_STARTED, DeviceReading, NotAvailable, ProcessReading, Sample
from jupyter_gpumem.core.tracefile import TraceWriter

GiB = 1024**3
TOTAL = 40 * GiB
PLACEHOLDER_PIDS = [1, 2]
OTHER_PID = 4_300_001  # above Linux's PID_MAX_LIMIT: never a live process


def demo_samples(count: int = 20, period: float = 0.5, t0: float = 1_700_000_000.0) -> list[Sample]:
    samples = []
    for i in range(count):
        second = int((0.15 + 0.05 * (i % 2)) * TOTAL)  # the second kernel's pool breathes a little
        gpu0_procs = (ProcessReading(1, int(0.75 * TOTAL)), ProcessReading(2, second))
        used0 = sum(p.used_bytes for p in gpu0_procs) + GiB // 2
        gpu1_used = 2 * GiB + GiB // 2
        devices = (
            DeviceReading(
                0,
                "NVIDIA A100-SXM4-40GB",
                "GPU-5a1e0000-demo-4000-8000-000000000000",
                TOTAL,
                used0,
                TOTAL - used0,
                reserved_bytes=GiB // 2,
                utilization_percent=60 + i % 5,
                display_active=False,
                mig_mode=False,
                processes=gpu0_procs,
            ),
            DeviceReading(
                1,
                "NVIDIA A100-SXM4-40GB",
                "GPU-5a1e0001-demo-4000-8000-000000000001",
                TOTAL,
                gpu1_used,
                TOTAL - gpu1_used,
                reserved_bytes=GiB // 2,
                utilization_percent=10,
                display_active=False,
                mig_mode=False,
                processes=(ProcessReading(OTHER_PID, 2 * GiB, name="python train.py", user="demo"),),
            ),
        )
        samples.append(
            Sample(
                t=t0 + i * period, pid=0, devices=devices, jax=NotAvailable(NOT_STARTED, "not recorded in this demo")
            )
        )
    return samples


def write_demo_trace(path: str) -> str:
    """Write the demo trace to ``path``; returns the path."""
    header = {
        "synthetic": True,
        "kernel_placeholder_pids": PLACEHOLDER_PIDS,
        "devices": [
            {"index": i, "name": "NVIDIA A100-SXM4-40GB", "uuid": uuid, "total_bytes": TOTAL}
            for i, uuid in enumerate(
                ["GPU-5a1e0000-demo-4000-8000-000000000000", "GPU-5a1e0001-demo-4000-8000-000000000001"]
            )
        ],
    }
    with TraceWriter(path, header) as writer:
        for sample in demo_samples():
            writer.write_sample(sample)
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m jupyter_gpumem.testing.demo_trace OUT.jsonl", file=sys.stderr)
        return 2
    print(write_demo_trace(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
