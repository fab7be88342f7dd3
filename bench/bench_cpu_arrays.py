"""What one sampler tick's read of JAX's live arrays costs with 50,000 live arrays, JAX on CPU.

A live monitor's sampler reads the bytes of JAX's live arrays at each tick where JAX runs on the
CPU (``sources/jax_arrays.cpu_arrays``). Measured: that read alone, and a whole tick with it
(``Sampler.sample_once(cpu_arrays=True)``: NVML, JAX's devices, the arrays), each the median of
several, the read's reuse window reset before each tick so every tick reads.
"""

from __future__ import annotations

import os
import statistics
import time

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARRAYS = 50_000
REPEATS = 15


def _median_ms(fn, repeats: int = REPEATS) -> tuple[float, float]:
    """(wall, this thread's CPU) milliseconds per call, medians of ``repeats`` after one warm-up."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def run() -> list[dict]:
    import jax.numpy as jnp

    from jupyter_gpumem.sampling.sampler import get_sampler
    from jupyter_gpumem.sources.jax_arrays import cpu_arrays

    held = list(jnp.arange(float(ARRAYS)).reshape(ARRAYS, 1))  # noqa: F841 - the live arrays
    reading = cpu_arrays()
    assert reading is not None and reading.arrays >= ARRAYS, reading
    sampler = get_sampler()

    def tick() -> None:
        sampler._arrays_due = 0.0  # read every time, as the first tick after the reuse window does
        sampler.sample_once(cpu_arrays=True)

    read_wall, read_cpu = _median_ms(cpu_arrays)
    tick_wall, tick_cpu = _median_ms(tick)
    note = f"{ARRAYS:,} live arrays of one CPU device held in one list; median of {REPEATS}"
    return [
        {"name": "live-array read (cpu_arrays)", "value": round(read_wall, 2), "unit": "ms", "note": note},
        {"name": "live-array read, thread CPU", "value": round(read_cpu, 2), "unit": "ms", "note": note},
        {"name": "sampler tick with the read", "value": round(tick_wall, 2), "unit": "ms", "note": note},
        {
            "name": "sampler tick, thread CPU",
            "value": round(tick_cpu, 2),
            "unit": "ms",
            "note": note + "; a read is repeated only after 20x its time (at most 5% of a core)",
        },
    ]


if __name__ == "__main__":
    print_rows(run())
