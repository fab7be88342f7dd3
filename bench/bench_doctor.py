"""CPU cost of the doctor's after-cell bookkeeping and of `%gpumem arrays`, JAX on CPU."""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARRAYS = 5000
REPEATS = 5


def _median_cpu(fn) -> float:
    fn()
    times = []
    for _ in range(REPEATS):
        start = time.thread_time()
        fn()
        times.append(time.thread_time() - start)
    return statistics.median(times)


def run() -> list[dict]:
    import jax.numpy as jnp

    from jupyter_gpumem import doctor

    arrays = [jnp.ones(4) + i for i in range(ARRAYS)]
    shell = type("Shell", (), {"user_ns": {"arrays": arrays}})()
    count = iter(range(10**6))
    after_cell = _median_cpu(lambda: doctor._attribute_new_buffers(next(count)))
    listing = _median_cpu(lambda: doctor.live_arrays(shell))
    return [
        {"name": "doctor after-cell bookkeeping", "value": round(after_cell * 1e3, 2), "unit": "ms CPU",
         "note": f"{ARRAYS} live arrays, JAX on CPU; runs after every cell once JAX has started"},
        {"name": "live_arrays() with names", "value": round(listing * 1e3, 2), "unit": "ms CPU",
         "note": f"{ARRAYS} live arrays held in one list; what %gpumem arrays costs"},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
