"""CPU cost of the doctor's after-cell bookkeeping and of `%gpumem arrays`, JAX on CPU."""

from __future__ import annotations

import os

from _common import median_thread_cpu, print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARRAYS = 5000
REPEATS = 5


def run() -> list[dict]:
    import jax.numpy as jnp

    from jupyter_gpumem import doctor

    arrays = [jnp.ones(4) + i for i in range(ARRAYS)]
    shell = type("Shell", (), {"user_ns": {"arrays": arrays}})()
    count = iter(range(10**6))
    after_cell = median_thread_cpu(lambda: doctor._attribute_new_buffers(next(count)), REPEATS)
    listing = median_thread_cpu(lambda: doctor.live_arrays(shell), REPEATS)
    return [
        {"name": "doctor after-cell bookkeeping", "value": round(after_cell * 1e3, 2), "unit": "ms CPU",
         "note": f"{ARRAYS} live arrays, JAX on CPU; runs after every cell once JAX has started"},
        {"name": "live_arrays() with names", "value": round(listing * 1e3, 2), "unit": "ms CPU",
         "note": f"{ARRAYS} live arrays held in one list; what %gpumem arrays costs"},
    ]


if __name__ == "__main__":
    print_rows(run())
