"""NvmlSource against the fake NVML world: one named scenario, one whole expected reading."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from jupyter_gpumem.core.readings import (
    ERROR,
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
from jupyter_gpumem.testing import FakeGpu, FakeWorld, fake_nvml, scenario

from doubles import Clock

MiB = 1024**2
GiB = 1024**3
A100_40 = "NVIDIA A100-SXM4-40GB"
A100_TOTAL = 40_960 * MiB
A100_RESERVED = 512 * MiB

NVML_NO_DRIVER = NotAvailable(NO_DRIVER, "NVIDIA driver not loaded: nvidia-smi should work before the monitor can")
NVML_NO_LIBRARY = NotAvailable(
    NO_LIBRARY,
    "NVIDIA's NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed here, "
    "or it is not visible inside this container",
)
NVML_NO_PERMISSION = NotAvailable(
    NO_PERMISSION,
    "no permission to query the GPUs: the user running Jupyter needs access to /dev/nvidia* "
    "(try nvidia-smi as that user)",
)
HIDDEN_PROCESS_MEMORY = NotAvailable(
    PIDS_HIDDEN, "the driver does not report this process's memory (as in MIG mode, and always under Windows WDDM)"
)


def gpu_lost(index: int) -> NotAvailable:
    return NotAvailable(
        GPU_LOST,
        f"GPU {index} has fallen off the bus (NVML: GPU is lost): it needs a reset (nvidia-smi -r) "
        "or a reboot; the other GPUs are still read",
    )


def a100(index: int, uuid: str, used: int, util: int, processes) -> DeviceReading:
    return DeviceReading(
        index=index,
        name=A100_40,
        uuid=uuid,
        total_bytes=A100_TOTAL,
        used_bytes=used,
        free_bytes=A100_TOTAL - A100_RESERVED - used,
        reserved_bytes=A100_RESERVED,
        utilization_percent=util,
        display_active=False,
        mig_mode=False,
        processes=processes,
    )


def read(world_or_name):
    with fake_nvml(world_or_name):
        return NvmlSource().read()


# --- every scenario, whole ----------------------------------------------------------------------


def test_three_gpus():
    assert read("three_gpus") == (
        a100(
            0,
            "GPU-5a1e0000-0000-4000-8000-000000000000",
            32 * GiB,
            87,
            (ProcessReading(4_200_101, 30 * GiB), ProcessReading(4_200_102, 2 * GiB)),
        ),
        a100(1, "GPU-5a1e0001-0000-4000-8000-000000000001", 10 * GiB, 12, (ProcessReading(4_200_201, 10 * GiB),)),
        a100(2, "GPU-5a1e0002-0000-4000-8000-000000000002", 0, 0, ()),
    )


def test_single_h100():
    assert read("single_h100") == (
        DeviceReading(
            index=0,
            name="NVIDIA H100 80GB HBM3",
            uuid="GPU-5a1e0064-0000-4000-8000-000000000064",
            total_bytes=81_559 * MiB,
            used_bytes=0,
            free_bytes=(81_559 - 566) * MiB,
            reserved_bytes=566 * MiB,
            utilization_percent=0,
            display_active=False,
            mig_mode=False,
            processes=(),
        ),
    )


def test_no_driver():
    assert read("no_driver") == NVML_NO_DRIVER


def test_no_library():
    assert read("no_library") == NVML_NO_LIBRARY


def test_no_permission():
    assert read("no_permission") == NVML_NO_PERMISSION


def test_lost_gpu_is_unreadable_while_the_other_reads():
    assert read("lost_gpu") == (
        a100(0, "GPU-5a1e0000-0000-4000-8000-000000000000", 8 * GiB, 40, (ProcessReading(4_200_101, 8 * GiB),)),
        DeviceUnreadable(index=1, why=gpu_lost(1)),
    )


def test_vanished_pid_is_still_reported_as_nvml_lists_it():
    # Whether the pid lives is for the server to find out; the driver's word is passed on.
    assert read("vanished_pid") == (
        a100(0, "GPU-5a1e0000-0000-4000-8000-000000000000", 12 * GiB, 5, (ProcessReading(4_200_999, 12 * GiB),)),
    )


def test_mig():
    assert read("mig") == (
        DeviceReading(
            index=0,
            name="NVIDIA A100-SXM4-80GB",
            uuid="GPU-5a1e012c-0000-4000-8000-00000000012c",
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
    )


def test_display_gpu():
    total, reserved = 16_376 * MiB, 240 * MiB
    used0 = 220 * MiB + 3 * GiB  # Xorg's graphics context counts on the device, not in the list
    assert read("display_gpu") == (
        DeviceReading(
            index=0,
            name="NVIDIA RTX A4000",
            uuid="GPU-5a1e0190-0000-4000-8000-000000000190",
            total_bytes=total,
            used_bytes=used0,
            free_bytes=total - reserved - used0,
            reserved_bytes=reserved,
            utilization_percent=9,
            display_active=True,
            mig_mode=False,
            processes=(ProcessReading(4_200_402, 3 * GiB),),
        ),
        DeviceReading(
            index=1,
            name="NVIDIA RTX A4000",
            uuid="GPU-5a1e0191-0000-4000-8000-000000000191",
            total_bytes=total,
            used_bytes=6 * GiB,
            free_bytes=total - reserved - 6 * GiB,
            reserved_bytes=reserved,
            utilization_percent=0,
            display_active=False,
            mig_mode=False,
            processes=(ProcessReading(4_200_403, 6 * GiB),),
        ),
    )


def test_containerized():
    # NVML inside a container lists the host's pids with their memory (NVIDIA/nvidia-docker#1483).
    assert read("containerized") == (
        a100(0, "GPU-5a1e01f4-0000-4000-8000-0000000001f4", 30 * GiB, 63, (ProcessReading(4_201_001, 30 * GiB),)),
        a100(
            1,
            "GPU-5a1e01f5-0000-4000-8000-0000000001f5",
            18 * GiB,
            20,
            (ProcessReading(4_201_002, 12 * GiB), ProcessReading(4_201_003, 6 * GiB)),
        ),
    )


def test_memory_the_driver_does_not_report_is_not_available_with_a_reason():
    world = scenario("single_h100")
    world.add_process(0, 4_201_001, None)
    (h100,) = read(world)
    assert h100.processes == (ProcessReading(4_201_001, HIDDEN_PROCESS_MEMORY),)


# --- lazy start, call counts ----------------------------------------------------------------------


def test_importing_nvml_imports_no_pynvml():
    code = "import sys, jupyter_gpumem.sources.nvml as n; n.NvmlSource(); print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_first_read_costs_two_plus_eight_calls_per_device():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        source.read()
        assert source.calls == world.total_calls() == 2 + 8 * 3


def test_later_reads_cost_five_calls_per_device():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        source.read()
        world.reset_calls()
        before = source.calls
        source.read()
        assert source.calls - before == world.total_calls() == 5 * 3
        assert world.calls == {
            "nvmlDeviceGetMemoryInfo": 3,
            "nvmlDeviceGetUtilizationRates": 3,
            "nvmlDeviceGetDisplayActive": 3,
            "nvmlDeviceGetMigMode": 3,
            "nvmlDeviceGetComputeRunningProcesses": 3,
        }


def test_old_driver_falls_back_to_memory_v1_once():
    world = scenario("single_h100")
    world.gpu(0).unsupported.add("nvmlDeviceGetMemoryInfo_v2")
    with fake_nvml(world):
        source = NvmlSource()
        first = source.read()
        world.reset_calls()
        second = source.read()
    assert first == second
    (dev,) = first
    assert (dev.used_bytes, dev.free_bytes) == (566 * MiB, (81_559 - 566) * MiB)  # v1: reserved counts as used
    assert dev.reserved_bytes == NotAvailable(
        NOT_SUPPORTED, "this driver does not report reserved memory (NVML memory info v1)"
    )
    assert world.calls["nvmlDeviceGetMemoryInfo"] == 1


def test_missing_pynvml_is_no_library(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    assert NvmlSource().read() == NotAvailable(
        NO_LIBRARY, "the nvidia-ml-py package is not installed: pip install nvidia-ml-py"
    )


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver_is_no_library():
    assert "pynvml" not in sys.modules or not getattr(sys.modules["pynvml"], "__fake__", False)
    assert NvmlSource().read() == NVML_NO_LIBRARY


def test_driver_version():
    with fake_nvml("single_h100"):
        assert NvmlSource().driver_version() == "560.35.03"


def test_driver_version_without_driver_says_why():
    with fake_nvml("no_driver"):
        assert NvmlSource().driver_version() == NVML_NO_DRIVER


# --- a world that changes while it is read -----------------------------------------------------------


def test_a_real_pid_put_on_a_fake_gpu_is_read_then_gone():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        world.add_process(2, os.getpid(), 3 * GiB)
        assert source.read()[2].processes == (ProcessReading(os.getpid(), 3 * GiB),)
        assert source.read()[2].used_bytes == 3 * GiB
        world.remove_process(2, os.getpid())
        assert source.read()[2].processes == ()
        assert source.read()[2].used_bytes == 0


def test_set_used_shows_in_the_next_read():
    with fake_nvml("single_h100") as world:
        source = NvmlSource()
        source.read()
        world.set_used(0, 40 * GiB)
        (dev,) = source.read()
        assert (dev.used_bytes, dev.free_bytes) == (40 * GiB, (81_559 - 566) * MiB - 40 * GiB)


def test_fault_on_one_device_for_two_calls_then_recovery():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        healthy = source.read()
        world.inject_fault(1, "UNKNOWN", times=2, function="nvmlDeviceGetMemoryInfo")
        unreadable = DeviceUnreadable(
            index=1,
            why=NotAvailable(ERROR, "reading memory on GPU 1 failed: Unknown Error"),
            name=A100_40,
            uuid="GPU-5a1e0001-0000-4000-8000-000000000001",
        )
        assert source.read() == (healthy[0], unreadable, healthy[2])
        assert source.read() == (healthy[0], unreadable, healthy[2])
        assert source.read() == healthy


def test_a_failed_field_leaves_the_rest_of_the_device():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        healthy = source.read()
        world.inject_fault(0, "NO_PERMISSION", function="nvmlDeviceGetComputeRunningProcesses")
        dev = source.read()[0]
        assert dev.processes == NotAvailable(NO_PERMISSION, "no permission to read its processes on GPU 0")
        assert dev.used_bytes == healthy[0].used_bytes


def test_gpu_lost_mid_run_keeps_its_name_and_comes_back():
    with fake_nvml("three_gpus") as world:
        source = NvmlSource()
        healthy = source.read()
        world.lose_gpu(0)
        assert source.read()[0] == DeviceUnreadable(
            index=0, why=gpu_lost(0), name=A100_40, uuid="GPU-5a1e0000-0000-4000-8000-000000000000"
        )
        assert source.read()[1:] == healthy[1:]
        world.recover_gpu(0)
        assert source.read() == healthy


def test_driver_removed_mid_run_is_retried_after_the_interval():
    clock = Clock()
    with fake_nvml("three_gpus") as world:
        source = NvmlSource(clock=clock, retry_interval_s=5.0)
        healthy = source.read()
        world.remove_driver()
        assert source.read() == NVML_NO_DRIVER
        world.restore_driver()
        world.reset_calls()
        clock.now += 4.9
        assert source.read() == NVML_NO_DRIVER  # too soon to try again
        assert world.total_calls() == 0
        clock.now += 0.1
        assert source.read() == healthy


def test_failed_init_is_not_retried_within_the_interval():
    clock = Clock()
    with fake_nvml("no_driver") as world:
        source = NvmlSource(clock=clock, retry_interval_s=5.0)
        for _ in range(10):
            source.read()
        assert world.calls["nvmlInit"] == 1
        clock.now += 5.0
        source.read()
        assert world.calls["nvmlInit"] == 2


def test_driver_that_comes_back_is_read():
    clock = Clock()
    world = scenario("three_gpus")
    world.remove_driver()
    with fake_nvml(world):
        source = NvmlSource(clock=clock)
        assert source.read() == NVML_NO_DRIVER
        world.restore_driver()
        clock.now += 5.0
        assert len(source.read()) == 3


def test_slow_call_delays_the_read_but_not_its_answer():
    with fake_nvml("single_h100") as world:
        source = NvmlSource()
        expected = source.read()
        world.slow_down(0.05, device=0, function="nvmlDeviceGetComputeRunningProcesses")
        start = time.perf_counter()
        assert source.read() == expected
        assert time.perf_counter() - start >= 0.05


def test_shutdown_then_read_starts_nvml_again():
    with fake_nvml("single_h100") as world:
        source = NvmlSource()
        first = source.read()
        source.shutdown()
        assert not source.started
        assert source.read() == first
        assert world.calls["nvmlInit"] == 2
        assert world.calls["nvmlShutdown"] == 1


def test_binding_that_raises_odd_exceptions_is_an_error_not_a_crash():
    class Odd:
        def nvmlInit(self):
            pass

        def nvmlShutdown(self):
            pass

        def nvmlDeviceGetCount(self):
            return "many"

    reading = NvmlSource(pynvml=Odd()).read()
    assert isinstance(reading, NotAvailable) and reading.code == ERROR


# --- the fake itself, where NvmlSource relies on it ----------------------------------------------------


def test_fake_nvml_restores_the_pynvml_it_replaced():
    before = sys.modules.get("pynvml")
    with fake_nvml("three_gpus"):
        assert sys.modules["pynvml"].__fake__
    assert sys.modules.get("pynvml") is before


def test_unknown_scenario_names_the_valid_ones():
    with pytest.raises(ValueError, match="three_gpus, single_h100, no_driver"):
        scenario("four_gpus")


def test_bad_fault_error_names_the_valid_ones():
    world = scenario("three_gpus")
    with pytest.raises(ValueError, match="GPU_IS_LOST"):
        world.inject_fault(0, "MELTED")
    assert world.pending_faults() == 0


def test_world_built_by_hand_reads():
    world = FakeWorld([FakeGpu("NVIDIA L4", "GPU-l4", 23_034 * MiB, used_bytes=MiB, mig_mode=None)])
    (dev,) = read(world)
    assert (dev.name, dev.used_bytes, dev.mig_mode, dev.reserved_bytes) == ("NVIDIA L4", MiB, False, 0)
