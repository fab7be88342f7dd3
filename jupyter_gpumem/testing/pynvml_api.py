"""The ``pynvml`` API over a fake world: ``fake_nvml(world)`` puts it in ``sys.modules`` for a
block; ``install_pynvml_api`` fills a module namespace (the drop-in in ``pynvml_dropin/``).

It acts as one of several nvidia-ml-py releases (``NVIDIA_ML_PY_VERSIONS``), on the driver the
world names (``FakeWorld.driver_version``).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.testing.nvml_errors import (
    ERROR_CLASSES,
    ERROR_CODES,
    ERROR_TEXT,
    NVMLError,
    NVMLLibraryMismatchError,
    library_mismatch,
)
from jupyter_gpumem.testing.scenarios import world_from_spec
from jupyter_gpumem.testing.world import FakeGpu, FakeWorld


@dataclass(frozen=True)
class _Handle:
    index: int

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


_NOT_IN_MIG = 0xFFFFFFFF


# The nvidia-ml-py releases the fake binding can act as, each read from its pynvml.py:
# - 11.495.46: strings come back as bytes (no convertStrBytes, which 11.515.48 added); there is
#   no nvmlMemory_v2 and nvmlDeviceGetMemoryInfo takes no version; the unversioned process
#   queries call the driver's _v2 functions, and there are no _v3 ones.
# - 12.535.108: strings are str; version=nvmlMemory_v2 calls nvmlDeviceGetMemoryInfo_v2; the
#   unversioned process queries call _v3; a function the driver lacks raises
#   NVMLError_FunctionNotFound.
# - 13.615.71: as 12.535.108, except that an unversioned process query whose _v3 the driver
#   lacks raises NVMLLibraryMismatchError (throwOnVersionMismatch).
NVIDIA_ML_PY_VERSIONS = ("11.495.46", "12.535.108", "13.615.71")
DEFAULT_NVIDIA_ML_PY = "13.615.71"

# What each release returns as bytes before 11.515.48 (among the functions the fake has).
_STRING_FUNCTIONS = (
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
)


def _check_nvidia_ml_py(version: str) -> str:
    if version not in NVIDIA_ML_PY_VERSIONS:
        raise ValueError(f"no fake nvidia-ml-py {version!r}; valid: {', '.join(NVIDIA_ML_PY_VERSIONS)}")
    return version


class _FakePynvml:
    """The functions of pynvml, reading ``world()`` on every call, as nvidia-ml-py
    ``nvidia_ml_py`` (one of ``NVIDIA_ML_PY_VERSIONS``) has them."""

    def __init__(self, world: Callable[[], FakeWorld], nvidia_ml_py: str = DEFAULT_NVIDIA_ML_PY):
        self._world = world
        self._init_count = 0
        self._lock = threading.Lock()
        self.nvidia_ml_py = _check_nvidia_ml_py(nvidia_ml_py)

    def functions(self) -> dict[str, Callable]:
        """The module-level functions of this release."""
        out = {name: getattr(self, name) for name in dir(self) if name.startswith("nvml")}
        if self.nvidia_ml_py == "11.495.46":
            for name in _STRING_FUNCTIONS:
                out[name] = _as_bytes(out[name])
            out["nvmlDeviceGetMemoryInfo"] = self._memory_info_v1_only
            for kind in ("Compute", "Graphics"):
                del out[f"nvmlDeviceGet{kind}RunningProcesses_v3"]
        return out

    def _device(self, function: str, handle: Any, symbol: str | None = None) -> FakeGpu:
        index = handle.index if isinstance(handle, _Handle) else -1
        gpu = self._world()._enter(function, index, self._init_count > 0, symbol)
        assert gpu is not None
        return gpu

    def _system(self, function: str) -> FakeWorld:
        world = self._world()
        world._enter(function, None, self._init_count > 0)
        return world

    # -- init -----------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: int = 0) -> None:
        self._world()._enter("nvmlInit", None, True)
        with self._lock:
            self._init_count += 1

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        world = self._world()
        with world._lock:
            world.calls["nvmlShutdown"] += 1
        with self._lock:
            if self._init_count == 0:
                raise NVMLError(ERROR_CODES["UNINITIALIZED"])
            self._init_count -= 1

    def nvmlErrorString(self, value: int) -> str:
        return ERROR_TEXT.get(value, f"NVML Error with code {value}")

    # -- system ---------------------------------------------------------------------------

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._system("nvmlSystemGetDriverVersion").driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        world = self._system("nvmlSystemGetNVMLVersion")
        return "12." + world.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._system("nvmlSystemGetCudaDriverVersion").cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self._system("nvmlSystemGetCudaDriverVersion_v2").cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self._system("nvmlDeviceGetCount").gpus)

    # -- handles --------------------------------------------------------------------------

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._world()._enter("nvmlDeviceGetHandleByIndex", index, self._init_count > 0)
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        world = self._system("nvmlDeviceGetHandleByUUID")
        if isinstance(uuid, bytes):
            uuid = uuid.decode()
        for i, gpu in enumerate(world.gpus):
            if gpu.uuid == uuid:
                return _Handle(i)
        raise NVMLError(ERROR_CODES["NOT_FOUND"])

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        self._device("nvmlDeviceGetIndex", handle)
        return handle.index

    # -- device queries -------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._device("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> types.SimpleNamespace:
        """``nvmlPciInfo_t``: its char arrays read as bytes in every nvidia-ml-py release (no
        convertStrBytes on a structure's fields)."""
        self._device("nvmlDeviceGetPciInfo", handle)
        bus_id = self._world().pci_bus_id(handle.index)
        domain, bus, rest = bus_id.split(":")
        return types.SimpleNamespace(
            busId=bus_id.encode(),
            busIdLegacy=bus_id[4:].encode(),
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(rest.split(".")[0], 16),
            pciDeviceId=0x20B010DE,
            pciSubSystemId=0x134F10DE,
        )

    def _memory_info_v1_only(self, handle: Any) -> types.SimpleNamespace:
        return self.nvmlDeviceGetMemoryInfo(handle)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> types.SimpleNamespace:
        symbol = "nvmlDeviceGetMemoryInfo_v2" if version else None
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle, symbol)
        if version:
            if "nvmlDeviceGetMemoryInfo_v2" in gpu.unsupported:
                raise NVMLError(ERROR_CODES["FUNCTION_NOT_FOUND"])
            return types.SimpleNamespace(
                version=version,
                total=gpu.total_bytes,
                reserved=gpu.reserved_bytes,
                free=gpu.free_bytes,
                used=gpu.used_bytes,
            )
        return types.SimpleNamespace(
            total=gpu.total_bytes, free=gpu.free_bytes, used=gpu.used_bytes + gpu.reserved_bytes
        )

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> types.SimpleNamespace:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        return types.SimpleNamespace(gpu=gpu.utilization_percent, memory=gpu.memory_utilization_percent)

    def nvmlDeviceGetDisplayActive(self, handle: Any) -> int:
        return int(self._device("nvmlDeviceGetDisplayActive", handle).display_active)

    def nvmlDeviceGetDisplayMode(self, handle: Any) -> int:
        return int(self._device("nvmlDeviceGetDisplayMode", handle).display_active)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._device("nvmlDeviceGetMigMode", handle)
        if gpu.mig_mode is None:
            raise NVMLError(ERROR_CODES["NOT_SUPPORTED"])
        mode = int(gpu.mig_mode)
        return [mode, mode]

    def _processes(self, function: str, handle: Any, graphics: bool, symbol: str) -> list[types.SimpleNamespace]:
        gpu = self._device(function, handle, symbol)
        gi = 0 if gpu.mig_mode else _NOT_IN_MIG
        procs = gpu.graphics_processes if graphics else gpu.processes
        return [
            types.SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=gi, computeInstanceId=gi)
            for p in procs
        ]

    def _unversioned_processes(self, function: str, handle: Any, graphics: bool) -> list[types.SimpleNamespace]:
        suffix = "_v2" if self.nvidia_ml_py == "11.495.46" else "_v3"
        try:
            return self._processes(function, handle, graphics, function + suffix)
        except ERROR_CLASSES["NVMLError_FunctionNotFound"]:
            if self.nvidia_ml_py.startswith("13."):
                raise library_mismatch(function) from None
            raise

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._unversioned_processes("nvmlDeviceGetComputeRunningProcesses", handle, False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[types.SimpleNamespace]:
        name = "nvmlDeviceGetComputeRunningProcesses_v2"
        return self._processes(name, handle, False, name)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[types.SimpleNamespace]:
        name = "nvmlDeviceGetComputeRunningProcesses_v3"
        return self._processes(name, handle, False, name)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._unversioned_processes("nvmlDeviceGetGraphicsRunningProcesses", handle, True)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[types.SimpleNamespace]:
        name = "nvmlDeviceGetGraphicsRunningProcesses_v2"
        return self._processes(name, handle, True, name)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[types.SimpleNamespace]:
        name = "nvmlDeviceGetGraphicsRunningProcesses_v3"
        return self._processes(name, handle, True, name)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int = 0) -> int:
        return self._device("nvmlDeviceGetTemperature", handle).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetFanSpeed", handle).fan_percent

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        gpu = self._device("nvmlDeviceGetPcieThroughput", handle)
        return gpu.pcie_tx_kib_s if counter == 0 else gpu.pcie_rx_kib_s

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_max_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_max_width

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_max_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_max_width

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        return tuple(self._device("nvmlDeviceGetCudaComputeCapability", handle).compute_capability)

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:
        # Fake GPUs have no NVLink; tools that probe it expect NOT_SUPPORTED then.
        self._device("nvmlDeviceGetNvLinkVersion", handle)
        raise NVMLError(ERROR_CODES["NOT_SUPPORTED"])

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: Any) -> list:
        self._device("nvmlDeviceGetFieldValues", handle)
        raise NVMLError(ERROR_CODES["NOT_SUPPORTED"])


_CONSTANTS: dict[str, Any] = {
    "NVML_SUCCESS": 0,
    "NVML_FEATURE_DISABLED": 0,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_DEVICE_MIG_DISABLE": 0,
    "NVML_DEVICE_MIG_ENABLE": 1,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_PCIE_UTIL_TX_BYTES": 0,
    "NVML_PCIE_UTIL_RX_BYTES": 1,
    "NVML_PCIE_UTIL_COUNT": 2,
    "NVML_NVLINK_MAX_LINKS": 18,
    "nvmlMemory_v2": 0x02000028,
    "NVML_VALUE_NOT_AVAILABLE_ulonglong": ctypes.c_ulonglong(-1),
    "NVML_VALUE_NOT_AVAILABLE_uint": ctypes.c_uint(-1),
}


def _as_bytes(function: Callable[..., str]) -> Callable[..., bytes]:
    def returning_bytes(*args: Any, **kwargs: Any) -> bytes:
        return function(*args, **kwargs).encode()

    returning_bytes.__name__ = function.__name__
    return returning_bytes


def install_pynvml_api(
    namespace: dict, world: Callable[[], FakeWorld], nvidia_ml_py: str = DEFAULT_NVIDIA_ML_PY
) -> None:
    """Fill ``namespace`` (a module's globals) with a pynvml-compatible API reading ``world()``,
    as nvidia-ml-py ``nvidia_ml_py`` has it (one of ``NVIDIA_ML_PY_VERSIONS``)."""
    api = _FakePynvml(world, nvidia_ml_py)
    namespace.update(api.functions())
    namespace.update(_CONSTANTS)
    if nvidia_ml_py == "11.495.46":
        del namespace["nvmlMemory_v2"]
    if nvidia_ml_py.startswith("13."):
        namespace["NVMLLibraryMismatchError"] = NVMLLibraryMismatchError
    for name, value in ERROR_CODES.items():
        namespace["NVML_ERROR_" + name] = value
    namespace["NVMLError"] = NVMLError
    namespace.update(ERROR_CLASSES)
    namespace["nvmlExceptionClass"] = lambda value: NVMLError._by_value[value]
    namespace["FAKE_WORLD"] = world
    namespace["__fake__"] = True


def make_pynvml_module(
    world: FakeWorld | Callable[[], FakeWorld], nvidia_ml_py: str = DEFAULT_NVIDIA_ML_PY
) -> types.ModuleType:
    """A fresh module object named ``pynvml`` that reads ``world``, as nvidia-ml-py
    ``nvidia_ml_py`` would (one of ``NVIDIA_ML_PY_VERSIONS``)."""
    module = types.ModuleType("pynvml", "A fake pynvml reading a jupyter_gpumem FakeWorld (synthetic).")
    source = world if callable(world) and not isinstance(world, FakeWorld) else (lambda: world)
    install_pynvml_api(module.__dict__, source, nvidia_ml_py)
    module.nvml = module  # the old pynvml package spelled errors pynvml.nvml.NVMLError_*
    return module


_MISSING = object()


@contextmanager
def fake_nvml(
    world: str | FakeWorld = "three_gpus", *, nvidia_ml_py: str = DEFAULT_NVIDIA_ML_PY
) -> Iterator[FakeWorld]:
    """Serve ``world`` (a FakeWorld or a scenario name) as ``pynvml`` inside the block.

    Yields the world so the block can change it. ``sys.modules["pynvml"]`` is restored on exit.
    In a pytest fixture: ``with fake_nvml("three_gpus") as world: yield world``.
    ``nvidia_ml_py`` picks the binding release it acts as (``NVIDIA_ML_PY_VERSIONS``); the
    driver it acts as follows ``world.driver_version``.
    """
    world = world_from_spec(world)
    module = make_pynvml_module(world, nvidia_ml_py)
    saved = sys.modules.get("pynvml", _MISSING)
    sys.modules["pynvml"] = module
    try:
        yield world
    finally:
        if saved is _MISSING:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved
