"""The memory metrics: pool, unused pool, headroom, growth room, largest likely request,
available bytes, fragmentation and bytes outside the allocator, from JAX's allocator statistics
and, under cuda_async, the CUDA driver's pool. Pure functions over ``readings`` types.
"""

from __future__ import annotations

from typing import Union

from jupyter_gpumem.core.readings import AllocatorStats, CudaPoolReading, NotAvailable

# --- derived metrics: pure functions, tested against hand-computed numbers ------------------
#
# One home for each fact, for BFC and cuda_async alike. Each takes JAX's statistics and, where
# there is one, the driver's reading of the cuda_async pool (``JaxDeviceReading.cuda_pool``
# passes as it is: a ``NotAvailable`` or None counts as no reading).
#
# Under cuda_async XLA allocates from the CUDA driver's DEFAULT pool and reports no pool_bytes;
# that pool has no size cap, so bytes_limit (the fraction) caps nothing: with preallocation on
# it is the pool's release threshold, with preallocation off XLA reports 0 (None here) and the
# threshold is 0. See openxla/xla xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc and
# shared/reference/jax-memory-facts.md.

PoolReading = Union[CudaPoolReading, NotAvailable, None]


def uses_driver_pool(stats: AllocatorStats, cuda_pool: PoolReading = None) -> bool:
    """True where the pool is the CUDA driver's default pool (cuda_async), which no fraction caps."""
    return stats.allocator == "cuda_async" or isinstance(cuda_pool, CudaPoolReading)


def pool_bytes(stats: AllocatorStats, cuda_pool: PoolReading = None) -> int | None:
    """Bytes the device's pool holds from CUDA.

    JAX's own ``pool_bytes`` (BFC); else, under cuda_async, the driver pool's reserved bytes;
    else None.
    """
    if stats.pool_bytes is not None:
        return stats.pool_bytes
    if isinstance(cuda_pool, CudaPoolReading):
        return cuda_pool.reserved_bytes
    return None


def held_bytes(stats: AllocatorStats | None, cuda_pool: PoolReading = None) -> int | None:
    """Bytes the allocator obtained from CUDA: its pool, or its bytes in use when it keeps none."""
    if stats is None:
        return None
    pool = pool_bytes(stats, cuda_pool)
    return pool if pool is not None else stats.bytes_in_use


def unused_pool_bytes(stats: AllocatorStats, cuda_pool: PoolReading = None) -> int | None:
    """Bytes the pool holds from CUDA but has not handed to arrays (pool - in use).

    Preallocated or pooled, unused. None without a pool reading.
    """
    pool = pool_bytes(stats, cuda_pool)
    if pool is None or stats.bytes_in_use is None:
        return None
    return max(0, pool - stats.bytes_in_use)


def headroom(stats: AllocatorStats, cuda_pool: PoolReading = None) -> int | None:
    """Bytes the pool may still grow by before it reaches ``bytes_limit``.

    With preallocation on the pool already is the limit, so this is 0. None under cuda_async,
    where the fraction is no cap, and where the limit or the pool is unknown.
    """
    if uses_driver_pool(stats, cuda_pool):
        return None
    pool = pool_bytes(stats, cuda_pool)
    if stats.bytes_limit is None or pool is None:
        return None
    return max(0, stats.bytes_limit - pool)


def growth_room(stats: AllocatorStats, cuda_pool: PoolReading = None, *, device_free: int | None = None) -> int | None:
    """Bytes the pool could grow by now.

    BFC: ``headroom``, capped by ``device_free`` (NVML's free bytes) where that is known.
    cuda_async: ``device_free`` itself, as nothing else caps the pool; None when unknown.
    """
    free = None if device_free is None else max(0, device_free)
    if uses_driver_pool(stats, cuda_pool):
        return free
    room = headroom(stats, cuda_pool)
    if room is not None and free is not None:
        room = min(room, free)
    return room


def largest_likely_request(
    stats: AllocatorStats, cuda_pool: PoolReading = None, *, device_free: int | None = None
) -> int | None:
    """The largest single allocation likely to succeed now.

    Either it fits in a free block of the pool, or the pool grows by it (``growth_room``).
    BFC reports its largest free block. The driver does not report one for the cuda_async
    pool, so its unused bytes stand in (an upper bound); without ``device_free`` the answer
    is not known there (None).
    """
    growth = growth_room(stats, cuda_pool, device_free=device_free)
    if uses_driver_pool(stats, cuda_pool):
        if growth is None:
            return None
        return max(unused_pool_bytes(stats, cuda_pool) or 0, growth)
    largest = stats.largest_free_block_bytes
    if largest is None and growth is None:
        return None
    return max(largest or 0, growth or 0)


def available_bytes(
    stats: AllocatorStats, cuda_pool: PoolReading = None, *, device_free: int | None = None
) -> int | None:
    """The most JAX could still get for arrays, in pieces: the pool's unused bytes plus
    ``growth_room``. None where the pool (BFC) or the device's free bytes (cuda_async) are not
    known.
    """
    unused = unused_pool_bytes(stats, cuda_pool)
    growth = growth_room(stats, cuda_pool, device_free=device_free)
    if uses_driver_pool(stats, cuda_pool):
        return None if growth is None else (unused or 0) + growth
    if unused is None:
        return None
    return unused + (growth or 0)


def fragmentation(stats: AllocatorStats, cuda_pool: PoolReading = None) -> float | None:
    """XLA's own BFC fragmentation, 0..1 (BFCAllocator::GetFragmentation).

    ``(pool - in_use - largest_free) / (pool - in_use)``: the share of the pool's free bytes that
    are not in its largest free block. 0 when the pool has no free bytes. None when the
    allocator does not report the three stats (cuda_async, whose driver pool reports no largest
    free block; platform; CPU), and whenever a driver pool reading comes with the stats: a
    largest free block beside one (a hand-written trace) is not a block of that pool.
    """
    if isinstance(cuda_pool, CudaPoolReading):
        return None
    pool = stats.pool_bytes
    in_use, largest = stats.bytes_in_use, stats.largest_free_block_bytes
    if pool is None or in_use is None or largest is None:
        return None
    free = pool - in_use
    if free <= 0:
        return 0.0
    return max(0.0, min(1.0, (free - largest) / free))


def outside_allocator_bytes(
    process_used: int | None, stats: AllocatorStats | None, cuda_pool: PoolReading = None
) -> int | None:
    """Bytes this process holds on the device outside JAX's pool.

    The CUDA context, loaded kernels, CUDA graphs, NCCL, other frameworks (XLA's convolution
    scratch and cuBLAS workspaces are program temporaries from the pool): NVML's per-process used
    bytes minus what the allocator obtained from CUDA (``held_bytes``: under cuda_async the
    driver pool's reserved bytes, reserved-but-unused included).
    """
    held = held_bytes(stats, cuda_pool)
    if process_used is None or held is None:
        return None
    return max(0, process_used - held)
