"""``%gpumem estimate``: a compiled call's needs judged against the room on the device, BFC and
cuda_async alike, from hand-made Samples (no JAX, no GPU).

Under cuda_async XLA allocates from the CUDA driver's default pool, which has no max size, and
reports no pool_bytes; with preallocation off it reports bytes_limit 0 and largest free block 0
(openxla/xla, xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc, read at the ROCm/xla fork,
commit 37fe764f8b67842e6783c6f439647fff3a251899; xla/pjrt/gpu/se_gpu_pjrt_client.cc gives it a
release threshold of 0 with preallocation off; see shared/reference/jax-memory-facts.md). So the
room there is the driver pool's unused bytes and the device's free bytes, as the monitor reads it.
"""

from __future__ import annotations

import pytest

from jupyter_gpumem.core.readings import (
    NO_DRIVER,
    CudaPoolReading,
    DeviceReading,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
    normalise_stats,
)
from jupyter_gpumem.doctor.estimating import estimate_report, room_now
from jupyter_gpumem.sources.jax_arrays import CompiledMemory

pytestmark = pytest.mark.jax_versions

GiB = 1 << 30
PID = 4242


def needs(output: int, temp: int) -> CompiledMemory:
    return CompiledMemory(
        argument_bytes=GiB,
        output_bytes=output,
        temp_bytes=temp,
        alias_bytes=0,
        code_bytes=0,
        peak_bytes=None,
        jitted=True,
    )


def gpu(free: int, process: int) -> DeviceReading:
    return DeviceReading(
        0, "NVIDIA H100 80GB HBM3", "GPU-0", 80 * GiB, 80 * GiB - free, free, processes=(ProcessReading(PID, process),)
    )


def cuda_async_sample(free: int, nvml: bool = True) -> Sample:
    """cuda_async, preallocation off: the driver pool reserves 8 GiB, 3 GiB in use."""
    stats = normalise_stats(
        {"bytes_in_use": 3 * GiB, "peak_bytes_in_use": 3 * GiB, "bytes_limit": 0, "largest_free_block_bytes": 0},
        "cuda_async",
    )
    pool = CudaPoolReading(
        reserved_bytes=8 * GiB, reserved_high_bytes=8 * GiB, used_bytes=3 * GiB, used_high_bytes=3 * GiB
    )
    jax = (JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, stats, pool),)
    devices = (gpu(free, 9 * GiB),) if nvml else NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded")
    return Sample(t=1.0, pid=PID, devices=devices, jax=jax)


def bfc_sample(free: int) -> Sample:
    """BFC, preallocation off: pool 16 GiB, 6 in use, limit 60, largest free block 4 GiB."""
    stats = normalise_stats(
        {"bytes_in_use": 6 * GiB, "pool_bytes": 16 * GiB, "bytes_limit": 60 * GiB, "largest_free_block_bytes": 4 * GiB},
        "bfc",
    )
    jax = (JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, stats),)
    return Sample(t=1.0, pid=PID, devices=(gpu(free, 20 * GiB),), jax=jax)


def test_estimate_under_cuda_async_fits_when_the_device_has_room():
    # needs 2 + 3 = 5 GiB, largest piece 3; room: max(8 - 3 unused, 71 free) = 71, in total 5 + 71 = 76
    report = estimate_report("f(x)", needs(2 * GiB, 3 * GiB), cuda_async_sample(free=71 * GiB))
    assert report.verdict == "fits"
    assert (report.largest_block, report.total_free) == (71 * GiB, 76 * GiB)
    assert "the driver pool's unused bytes and the device's free memory" in report.measure


def test_estimate_under_cuda_async_with_preallocation_on_counts_the_reserved_pool():
    # bytes_limit 60 GiB (the release threshold); the driver pool reserves 60, 20 in use -> 40 unused;
    # 10 free on the device: largest max(40, 10) = 40, in total 40 + 10 = 50; needs 5 GiB
    stats = normalise_stats(
        {"bytes_in_use": 20 * GiB, "bytes_limit": 60 * GiB, "largest_free_block_bytes": 0}, "cuda_async"
    )
    pool = CudaPoolReading(
        reserved_bytes=60 * GiB, reserved_high_bytes=60 * GiB, used_bytes=20 * GiB, used_high_bytes=20 * GiB
    )
    sample = Sample(
        t=1.0,
        pid=PID,
        devices=(gpu(10 * GiB, 61 * GiB),),
        jax=(JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, stats, pool),),
    )
    report = estimate_report("f(x)", needs(2 * GiB, 3 * GiB), sample)
    assert (report.verdict, report.largest_block, report.total_free) == ("fits", 40 * GiB, 50 * GiB)


def test_estimate_under_cuda_async_does_not_fit_when_the_device_is_full():
    # needs 10 GiB; room: 5 unused in the pool + 1 free on the device = 6 GiB
    report = estimate_report("f(x)", needs(4 * GiB, 6 * GiB), cuda_async_sample(free=1 * GiB))
    assert (report.verdict, report.total_free) == ("does not fit", 6 * GiB)


def test_estimate_under_cuda_async_without_nvml_is_unknown():
    largest, total, measure = room_now(cuda_async_sample(free=71 * GiB, nvml=False))
    assert (largest, total) == (None, None)
    assert "cannot be read" in measure
    assert estimate_report("f(x)", needs(GiB, GiB), cuda_async_sample(free=71 * GiB, nvml=False)).verdict == "unknown"


def test_estimate_under_bfc_caps_growth_by_the_device_free_memory():
    # headroom 60 - 16 = 44 GiB, but only 30 free: largest max(4 block, 30) = 30; total 10 unused + 30 = 40
    report = estimate_report("f(x)", needs(15 * GiB, 20 * GiB), bfc_sample(free=30 * GiB))
    assert (report.largest_block, report.total_free, report.verdict) == (30 * GiB, 40 * GiB, "fits")
    assert report.measure == "allocator statistics of device 0"


def test_estimate_under_bfc_beyond_what_could_be_had_does_not_fit():
    assert estimate_report("f(x)", needs(20 * GiB, 25 * GiB), bfc_sample(free=30 * GiB)).verdict == "does not fit"


def test_estimate_on_the_cpu_is_judged_against_host_memory():
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    sample = Sample(t=1.0, pid=PID, devices=NotAvailable(NO_DRIVER, "no driver"), jax=(cpu,))
    assert room_now(sample)[2] == "host memory available (CPU: no allocator statistics)"


def test_estimate_that_fits_only_after_defragmenting_names_the_piece_and_the_block():
    # BFC, 2 GiB free on the device: largest max(4 block, 2) = 4; total 10 unused + 2 = 12 GiB.
    # needs 5 + 3 = 8 GiB (within 12), but the 5 GiB output is larger than the 4 GiB block.
    report = estimate_report("f(x)", needs(5 * GiB, 3 * GiB), bfc_sample(free=2 * GiB))
    assert report.lines()[0] == (
        "f(x): fits only after defragmenting: needs 8.00 GiB of 12.00 GiB free, but its "
        "largest piece (5.00 GiB) is larger than the largest free block (4.00 GiB)"
    )


def test_estimate_that_does_not_fit_says_needed_against_free():
    # needs 20 + 25 = 45 GiB; total 10 unused + 30 free on the device = 40 GiB
    report = estimate_report("f(x)", needs(20 * GiB, 25 * GiB), bfc_sample(free=30 * GiB))
    assert report.lines()[0] == "f(x): does not fit: needs 45.00 GiB, only 40.00 GiB free"


def test_host_memory_available_is_memavailable_in_bytes(tmp_path):
    from jupyter_gpumem.sources import host_memory

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684096 kB\nMemFree:        20548260 kB\nMemAvailable:   24098500 kB\n")
    assert host_memory.available_bytes(str(meminfo)) == 24098500 * 1024
    assert host_memory.available_bytes(str(tmp_path / "absent")) is None
