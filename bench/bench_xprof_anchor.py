"""``%gpumem peak`` beside XProf's memory viewer on the same programs, JAX on CPU.

Each program is run once, jitted, under ``jax.profiler.trace``; XProf (``xprof`` from PyPI, in
its own environment: ``make xprof-anchor``) reads the captured profile with its converter
(``xprof.convert.raw_to_tool_data.xspace_to_tool_data(paths, "memory_viewer", {"module_name":
...})``, after ``xspace_to_tool_names``, which writes each module's ``*.hlo_proto.pb`` beside
the profile: openxla/xprof plugin/xprof/convert/raw_to_tool_data.py and
xprof/convert/xplane_to_tools_data.cc at a27d00aa). The same call goes through ``%gpumem peak``
(``doctor.peak_report.peak``), compiled, not run.

What is compared: XProf's ``peakHeapMib`` (``peak_heap_mib`` in
xprof/convert/hlo_proto_to_memory_visualization_utils.cc: the heap simulator's peak of the
temporary allocation plus every allocation of indefinite lifetime, parameters, outputs,
constants and thread-local ones, whole) in bytes, against ``ProgramPeak.peak_bytes`` (every
whole-program allocation plus the most temporaries live at once, from the buffer-assignment
dump's live ranges). Both count the same program's buffer assignment the same way, so they should
agree to the byte; the rows say by how much they differ. XProf's number is a double in MiB;
``round(mib * 2**20)`` is exact below 2**52 bytes.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

XPROF_ENV = Path(os.environ.get("XPROF_ANCHOR_ENV", Path.home() / ".cache" / "xprof-anchor"))
XPROF_VERSION = "2.24.2"

# Run in XProf's environment: argv[1] the profile's xplane.pb files (JSON), argv[2] module prefixes
# (JSON); prints {prefix: {module, peak_heap_mib, ...}}.
READ_XPROF = """
import json, os, sys
from xprof.convert import raw_to_tool_data as convert
paths, prefixes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
convert.xspace_to_tool_names(paths)  # writes <module>.hlo_proto.pb beside the profile
names = [f[: -len(".hlo_proto.pb")] for f in os.listdir(os.path.dirname(paths[0])) if f.endswith(".hlo_proto.pb")]
found = {}
for prefix in prefixes:
    module = next(n for n in sorted(names) if n.startswith(prefix + "("))
    data, _ = convert.xspace_to_tool_data(paths, "memory_viewer", {"module_name": module})
    view = json.loads(data)
    found[prefix] = {"module": module, "peak_heap_mib": view["peakHeapMib"],
                     "parameters_mib": view.get("entryComputationParametersMib", 0),
                     "outputs_mib": view.get("maybeLiveOutMib", 0)}
print(json.dumps(found))
"""


def programs():
    """``(module prefix, jitted function, arguments)``: a scan under grad, an upcast, a donated
    update; the arguments made before the trace, so the profile holds no other program of
    theirs."""
    import jax
    import jax.numpy as jnp

    def layer(h, w):
        return jnp.tanh(h @ w), None

    def scan_loss(w, x):
        h, _ = jax.lax.scan(layer, x, w)
        return (h**2).sum()

    def upcast_matmul(x, w):
        return x.astype(jnp.float32) @ w

    def update(p, g):
        return p - 0.1 * g

    return [
        ("jit_scan_loss", jax.jit(jax.grad(scan_loss)), (jnp.ones((16, 256, 256)) * 0.01, jnp.ones((512, 256)))),
        ("jit_upcast_matmul", jax.jit(upcast_matmul), (jnp.ones((2048, 1024), jnp.bfloat16), jnp.ones((1024, 8)))),
        ("jit_update", jax.jit(update, donate_argnums=0), (jnp.ones((1024, 1024)), jnp.ones((1024, 1024)))),
    ]


def xprof_peaks(folder: str, prefixes: list[str]) -> dict:
    paths = glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb"))
    proc = subprocess.run(
        [str(XPROF_ENV / "bin" / "python"), "-c", READ_XPROF, json.dumps(paths), json.dumps(prefixes)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    if not (XPROF_ENV / "bin" / "python").exists():
        note = f"no XProf environment at {XPROF_ENV}: run `make xprof-anchor` first"
        return [{"name": "XProf memory viewer beside %gpumem peak", "value": None, "unit": "", "note": note}]
    import jax

    from jupyter_gpumem.doctor.peak_report import peak

    cases = programs()
    with tempfile.TemporaryDirectory(prefix="gpumem-xprof-") as folder:
        with jax.profiler.trace(folder):
            for _, fn, args in cases:
                jax.block_until_ready(fn(*[a.copy() for a in args]))
        theirs = xprof_peaks(folder, [name for name, _, _ in cases])
    rows = []
    for name, fn, args in cases:
        ours = peak(fn, *args).peak.peak_bytes
        xprof = round(theirs[name]["peak_heap_mib"] * (1 << 20))
        note = f"{theirs[name]['module']}; XProf {xprof} B, ours {ours} B; xprof {XPROF_VERSION}, jax {jax.__version__}"
        rows.append({"name": f"{name}: ours minus XProf's peak", "value": ours - xprof, "unit": "B", "note": note})
    return rows


if __name__ == "__main__":
    print_rows(run())
    sys.exit(0)
