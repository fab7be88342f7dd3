"""One of two processes sharing GPU 0 (run twice at once, as ``two_processes.py a`` and ``b``).

Each, with preallocation off, holds a different amount for a few seconds so that NVML in each
trace shows both processes, then frees it.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import GiB, first_op, hold, mark, pause  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "a"
first_op()
mark(f"process {which} started")
pause(1.0)
arrays = [hold((2 if which == "a" else 3) * GiB) for _ in range(2)]
mark(f"process {which} holds {sum(a.nbytes for a in arrays) >> 30} GiB")
pause(3.0)
arrays.clear()
mark(f"process {which} freed its arrays")
pause(1.0)
