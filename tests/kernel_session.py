"""Run cells in a real IPython shell, in this process, and print what each did as one JSON line.

    python tests/kernel_session.py CELLS.json [--ext] [--settle] [--plain-tracebacks]

CELLS.json is a list of cell sources. With ``--ext`` the first thing run is
``%load_ext jupyter_gpumem``; without it the same cells run on plain IPython and JAX, for
comparison. With ``--settle`` the script waits, before each cell and outside it, for what the
earlier cells dispatched (``settle``): a test that needs a real out-of-memory error raised by
its cell sets it. Each cell's record: ``ok``, ``error`` (the exception's class name), ``seconds``
(wall time of ``run_cell``, hooks included) and ``out`` (what it printed and displayed).
With ``--plain-tracebacks`` IPython shows errors as ``%xmode Plain`` does (``plain_tracebacks``).
The last line printed is ``JSON`` and the records. The test runs this under a time limit: a
cell that hangs never prints it, and an abort shows as the return code.

Tests that need only the records call ``run_session``.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

from child_env import pythonpath
from IPython.core.interactiveshell import InteractiveShell


def settle() -> None:
    """Wait for every live JAX array's computation, where JAX has been imported; an array whose
    computation failed is passed over (``block_until_ready`` raises its error and never reads the
    buffer).

    Why: with a computation still pending, JAX dispatches the next one asynchronously, and an
    allocation that cannot be made no longer raises at the call: the call returns an array that
    failed, and converting it to numpy (IPython displaying a cell's value) aborts the process on
    the CPU ("Check failed: data_.IsConcrete()", xla/pjrt/cpu/abstract_tfrt_cpu_buffer.cc,
    jaxlib 0.4.38; "buffer_.IsConcrete()", raw_buffer.h, jaxlib 0.10.2). Seen on a loaded
    machine with ``jnp.zeros((2**46,), jnp.float32)`` run right after ``jnp.ones(...) * 1e-3``;
    reproduced on both releases by a matmul left pending before it."""
    jax = sys.modules.get("jax")
    if jax is None:
        return
    for array in jax.live_arrays():
        try:
            array.block_until_ready()
        except Exception:  # the array's own error: it is not this script's to report
            pass


PLAIN_TRACEBACKS = """IPython's default display of an error (``%xmode Context``) parses the source file
of every frame with stack_data, and an error from inside JAX passes through JAX's largest files:
the first out-of-memory error in a process took 4.0 s to show in Context mode and 0.27 s in Plain
(IPython 9.18, JAX 0.10.2, a quiet 2-core machine). A test that reads what the extension printed,
not the traceback, and does not check what the traceback display keeps alive
(doctor/last_error.py), can run in Plain mode."""


def main() -> None:
    with open(sys.argv[1]) as fh:
        cells = json.load(fh)
    shell = InteractiveShell.instance()
    if "--plain-tracebacks" in sys.argv[2:]:
        shell.InteractiveTB.set_mode(mode="Plain")  # what %xmode Plain does, without its message
    if "--ext" in sys.argv[2:]:
        shell.run_line_magic("load_ext", "jupyter_gpumem")
    records = []
    for source in cells:
        if "--settle" in sys.argv[2:]:
            settle()
        buf = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            result = shell.run_cell(source, store_history=True)
        seconds = time.perf_counter() - t0
        error = result.error_in_exec or result.error_before_exec
        records.append(
            {
                "ok": result.success,
                "error": type(error).__name__ if error else None,
                "seconds": seconds,
                "out": buf.getvalue(),
            }
        )
        print(f"cell {len(records)} done in {seconds:.3f} s", file=sys.__stderr__, flush=True)
    print("JSON" + json.dumps(records), flush=True)


def run_session(
    folder: Path, cells: list[str], env: dict | None = None, settle: bool = True, plain_tracebacks: bool = False
) -> list[dict]:
    """Each cell's record from this script run with the extension loaded, in a fresh process
    in ``folder`` on CPU JAX, with this checkout's package first; ``env`` adds variables;
    ``settle``: each cell starts once the earlier cells' computations are done (``settle``);
    ``plain_tracebacks``: errors shown as ``%xmode Plain`` shows them (``PLAIN_TRACEBACKS``)."""
    path = folder / "cells.json"
    path.write_text(json.dumps(cells))
    flags = ["--ext"] + (["--settle"] if settle else []) + (["--plain-tracebacks"] if plain_tracebacks else [])
    proc = subprocess.run(
        [sys.executable, __file__, str(path), *flags],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=folder,
        env={
            "JAX_PLATFORMS": "cpu",
            "PATH": "/usr/bin:/bin",
            "HOME": str(folder),
            "PYTHONPATH": pythonpath(),
            **(env or {}),
        },
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


if __name__ == "__main__":
    main()
