"""``sources.jax_arrays.cpu_arrays``: the bytes of JAX's live arrays where JAX runs on the CPU,
read from shapes and shardings, in a fresh CPU JAX (``jax.live_arrays()`` and the backend are
per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from child_env import pythonpath

ROOT = Path(__file__).parents[2]

READ = textwrap.dedent("""\
    import json, jax, jax.numpy as jnp
    from jupyter_gpumem.sources.jax_arrays import cpu_arrays
    before = cpu_arrays()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("d",))
    split = jax.device_put(jnp.ones((1024,), jnp.float32), NamedSharding(mesh, P("d")))
    copied = jax.device_put(jnp.ones((100,), jnp.float32), NamedSharding(mesh, P()))
    gone = jnp.ones((10,)); gone.delete()
    reading = cpu_arrays()
    print(json.dumps({"before": before is None, "bytes": reading.bytes, "arrays": reading.arrays,
                      "listed": len(jax.live_arrays()), "devices": jax.device_count()}))""")


def _read(devices: int) -> dict:
    env = {
        "JAX_PLATFORMS": "cpu",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": pythonpath(),
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "HOME": os.environ.get("HOME", "/tmp"),
    }
    proc = subprocess.run([sys.executable, "-c", READ], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.jax_versions
def test_one_cpu_device_counts_each_live_array_once_and_not_the_deleted_one():
    found = _read(1)
    assert found["before"] is True  # JAX imported, not started: nothing is read, nothing started
    assert (found["bytes"], found["arrays"], found["listed"]) == (4096 + 400, 2, 2)


@pytest.mark.jax_versions
def test_several_cpu_devices_count_each_device_s_shard_and_each_copy():
    """Split over 4 devices the 4 KiB array is 1 KiB on each; the 400 B one is copied to all 4."""
    found = _read(4)
    assert found["devices"] == 4
    assert (found["bytes"], found["arrays"]) == (4096 + 4 * 400, 2)
