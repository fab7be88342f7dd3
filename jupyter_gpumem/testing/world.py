"""A fake NVML world: GPUs and the processes on them, mutable while it is read.

Change used bytes, add or remove processes (a real kernel's pid on a fake GPU), make a device
fail for the next few calls, slow calls down, lose a GPU, remove the driver. The world counts
every NVML call by function name. Every world is synthetic (``"synthetic": true`` in its JSON).
"""

from __future__ import annotations

import collections
import copy
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_gpumem.testing.nvml_errors import (
    ERROR_CODES,
    ERROR_NAMES,
    NVMLError,
    error_value,
)

MiB = 1024**2


GiB = 1024**3


# Versioned NVML functions and the driver release that first exports each. A binding looks a
# function up by name when it is called and raises NVMLError_FunctionNotFound if the driver
# lacks it (``_nvmlGetFunctionPointer`` in nvidia-ml-py's pynvml.py, 11.495.46 to 13.615.71).
# Releases as gpustat's tests model them (gpustat/test_gpustat.py, NvidiaDriverMock):
# 450.66 added the _v2 process queries; 510.39.01 added _v3 and nvmlDeviceGetMemoryInfo_v2.
DRIVER_FUNCTIONS_SINCE: dict[str, tuple[int, ...]] = {
    "nvmlDeviceGetComputeRunningProcesses_v2": (450, 66),
    "nvmlDeviceGetGraphicsRunningProcesses_v2": (450, 66),
    "nvmlDeviceGetComputeRunningProcesses_v3": (510, 39, 1),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": (510, 39, 1),
    "nvmlDeviceGetMemoryInfo_v2": (510, 39, 1),
}


def _driver_release(version: str) -> tuple[int, ...]:
    """``"470.256.02"`` -> ``(470, 256, 2)``; anything else is refused with the expected form."""
    if not isinstance(version, str) or not re.fullmatch(r"\d+(\.\d+)*", version):
        raise ValueError(f'driver_version must look like "550.54.15", got {version!r}')
    return tuple(int(part) for part in version.split("."))


@dataclass
class FakeProcess:
    """A process holding memory on a fake GPU. ``used_bytes`` None: the driver hides it."""

    pid: int
    used_bytes: int | None


@dataclass
class FakeGpu:
    """One fake GPU.

    ``used_bytes`` is memory in use excluding ``reserved_bytes`` (NVML's v2 meaning); the v1
    memory query reports ``used_bytes + reserved_bytes`` as used, as real drivers do.
    ``mig_mode`` None means the GPU cannot do MIG (the query answers NOT_SUPPORTED).
    ``unsupported`` names NVML functions that answer NOT_SUPPORTED on this GPU
    (``"nvmlDeviceGetMemoryInfo_v2"`` answers FUNCTION_NOT_FOUND, as an old driver does).
    ``pci_bus_id`` empty: one made from the GPU's index, so NVML's order is the PCI bus order.
    """

    name: str
    uuid: str
    total_bytes: int
    used_bytes: int = 0
    reserved_bytes: int = 0
    utilization_percent: int = 0
    memory_utilization_percent: int = 0
    display_active: bool = False
    mig_mode: bool | None = False
    processes: list[FakeProcess] = field(default_factory=list)
    graphics_processes: list[FakeProcess] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False
    temperature_c: int = 38
    power_mw: int = 65_000
    power_limit_mw: int = 400_000
    fan_percent: int = 0
    pcie_tx_kib_s: int = 1_024
    pcie_rx_kib_s: int = 2_048
    pcie_max_generation: int = 4
    pcie_max_width: int = 16
    compute_capability: tuple[int, int] = (8, 0)
    pci_bus_id: str = ""

    @property
    def free_bytes(self) -> int:
        return max(0, self.total_bytes - self.used_bytes - self.reserved_bytes)

    def to_json(self) -> dict:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["processes"] = [vars(p).copy() for p in self.processes]
        out["graphics_processes"] = [vars(p).copy() for p in self.graphics_processes]
        out["unsupported"] = sorted(self.unsupported)
        out["compute_capability"] = list(self.compute_capability)
        return out

    @classmethod
    def from_json(cls, data: dict) -> FakeGpu:
        data = dict(data)
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown GPU fields {sorted(unknown)}; valid: {sorted(cls.__dataclass_fields__)}")
        data["processes"] = [FakeProcess(**p) for p in data.get("processes", [])]
        data["graphics_processes"] = [FakeProcess(**p) for p in data.get("graphics_processes", [])]
        data["unsupported"] = set(data.get("unsupported", []))
        data["compute_capability"] = tuple(data.get("compute_capability", (8, 0)))
        return cls(**data)


@dataclass
class _Fault:
    """The next ``times`` matching calls raise ``error`` and/or take ``delay_s`` seconds."""

    device: int | None  # None: any call
    error: int | None
    times: int
    function: str | None = None
    delay_s: float = 0.0

    def matches(self, function: str, device: int | None) -> bool:
        if self.function is not None and self.function != function:
            return False
        return self.device is None or self.device == device

    def to_json(self) -> dict:
        return {
            "device": self.device,
            "error": None if self.error is None else ERROR_NAMES[self.error],
            "times": self.times,
            "function": self.function,
            "delay_s": self.delay_s,
        }


class FakeWorld:
    """A mutable, thread-safe world of fake GPUs that the fake ``pynvml`` reads.

    ``calls`` counts NVML calls by function name (every call, failed ones included).
    ``cuda_order``: the NVML indices in the order CUDA numbers the GPUs by default (fastest
    first); None is NVML's own order. ``cuda_devices`` applies it, as a fake CUDA driver would.
    """

    def __init__(
        self,
        gpus: list[FakeGpu] | tuple[FakeGpu, ...] = (),
        *,
        name: str = "custom",
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
        system_error: int | str | None = None,
        cuda_order: list[int] | None = None,
    ):
        _driver_release(driver_version)
        self.name = name
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.system_error: int | None = None if system_error is None else error_value(system_error)
        self.cuda_order: list[int] | None = None if cuda_order is None else list(cuda_order)
        self.calls: collections.Counter[str] = collections.Counter()
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()

    # -- reading ---------------------------------------------------------------------------

    def gpu(self, device: int) -> FakeGpu:
        with self._lock:
            if not isinstance(device, int) or not 0 <= device < len(self.gpus):
                raise ValueError(f"no fake GPU {device!r}; valid devices: {list(range(len(self.gpus)))}")
            return self.gpus[device]

    def driver_exports(self, function: str) -> bool:
        """Whether this world's driver (``driver_version``) has the NVML C function ``function``.

        ``"nvmlDeviceGetComputeRunningProcesses_v3"`` on a 470 driver: False, as on a real one.
        """
        since = DRIVER_FUNCTIONS_SINCE.get(function)
        return since is None or _driver_release(self.driver_version) >= since

    def pci_bus_id(self, device: int) -> str:
        """GPU ``device``'s PCI bus id as NVML writes it ("00000000:3B:00.0")."""
        gpu = self.gpu(device)
        return gpu.pci_bus_id or f"00000000:{0x18 + 0x10 * device:02X}:00.0"

    def cuda_devices(self, env: dict[str, str] | None = None) -> list[int]:
        """The NVML indices of the GPUs a CUDA process sees, in CUDA's ordinal order.

        As the CUDA driver numbers them: fastest first (``cuda_order``) unless
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (NVML's order); then ``CUDA_VISIBLE_DEVICES`` picks and
        reorders them by index into that order or by UUID (a unique prefix will do), stopping
        at the first entry that names no GPU (CUDA's documented parsing).
        """
        env = dict(os.environ if env is None else env)
        with self._lock:
            count = len(self.gpus)
            pci_order = env.get("CUDA_DEVICE_ORDER", "").strip().upper() == "PCI_BUS_ID"
            order = list(range(count)) if pci_order or self.cuda_order is None else list(self.cuda_order)
            raw = env.get("CUDA_VISIBLE_DEVICES")
            if raw is None:
                return order
            picked: list[int] = []
            for entry in (part.strip() for part in raw.split(",")):
                if entry.isdigit() and int(entry) < len(order):
                    index = order[int(entry)]
                elif entry.lower().startswith("gpu-"):
                    hits = [i for i in order if self.gpus[i].uuid.lower().startswith(entry.lower())]
                    index = hits[0] if len(hits) == 1 else None
                else:
                    index = None
                if index is None or index in picked:
                    break
                picked.append(index)
            return picked

    def total_calls(self) -> int:
        with self._lock:
            return sum(self.calls.values())

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()

    # -- changing the world ----------------------------------------------------------------

    def add_gpu(self, gpu: FakeGpu) -> int:
        """Add a GPU; returns its index."""
        with self._lock:
            self.gpus.append(gpu)
            return len(self.gpus) - 1

    def set_used(self, device: int, used_bytes: int) -> None:
        gpu = self.gpu(device)
        if not isinstance(used_bytes, int) or not 0 <= used_bytes <= gpu.total_bytes - gpu.reserved_bytes:
            raise ValueError(
                f"used_bytes must be an int from 0 to {gpu.total_bytes - gpu.reserved_bytes} "
                f"(total minus reserved) on GPU {device}, got {used_bytes!r}"
            )
        with self._lock:
            gpu.used_bytes = used_bytes

    def set_utilization(self, device: int, percent: int) -> None:
        if not isinstance(percent, int) or not 0 <= percent <= 100:
            raise ValueError(f"utilisation must be an int from 0 to 100, got {percent!r}")
        gpu = self.gpu(device)
        with self._lock:
            gpu.utilization_percent = percent

    def add_process(self, device: int, pid: int, used_bytes: int | None, *, graphics: bool = False) -> FakeProcess:
        """Put process ``pid`` on GPU ``device``; its bytes add to the GPU's used bytes.

        ``used_bytes`` None: the driver lists the pid but not its memory (containers, MIG).
        """
        gpu = self.gpu(device)
        if not isinstance(pid, int) or pid <= 0:
            raise ValueError(f"pid must be a positive int, got {pid!r}")
        if used_bytes is not None and (not isinstance(used_bytes, int) or used_bytes < 0):
            raise ValueError(f"used_bytes must be a non-negative int or None, got {used_bytes!r}")
        with self._lock:
            if used_bytes and gpu.used_bytes + used_bytes > gpu.total_bytes - gpu.reserved_bytes:
                raise ValueError(
                    f"GPU {device} has {gpu.free_bytes} bytes free; cannot add a process using {used_bytes}"
                )
            proc = FakeProcess(pid, used_bytes)
            (gpu.graphics_processes if graphics else gpu.processes).append(proc)
            gpu.used_bytes += used_bytes or 0
            return proc

    def remove_process(self, device: int, pid: int) -> None:
        """Take ``pid`` off GPU ``device`` and give its bytes back."""
        gpu = self.gpu(device)
        with self._lock:
            for procs in (gpu.processes, gpu.graphics_processes):
                for proc in procs:
                    if proc.pid == pid:
                        procs.remove(proc)
                        gpu.used_bytes = max(0, gpu.used_bytes - (proc.used_bytes or 0))
                        return
            present = [p.pid for p in gpu.processes + gpu.graphics_processes]
        raise ValueError(f"pid {pid} is not on GPU {device}; pids there: {present}")

    def inject_fault(
        self, device: int | None, error: int | str, times: int = 1, *, function: str | None = None
    ) -> None:
        """The next ``times`` calls on ``device`` (None: any call) raise ``error``, then recover.

        ``function`` limits it to one NVML function, e.g. ``"nvmlDeviceGetMemoryInfo"``.
        """
        value = error_value(error)
        self._add_fault(_Fault(device, value, self._check_times(times), function))

    def slow_down(
        self, seconds: float, times: int = 1, *, device: int | None = None, function: str | None = None
    ) -> None:
        """The next ``times`` matching calls each take ``seconds`` longer."""
        if not isinstance(seconds, (int, float)) or seconds < 0:
            raise ValueError(f"seconds must be a non-negative number, got {seconds!r}")
        self._add_fault(_Fault(device, None, self._check_times(times), function, float(seconds)))

    def pending_faults(self) -> int:
        with self._lock:
            return sum(f.times for f in self._faults)

    def lose_gpu(self, device: int) -> None:
        """Every call on ``device`` raises NVML_ERROR_GPU_IS_LOST until ``recover_gpu``."""
        gpu = self.gpu(device)
        with self._lock:
            gpu.lost = True

    def recover_gpu(self, device: int) -> None:
        gpu = self.gpu(device)
        with self._lock:
            gpu.lost = False

    def remove_driver(self, error: int | str = "DRIVER_NOT_LOADED") -> None:
        """Every NVML call, nvmlInit included, raises ``error`` until ``restore_driver``."""
        value = error_value(error)
        with self._lock:
            self.system_error = value

    def restore_driver(self) -> None:
        with self._lock:
            self.system_error = None

    # -- JSON --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        with self._lock:
            return {
                "format": 1,
                "synthetic": True,
                "name": self.name,
                "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version,
                "system_error": None if self.system_error is None else ERROR_NAMES[self.system_error],
                "cuda_order": self.cuda_order,
                "gpus": [gpu.to_json() for gpu in self.gpus],
                "faults": [f.to_json() for f in self._faults],
            }

    @classmethod
    def from_json(cls, data: dict) -> FakeWorld:
        if not isinstance(data, dict) or data.get("format") != 1:
            raise ValueError('not a fake NVML world: expected a JSON object with "format": 1')
        world = cls(
            [FakeGpu.from_json(g) for g in data.get("gpus", [])],
            name=data.get("name", "custom"),
            driver_version=data.get("driver_version", "550.54.15"),
            cuda_driver_version=data.get("cuda_driver_version", 12040),
            system_error=data.get("system_error"),
            cuda_order=data.get("cuda_order"),
        )
        for f in data.get("faults", []):
            error = f.get("error")
            world._faults.append(
                _Fault(
                    f.get("device"),
                    None if error is None else error_value(error),
                    int(f.get("times", 1)),
                    f.get("function"),
                    float(f.get("delay_s", 0.0)),
                )
            )
        return world

    def save(self, path: str | os.PathLike) -> None:
        """Write the world as JSON, atomically, so a reader never sees half a file."""
        from jupyter_gpumem.core.files import replaced_on_success

        with replaced_on_success(path, encoding="utf-8") as handle:  # a temporary no one can predict
            handle.write(json.dumps(self.to_json(), indent=1))

    @classmethod
    def load(cls, path: str | os.PathLike) -> FakeWorld:
        return cls.from_json(json.loads(Path(path).read_text()))

    def copy(self) -> FakeWorld:
        return FakeWorld.from_json(copy.deepcopy(self.to_json()))

    # -- used by the fake pynvml -------------------------------------------------------------

    @staticmethod
    def _check_times(times: int) -> int:
        if not isinstance(times, int) or times < 1:
            raise ValueError(f"times must be a positive int, got {times!r}")
        return times

    def _add_fault(self, fault: _Fault) -> None:
        if fault.device is not None:
            self.gpu(fault.device)  # validates the index
        with self._lock:
            self._faults.append(fault)

    def _enter(self, function: str, device: int | None, initialised: bool, symbol: str | None = None) -> FakeGpu | None:
        """Count a call and decide its fate: raise, sleep, or hand back the GPU it reads.

        ``symbol`` is the driver function the binding resolves ``function`` to, when the driver
        may lack it (``DRIVER_FUNCTIONS_SINCE``).
        """
        delay = 0.0
        error: int | None = None
        with self._lock:
            self.calls[function] += 1
            if self.system_error is not None:
                error = self.system_error
            elif not initialised:
                error = ERROR_CODES["UNINITIALIZED"]
            elif symbol is not None and not self.driver_exports(symbol):
                error = ERROR_CODES["FUNCTION_NOT_FOUND"]
            else:
                for fault in list(self._faults):
                    if fault.matches(function, device):
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                        delay += fault.delay_s
                        if fault.error is not None:
                            error = fault.error
                            break
            gpu = None
            if error is None and device is not None:
                if not 0 <= device < len(self.gpus):
                    error = ERROR_CODES["INVALID_ARGUMENT"]
                else:
                    gpu = self.gpus[device]
                    if gpu.lost:
                        error = ERROR_CODES["GPU_IS_LOST"]
                    elif function in gpu.unsupported:
                        error = ERROR_CODES["NOT_SUPPORTED"]
        if delay:
            time.sleep(delay)
        if error is not None:
            raise NVMLError(error)
        return gpu
