"""On a real GPU: the settings change what the driver sees after JAX's first operation.

Each scenario runs in a fresh interpreter (JAX reads its settings once) and reports this
process's memory on its device as NVML sees it, as a share of the device's total.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_SCRIPT = """
import json, os
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jupyter_gpumem")
line = {line!r}
if line:
    assert shell.run_cell("%gpumem " + line).success
import jax.numpy as jnp
jnp.ones(1024).block_until_ready()
from jupyter_gpumem.settings import apply as allocator_shim
reading = allocator_shim.read_jax_devices()[0]
import pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(reading.nvml_index)
total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
mine = sum(p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid())
print(json.dumps({{"share": mine / total, "mine": mine, "platform": reading.platform}}))
"""


def _share_after_first_op(line: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_CUDA", "TF_GPU"))}
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(line=line)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["platform"] == "gpu", "JAX fell back to the CPU"
    return result


def test_default_settings_preallocate_about_three_quarters():
    assert 0.70 <= _share_after_first_op("")["share"] <= 0.82


def test_preallocate_off_takes_little():
    assert _share_after_first_op("preallocate off")["mine"] < 2 << 30


def test_fraction_sets_the_preallocated_share():
    assert 0.25 <= _share_after_first_op("fraction .3")["share"] <= 0.37
