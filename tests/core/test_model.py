"""model.py: derived metrics against hand-computed numbers, the stats normaliser, the Timeline."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.metrics import (
    available_bytes,
    fragmentation,
    growth_room,
    headroom,
    held_bytes,
    largest_likely_request,
    outside_allocator_bytes,
    pool_bytes,
    unused_pool_bytes,
    uses_driver_pool,
)
from jupyter_gpumem.core.readings import (
    AllocatorSettings,
    AllocatorStats,
    CudaPoolReading,
    DeviceReading,
    Event,
    JaxDeviceReading,
    NotAvailable,
    Sample,
    Timeline,
    is_available,
    normalise_stats,
)

GiB = 1 << 30
MiB = 1 << 20


def bfc(**kw) -> AllocatorStats:
    return AllocatorStats(allocator="bfc", **kw)


# --- fragmentation: (pool - in_use - largest_free) / (pool - in_use) ---------------------------


def test_fragmentation_by_xla_formula():
    # pool 10 GiB, 4 GiB in use -> 6 GiB free; largest free block 1.5 GiB.
    # (6 - 1.5) / 6 = 4.5 / 6 = 0.75
    stats = bfc(pool_bytes=10 * GiB, bytes_in_use=4 * GiB, largest_free_block_bytes=3 * GiB // 2)
    assert fragmentation(stats) == 0.75


def test_fragmentation_is_zero_when_free_bytes_are_one_block():
    # pool 8 GiB, 2 GiB in use, largest free 6 GiB: (6 - 6) / 6 = 0
    assert fragmentation(bfc(pool_bytes=8 * GiB, bytes_in_use=2 * GiB, largest_free_block_bytes=6 * GiB)) == 0.0


def test_fragmentation_is_zero_when_the_pool_is_full():
    # pool == in_use: no free bytes, nothing to fragment (XLA returns 0 here too)
    assert fragmentation(bfc(pool_bytes=GiB, bytes_in_use=GiB, largest_free_block_bytes=0)) == 0.0


def test_fragmentation_in_mib_steps():
    # pool 1000 MiB, 200 MiB in use -> 800 MiB free; largest free 100 MiB: (800 - 100) / 800 = 0.875
    stats = bfc(pool_bytes=1000 * MiB, bytes_in_use=200 * MiB, largest_free_block_bytes=100 * MiB)
    assert fragmentation(stats) == 0.875


def test_fragmentation_unknown_without_pool_stats():
    assert fragmentation(AllocatorStats(allocator="cuda_async", bytes_in_use=5)) is None


def test_fragmentation_unknown_without_a_pool_even_with_the_other_stats():
    assert fragmentation(bfc(bytes_in_use=GiB, largest_free_block_bytes=GiB)) is None


# --- unused pool bytes, headroom -----------------------------------------------------------------


def test_unused_pool_bytes_is_pool_minus_in_use():
    # preallocated 60 GiB, 4 GiB in arrays -> 56 GiB held but unused
    assert unused_pool_bytes(bfc(pool_bytes=60 * GiB, bytes_in_use=4 * GiB)) == 56 * GiB


def test_unused_pool_bytes_needs_a_pool():
    assert unused_pool_bytes(bfc(bytes_in_use=4)) is None


def test_headroom_is_limit_minus_pool_when_growing():
    # limit 60 GiB, pool grown to 12 GiB -> may still grow by 48 GiB
    assert headroom(bfc(bytes_limit=60 * GiB, pool_bytes=12 * GiB)) == 48 * GiB


def test_headroom_is_zero_when_preallocated():
    assert headroom(bfc(bytes_limit=60 * GiB, pool_bytes=60 * GiB)) == 0


def test_headroom_unknown_without_a_limit():
    assert headroom(bfc(pool_bytes=GiB)) is None


# --- largest likely request ------------------------------------------------------------------


def test_largest_likely_request_without_device_free_is_the_larger_of_block_and_growth():
    # largest free block 3 GiB; limit 60 GiB - pool 12 GiB = 48 GiB growth -> 48 GiB
    stats = bfc(bytes_limit=60 * GiB, pool_bytes=12 * GiB, largest_free_block_bytes=3 * GiB)
    assert largest_likely_request(stats) == 48 * GiB


def test_largest_likely_request_growth_is_capped_by_device_free():
    # growth would be 48 GiB but the driver has only 2 GiB free -> max(3 GiB block, 2 GiB) = 3 GiB
    stats = bfc(bytes_limit=60 * GiB, pool_bytes=12 * GiB, largest_free_block_bytes=3 * GiB)
    assert largest_likely_request(stats, device_free=2 * GiB) == 3 * GiB


def test_largest_likely_request_when_preallocated_is_the_largest_block():
    # preallocated: headroom 0, so only the 7 GiB block counts, whatever the device has free
    stats = bfc(bytes_limit=60 * GiB, pool_bytes=60 * GiB, largest_free_block_bytes=7 * GiB)
    assert largest_likely_request(stats, device_free=15 * GiB) == 7 * GiB


def test_largest_likely_request_negative_device_free_counts_as_zero():
    stats = bfc(bytes_limit=10, pool_bytes=4, largest_free_block_bytes=1)
    assert largest_likely_request(stats, device_free=-5) == 1


def test_largest_likely_request_unknown_without_stats():
    assert largest_likely_request(AllocatorStats(allocator="cuda_async")) is None


# --- outside the allocator -------------------------------------------------------------------------


def test_outside_allocator_bytes_is_process_used_minus_pool():
    # NVML says the process holds 60.5 GiB; the pool is 60 GiB -> 512 MiB of context etc.
    assert outside_allocator_bytes(60 * GiB + 512 * MiB, bfc(pool_bytes=60 * GiB, bytes_in_use=GiB)) == 512 * MiB


def test_outside_allocator_bytes_uses_in_use_without_a_pool():
    # cuda_async with no reading of the driver's pool: 3 GiB process, 2 GiB in use -> 1 GiB outside
    assert outside_allocator_bytes(3 * GiB, AllocatorStats(allocator="cuda_async", bytes_in_use=2 * GiB)) == GiB


def test_outside_allocator_bytes_never_negative():
    assert outside_allocator_bytes(GiB, bfc(pool_bytes=2 * GiB)) == 0


def test_outside_allocator_bytes_unknown_without_readings():
    assert outside_allocator_bytes(None, bfc(pool_bytes=1)) is None
    assert outside_allocator_bytes(5, None) is None


# --- growth and what could be had, BFC --------------------------------------------------------


def test_growth_room_is_headroom_capped_by_device_free():
    # limit 60 - pool 12 = 48 GiB headroom; the driver has 2 GiB free -> 2 GiB
    assert growth_room(bfc(bytes_limit=60 * GiB, pool_bytes=12 * GiB), device_free=2 * GiB) == 2 * GiB


def test_available_bytes_is_unused_pool_plus_growth():
    # pool 16, in use 6 -> 10 unused; headroom 60 - 16 = 44, capped by 30 free -> 10 + 30 = 40 GiB
    stats = bfc(bytes_limit=60 * GiB, pool_bytes=16 * GiB, bytes_in_use=6 * GiB)
    assert available_bytes(stats, device_free=30 * GiB) == 40 * GiB
    assert available_bytes(stats) == 54 * GiB  # 10 + 44 uncapped


def test_available_bytes_needs_a_pool():
    assert available_bytes(bfc(bytes_limit=GiB, bytes_in_use=1)) is None


# --- cuda_async: the CUDA driver's default pool is JAX's pool --------------------------------
#
# XLA's cuda_async allocator (openxla/xla, xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc,
# read at the ROCm/xla fork's commit 37fe764f) takes the device's default pool
# (cuDeviceGetDefaultMemPool), reports no pool_bytes, sets the release threshold and bytes_limit
# to reserve_memory_size, which se_gpu_pjrt_client.cc makes 0 with preallocation off; the
# default pool has no max size. So the pool's size comes from the driver, and the fraction caps
# nothing. These stats are what normalise_stats makes of such a report.

ASYNC_RAW = {"bytes_in_use": 3 * GiB, "peak_bytes_in_use": 5 * GiB, "bytes_limit": 0, "largest_free_block_bytes": 0}


def cuda_async(**raw) -> AllocatorStats:
    return normalise_stats({**ASYNC_RAW, **raw}, "cuda_async")


def driver_pool(reserved: int, used: int) -> CudaPoolReading:
    return CudaPoolReading(reserved_bytes=reserved, reserved_high_bytes=reserved, used_bytes=used, used_high_bytes=used)


POOL_8_OF_3 = driver_pool(8 * GiB, 3 * GiB)  # 8 GiB reserved, 3 GiB used


def test_pool_bytes_is_jax_pool_under_bfc():
    assert pool_bytes(bfc(pool_bytes=16 * GiB)) == 16 * GiB


def test_pool_bytes_is_the_driver_pools_reserved_bytes_under_cuda_async():
    assert pool_bytes(cuda_async(), POOL_8_OF_3) == 8 * GiB


@pytest.mark.parametrize("reading", [None, NotAvailable("no_driver", "libcuda is not loaded")])
def test_pool_bytes_unknown_under_cuda_async_without_a_driver_reading(reading):
    assert pool_bytes(cuda_async(), reading) is None


def test_unused_pool_bytes_under_cuda_async_is_reserved_minus_in_use():
    # 8 GiB reserved - 3 GiB in use = 5 GiB reserved but unused
    assert unused_pool_bytes(cuda_async(), POOL_8_OF_3) == 5 * GiB


def test_held_bytes_is_the_driver_pool_under_cuda_async_and_in_use_without_it():
    assert held_bytes(cuda_async(), POOL_8_OF_3) == 8 * GiB
    assert held_bytes(cuda_async(), None) == 3 * GiB
    assert held_bytes(None) is None


def test_reserved_but_unused_pool_is_not_outside_the_allocator():
    # NVML: 9 GiB for the process; the driver pool holds 8 -> 1 GiB outside (not 9 - 3 in use = 6)
    assert outside_allocator_bytes(9 * GiB, cuda_async(), POOL_8_OF_3) == 1 * GiB


def test_headroom_under_cuda_async_with_preallocation_off_is_unknown_not_zero():
    # bytes_limit reported as 0 (None after normalising): the fraction is no cap
    assert headroom(cuda_async(), POOL_8_OF_3) is None


def test_headroom_under_cuda_async_with_preallocation_on_is_unknown_too():
    # bytes_limit 60 GiB is only the release threshold of a pool with no max size
    assert headroom(cuda_async(bytes_limit=60 * GiB), driver_pool(60 * GiB, 3 * GiB)) is None


def test_growth_under_cuda_async_is_what_the_device_has_free():
    assert growth_room(cuda_async(), POOL_8_OF_3, device_free=71 * GiB) == 71 * GiB
    assert growth_room(cuda_async(), POOL_8_OF_3) is None


def test_largest_likely_request_under_cuda_async_is_device_free_when_that_is_larger():
    # max(5 GiB unused in the pool, 71 GiB free on the device) = 71 GiB
    assert largest_likely_request(cuda_async(), POOL_8_OF_3, device_free=71 * GiB) == 71 * GiB


def test_largest_likely_request_under_cuda_async_is_the_unused_pool_when_that_is_larger():
    # preallocated: 60 GiB reserved, 20 in use -> 40 unused; the device has 10 GiB free -> 40 GiB
    stats = cuda_async(bytes_in_use=20 * GiB, bytes_limit=60 * GiB)
    assert largest_likely_request(stats, driver_pool(60 * GiB, 20 * GiB), device_free=10 * GiB) == 40 * GiB


def test_largest_likely_request_under_cuda_async_unknown_without_device_free():
    assert largest_likely_request(cuda_async(), POOL_8_OF_3) is None


def test_available_bytes_under_cuda_async_is_unused_pool_plus_device_free():
    # 5 GiB unused in the pool + 71 GiB free on the device = 76 GiB
    assert available_bytes(cuda_async(), POOL_8_OF_3, device_free=71 * GiB) == 76 * GiB


def test_fragmentation_under_cuda_async_is_not_measured():
    assert fragmentation(cuda_async(), POOL_8_OF_3) is None


def test_fragmentation_beside_a_driver_pool_reading_is_not_measured_whatever_the_allocators_name():
    """A trace may carry a driver pool reading with a null allocator (read as "unknown") and a
    largest free block (core/tracefile.py accepts both); that block is not a block of the driver
    pool, so no fragmentation is made of the two."""
    stats = AllocatorStats(allocator="unknown", bytes_in_use=3 * GiB, largest_free_block_bytes=GiB)
    assert fragmentation(stats, POOL_8_OF_3) is None


def test_fragmentation_of_a_pool_with_one_free_byte_outside_any_block_is_whole():
    """BFC's chunks are multiples of 256 bytes (kMinAllocationBits = 8, xla/tsl/framework/
    bfc_allocator.h), so XLA never reports one free byte; a trace file may: (1 - 0) / 1."""
    assert fragmentation(bfc(pool_bytes=1024, bytes_in_use=1023, largest_free_block_bytes=0)) == 1.0


def test_driver_pool_is_known_by_the_allocator_or_by_a_pool_reading():
    assert uses_driver_pool(cuda_async())
    assert uses_driver_pool(AllocatorStats(allocator="unknown"), POOL_8_OF_3)
    assert not uses_driver_pool(bfc(pool_bytes=GiB))


# A pool reading from the driver is the cuda_async pool even where the allocator's name is not known.
NAMELESS = AllocatorStats(allocator="unknown", bytes_in_use=3 * GiB)


def test_largest_likely_request_with_a_driver_pool_reading_is_its_unused_bytes_when_larger_whatever_the_name():
    # 8 GiB reserved - 3 GiB in use = 5 GiB unused; the device has 1 GiB free -> 5 GiB
    assert largest_likely_request(NAMELESS, POOL_8_OF_3, device_free=1 * GiB) == 5 * GiB


def test_available_bytes_with_a_driver_pool_reading_is_unused_pool_plus_device_free_whatever_the_name():
    # 5 GiB unused + 1 GiB free = 6 GiB
    assert available_bytes(NAMELESS, POOL_8_OF_3, device_free=1 * GiB) == 6 * GiB


def test_available_bytes_with_a_driver_pool_reading_is_unknown_without_device_free_whatever_the_name():
    assert available_bytes(NAMELESS, POOL_8_OF_3) is None


def test_growth_with_a_driver_pool_reading_is_what_the_device_has_free_whatever_the_name():
    assert growth_room(NAMELESS, POOL_8_OF_3, device_free=1 * GiB) == 1 * GiB


def test_a_device_with_nothing_free_leaves_no_room_to_grow():
    assert growth_room(cuda_async(), POOL_8_OF_3, device_free=0) == 0
    assert growth_room(bfc(bytes_limit=8 * GiB, pool_bytes=6 * GiB), device_free=-1) == 0


def test_headroom_with_a_driver_pool_reading_is_unknown_whatever_the_name():
    stats = AllocatorStats(allocator="unknown", bytes_in_use=3 * GiB, bytes_limit=60 * GiB)
    assert headroom(stats, POOL_8_OF_3) is None


def test_unused_pool_bytes_of_a_pool_all_in_use_is_zero():
    assert unused_pool_bytes(bfc(pool_bytes=4 * GiB, bytes_in_use=4 * GiB)) == 0


def test_available_bytes_under_cuda_async_unknown_without_device_free():
    assert available_bytes(cuda_async(), POOL_8_OF_3) is None


def test_largest_likely_request_under_cuda_async_is_zero_with_the_pool_all_in_use_and_nothing_free():
    full = cuda_async(bytes_in_use=8 * GiB)
    assert largest_likely_request(full, driver_pool(8 * GiB, 8 * GiB), device_free=0) == 0


def test_available_bytes_under_cuda_async_with_the_pool_all_in_use_is_device_free():
    full = cuda_async(bytes_in_use=8 * GiB)
    assert available_bytes(full, driver_pool(8 * GiB, 8 * GiB), device_free=2 * GiB) == 2 * GiB


def test_largest_likely_request_without_a_limit_is_the_largest_free_block():
    # no bytes_limit: growth unknown, so the 3 GiB block is what is known to fit
    assert largest_likely_request(bfc(pool_bytes=12 * GiB, largest_free_block_bytes=3 * GiB)) == 3 * GiB


def test_largest_likely_request_without_a_largest_block_is_the_growth():
    # limit 8 GiB - pool 6 GiB = 2 GiB the pool may still grow by
    assert largest_likely_request(bfc(bytes_limit=8 * GiB, pool_bytes=6 * GiB)) == 2 * GiB


def test_largest_likely_request_of_a_full_preallocated_pool_is_zero():
    assert largest_likely_request(bfc(bytes_limit=8 * GiB, pool_bytes=8 * GiB, largest_free_block_bytes=0)) == 0


def test_available_bytes_of_a_preallocated_pool_is_its_unused_bytes():
    # pool 8 GiB = limit, 3 GiB in use -> 5 GiB, and no growth
    assert available_bytes(bfc(bytes_limit=8 * GiB, pool_bytes=8 * GiB, bytes_in_use=3 * GiB)) == 5 * GiB


# --- normalise_stats -----------------------------------------------------------------------------


BFC_RAW = {
    "num_allocs": 12,
    "bytes_in_use": 4096,
    "peak_bytes_in_use": 8192,
    "largest_alloc_size": 2048,
    "bytes_limit": 1 << 34,
    "bytes_reserved": 0,
    "peak_bytes_reserved": 0,
    "largest_free_block_bytes": 1 << 30,
    "pool_bytes": 1 << 31,
    "peak_pool_bytes": 1 << 31,
}


def test_normalise_bfc_keeps_every_stat_and_the_raw_dict():
    stats = normalise_stats(BFC_RAW, "bfc")
    assert (stats.bytes_in_use, stats.pool_bytes, stats.largest_free_block_bytes) == (4096, 1 << 31, 1 << 30)
    assert stats.raw == BFC_RAW


def test_normalise_minus_one_becomes_none():
    assert normalise_stats({**BFC_RAW, "peak_bytes_in_use": -1}, "bfc").peak_bytes_in_use is None


def test_normalise_cuda_async_drops_its_meaningless_zeros():
    raw = {"bytes_in_use": 1001, "bytes_limit": 0, "largest_free_block_bytes": 0}
    stats = normalise_stats(raw, "cuda_async")
    assert (stats.bytes_in_use, stats.bytes_limit, stats.largest_free_block_bytes) == (1001, None, None)


def test_normalise_cuda_async_keeps_a_real_limit():
    assert normalise_stats({"bytes_limit": 60 * GiB}, "cuda_async").bytes_limit == 60 * GiB


def test_normalise_cpu_none_is_not_available_with_no_stats():
    assert normalise_stats(None, "bfc", platform="cpu") == NotAvailable(
        model.NO_STATS, "JAX is running on the CPU, which keeps no allocator statistics"
    )


def test_normalise_none_from_a_gpu_allocator_says_which_allocator_keeps_none():
    assert normalise_stats(None, "platform") == NotAvailable(
        model.NO_STATS, "the platform allocator reports no memory statistics"
    )


def test_normalise_non_dict_is_an_error_value_naming_what_came():
    assert normalise_stats([1, 2], "bfc") == NotAvailable(model.ERROR, "memory_stats() returned list, not a dict")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1.0])
def test_normalise_non_finite_and_negative_floats_become_none(value):
    assert normalise_stats({"bytes_in_use": value}, "bfc").bytes_in_use is None


def test_normalise_whole_floats_count_and_fractions_do_not():
    stats = normalise_stats({"bytes_in_use": 512.0, "pool_bytes": 0.5, "num_allocs": True}, "bfc")
    assert (stats.bytes_in_use, stats.pool_bytes, stats.num_allocs) == (512, None, None)


_values = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(list(BFC_RAW) + ["other", ""]) | st.text(max_size=6), _values, max_size=12),
    st.sampled_from(["bfc", "cuda_async", "platform", "tpu", ""]),
    st.sampled_from(["gpu", "cpu", "tpu"]),
)
def test_normalise_never_raises_and_gives_non_negative_counts(raw, allocator, platform):
    stats = normalise_stats(raw, allocator, platform)
    assert isinstance(stats, AllocatorStats)
    for key in model.STAT_KEYS:
        value = getattr(stats, key)
        assert value is None or (type(value) is int and value >= 0)


@settings(max_examples=50, deadline=None)
@given(_values)
def test_normalise_never_raises_for_any_value(raw):
    assert isinstance(normalise_stats(raw, "bfc"), (AllocatorStats, NotAvailable))


# --- Timeline ------------------------------------------------------------------------------------


def _sample(t: float) -> Sample:
    return Sample(t=t, pid=1, devices=(), jax=())


def test_timeline_keeps_only_the_newest_samples():
    timeline = Timeline(max_samples=3)
    for t in range(5):
        timeline.append(_sample(float(t)))
    assert [s.t for s in timeline.samples()] == [2.0, 3.0, 4.0]


def test_timeline_bounds_events_too():
    timeline = Timeline(max_events=2)
    for t in range(4):
        timeline.add_event(Event(float(t), "marker"))
    assert [e.t for e in timeline.events()] == [2.0, 3.0]


def test_timeline_since_returns_strictly_later_items():
    timeline = Timeline()
    timeline.extend([_sample(1.0), _sample(2.0), Event(1.5, "cell_start"), _sample(3.0)])
    assert [s.t for s in timeline.samples(since=2.0)] == [3.0]
    assert [e.t for e in timeline.events(since=1.0)] == [1.5]


def test_timeline_events_since_a_time_leave_out_an_event_at_that_time():
    timeline = Timeline()
    timeline.extend([Event(1.0, "cell_start"), Event(2.0, "cell_end")])
    assert [e.t for e in timeline.events(since=1.0)] == [2.0]


def test_a_timeline_keeps_a_copy_of_its_trace_header():
    header = {"synthetic": True, "format": "jupyter-gpumem-trace"}
    timeline = Timeline(trace_header=header)
    header["synthetic"] = False
    assert (timeline.trace_header, Timeline().trace_header) == (
        {"synthetic": True, "format": "jupyter-gpumem-trace"},
        None,
    )


def test_timeline_version_bumps_on_every_change():
    timeline = Timeline()
    timeline.append(_sample(1.0))
    timeline.add_event(Event(1.0, "marker"))
    timeline.clear()
    assert timeline.version == 3 and len(timeline) == 0 and timeline.latest() is None


def test_extending_a_timeline_is_one_change_however_many_items_it_adds():
    timeline = Timeline()
    timeline.extend([_sample(1.0), Event(1.0, "marker"), _sample(2.0)])
    timeline.extend([_sample(3.0)])
    assert timeline.version == 2


def test_the_latest_sample_is_the_newest_appended():
    timeline = Timeline()
    timeline.extend([_sample(1.0), _sample(2.0), _sample(3.0)])
    assert timeline.latest().t == 3.0


def test_timeline_appends_from_many_threads_lose_nothing():
    timeline = Timeline(max_samples=10_000)
    start = threading.Barrier(4)

    def writer(k: int) -> None:
        start.wait()
        for i in range(500):
            timeline.append(_sample(k * 1000 + i))
            timeline.samples()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(timeline) == 2000 and timeline.version == 2000


def test_a_sample_finds_a_device_and_its_jax_reading_by_index_the_first_listed_winning():
    first, second = DeviceReading(3, "first", "GPU-a", 10, 1, 9), DeviceReading(3, "second", "GPU-b", 10, 1, 9)
    jax = (
        JaxDeviceReading(0, "gpu", "x", 3, NotAvailable("not_started", "synthetic")),
        JaxDeviceReading(1, "gpu", "y", 3, NotAvailable("not_started", "synthetic")),
    )
    sample = Sample(t=1.0, pid=1, devices=(first, DeviceReading(0, "other", "GPU-c", 10, 1, 9), second), jax=jax)
    assert sample.device(3) is first and sample.device(0).name == "other" and sample.device(9) is None
    assert sample.jax_for(3).jax_id == 0 and sample.jax_for(0) is None
    assert Sample(t=1.0, pid=1, devices=NotAvailable("no_driver", "synthetic"), jax=()).device(0) is None


def test_a_pid_listed_twice_on_a_device_holds_the_sum_of_its_entries():
    # NVML lists a process once per context kind (compute and graphics) it has on a device.
    device = model.DeviceReading(
        0,
        "GPU",
        "GPU-0",
        40 * GiB,
        9 * GiB,
        31 * GiB,
        processes=(
            model.ProcessReading(7, 3 * GiB),
            model.ProcessReading(8, 1 * GiB),
            model.ProcessReading(7, 5 * GiB),
        ),
    )
    assert (device.process_bytes(7), device.process_bytes(8), device.process_bytes(9)) == (8 * GiB, 1 * GiB, 0)


def test_a_timeline_keeps_the_last_36000_samples_and_10000_events_by_default():
    timeline = model.Timeline()
    for i in range(36_001):
        timeline.append(model.Sample(t=float(i), pid=1, devices=(), jax=()))
    for i in range(10_001):
        timeline.add_event(model.Event(float(i), "marker", {}))
    assert [s.t for s in timeline.samples()][:1] == [1.0] and len(timeline.samples()) == 36_000
    assert timeline.events()[0].t == 1.0 and len(timeline.events()) == 10_000


# --- NotAvailable and AllocatorSettings ------------------------------------------------------------


def test_a_missing_reading_is_falsy_so_a_default_reads_naturally():
    missing = NotAvailable("no_driver", "synthetic: libcuda is not loaded")
    assert (bool(missing), missing or 7) == (False, 7)


def test_only_a_not_available_value_is_unavailable():
    assert (is_available(0), is_available(None), is_available(NotAvailable("gpu_lost", "synthetic"))) == (
        True,
        True,
        False,
    )


def test_settings_given_are_the_set_ones_in_a_stable_order():
    settings = AllocatorSettings(remat=False, allocator="bfc", fraction=0.5)
    assert list(settings.given().items()) == [("fraction", 0.5), ("allocator", "bfc"), ("remat", False)]


def test_merged_settings_take_the_other_ones_given_values_on_top():
    base = AllocatorSettings(preallocate=False, fraction=0.5)
    merged = base.merged(AllocatorSettings(fraction=0.8, allocator="cuda_async"))
    assert merged == AllocatorSettings(preallocate=False, fraction=0.8, allocator="cuda_async")
