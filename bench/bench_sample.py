"""CPU cost of one sample: NVML on the fake three-GPU world, JAX on CPU (backend started)."""

from __future__ import annotations

import os

from _common import median_thread_cpu, print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

BLOCKS = 9
CALLS = 300


def _per_call_cpu(fn) -> float:
    return median_thread_cpu(fn, BLOCKS, CALLS)


def run() -> list[dict]:
    import jax
    import jax.numpy as jnp

    from jupyter_gpumem.sampling.sampler import Sampler
    from jupyter_gpumem.settings.apply import read_jax_devices
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    jnp.ones(4).block_until_ready()  # start the backend
    note = f"median of {BLOCKS} blocks x {CALLS} calls, thread CPU time"
    with fake_nvml("three_gpus"):
        source = NvmlSource()
        nvml = _per_call_cpu(source.read)
        sampler = Sampler(source.read, read_jax_devices)
        whole = _per_call_cpu(sampler.sample_once)
    jax_read = _per_call_cpu(read_jax_devices)
    return [
        {"name": "NVML read, fake three_gpus", "value": nvml * 1e6, "unit": "us", "note": note},
        {
            "name": f"JAX read, CPU ({jax.__version__}, {len(jax.devices())} device)",
            "value": jax_read * 1e6,
            "unit": "us",
            "note": note,
        },
        {"name": "Sampler.sample_once (both)", "value": whole * 1e6, "unit": "us", "note": note},
    ]


if __name__ == "__main__":
    print_rows(run())
