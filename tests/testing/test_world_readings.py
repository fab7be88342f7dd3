"""Every fake NVML scenario, read by NvmlSource through every driver and binding: whole expected readings.

``EXPECTED`` is what NvmlSource should report for each scenario on a driver and a binding
that both have NVML's v2 memory query (driver 510.39.01 or later, nvidia-ml-py 11.515.48 or
later). The other combinations differ only where NVML itself does, as ``expected_reading``
spells out. The axes are the ``scenario_name``, ``driver`` and ``nvidia_ml_py`` fixtures in
conftest.py.
"""

from __future__ import annotations

import dataclasses

from jupyter_gpumem.core.readings import (
    GPU_LOST,
    NO_DRIVER,
    NO_LIBRARY,
    NO_PERMISSION,
    NOT_SUPPORTED,
    PIDS_HIDDEN,
    DeviceReading,
    DeviceUnreadable,
    NotAvailable,
    ProcessReading,
)
from jupyter_gpumem.sources.nvml import NvmlSource
from jupyter_gpumem.testing import SCENARIOS, fake_nvml
from jupyter_gpumem.testing.scenarios import DGX_H100_BUSY, DGX_H100_JOBS, SIXTEEN_V100_USED_GIB

MiB = 1024**2
GiB = 1024**3


def uuid(n: int) -> str:
    return f"GPU-5a1e{n:04x}-0000-4000-8000-{n:012x}"


def a100_40gb(index: int, n: int, *, used: int, utilization: int, processes) -> DeviceReading:
    """An A100-SXM4-40GB of the scenarios: 40,960 MiB, 512 MiB of it reserved by the driver."""
    total, reserved = 40_960 * MiB, 512 * MiB
    return DeviceReading(
        index=index,
        name="NVIDIA A100-SXM4-40GB",
        uuid=uuid(n),
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - reserved - used,
        reserved_bytes=reserved,
        utilization_percent=utilization,
        display_active=False,
        mig_mode=False,
        processes=processes,
    )


def rtx_a4000(index: int, n: int, *, used: int, utilization: int, display: bool, processes) -> DeviceReading:
    """An RTX A4000 of the display_gpu scenario: 16,376 MiB, 240 MiB reserved, cannot do MIG."""
    total, reserved = 16_376 * MiB, 240 * MiB
    return DeviceReading(
        index=index,
        name="NVIDIA RTX A4000",
        uuid=uuid(n),
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - reserved - used,
        reserved_bytes=reserved,
        utilization_percent=utilization,
        display_active=display,
        mig_mode=False,
        processes=processes,
    )


def h100_80gb(index: int, *, utilization: int, processes) -> DeviceReading:
    """An H100 80GB of dgx_h100: 81,559 MiB, 566 MiB of it reserved; used is what its processes hold."""
    total, reserved = 81_559 * MiB, 566 * MiB
    used = sum(p.used_bytes for p in processes)
    return DeviceReading(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        uuid=uuid(600 + index),
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - reserved - used,
        reserved_bytes=reserved,
        utilization_percent=utilization,
        display_active=False,
        mig_mode=False,
        processes=processes,
    )


def dgx_h100() -> tuple[DeviceReading, ...]:
    """Eight H100s; each GPU lists the jobs on it in the order they were started (by pid)."""
    return tuple(
        h100_80gb(
            i,
            utilization=busy,
            processes=tuple(ProcessReading(pid, gib[i] * GiB) for pid, gib in DGX_H100_JOBS.items() if i in gib),
        )
        for i, busy in enumerate(DGX_H100_BUSY)
    )


def v100_32gb(index: int, used_gib: int) -> DeviceReading:
    """A V100 32GB of sixteen_v100: 32,768 MiB, 256 MiB reserved, one process if any is used."""
    total, reserved, used = 32_768 * MiB, 256 * MiB, used_gib * GiB
    pid = 4_204_000 if index < 8 else 4_204_100 + index
    return DeviceReading(
        index=index,
        name="Tesla V100-SXM3-32GB",
        uuid=uuid(700 + index),
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - reserved - used,
        reserved_bytes=reserved,
        utilization_percent=min(99, 3 * used_gib),
        display_active=False,
        mig_mode=False,
        processes=(ProcessReading(pid, used),) if used else (),
    )


GPU_1_LOST = NotAvailable(
    GPU_LOST,
    "GPU 1 has fallen off the bus (NVML: GPU is lost): it needs a reset (nvidia-smi -r) or a reboot; "
    "the other GPUs are still read",
)

EXPECTED: dict[str, tuple[DeviceReading | DeviceUnreadable, ...] | NotAvailable] = {
    "three_gpus": (
        a100_40gb(
            0,
            0,
            used=32 * GiB,
            utilization=87,
            processes=(ProcessReading(4_200_101, 30 * GiB), ProcessReading(4_200_102, 2 * GiB)),
        ),
        a100_40gb(1, 1, used=10 * GiB, utilization=12, processes=(ProcessReading(4_200_201, 10 * GiB),)),
        a100_40gb(2, 2, used=0, utilization=0, processes=()),
    ),
    "single_h100": (
        DeviceReading(
            index=0,
            name="NVIDIA H100 80GB HBM3",
            uuid=uuid(100),
            total_bytes=81_559 * MiB,
            used_bytes=0,
            free_bytes=(81_559 - 566) * MiB,
            reserved_bytes=566 * MiB,
            utilization_percent=0,
            display_active=False,
            mig_mode=False,
            processes=(),
        ),
    ),
    "no_driver": NotAvailable(NO_DRIVER, "NVIDIA driver not loaded: nvidia-smi should work before the monitor can"),
    "no_library": NotAvailable(
        NO_LIBRARY,
        "NVIDIA's NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed here, "
        "or it is not visible inside this container",
    ),
    "no_permission": NotAvailable(
        NO_PERMISSION,
        "no permission to query the GPUs: the user running Jupyter needs access to /dev/nvidia* "
        "(try nvidia-smi as that user)",
    ),
    "lost_gpu": (
        a100_40gb(0, 0, used=8 * GiB, utilization=40, processes=(ProcessReading(4_200_101, 8 * GiB),)),
        DeviceUnreadable(index=1, why=GPU_1_LOST),  # lost before its name was read
    ),
    # Whether the pid lives is for the server to find out; the driver's word is passed on.
    "vanished_pid": (a100_40gb(0, 0, used=12 * GiB, utilization=5, processes=(ProcessReading(4_200_999, 12 * GiB),)),),
    "mig": (
        DeviceReading(
            index=0,
            name="NVIDIA A100-SXM4-80GB",
            uuid=uuid(300),
            total_bytes=81_920 * MiB,
            used_bytes=20 * GiB,
            free_bytes=(81_920 - 640) * MiB - 20 * GiB,
            reserved_bytes=640 * MiB,
            utilization_percent=NotAvailable(NOT_SUPPORTED, "GPU 0 or its driver does not report utilisation"),
            display_active=False,
            mig_mode=True,
            processes=NotAvailable(
                PIDS_HIDDEN,
                "GPU 0 is in MIG mode: NVML reports memory per MIG instance, not per process on the whole GPU",
            ),
        ),
    ),
    # Xorg's 220 MiB count on GPU 0 but it is a graphics process, not in the compute list.
    "display_gpu": (
        rtx_a4000(
            0,
            400,
            used=220 * MiB + 3 * GiB,
            utilization=9,
            display=True,
            processes=(ProcessReading(4_200_402, 3 * GiB),),
        ),
        rtx_a4000(1, 401, used=6 * GiB, utilization=0, display=False, processes=(ProcessReading(4_200_403, 6 * GiB),)),
    ),
    # The host's pids with their memory, as NVML lists them inside a container (nvidia-docker#1483).
    "containerized": (
        a100_40gb(0, 500, used=30 * GiB, utilization=63, processes=(ProcessReading(4_201_001, 30 * GiB),)),
        a100_40gb(
            1,
            501,
            used=18 * GiB,
            utilization=20,
            processes=(ProcessReading(4_201_002, 12 * GiB), ProcessReading(4_201_003, 6 * GiB)),
        ),
    ),
    # GPU 5 holds two jobs, 74 GiB of its 80: the fullest of the eight.
    "dgx_h100": dgx_h100(),
    "sixteen_v100": tuple(v100_32gb(i, gib) for i, gib in enumerate(SIXTEEN_V100_USED_GIB)),
}

RESERVED_UNKNOWN = NotAvailable(NOT_SUPPORTED, "this driver does not report reserved memory (NVML memory info v1)")

# NvmlSource asks for the process list through the unversioned nvmlDeviceGetComputeRunningProcesses.
# From nvidia-ml-py 11.515.48 that calls the driver's _v3, which no driver before 510.39.01 has;
# NvmlSource then asks the binding's _v2 function, so every combination lists the same processes.


def has_memory_info_v2(driver: str, nvidia_ml_py: str) -> bool:
    """nvmlDeviceGetMemoryInfo_v2 came with driver 510.39.01; nvidia-ml-py 11.495.46 cannot ask for it."""
    return int(driver.split(".")[0]) >= 510 and nvidia_ml_py != "11.495.46"


def as_memory_info_v1(reading: DeviceReading | DeviceUnreadable) -> DeviceReading | DeviceUnreadable:
    """The reading through NVML's v1 memory query: reserved memory counts as used, and is unknown."""
    if not isinstance(reading, DeviceReading):
        return reading
    return dataclasses.replace(
        reading, used_bytes=reading.used_bytes + reading.reserved_bytes, reserved_bytes=RESERVED_UNKNOWN
    )


def expected_reading(scenario_name: str, driver: str, nvidia_ml_py: str):
    expected = EXPECTED[scenario_name]
    if isinstance(expected, NotAvailable) or has_memory_info_v2(driver, nvidia_ml_py):
        return expected
    return tuple(as_memory_info_v1(reading) for reading in expected)


def test_every_scenario_has_an_expected_reading():
    assert sorted(EXPECTED) == sorted(SCENARIOS)


def test_nvml_source_reads_the_expected_devices(world, scenario_name, driver, nvidia_ml_py):
    expected = expected_reading(scenario_name, driver, nvidia_ml_py)
    assert NvmlSource().read() == expected


def test_dgx_h100_is_fullest_on_gpu_5_with_74_of_80_gib():
    with fake_nvml("dgx_h100"):
        readings = NvmlSource().read()
    assert len(readings) == 8
    fullest = max(readings, key=lambda r: r.used_bytes / r.total_bytes)
    assert (fullest.index, fullest.used_bytes, fullest.total_bytes) == (5, 74 * GiB, 81_559 * MiB)
