"""A real out-of-memory error from a jitted program whose temporary buffer is larger than the GPU.

The outer product of a vector with itself, sorted along one axis, needs the whole n×n product
in memory at once (XLA sorts in a buffer of its own); n is chosen so that buffer is 1.5× the
device. Before it, a program whose n×n output alone is too big. The compiled program's
``memory_analysis()`` is marked first. Every error text is kept
whole (``$GPU_PROOF_TEXTS``), then the last one is raised for the recorder's "oom" event.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from _gpu import GiB, first_op, hold, mark, nvml_memory, pause, save_text  # noqa: E402

first_op()
kept = hold(GiB)  # something live for the report to name
mark("holding 1 GiB")
pause()
total = nvml_memory()["total"]
n = int(math.sqrt(1.5 * total / 4))
x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
# First a program whose output alone is too big, kept as a second form of the text.
too_big_output = jax.jit(lambda v: v[:, None] * v[None, :])
try:
    too_big_output(x).block_until_ready()
    mark("the n×n output fitted (unexpected)")
except Exception as exc:
    save_text("oom_runtime_output", f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
    mark("out of memory for the n×n output")
    pause()
program = jax.jit(lambda v: jnp.sort(v[:, None] * v[None, :], axis=0)[0])
phase = "compile"
try:
    compiled = program.lower(x).compile()
    analysis = compiled.memory_analysis()
    mark("compiled", temp_bytes=getattr(analysis, "temp_size_in_bytes", None), n=n)
    phase = "run"
    compiled(x).block_until_ready()
    mark("ran without an OOM (unexpected)")
except Exception as exc:
    save_text(f"oom_runtime_{phase}", f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
    mark(f"out of memory at {phase}")
    pause()
    raise
