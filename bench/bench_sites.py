"""Allocation sites in ``%gpumem arrays``: the cost of naming each live array's line, with
5,000 live arrays in a real IPython shell, JAX on CPU.

Two worlds: 5,000 arrays made by one line (one distinct traceback), and 5,000 made through
500 different functions (500 distinct tracebacks, each reduced once). Each listing starts with
the kept reductions dropped, so every distinct traceback is read again.
"""

from __future__ import annotations

import os
import statistics
import time

from _common import print_rows
from bench_doctor import _cell_seconds as _seconds

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARRAYS = 5_000
REPEATS = 7


def _listing(shell) -> tuple[float, float]:
    """Medians of ``%gpumem arrays --by line`` and of labelling the arrays alone, in seconds."""
    from jupyter_gpumem.core import sites
    from jupyter_gpumem.sources import jax_arrays

    whole, labels = [], []
    arrays = jax_arrays.live_arrays_newest_first()
    for _ in range(REPEATS):
        sites.forget()
        t0 = time.perf_counter()
        label = sites.site_labeller(sites.cell_numbers(shell))
        for a in arrays:
            label(a.traceback)
        labels.append(time.perf_counter() - t0)
        sites.forget()
        whole.append(_seconds(shell, "%gpumem arrays --by line"))
    return statistics.median(whole), statistics.median(labels)


def run() -> list[dict]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpumem")
    _seconds(shell, "import jax, jax.numpy as jnp")
    _seconds(shell, f"held = [jnp.full((4,), i) for i in range({ARRAYS})]")
    one_whole, one_labels = _listing(shell)
    _seconds(shell, "del held")
    makers = "\n".join(f"def make_{i}(n):\n    return [jnp.full((4,), j) for j in range(n)]" for i in range(500))
    _seconds(shell, makers)
    _seconds(shell, f"held = [a for i in range(500) for a in globals()[f'make_{{i}}']({ARRAYS // 500})]")
    many_whole, many_labels = _listing(shell)
    ms = lambda s: round(s * 1e3, 2)  # noqa: E731
    note = f"{ARRAYS} live arrays, JAX on CPU; median of {REPEATS}"
    return [
        {
            "name": "%gpumem arrays --by line, one site",
            "value": ms(one_whole),
            "unit": "ms",
            "note": note + "; target < 300 ms",
        },
        {"name": "sites alone, one site", "value": ms(one_labels), "unit": "ms", "note": note},
        {
            "name": "%gpumem arrays --by line, 500 sites",
            "value": ms(many_whole),
            "unit": "ms",
            "note": note + "; target < 300 ms",
        },
        {"name": "sites alone, 500 sites", "value": ms(many_labels), "unit": "ms", "note": note},
    ]


if __name__ == "__main__":
    print_rows(run())
