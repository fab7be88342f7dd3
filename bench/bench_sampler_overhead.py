"""Slowdown of a CPU JAX matmul loop with the sampler at 10 Hz (target < 1%).

Blocks with and without the sampler alternate (ABBA) so machine drift hits both alike; the
ratio is median(on) / median(off) over the same run.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

PAIRS = 16
STEPS = 300  # matmuls per block


def run() -> list[dict]:
    import jax
    import jax.numpy as jnp

    from jupyter_gpumem.allocator_shim import read_jax_devices
    from jupyter_gpumem.nvml import NvmlSource
    from jupyter_gpumem.sampler import Sampler
    from jupyter_gpumem.testing.fake_nvml import fake_nvml

    step = jax.jit(lambda a: jnp.tanh(a @ a) * 0.5)
    x = jnp.ones((256, 256), jnp.float32) * 0.01
    step(x).block_until_ready()

    def block() -> float:
        y = x
        start = time.perf_counter()
        for _ in range(STEPS):
            y = step(y)
            y.block_until_ready()
        return time.perf_counter() - start

    with fake_nvml("three_gpus"):
        sampler = Sampler(NvmlSource().read, read_jax_devices, interval=0.1)
        cpu = {"s": 0.0}
        plain = sampler.sample_once

        def timed_sample():  # the sampler thread's own CPU time, immune to machine noise
            start = time.thread_time()
            try:
                return plain()
            finally:
                cpu["s"] += time.thread_time() - start

        sampler.sample_once = timed_sample
        on, off, ticks = [], [], []
        block()
        for i in range(PAIRS):
            for sampled in ((True, False) if i % 2 else (False, True)):
                if sampled:
                    before = len(sampler.timeline)
                    sub = sampler.subscribe(lambda s: None, interval=0.1)
                    on.append(block())
                    sub.close()
                    ticks.append((len(sampler.timeline) - before) / on[-1])
                else:
                    off.append(block())
    ratio = statistics.median(on) / statistics.median(off)
    share = cpu["s"] / sum(on)
    return [
        {"name": "matmul block, sampler off", "value": statistics.median(off) * 1e3, "unit": "ms", "note": f"{STEPS} jitted 256x256 matmuls, median of {PAIRS}"},
        {"name": "matmul block, sampler at 10 Hz", "value": statistics.median(on) * 1e3, "unit": "ms", "note": f"median of {PAIRS}; {statistics.median(ticks):.1f} samples/s seen"},
        {"name": "sampler thread CPU while on", "value": share * 100, "unit": "% of a core", "note": "thread CPU seconds in sampling / wall seconds sampled"},
        {"name": "slowdown with sampler", "value": (ratio - 1) * 100, "unit": "%", "note": "median(on)/median(off) - 1, interleaved; target < 1%"},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
