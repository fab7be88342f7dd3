"""Named fake worlds (``three_gpus``, ``lost_gpu``, ``mig``, ...), and the world a process reads
from ``JUPYTER_GPUMEM_FAKE_NVML`` (a scenario name or a JSON file written by ``FakeWorld.save``).

Scenario pids are above Linux's PID_MAX_LIMIT (4194304), so they never match a live process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_gpumem.testing.world import FakeGpu, FakeWorld, GiB, MiB

ENV_VAR = "JUPYTER_GPUMEM_FAKE_NVML"


DROPIN_DIR = str(Path(__file__).resolve().parent / "pynvml_dropin")


def _uuid(n: int) -> str:
    return f"GPU-5a1e{n:04x}-0000-4000-8000-{n:012x}"


def _a100_40(n: int, **kw: Any) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-40GB", _uuid(n), 40_960 * MiB, reserved_bytes=512 * MiB, **kw)


def _three_gpus() -> FakeWorld:
    """Three A100 40GB: two busy with JAX-sized processes, one idle."""
    w = FakeWorld(
        [_a100_40(0, utilization_percent=87), _a100_40(1, utilization_percent=12), _a100_40(2)], name="three_gpus"
    )
    w.add_process(0, 4_200_101, 30 * GiB)
    w.add_process(0, 4_200_102, 2 * GiB)
    w.add_process(1, 4_200_201, 10 * GiB)
    return w


def _single_h100() -> FakeWorld:
    """One idle H100 80GB."""
    gpu = FakeGpu(
        "NVIDIA H100 80GB HBM3",
        _uuid(100),
        81_559 * MiB,
        reserved_bytes=566 * MiB,
        power_limit_mw=700_000,
        pcie_max_generation=5,
        compute_capability=(9, 0),
    )
    return FakeWorld([gpu], name="single_h100", driver_version="560.35.03", cuda_driver_version=12060)


def _no_driver() -> FakeWorld:
    """libnvidia-ml loads but the kernel driver is not loaded."""
    return FakeWorld(name="no_driver", system_error="DRIVER_NOT_LOADED")


def _no_library() -> FakeWorld:
    """No libnvidia-ml.so.1 at all (a machine without the NVIDIA driver)."""
    return FakeWorld(name="no_library", system_error="LIBRARY_NOT_FOUND")


def _no_permission() -> FakeWorld:
    """The user may not open /dev/nvidia*."""
    return FakeWorld(name="no_permission", system_error="NO_PERMISSION")


def _lost_gpu() -> FakeWorld:
    """Two A100s; GPU 1 has fallen off the bus and every call on it raises GPU_IS_LOST."""
    w = FakeWorld([_a100_40(0, utilization_percent=40), _a100_40(1)], name="lost_gpu")
    w.add_process(0, 4_200_101, 8 * GiB)
    w.lose_gpu(1)
    return w


def _vanished_pid() -> FakeWorld:
    """NVML still lists pid 4200999, whose process no longer exists."""
    w = FakeWorld([_a100_40(0, utilization_percent=5)], name="vanished_pid")
    w.add_process(0, 4_200_999, 12 * GiB)
    return w


def _mig() -> FakeWorld:
    """An A100 80GB in MIG mode: pids are listed without memory, utilisation is per instance."""
    gpu = FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        _uuid(300),
        81_920 * MiB,
        reserved_bytes=640 * MiB,
        used_bytes=20 * GiB,
        mig_mode=True,
        unsupported={"nvmlDeviceGetUtilizationRates"},
    )
    w = FakeWorld([gpu], name="mig")
    w.add_process(0, 4_200_301, None)
    w.add_process(0, 4_200_302, None)
    return w


def _display_gpu() -> FakeWorld:
    """A workstation: GPU 0 drives the display (Xorg on it), GPU 1 is headless."""

    def a4000(n: int, **kw: Any) -> FakeGpu:
        return FakeGpu(
            "NVIDIA RTX A4000",
            _uuid(n),
            16_376 * MiB,
            reserved_bytes=240 * MiB,
            mig_mode=None,
            power_limit_mw=140_000,
            compute_capability=(8, 6),
            **kw,
        )

    w = FakeWorld([a4000(400, display_active=True, utilization_percent=9), a4000(401)], name="display_gpu")
    w.add_process(0, 4_200_401, 220 * MiB, graphics=True)
    w.add_process(0, 4_200_402, 3 * GiB)
    w.add_process(1, 4_200_403, 6 * GiB)
    return w


def _containerized() -> FakeWorld:
    """Seen from inside a container: NVML lists the host's pids, each with its memory, and none
    of them is a process in the container's PID namespace (NVIDIA/nvidia-docker#1483: "you will
    always get the host pids"). GPU 0 holds one process, GPU 1 two."""
    w = FakeWorld([_a100_40(500, utilization_percent=63), _a100_40(501, utilization_percent=20)], name="containerized")
    w.add_process(0, 4_201_001, 30 * GiB)
    w.add_process(1, 4_201_002, 12 * GiB)
    w.add_process(1, 4_201_003, 6 * GiB)
    return w


def _h100_80(n: int, **kw: Any) -> FakeGpu:
    return FakeGpu(
        "NVIDIA H100 80GB HBM3",
        _uuid(n),
        81_559 * MiB,
        reserved_bytes=566 * MiB,
        power_limit_mw=700_000,
        pcie_max_generation=5,
        compute_capability=(9, 0),
        **kw,
    )


# GiB held per GPU by each (made-up) process of dgx_h100: pid -> {GPU: GiB}.
DGX_H100_JOBS: dict[int, dict[int, int]] = {
    4_203_001: {0: 60, 1: 60, 2: 60, 3: 60},  # a job sharded over four GPUs
    4_203_002: {4: 20, 5: 20},  # a second one over two
    4_203_003: {5: 54},  # and a kernel that nearly fills GPU 5: 74 of 80 GiB there
    4_203_004: {6: 8},
}
DGX_H100_BUSY = (91, 90, 88, 89, 35, 97, 12, 0)


def _dgx_h100() -> FakeWorld:
    """A DGX-like box: 8 × H100 80GB, jobs across several GPUs, uneven use, GPU 5 nearly full
    (74 GiB of 80), GPU 7 idle."""
    gpus = [_h100_80(600 + i, utilization_percent=busy) for i, busy in enumerate(DGX_H100_BUSY)]
    w = FakeWorld(gpus, name="dgx_h100", driver_version="560.35.03", cuda_driver_version=12060)
    for pid, per_gpu in DGX_H100_JOBS.items():
        for device, gib in per_gpu.items():
            w.add_process(device, pid, gib * GiB)
    return w


# GiB held on each of sixteen_v100's GPUs by its one process there (GPU 11 nearly full).
SIXTEEN_V100_USED_GIB = (28, 28, 28, 28, 28, 28, 28, 28, 12, 12, 4, 31, 0, 0, 16, 2)


def _sixteen_v100() -> FakeWorld:
    """A 16-GPU box (DGX-2-like): 16 × V100 32GB, a job over GPUs 0-7, smaller ones on the rest,
    GPU 11 nearly full (31 GiB of 32), GPUs 12 and 13 idle."""

    def v100(n: int, **kw: Any) -> FakeGpu:
        return FakeGpu(
            "Tesla V100-SXM3-32GB",
            _uuid(n),
            32_768 * MiB,
            reserved_bytes=256 * MiB,
            power_limit_mw=350_000,
            pcie_max_generation=3,
            compute_capability=(7, 0),
            **kw,
        )

    used = SIXTEEN_V100_USED_GIB
    gpus = [v100(700 + i, utilization_percent=min(99, 3 * gib)) for i, gib in enumerate(used)]
    w = FakeWorld(gpus, name="sixteen_v100")
    for i, gib in enumerate(used):
        if gib:
            w.add_process(i, 4_204_000 if i < 8 else 4_204_100 + i, gib * GiB)
    return w


SCENARIOS: dict[str, Callable[[], FakeWorld]] = {
    "three_gpus": _three_gpus,
    "single_h100": _single_h100,
    "no_driver": _no_driver,
    "no_library": _no_library,
    "no_permission": _no_permission,
    "lost_gpu": _lost_gpu,
    "vanished_pid": _vanished_pid,
    "mig": _mig,
    "display_gpu": _display_gpu,
    "containerized": _containerized,
    "dgx_h100": _dgx_h100,
    "sixteen_v100": _sixteen_v100,
}


def scenario(name: str) -> FakeWorld:
    """A fresh world for a named scenario."""
    try:
        factory = SCENARIOS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown fake NVML scenario {name!r}; valid: {', '.join(SCENARIOS)}") from None
    return factory()


def world_from_spec(spec: str | FakeWorld) -> FakeWorld:
    """A world from a FakeWorld, a scenario name, or a path to a JSON world file."""
    if isinstance(spec, FakeWorld):
        return spec
    if spec in SCENARIOS:
        return scenario(spec)
    if isinstance(spec, str) and os.path.isfile(spec):
        return FakeWorld.load(spec)
    raise ValueError(
        f"{spec!r} is neither a fake NVML scenario ({', '.join(SCENARIOS)}) nor an existing JSON world file"
    )


class WorldFromEnv:
    """The world named by a scenario name or a JSON path; a file is re-read when it changes.

    Call counts carry over a reload, so a test can change the world from outside the process
    and still count calls.
    """

    def __init__(self, spec: str):
        self._path = None if spec in SCENARIOS else spec
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._world = world_from_spec(spec)
        if self._path is not None:
            self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self._path)
        except OSError:
            return None
        # save() replaces the file, so the inode changes even within one mtime tick.
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def current(self) -> FakeWorld:
        if self._path is None:
            return self._world
        with self._lock:
            stamp = self._file_stamp()
            if stamp is not None and stamp != self._stamp:
                try:
                    fresh = FakeWorld.load(self._path)
                except (OSError, ValueError):
                    return self._world  # keep the last good world while the file is odd
                fresh.calls = self._world.calls
                self._world, self._stamp = fresh, stamp
            return self._world
