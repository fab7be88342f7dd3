"""What cuda_async really does with the fraction and with async-prealloc, in sentences for the
settings' notes and ``%gpumem status``, and the async-prealloc variable read as XLA reads it.

From openxla/xla, the allocator JAX 0.10 and 0.11 build (unverified on a GPU):

- xla/pjrt/gpu/se_gpu_pjrt_client.cc, ``CreateCudaAsyncAllocator``: cuda_async uses the
  device's default CUDA pool (``create_new_pool`` false), with ``reserve_memory_size`` =
  ``preallocate ? total × fraction : 0``.
- xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc: that size is the pool's release
  threshold and ``bytes_limit``; nothing sets a maximum size on the default pool, so the
  fraction limits nothing, with preallocation on or off. ``SetStreamAndPreallocateMemory`` reads
  ``TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC`` with ``tsl::ReadInt64FromEnvVar`` inside a fatal
  status check (absl's ``CHECK_OK`` in jax-cuda12-pjrt 0.10.2, whose plugin holds its
  "... &prealloc_size) is OK" text; ``TF_CHECK_OK`` in the source at openxla/xla 16569562): a
  value it cannot read aborts the process; ``-1`` means the release
  threshold, preallocation on takes the threshold whatever the value, and the bytes are
  allocated and freed at once. With a release threshold of 0 the driver takes them back at the
  next synchronisation.
"""

from __future__ import annotations

import re

from jupyter_gpumem.core.env_table import ASYNC_PREALLOC_VAR
from jupyter_gpumem.core.units import format_bytes

# absl::SimpleAtoi, which tsl::ReadInt64FromEnvVar uses: ASCII blanks around, a sign, decimal
# digits, in int64's range.
_WHOLE_NUMBER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)[ \t\n\v\f\r]*")

_INT64 = (-(2**63), 2**63 - 1)


def read_async_prealloc(raw: str) -> int | None:
    """The variable's value as XLA reads it; None when XLA cannot read it (and would abort)."""
    match = _WHOLE_NUMBER.fullmatch(raw)
    if match is None:
        return None
    value = int(match.group(1))
    return value if _INT64[0] <= value <= _INT64[1] else None


def async_prealloc_problem(raw: str) -> str | None:
    """Why XLA would abort or fail on the variable's value, or None when it reads it fine."""
    value = read_async_prealloc(raw)
    if value is None:
        return (
            f"{ASYNC_PREALLOC_VAR}={raw!r} is not a whole number of bytes. XLA's cuda_async allocator "
            "reads it inside a CHECK_OK when JAX's backend starts, and a value it cannot read aborts "
            "the process: the kernel dies. Use `%gpumem async-prealloc SIZE` (bytes, 512MiB, all) "
            "or unset it."
        )
    if value < -1:
        return (
            f"{ASYNC_PREALLOC_VAR}={raw!r} is negative: cuda_async would try to allocate that many "
            "bytes as an unsigned size, fail and log an error. Use a size in bytes, or -1 (all)."
        )
    return None


def fraction_note(fraction: object, preallocate: bool) -> str:
    """Why the fraction is no cap under cuda_async, with preallocation on or off.

    XLA gives the device's default pool only a release threshold (``cuMemPoolSetAttribute(pool_,
    CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &pool_size_64)`` in the ``GpuCudaMallocAsyncAllocator``
    constructor, openxla/xla xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc at commit
    16569562fc04a1d1eadcd6a79f2269c1ccf4c421): how much the pool keeps at a synchronisation,
    not how much it may hold. A default pool has no maximum size.
    """
    if preallocate:
        return (
            f"under cuda_async the fraction ({fraction}) is no cap, even with preallocation on: XLA makes "
            "it the release threshold of the CUDA driver's default pool (what the pool keeps), and reserves "
            "that much at start, but the pool has no size limit, so JAX can grow past it into all of the "
            "GPU's free memory."
        )
    return (
        f"under cuda_async with preallocation off, the fraction ({fraction}) is no cap: XLA reserves "
        "no pool, and the CUDA driver's default pool that cuda_async allocates from has no size limit, "
        "so JAX can take all of the GPU's free memory."
    )


def async_prealloc_note(value: int, preallocate: bool) -> str | None:
    """What async-prealloc ``value`` really does under cuda_async; None for 0 (nothing to say)."""
    if value == 0 or value < -1:
        return None
    shown = "all" if value == -1 else format_bytes(value)
    if preallocate:
        return (
            f"async-prealloc ({shown}) changes nothing while preallocation is on: cuda_async reserves "
            "its whole pool (total × fraction) and keeps it."
        )
    if value == -1:
        return (
            "async-prealloc all reserves nothing with preallocation off: `all` means the pool's "
            "release threshold, which is 0 then."
        )
    return (
        f"async-prealloc ({shown}) is not kept: with preallocation off the pool's release threshold "
        "is 0, so the bytes cuda_async allocates and frees at start go back to the driver at the "
        "next synchronisation."
    )
