"""One of two processes sharing GPU 0 (run twice at once, as ``two_processes.py a`` and ``b``),
as two kernels would: ``a`` with JAX's defaults (BFC takes 75% of the card at the first
operation), ``b`` with preallocation off.

``a`` holds two 2 GiB arrays inside its pool for 6 s; ``b`` waits 2 s for ``a``'s pool to be
taken, then holds two arrays of a tenth of the card each for 3 s, so that between them the two
hold over 90% of the card (the server's over-commit warning, server/device_report.py). Each
trace's NVML readings show both processes.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import GiB, first_op, hold, mark, nvml_memory, pause  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "a"
first_op()
mark(f"process {which} started")
total = nvml_memory()["total"]
pause(1.0 if which == "a" else 2.0)
size = 2 * GiB if which == "a" else int(0.1 * total * GiB / (1 << 30))  # GPU_PROOF_UNIT shrinks it too
arrays = [hold(size) for _ in range(2)]
mark(f"process {which} holds {sum(a.nbytes for a in arrays) / GiB:.1f} GiB")
pause(6.0 if which == "a" else 3.0)
arrays.clear()
mark(f"process {which} freed its arrays")
pause(1.0)
