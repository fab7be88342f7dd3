"""One allocation story, recorded under each allocator setting (the environment chooses it).

Hold 1, 2 and 4 GiB; free the 2 GiB; then sixteen 256 MiB arrays, every other one freed, and a
1 GiB array that cannot fit in the holes; then free everything. Markers name each step.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import GiB, MiB, first_op, hold, mark, pause  # noqa: E402

first_op()
mark("backend started")
pause()
held = {}
for gib in (1, 2, 4):
    held[gib] = hold(gib * GiB)
    mark(f"holding {gib} GiB more")
    pause()
del held[2]
mark("freed the 2 GiB array")
pause()
small = [hold(256 * MiB) for _ in range(16)]
mark("sixteen 256 MiB arrays")
pause()
del small[1::2]
mark("freed every other 256 MiB array")
pause()
held["big"] = hold(GiB)
mark("1 GiB array after the holes")
pause()
held.clear()
small.clear()
mark("freed everything")
pause(0.8)
