"""An out-of-memory error that carries XLA's "BufferAssignment OOM Debugging" and "Peak buffers".

Read in openxla/xla at b7d5c516d95c521a81664a0ec73bac8f971ef7ba, xla/service/gpu/gpu_executable.cc
(the later stored version moves the same code into AllocateCopyProtectedOutputBuffer; the commit
JAX 0.11.2 pins could not be read here: jaxlib 0.11.2 names jax commit 32544801e261, which no
stored copy of jax holds):

- ``GpuExecutable::BufferForAllocation`` returns the allocator's error alone for every buffer of
  the program, temporaries included. That is what the H100 run of 2026-11-26 saw for a program
  whose 238.94 GiB of temporaries passed the device (tests/data/oom_texts/h100_jax_0.11.2_jit_oom_run.txt).
- The one call of ``VerboseAllocationError``, which appends ``buffer_assignment_->ToVerboseString``
  (the section with "Peak buffers"), is in ``ExecuteAsyncOnStreamImpl``: an output that aliases a
  parameter whose buffer the call does not own ("Using copy-protection: aliasing is specified,
  but the buffer is not donated") gets a fresh buffer, and when that allocation fails the error
  carries the buffer assignment.
- No compile-time check of the buffer assignment against the device memory was found (no other
  caller of ``ToVerboseString`` in the stored XLA sources but tools): ``xla_gpu_memory_limit_slop_factor``
  scales only the memory limit that the latency-hiding scheduler and the collective combiners
  work to (``MaxAvailableMemory``: device memory × factor / 100), and a program over the device
  compiles and fails at run as above.

The common PjRt client runs a donated parameter without owning it only where
``ExecuteOptions::non_donatable_input_indices`` names it (xla/pjrt/common_pjrt_client.cc,
``donation_denied_at_runtime``), and jax 0.11.2's Python never sets it. The one way tried here:
``step`` donates its first argument and is called with ``x`` as both arguments, with ``x`` at
55% of BFC's limit (JAX's defaults), so that a copy of ``x`` cannot fit. On the CPU, jax 0.11.2
refuses that call before it runs: "INVALID_ARGUMENT: Attempt to use a buffer that was previously
donated in the same call to Execute() ... `f(donate(a), a)`". Whatever the GPU answers is kept
whole (``$GPU_PROOF_TEXTS``); where it is an OOM, ``jupyter_gpumem.doctor.oom_report`` reads it in
this process, and what both say is kept as ``$GPU_PROOF_REPORTS/oom_peak_buffers.json``
(bench/gpu_proof.py, ``peak_buffers_problem``, judges it: the report's peak rows must name this
file's lines).
"""

from __future__ import annotations

import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
from _gpu import first_op, hold, mark, pause, save_text, stats  # noqa: E402


def step(a, b):
    doubled = a * 2.0
    return doubled + b


first_op()
limit = (stats() or {}).get("bytes_limit") or 0
x = hold(int(0.55 * limit))
mark("holding 55% of BFC's limit", bytes=x.nbytes, limit=limit)
pause()
program = jax.jit(step, donate_argnums=0)
source, first = inspect.getsourcelines(step)
result = {"file": os.path.basename(__file__), "lines": list(range(first + 1, first + len(source))), "limit": limit}
error = None
try:
    program(x, x).block_until_ready()
    result["outcome"] = "ran: the copy fitted, or the input was donated after all"
    mark("ran without an OOM (unexpected)")
except Exception as exc:  # the text is the finding
    error = exc
    result["text"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    save_text("oom_peak_buffers_not_donated", result["text"])
    mark("out of memory copying an input that was not donated")
    pause()
if error is not None:
    try:
        from jupyter_gpumem import doctor

        report = doctor.oom_report(error)
        result["report"] = None if report is None else str(report)
    except Exception as exc:  # the report's failure is a finding too
        result["report_error"] = f"{type(exc).__name__}: {exc}"
folder = os.environ.get("GPU_PROOF_REPORTS")
if folder:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "oom_peak_buffers.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
print(result.get("report") or result.get("report_error") or result.get("outcome"), flush=True)
if error is not None:
    raise error
