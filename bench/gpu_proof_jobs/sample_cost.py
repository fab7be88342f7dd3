"""What one sample costs on a real GPU: the whole sample (NVML, JAX's memory_stats, the driver's
default pool) against NVML alone, and each of the other two alone.

    python sample_cost.py [--calls 100]

Run under cuda_async (bench/gpu_proof.py sets it), so that the sampler reads the pool. The four
are timed interleaved, ``--calls`` rounds, so that drift touches each alike; prints one
``GPU_PROOF_RESULT`` line with the medians in µs, wall clock and this thread's CPU
(bench/bench_sample.py measures the same on the fake NVML and a CPU JAX).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _gpu import GiB, device, emit, first_op, hold  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--calls", type=int, default=100)
calls = parser.parse_args().calls

first_op()
kept = hold(GiB)  # something in the pool to read

from jupyter_gpumem.sampling.sampler import get_sampler  # noqa: E402
from jupyter_gpumem.sources.libcuda import read_default_pool  # noqa: E402
from jupyter_gpumem.sources.nvml import NvmlSource  # noqa: E402

nvml = NvmlSource()
sampler = get_sampler()
ordinal = device().local_hardware_id
timed = {
    "sample": sampler.sample_once,
    "nvml": nvml.read,
    "stats": device().memory_stats,
    "pool": lambda: read_default_pool(ordinal),
}
first = sampler.sample_once()  # the first read loads NVML and libcuda: not timed
wall: dict[str, list[float]] = {k: [] for k in timed}
cpu: dict[str, list[float]] = {k: [] for k in timed}
for _ in range(calls):
    for name, call in timed.items():
        w0, c0 = time.perf_counter(), time.thread_time()
        call()
        cpu[name].append(time.thread_time() - c0)
        wall[name].append(time.perf_counter() - w0)
readings = first.jax if isinstance(first.jax, tuple) else ()
emit(
    calls=calls,
    platform=device().platform,
    pool_in_sample=any(getattr(r, "cuda_pool", None) is not None for r in readings),
    **{f"{k}_us": statistics.median(v) * 1e6 for k, v in wall.items()},
    **{f"{k}_cpu_us": statistics.median(v) * 1e6 for k, v in cpu.items()},
    p90_sample_us=sorted(wall["sample"])[int(0.9 * calls)] * 1e6,
)
