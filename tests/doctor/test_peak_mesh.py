"""``%gpumem peak`` on a mesh: eight CPU devices (``--xla_force_host_platform_device_count=8``,
set before JAX starts, so in a fresh process), figures per device, and each fix it offers checked
against the partitioned program.

What the tests rely on, read in JAX's source and on CPU JAX 0.4.38, 0.7.2 and 0.10.2:
``Compiled.memory_analysis()`` counts one device's module (the SPMD-partitioned ``main.N_spmd``,
``num_partitions=8`` in ``Compiled.as_text()``); ``Compiled.input_shardings`` is ``(args,
kwargs)`` and ``Sharding.shard_shape`` gives a device's shape (jax/_src/stages.py and
jax/_src/sharding.py, jax-v0.4.38 and jax-v0.10.2); a donated argument no output of its
per-device shape can take is not aliased ("Some donated buffers were not usable",
jax/_src/interpreters/mlir.py, jax-v0.10.2). The expected numbers are the child's own
``memory_analysis()`` of the fix compiled directly.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from child_env import pythonpath

pytestmark = pytest.mark.jax_versions

MiB = 1 << 20

CHILD = r"""
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jupyter_gpumem.doctor.peak_report import peak
from jupyter_gpumem.doctor.program_budget import donation_gain
from jupyter_gpumem.sources.jax_arrays import compile_memory

mesh = Mesh(np.array(jax.devices()), ("x",))

def spread(a, b):  # elementwise: sharding a costs no communication
    return jnp.tanh(a) + b

def contract(a, b):  # a @ b.T: sharding a makes each device gather all of b
    return jnp.tanh(a @ b.T) + a

def abstract(spec_a):
    return (jax.ShapeDtypeStruct((4096, 4096), jnp.float32, sharding=NamedSharding(mesh, spec_a)),
            jax.ShapeDtypeStruct((4096, 4096), jnp.float32, sharding=NamedSharding(mesh, P("x", None))))

def measured(fn, spec_a, **jit):
    m = jax.jit(fn, **jit).lower(*abstract(spec_a)).compile().memory_analysis()
    m = m[0] if isinstance(m, (list, tuple)) else m
    return {k: getattr(m, k + "_size_in_bytes") for k in ("argument", "output", "temp", "alias")}

out = {"devices": len(jax.devices())}
for fn in (spread, contract):
    report = peak(jax.jit(fn), *abstract(P()), _expression=fn.__name__ + "(a, b)")
    out[fn.__name__] = {
        "text": str(report),
        "json": report.to_json(),
        "replicated": measured(fn, P()),
        "sharded": measured(fn, P("x", None)),
        "donated": measured(fn, P(), donate_argnums=(0,)),
        "budget_donation": donation_gain(*[getattr(compile_memory(jax.jit(fn), abstract(P()), {}), k)
                                           for k in ("inputs", "outputs")]),
    }
print("JSON" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def mesh_reports(tmp_path_factory):
    """One child process with eight CPU devices: each program's report and JAX's own figures."""
    folder = tmp_path_factory.mktemp("mesh")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": pythonpath()},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(line[4:])
    assert found["devices"] == 8
    return found


def _total(m: dict) -> int:
    return m["argument"] + m["output"] + m["temp"] - m["alias"]


def test_a_mesh_programs_peak_says_it_is_per_device_and_shows_each_devices_shapes(mesh_reports):
    report = mesh_reports["spread"]
    first = report["text"].splitlines()[0]
    assert "per device (each of 8 devices runs the same partitioned program)" in first
    assert report["json"]["devices"] == 8
    a, b = report["json"]["arguments"]
    assert (a["shape"], a["device_shape"], a["replicated"]) == ([4096, 4096], [4096, 4096], True)
    assert (b["shape"], b["device_shape"], b["replicated"]) == ([4096, 4096], [512, 4096], False)
    assert report["json"]["argument_bytes"] == report["replicated"]["argument"] == 72 * MiB
    assert "argument 0: f32[4096,4096] -> f32[4096,4096] 64.00 MiB (replicated, a whole copy on each)" in report["text"]
    assert "Replicated: 64.00 MiB per device are whole copies (1 array)" in report["text"]


def test_the_replicated_argument_gets_the_sharding_that_compiles_smaller_with_its_measured_saving(mesh_reports):
    """Arguments 72 -> 16 MiB per device; the saving claimed is the fix's own memory_analysis."""
    report = mesh_reports["spread"]
    shard = next(f for f in report["json"]["fixes"] if f["kind"] == "shard")
    assert "shard a (argument 0)" in shard["text"] and "NamedSharding(mesh, P('x', None))" in shard["text"]
    assert report["sharded"]["argument"] == 16 * MiB
    assert shard["saves"] == _total(report["replicated"]) - _total(report["sharded"]) > 0
    assert "arguments 72.00 MiB -> 16.00 MiB" in shard["text"]


def test_donation_is_not_offered_for_an_argument_no_output_has_the_per_device_shape_of(mesh_reports):
    """Globally the output is f32[4096,4096] like a; per device it is not a's shape: XLA aliases
    nothing, so donating a is not offered (by the peak, nor counted by an OOM report's budget,
    which counts b's 8 MiB where the output has b's per-device shape, and nothing for a @ b.T's
    f32[4096,512])."""
    for name, budget in (("spread", 8 * MiB), ("contract", 0)):
        report = mesh_reports[name]
        assert report["donated"]["alias"] == 0
        assert not [f for f in report["json"]["fixes"] if f["kind"] == "donate" and "argument 0" in f["text"]]
        assert report["budget_donation"] == budget


def test_donation_offered_on_a_mesh_saves_what_xla_aliases(mesh_reports):
    """b's per-device f32[512,4096] is the output's: donating it is offered, with the bytes XLA
    aliased when compiled so."""
    report = mesh_reports["spread"]
    donate = next(f for f in report["json"]["fixes"] if f["kind"] == "donate")
    assert "donate_argnums=(1,)" in donate["text"] and donate["saves"] == 8 * MiB


def test_a_sharding_that_makes_the_program_gather_is_declined_with_its_numbers(mesh_reports):
    """Sharding a in a @ b.T cuts the arguments to 16 MiB, but each device then gathers all of b:
    the total per device grows, so it is not offered, and the report says why."""
    report = mesh_reports["contract"]
    assert report["sharded"]["argument"] == 16 * MiB and _total(report["sharded"]) > _total(report["replicated"])
    assert not [f for f in report["json"]["fixes"] if f["kind"] == "shard"]
    declined = report["json"]["declined"]
    assert any(d.startswith("shard a (argument 0)") and "arguments 72.00 MiB -> 16.00 MiB" in d for d in declined)
