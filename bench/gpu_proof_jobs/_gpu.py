"""What the GPU proof's trace jobs and fact probes share: readings of this process on GPU 0.

Imported by scripts that run on the device machine in a fresh interpreter each; jax and pynvml
are imported on first use, so a probe can set JAX's variables first.
"""

from __future__ import annotations

import json
import os
import sys
import time

# GPU_PROOF_UNIT shrinks every size for a rehearsal on a CPU (GPU_PROOF_UNIT=1048576: GiB become MiB).
GiB = int(os.environ.get("GPU_PROOF_UNIT", 1 << 30))
MiB = GiB >> 10
RESULT_PREFIX = "GPU_PROOF_RESULT "


def first_op() -> None:
    """Start JAX's backend with one small operation."""
    import jax.numpy as jnp

    jnp.ones(1024, jnp.float32).block_until_ready()


def device():
    import jax

    return jax.devices()[0]


def stats() -> dict | None:
    """``memory_stats()`` of JAX's first device (None where the allocator keeps none)."""
    return device().memory_stats()


def nvml_memory() -> dict:
    """GPU 0 as NVML sees it: ``total``, ``used`` by everyone, and ``mine`` (this process).

    NVML lists host pids; the device machine is a VM whose pids are its own, so ``mine``
    matches ``os.getpid()`` there (nvidia-ml-py's nvmlDeviceGetComputeRunningProcesses).
    """
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.nvmlDeviceGetMemoryInfo(handle)
    mine = sum(
        p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()
    )
    return {"total": int(info.total), "used": int(info.used), "mine": int(mine)}


def hold(nbytes: int):
    """A float32 array of about ``nbytes`` on the device, computed (so its buffer exists)."""
    import jax.numpy as jnp

    return jnp.ones(max(1, nbytes // 4), jnp.float32).block_until_ready()


def error_text(call) -> str | None:
    """``str()`` of what ``call()`` raised, or None when it returned."""
    try:
        call()
    except Exception as exc:  # the text is the finding
        return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    return None


def save_text(name: str, text: str) -> str | None:
    """Keep a whole error text as ``$GPU_PROOF_TEXTS/<name>.txt``; returns the path written."""
    folder = os.environ.get("GPU_PROOF_TEXTS")
    if not folder or text is None:
        return None
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def mark(name: str, **data) -> None:
    """A marker in the recording in progress; nothing when run outside the recorder."""
    try:
        from jupyter_gpumem.record import mark as record_mark

        record_mark(name, **data)
    except Exception as exc:  # a marker never stops a job
        print(f"marker {name!r} not written: {exc}", file=sys.stderr)


def pause(seconds: float = 0.4) -> None:
    """Let the recorder take a few samples of the state just reached."""
    time.sleep(seconds)


def emit(**observed) -> None:
    """Print the probe's observations as the last line, for bench/gpu_proof_facts.py, with the
    platform JAX ran on (a verdict from a CPU run would mean nothing)."""
    if "platform" not in observed and "jax" in sys.modules:
        try:
            observed["platform"] = device().platform
        except Exception as exc:  # JAX could not start: say so rather than guess
            observed["platform"] = f"none ({type(exc).__name__})"
    print(RESULT_PREFIX + json.dumps(observed, default=repr), flush=True)
