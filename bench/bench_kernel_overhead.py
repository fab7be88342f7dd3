"""The sampler's overhead on a CPU JAX loop at 1, 10 and 50 Hz, as ratios against no sampler.

Blocks of jitted matmuls run with the sampler off and at each rate, in a rotating order in the
same run, so machine drift hits every arm alike. The sampler reads the fake NVML world
``three_gpus`` (synthetic) and CPU JAX. Reported per rate: median(on) / median(off) - 1, and the
sampler thread's own CPU time per wall second (immune to other load on the machine).

    python bench/bench_kernel_overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

RATES = (1, 10, 50)
ROUNDS = 12
STEPS = 300  # matmuls per block (~0.3-0.6 s on a laptop core)


def run(rounds: int = ROUNDS) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from jupyter_gpumem.sampling.sampler import Sampler
    from jupyter_gpumem.settings.apply import read_jax_devices
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

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

    arms = (0, *RATES)  # 0 = no sampler
    times = {a: [] for a in arms}
    cpu = {a: 0.0 for a in RATES}
    seen = {a: [] for a in RATES}
    with fake_nvml("three_gpus"):
        sampler = Sampler(NvmlSource().read, read_jax_devices, interval=1.0)
        plain = sampler.sample_once
        current = {"rate": None}

        def timed_sample():
            start = time.thread_time()
            try:
                return plain()
            finally:
                cpu[current["rate"]] += time.thread_time() - start

        sampler.sample_once = timed_sample
        block()
        for r in range(rounds):
            order = arms[r % len(arms) :] + arms[: r % len(arms)]  # rotate: no arm always first
            for arm in order:
                if arm == 0:
                    times[0].append(block())
                    continue
                current["rate"] = arm
                before = len(sampler.timeline)
                with sampler.subscribe(lambda s: None, interval=1.0 / arm):
                    times[arm].append(block())
                seen[arm].append((len(sampler.timeline) - before) / times[arm][-1])
    off = statistics.median(times[0])
    note = (
        f"{STEPS} jitted 256x256 matmuls per block, {rounds} blocks per arm, rotated; fake NVML three_gpus (synthetic)"
    )
    rows = [{"name": "block, no sampler", "value": off * 1e3, "unit": "ms", "note": note}]
    for rate in RATES:
        on = statistics.median(times[rate])
        rows.append(
            {
                "name": f"overhead at {rate} Hz",
                "value": (on / off - 1) * 100,
                "unit": "%",
                "note": f"median(on)/median(off) - 1; {statistics.median(seen[rate]):.1f} samples/s seen"
                + ("; target < 1%" if rate == 10 else ""),
            }
        )
        rows.append(
            {
                "name": f"sampler thread CPU at {rate} Hz",
                "value": cpu[rate] / sum(times[rate]) * 100,
                "unit": "% of a core",
                "note": "thread CPU seconds sampling / wall seconds sampled",
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"blocks per arm, 3 to 100 (default {ROUNDS})")
    args = parser.parse_args(argv)
    if not 3 <= args.rounds <= 100:
        parser.error("--rounds must be from 3 to 100")
    print_rows(run(args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
