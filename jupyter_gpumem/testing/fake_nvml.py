"""A fake NVML world: GPUs and processes that tests, demos and other tools can read.

``FakeWorld`` holds believable GPUs and the processes on them. It is mutable while it is being
read: change used bytes, add or remove processes (a real kernel's pid on a fake GPU), make a
device fail for the next few calls, slow calls down, lose a GPU, remove the driver. It counts
every NVML call by function name.

Two ways to read it:

- ``fake_nvml(world_or_scenario)``: a context manager that puts a fake ``pynvml`` module into
  ``sys.modules``, so ``jupyter_gpumem.nvml.NvmlSource`` (or anything doing ``import pynvml``)
  reads the world; the real module is restored on exit.
- ``jupyter_gpumem/testing/pynvml_dropin/``: a directory to put first on ``PYTHONPATH`` so other
  processes, with unchanged code, read a world named by ``JUPYTER_GPUMEM_FAKE_NVML`` (a scenario
  name or a JSON file written by ``FakeWorld.save``).

Every world is synthetic (``"synthetic": true`` in its JSON). Scenario pids are above Linux's
PID_MAX_LIMIT (4194304), so they never match a live process; use ``add_process`` with a real pid
to put a real process on a fake GPU.
"""

from __future__ import annotations

import collections
import copy
import ctypes
import json
import os
import sys
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = [
    "FakeGpu",
    "FakeProcess",
    "FakeWorld",
    "SCENARIOS",
    "scenario",
    "fake_nvml",
    "make_pynvml_module",
    "install_pynvml_api",
    "world_from_spec",
    "WorldFromEnv",
    "ERROR_CODES",
    "NVMLError",
    "DROPIN_DIR",
    "ENV_VAR",
]

ENV_VAR = "JUPYTER_GPUMEM_FAKE_NVML"
DROPIN_DIR = str(Path(__file__).resolve().parent / "pynvml_dropin")

MiB = 1024**2
GiB = 1024**3

# --- NVML's error codes and exception classes --------------------------------------------------

# The values of NVML's nvmlReturn_t (nvml.h), keyed by the name without the NVML_ERROR_ prefix.
ERROR_CODES: dict[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "UNKNOWN": 999,
}
_ERROR_NAMES = {value: name for name, value in ERROR_CODES.items()}

_ERROR_TEXT = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    9: "Driver Not Loaded",
    10: "Timeout",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
    16: "GPU requires restart",
    18: "RM has detected an NVML/RM version mismatch.",
    999: "Unknown Error",
}


class NVMLError(Exception):
    """NVML's exception, as pynvml raises it: ``.value`` is the nvmlReturn_t code.

    ``NVMLError(15)`` builds the matching subclass (``NVMLError_GpuIsLost``), so code that
    catches the subclasses works against the fake as against the real bindings.
    """

    _fixed_value: int | None = None
    _by_value: dict[int, type] = {}

    def __new__(cls, value: int | None = None, *args: Any):
        if cls is NVMLError and value in NVMLError._by_value:
            cls = NVMLError._by_value[value]
        return Exception.__new__(cls)

    def __init__(self, value: int | None = None, *args: Any):
        if value is None:
            value = self._fixed_value if self._fixed_value is not None else ERROR_CODES["UNKNOWN"]
        self.value = value
        Exception.__init__(self, value)

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


def _class_name(error_name: str) -> str:
    return "NVMLError_" + "".join(part.capitalize() for part in error_name.split("_"))


ERROR_CLASSES: dict[str, type] = {}
for _name, _value in ERROR_CODES.items():
    _cls = type(_class_name(_name), (NVMLError,), {"_fixed_value": _value, "__module__": "pynvml"})
    NVMLError._by_value[_value] = _cls
    ERROR_CLASSES[_cls.__name__] = _cls
    globals()[_cls.__name__] = _cls
del _name, _value, _cls


def error_value(error: int | str) -> int:
    """An NVML error code from ``15``, ``"GPU_IS_LOST"`` or ``"NVML_ERROR_GPU_IS_LOST"``."""
    if isinstance(error, bool):
        raise ValueError(f"not an NVML error: {error!r}")
    if isinstance(error, int):
        if error in _ERROR_NAMES:
            return error
        raise ValueError(f"unknown NVML error code {error}; valid codes: {sorted(_ERROR_NAMES)}")
    if isinstance(error, str):
        name = error.upper().removeprefix("NVML_ERROR_")
        if name in ERROR_CODES:
            return ERROR_CODES[name]
    raise ValueError(f"unknown NVML error {error!r}; valid names: {', '.join(ERROR_CODES)}")


# --- the world ---------------------------------------------------------------------------------


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
    def from_json(cls, data: dict) -> "FakeGpu":
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
            "error": None if self.error is None else _ERROR_NAMES[self.error],
            "times": self.times,
            "function": self.function,
            "delay_s": self.delay_s,
        }


class FakeWorld:
    """A mutable, thread-safe world of fake GPUs that the fake ``pynvml`` reads.

    ``calls`` counts NVML calls by function name (every call, failed ones included).
    """

    def __init__(
        self,
        gpus: list[FakeGpu] | tuple[FakeGpu, ...] = (),
        *,
        name: str = "custom",
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
        system_error: int | str | None = None,
    ):
        self.name = name
        self.gpus: list[FakeGpu] = list(gpus)
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.system_error: int | None = None if system_error is None else error_value(system_error)
        self.calls: collections.Counter[str] = collections.Counter()
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()

    # -- reading ---------------------------------------------------------------------------

    def gpu(self, device: int) -> FakeGpu:
        with self._lock:
            if not isinstance(device, int) or not 0 <= device < len(self.gpus):
                raise ValueError(f"no fake GPU {device!r}; valid devices: {list(range(len(self.gpus)))}")
            return self.gpus[device]

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

    def inject_fault(self, device: int | None, error: int | str, times: int = 1, *, function: str | None = None) -> None:
        """The next ``times`` calls on ``device`` (None: any call) raise ``error``, then recover.

        ``function`` limits it to one NVML function, e.g. ``"nvmlDeviceGetMemoryInfo"``.
        """
        value = error_value(error)
        self._add_fault(_Fault(device, value, self._check_times(times), function))

    def slow_down(self, seconds: float, times: int = 1, *, device: int | None = None, function: str | None = None) -> None:
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
                "system_error": None if self.system_error is None else _ERROR_NAMES[self.system_error],
                "gpus": [gpu.to_json() for gpu in self.gpus],
                "faults": [f.to_json() for f in self._faults],
            }

    @classmethod
    def from_json(cls, data: dict) -> "FakeWorld":
        if not isinstance(data, dict) or data.get("format") != 1:
            raise ValueError("not a fake NVML world: expected a JSON object with \"format\": 1")
        world = cls(
            [FakeGpu.from_json(g) for g in data.get("gpus", [])],
            name=data.get("name", "custom"),
            driver_version=data.get("driver_version", "550.54.15"),
            cuda_driver_version=data.get("cuda_driver_version", 12040),
            system_error=data.get("system_error"),
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
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FakeWorld":
        return cls.from_json(json.loads(Path(path).read_text()))

    def copy(self) -> "FakeWorld":
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

    def _enter(self, function: str, device: int | None, initialised: bool) -> FakeGpu | None:
        """Count a call and decide its fate: raise, sleep, or hand back the GPU it reads."""
        delay = 0.0
        error: int | None = None
        with self._lock:
            self.calls[function] += 1
            if self.system_error is not None:
                error = self.system_error
            elif not initialised:
                error = ERROR_CODES["UNINITIALIZED"]
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


# --- scenarios ---------------------------------------------------------------------------------


def _uuid(n: int) -> str:
    return f"GPU-5a1e{n:04x}-0000-4000-8000-{n:012x}"


def _a100_40(n: int, **kw: Any) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-40GB", _uuid(n), 40_960 * MiB, reserved_bytes=512 * MiB, **kw)


def _three_gpus() -> FakeWorld:
    """Three A100 40GB: two busy with JAX-sized processes, one idle."""
    w = FakeWorld([_a100_40(0, utilization_percent=87), _a100_40(1, utilization_percent=12), _a100_40(2)], name="three_gpus")
    w.add_process(0, 4_200_101, 30 * GiB)
    w.add_process(0, 4_200_102, 2 * GiB)
    w.add_process(1, 4_200_201, 10 * GiB)
    return w


def _single_h100() -> FakeWorld:
    """One idle H100 80GB."""
    gpu = FakeGpu(
        "NVIDIA H100 80GB HBM3", _uuid(100), 81_559 * MiB, reserved_bytes=566 * MiB,
        power_limit_mw=700_000, pcie_max_generation=5, compute_capability=(9, 0),
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
        "NVIDIA A100-SXM4-80GB", _uuid(300), 81_920 * MiB, reserved_bytes=640 * MiB,
        used_bytes=20 * GiB, mig_mode=True, unsupported={"nvmlDeviceGetUtilizationRates"},
    )
    w = FakeWorld([gpu], name="mig")
    w.add_process(0, 4_200_301, None)
    w.add_process(0, 4_200_302, None)
    return w


def _display_gpu() -> FakeWorld:
    """A workstation: GPU 0 drives the display (Xorg on it), GPU 1 is headless."""
    def a4000(n: int, **kw: Any) -> FakeGpu:
        return FakeGpu("NVIDIA RTX A4000", _uuid(n), 16_376 * MiB, reserved_bytes=240 * MiB,
                       mig_mode=None, power_limit_mw=140_000, compute_capability=(8, 6), **kw)

    w = FakeWorld([a4000(400, display_active=True, utilization_percent=9), a4000(401)], name="display_gpu")
    w.add_process(0, 4_200_401, 220 * MiB, graphics=True)
    w.add_process(0, 4_200_402, 3 * GiB)
    w.add_process(1, 4_200_403, 6 * GiB)
    return w


def _containerized() -> FakeWorld:
    """Seen from a container: pids from the host's namespace, memory per process hidden."""
    w = FakeWorld([_a100_40(500, used_bytes=24 * GiB, utilization_percent=63), _a100_40(501)], name="containerized")
    w.add_process(0, 4_201_001, None)
    w.add_process(0, 4_201_002, None)
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


# --- the fake pynvml API -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Handle:
    index: int

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


_NOT_IN_MIG = 0xFFFFFFFF


class _FakePynvml:
    """The functions of pynvml, reading ``world()`` on every call."""

    def __init__(self, world: Callable[[], FakeWorld]):
        self._world = world
        self._init_count = 0
        self._lock = threading.Lock()

    def _device(self, function: str, handle: Any) -> FakeGpu:
        index = handle.index if isinstance(handle, _Handle) else -1
        gpu = self._world()._enter(function, index, self._init_count > 0)
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
        return _ERROR_TEXT.get(value, f"NVML Error with code {value}")

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

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> types.SimpleNamespace:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        if version:
            if "nvmlDeviceGetMemoryInfo_v2" in gpu.unsupported:
                raise NVMLError(ERROR_CODES["FUNCTION_NOT_FOUND"])
            return types.SimpleNamespace(
                version=version, total=gpu.total_bytes, reserved=gpu.reserved_bytes,
                free=gpu.free_bytes, used=gpu.used_bytes,
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

    def _processes(self, function: str, handle: Any, graphics: bool) -> list[types.SimpleNamespace]:
        gpu = self._device(function, handle)
        gi = 0 if gpu.mig_mode else _NOT_IN_MIG
        procs = gpu.graphics_processes if graphics else gpu.processes
        return [
            types.SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=gi, computeInstanceId=gi)
            for p in procs
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle, False)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v2", handle, False)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetComputeRunningProcesses_v3", handle, False)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", handle, True)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v2", handle, True)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[types.SimpleNamespace]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, True)

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


def install_pynvml_api(namespace: dict, world: Callable[[], FakeWorld]) -> None:
    """Fill ``namespace`` (a module's globals) with a pynvml-compatible API reading ``world()``."""
    api = _FakePynvml(world)
    for name in dir(api):
        if name.startswith("nvml"):
            namespace[name] = getattr(api, name)
    namespace.update(_CONSTANTS)
    for name, value in ERROR_CODES.items():
        namespace["NVML_ERROR_" + name] = value
    namespace["NVMLError"] = NVMLError
    namespace.update(ERROR_CLASSES)
    namespace["nvmlExceptionClass"] = lambda value: NVMLError._by_value[value]
    namespace["FAKE_WORLD"] = world
    namespace["__fake__"] = True


def make_pynvml_module(world: FakeWorld | Callable[[], FakeWorld]) -> types.ModuleType:
    """A fresh module object named ``pynvml`` that reads ``world``."""
    module = types.ModuleType("pynvml", "A fake pynvml reading a jupyter_gpumem FakeWorld (synthetic).")
    source = world if callable(world) and not isinstance(world, FakeWorld) else (lambda: world)
    install_pynvml_api(module.__dict__, source)
    module.nvml = module  # the old pynvml package spelled errors pynvml.nvml.NVMLError_*
    return module


_MISSING = object()


@contextmanager
def fake_nvml(world: str | FakeWorld = "three_gpus") -> Iterator[FakeWorld]:
    """Serve ``world`` (a FakeWorld or a scenario name) as ``pynvml`` inside the block.

    Yields the world so the block can change it. ``sys.modules["pynvml"]`` is restored on exit.
    In a pytest fixture: ``with fake_nvml("three_gpus") as world: yield world``.
    """
    world = world_from_spec(world)
    saved = sys.modules.get("pynvml", _MISSING)
    sys.modules["pynvml"] = make_pynvml_module(world)
    try:
        yield world
    finally:
        if saved is _MISSING:
            sys.modules.pop("pynvml", None)
        else:
            sys.modules["pynvml"] = saved
