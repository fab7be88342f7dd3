"""An out-of-memory error while a new program is compiled and loaded on a GPU that is full.

Preallocation off and a fraction of 1.0 let BFC grow until CUDA refuses: the job fills the
device with 1 GiB, then 64 MiB, 4 MiB and 1 MiB arrays until each size fails, and then asks for a
matrix product that was never compiled (the fill's own programs are compiled before it starts). XLA needs device memory to autotune and to load the
compiled kernels (cuModuleLoadData), outside BFC's pool. Each error text is kept whole
(``$GPU_PROOF_TEXTS``); the compile-time one is raised for the recorder's "oom" event.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from _gpu import GiB, MiB, first_op, hold, mark, nvml_memory, pause, save_text  # noqa: E402

first_op()
a = jnp.ones((2048, 2048), jnp.float32).block_until_ready()
mark("backend started")
pause()
SIZES = (GiB, 64 * MiB, 4 * MiB, MiB)
for size in SIZES:  # compiled while there is room, so that filling compiles nothing new
    hold(size).delete()
filler = []
for size in SIZES:
    while True:
        try:
            filler.append(hold(size))
        except Exception as exc:
            save_text(f"oom_fill_{size >> 20}MiB", f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
            break
    mark(f"full at {size >> 20} MiB arrays", held_bytes=sum(f.nbytes for f in filler), nvml=nvml_memory())
    pause()
phase = "compile"
try:
    compiled = jax.jit(lambda m: jnp.tanh(m @ m.T) @ m).lower(a).compile()
    mark("compiled on a full GPU")
    phase = "run"
    compiled(a).block_until_ready()
    mark("ran on a full GPU: no compile-time OOM")
except Exception as exc:
    save_text(f"oom_compile_{phase}", f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
    mark(f"out of memory at {phase} of a new program")
    pause()
    # The same program compiled without the autotuner's trials (xla_gpu_autotune_level 0, a
    # per-program compiler option): does it compile and run on the same full GPU?
    try:
        program = jax.jit(lambda m: jnp.tanh(m @ m.T) @ m).lower(a)
        program.compile(compiler_options={"xla_gpu_autotune_level": 0})(a).block_until_ready()
        outcome = "compiled with xla_gpu_autotune_level 0 and ran on the full GPU"
    except Exception as retry:
        outcome = f"{type(retry).__module__}.{type(retry).__name__}: {retry}"
    save_text("oom_compile_autotune_off", outcome)
    mark("autotune off: " + outcome[:120])
    raise
