"""On a real GPU: what cuda_async does with the fraction and async-prealloc, as the notes say.

Read from openxla/xla, not yet seen on a GPU (hence these tests):
- xla/pjrt/gpu/se_gpu_pjrt_client.cc, ``CreateCudaAsyncAllocator``: the default pool, with
  ``reserve_memory_size = preallocate ? total × fraction : 0``.
- xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc: that size is the release threshold;
  the default pool has no maximum size; ``SetStreamAndPreallocateMemory`` allocates and frees
  ``TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC`` bytes at start.

Each scenario runs in a fresh interpreter (JAX reads its settings once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_SCRIPT = """
import json
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jupyter_gpumem")
assert shell.run_cell("%gpumem " + {line!r}).success
import jax, jax.numpy as jnp
from jupyter_gpumem.sources.libcuda import read_default_pool
jnp.ones(1024).block_until_ready()
device = jax.devices()[0]
import pynvml  # the total; NVML and CUDA may order several GPUs differently, so these tests assume one
pynvml.nvmlInit()
total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(device.local_hardware_id)).total
after_start = read_default_pool(device.local_hardware_id)
held = None
share = {share!r}
if share:
    held = jnp.ones(int(total * share) // 4, jnp.float32).block_until_ready()
pool = read_default_pool(device.local_hardware_id)
print(json.dumps({{"platform": device.platform, "total": total,
                  "after_start": after_start.reserved_bytes, "reserved": pool.reserved_bytes,
                  "held": held is not None}}))
"""


def _run(line: str, share: float = 0.0) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_CUDA", "TF_GPU", "JAX_PJRT"))}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(line=line, share=share)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["platform"] in ("gpu", "cuda"), "JAX fell back to the CPU"
    return result


def test_async_prealloc_with_preallocation_off_is_handed_back_at_the_next_synchronisation():
    r = _run("allocator cuda_async preallocate off async-prealloc 4GiB")
    assert r["after_start"] < 1 << 30  # far below the 4 GiB asked for: the threshold is 0


def test_the_fraction_is_no_cap_under_cuda_async_with_preallocation_off():
    r = _run("allocator cuda_async preallocate off fraction .1", share=0.3)
    assert r["held"] and r["reserved"] >= 0.29 * r["total"]


def test_cuda_async_with_preallocation_on_reserves_the_fraction():
    r = _run("allocator cuda_async fraction .3")
    assert 0.25 * r["total"] <= r["after_start"] <= 0.35 * r["total"]
