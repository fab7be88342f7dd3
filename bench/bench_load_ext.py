"""What ``%load_ext jupyter_gpumem`` adds to a fresh IPython start (target < 50 ms).

Fresh interpreters, with and without the extension, interleaved so drift hits both alike.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from _common import print_rows

RUNS = 15  # per side
_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t1 = time.perf_counter()
if {load}:
    shell.run_line_magic("load_ext", "jupyter_gpumem")
t2 = time.perf_counter()
heavy = [m for m in ("jax", "pynvml", "plotly", "ipywidgets", "numpy") if m in sys.modules]
print(json.dumps({{"load_s": t2 - t1, "heavy": heavy}}))
"""


def _child(load: bool) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(load=load)], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    _child(True)  # warm the file cache
    with_ext, without, in_process, heavy = [], [], [], set()
    for i in range(RUNS):
        for load in (True, False) if i % 2 else (False, True):
            wall, info = _child(load)
            (with_ext if load else without).append(wall)
            if load:
                in_process.append(info["load_s"])
                heavy.update(info["heavy"])
    added = statistics.median(with_ext) - statistics.median(without)
    return [
        {
            "name": "fresh IPython start, no extension",
            "value": statistics.median(without) * 1e3,
            "unit": "ms",
            "note": f"median of {RUNS} processes",
        },
        {
            "name": "fresh IPython start + %load_ext",
            "value": statistics.median(with_ext) * 1e3,
            "unit": "ms",
            "note": f"median of {RUNS}, interleaved",
        },
        {
            "name": "added by %load_ext (wall)",
            "value": added * 1e3,
            "unit": "ms",
            "note": "difference of medians; target < 50 ms",
        },
        {
            "name": "%load_ext call itself",
            "value": statistics.median(in_process) * 1e3,
            "unit": "ms",
            "note": f"in-process; heavy modules imported: {sorted(heavy) or 'none'}",
        },
    ]


if __name__ == "__main__":
    print_rows(run())
