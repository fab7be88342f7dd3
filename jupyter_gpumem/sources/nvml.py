"""GPUs as the NVIDIA driver sees them, read through NVML (``pynvml``, from nvidia-ml-py).

This is the only module that imports ``pynvml``, and it does so on the first read, never at
import. Every failure becomes a ``NotAvailable`` with a reason a person can act on; a device
that cannot be read becomes a ``DeviceUnreadable`` while the others still read.

NVML calls per ``read()`` (``NvmlSource.calls`` counts them):

- first read: nvmlInit + nvmlDeviceGetCount, then per device GetHandleByIndex, GetName and
  GetUUID (cached until the next init) and the 5 per-read queries below: ``2 + 8 * devices``.
- every later read, per device: GetMemoryInfo, GetUtilizationRates, GetDisplayActive,
  GetMigMode, GetComputeRunningProcesses: ``5 * devices``. A driver without the v2 memory query
  costs one extra call, once.
- while NVML cannot start: nothing, except one retry every ``retry_interval_s``.

Pids are as the driver reports them: in the host's pid namespace, which may not be ours
(containers). Matching them to kernels is the server's job.

Every pynvml call goes through ``NvmlSource._call``, the one place that catches what the
binding raises (its ``NVMLError`` and ``NVMLLibraryMismatchError``, and ``TypeError`` or
``AttributeError`` from a binding older than the call) and turns it into a ``NotAvailable``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

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
from jupyter_gpumem.core.synthetic import NVML_FIELDS
from jupyter_gpumem.sources.device_identity import GpuIdentity

__all__ = ["NvmlSource", "explain_nvml_error", "RETRY_INTERVAL_S"]

RETRY_INTERVAL_S = 5.0

# nvmlReturn_t values (nvml.h); kept here so the codes are known before pynvml is imported.
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_ARGUMENT_VERSION_MISMATCH = 25
_GPU_NOT_FOUND = 28

# After one of these NVML as a whole is gone: drop every handle and init again later.
_SYSTEM_ERRORS = {_UNINITIALIZED, _DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND, _LIB_RM_VERSION_MISMATCH}
# These end a device's reading: it is a DeviceUnreadable this time.
_DEVICE_ERRORS = {_GPU_IS_LOST, _RESET_REQUIRED, _GPU_NOT_FOUND}

# How a driver or binding without the v2 memory query refuses it (None: e.g. a TypeError).
_V2_REFUSALS = {_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH, None}

_NOT_AVAILABLE_ULL = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long

_NO_PYNVML = NotAvailable(NO_LIBRARY, "the nvidia-ml-py package is not installed: pip install nvidia-ml-py")


def _error_value(exc: BaseException) -> int | None:
    if type(exc).__name__ == "NVMLLibraryMismatchError":
        # nvidia-ml-py 13 raises it in place of NVMLError_FunctionNotFound for an unversioned
        # call whose versioned function the driver lacks (throwOnVersionMismatch in pynvml.py).
        return _FUNCTION_NOT_FOUND
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def explain_nvml_error(exc: BaseException, what: str = "NVML", device: int | None = None) -> NotAvailable:
    """A ``NotAvailable`` for an exception raised by a pynvml call about ``what``."""
    value = _error_value(exc)
    gpu = "the GPU" if device is None else f"GPU {device}"
    if value == _LIBRARY_NOT_FOUND:
        return NotAvailable(
            NO_LIBRARY,
            "NVIDIA's NVML library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed "
            "here, or it is not visible inside this container",
        )
    if value == _DRIVER_NOT_LOADED:
        return NotAvailable(NO_DRIVER, "NVIDIA driver not loaded: nvidia-smi should work before the monitor can")
    if value == _LIB_RM_VERSION_MISMATCH:
        return NotAvailable(
            NO_DRIVER,
            "the NVIDIA driver library and kernel module versions differ (a driver upgrade without a "
            "reboot): reboot, or reload the nvidia kernel module, until nvidia-smi works",
        )
    if value == _UNINITIALIZED:
        return NotAvailable(NO_DRIVER, "NVML lost its connection to the NVIDIA driver: it will be retried")
    if value == _NO_PERMISSION:
        if what == "NVML":
            return NotAvailable(
                NO_PERMISSION,
                "no permission to query the GPUs: the user running Jupyter needs access to /dev/nvidia* "
                "(try nvidia-smi as that user)",
            )
        return NotAvailable(NO_PERMISSION, f"no permission to read {what} on {gpu}")
    if value == _GPU_IS_LOST:
        return NotAvailable(
            GPU_LOST,
            f"{gpu} has fallen off the bus (NVML: GPU is lost): it needs a reset (nvidia-smi -r) or a "
            "reboot; the other GPUs are still read",
        )
    if value == _RESET_REQUIRED:
        return NotAvailable(GPU_LOST, f"{gpu} needs a reset (nvidia-smi -r) or a reboot before it can be read")
    if value == _GPU_NOT_FOUND:
        return NotAvailable(GPU_LOST, f"{gpu} is no longer found by the driver")
    if value in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
        return NotAvailable(NOT_SUPPORTED, f"{gpu} or its driver does not report {what}")
    message = str(exc) or type(exc).__name__
    return NotAvailable(ERROR, f"reading {what} on {gpu} failed: {message}")


class _Refused(Exception):
    """A pynvml call failed; ``why`` says so for people."""

    def __init__(self, why: NotAvailable, value: int | None = None):
        self.why = why
        self.value = value  # the NVML error code, None for a non-NVML exception


class _SystemGone(_Refused):
    """NVML as a whole stopped answering during a read."""


class _DeviceGone(_Refused):
    """One query (or one device) failed; NVML itself still answers."""


def _binding_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """What a pynvml call raises when it cannot answer: the binding's ``NVMLError`` (and
    nvidia-ml-py 13's ``NVMLLibraryMismatchError``), and ``TypeError`` or ``AttributeError`` from
    a binding that predates a call or its arguments."""
    own = tuple(
        error
        for error in (getattr(nvml, "NVMLError", None), getattr(nvml, "NVMLLibraryMismatchError", None))
        if isinstance(error, type) and issubclass(error, Exception)
    )
    return (*own, TypeError, AttributeError)


def is_fake() -> bool:
    """True when the ``pynvml`` in use is the fake world from ``jupyter_gpumem.testing`` (its
    readings are made up). Never imports pynvml."""
    return bool(getattr(sys.modules.get("pynvml"), "__fake__", False))


def made_up_fields() -> tuple[str, ...]:
    """The sample fields the NVML in use makes up: NVML's own (``synthetic.NVML_FIELDS``) in the
    fake world, none otherwise. JAX's readings beside it are real."""
    return NVML_FIELDS if is_fake() else ()


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NvmlSource:
    """Reads every GPU through NVML. Never raises; thread-safe.

    ``calls`` counts the NVML functions this source has called (init and shutdown included).
    ``pynvml`` may be passed in (a module or any object with its functions); by default it is
    imported on the first read, so a fake one placed in ``sys.modules`` is used.
    """

    def __init__(
        self,
        *,
        retry_interval_s: float = RETRY_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        pynvml: Any = None,
    ):
        self.calls = 0
        self._retry_interval_s = retry_interval_s
        self._clock = clock
        self._nvml = pynvml
        self._errors: tuple[type[BaseException], ...] = ()
        self._lock = threading.RLock()
        self._started = False
        self._failure: NotAvailable | None = None
        self._next_try = float("-inf")
        self._handles: dict[int, Any] = {}
        self._identity: dict[int, tuple[str, str]] = {}
        self._count = 0
        self._memory_v2 = True
        self._processes_v2 = False
        self._driver_version: str | None = None

    # -- public -----------------------------------------------------------------------------

    def read(self) -> tuple[DeviceReading | DeviceUnreadable, ...] | NotAvailable:
        """Every GPU now: a reading per device, or why none can be read."""
        with self._lock:
            failure = self._ensure_started()
            if failure is not None:
                return failure
            try:
                return tuple(self._read_device(i) for i in range(self._count))
            except _SystemGone as gone:
                self._drop(gone.why)
                return gone.why

    def driver_version(self) -> str | NotAvailable:
        """The NVIDIA driver's version, e.g. ``"550.54.15"``."""
        with self._lock:
            failure = self._ensure_started()
            if failure is not None:
                return failure
            try:
                if self._driver_version is None:
                    self._driver_version = _text(self._call("nvmlSystemGetDriverVersion", what="the driver version"))
                return self._driver_version
            except _SystemGone as gone:
                self._drop(gone.why)
                return gone.why
            except _DeviceGone as gone:
                return gone.why

    def gpu_count(self) -> int | NotAvailable:
        """How many GPUs NVML lists (``nvmlDeviceGetCount``, read when NVML starts)."""
        with self._lock:
            failure = self._ensure_started()
            return failure if failure is not None else self._count

    def cuda_driver_version(self) -> int | NotAvailable:
        """The newest CUDA version the driver supports, as ``nvmlSystemGetCudaDriverVersion``
        gives it: 1000 * major + 10 * minor (12040 is CUDA 12.4)."""
        with self._lock:
            failure = self._ensure_started()
            if failure is not None:
                return failure
            try:
                return int(self._call("nvmlSystemGetCudaDriverVersion", what="the driver's CUDA version"))
            except _SystemGone as gone:
                self._drop(gone.why)
                return gone.why
            except _DeviceGone as gone:
                return gone.why

    def identities(self) -> tuple[GpuIdentity, ...] | NotAvailable:
        """Each GPU's index, UUID and PCI bus id: what a CUDA device is matched on. A GPU that
        cannot say one of them has it empty (UUID) or None (bus id)."""
        with self._lock:
            failure = self._ensure_started()
            if failure is not None:
                return failure
            try:
                return tuple(self._identity_of(i) for i in range(self._count))
            except _SystemGone as gone:
                self._drop(gone.why)
                return gone.why

    def shutdown(self) -> None:
        """Release NVML. A later read starts it again."""
        with self._lock:
            if self._started:
                self._shutdown_quietly()
            self._started = False
            self._failure = None
            self._next_try = float("-inf")
            self._forget_devices()

    @property
    def started(self) -> bool:
        return self._started

    # -- starting ---------------------------------------------------------------------------

    def _ensure_started(self) -> NotAvailable | None:
        if self._started:
            return None
        now = self._clock()
        if now < self._next_try and self._failure is not None:
            return self._failure
        self._next_try = now + self._retry_interval_s
        if self._nvml is None:
            try:
                import pynvml  # here, not at import: loading the extension never loads NVML

                self._nvml = pynvml
            except ImportError:
                self._failure = _NO_PYNVML
                return self._failure
        self._errors = _binding_errors(self._nvml)
        try:
            self._call("nvmlInit", what="NVML")
        except _Refused as refused:
            self._failure = refused.why
            return self._failure
        self._started = True
        self._forget_devices()
        try:
            self._count = int(self._call("nvmlDeviceGetCount", what="the number of GPUs"))
        except _Refused as refused:
            self._drop(refused.why)
            return refused.why
        except (TypeError, ValueError) as exc:
            why = NotAvailable(ERROR, f"NVML gave an odd device count: {exc}")
            self._drop(why)
            return why
        self._failure = None
        return None

    def _forget_devices(self) -> None:
        self._handles.clear()
        self._identity.clear()
        self._count = 0
        self._memory_v2 = True
        self._processes_v2 = False
        self._driver_version = None

    def _drop(self, why: NotAvailable) -> None:
        """NVML went away mid-run: forget it, and try again after the retry interval."""
        if self._started:
            self._shutdown_quietly()
        self._started = False
        self._forget_devices()
        self._failure = why
        self._next_try = self._clock() + self._retry_interval_s

    def _shutdown_quietly(self) -> None:
        try:
            self._call("nvmlShutdown", what="NVML")
        except _Refused:
            pass  # NVML is being let go of either way

    # -- calling ----------------------------------------------------------------------------

    def _call(self, function: str, *args: Any, what: str, device: int | None = None, **kwargs: Any) -> Any:
        """Call one pynvml function: the one place its errors are caught. They come out as
        _SystemGone (NVML as a whole is gone) or _DeviceGone (this query or this GPU)."""
        self.calls += 1
        try:
            return getattr(self._nvml, function)(*args, **kwargs)
        except self._errors as exc:
            why = explain_nvml_error(exc, what, device)
            value = _error_value(exc)
            if value in _SYSTEM_ERRORS:
                raise _SystemGone(why, value) from None
            raise _DeviceGone(why, value) from None

    def _optional(self, function: str, handle: Any, index: int, what: str, **kwargs: Any) -> Any:
        """A query whose failure leaves one field NotAvailable, unless the GPU itself is gone."""
        try:
            return self._call(function, handle, what=what, device=index, **kwargs)
        except _DeviceGone as gone:
            if gone.why.code == GPU_LOST:
                raise
            return gone.why

    # -- one device -------------------------------------------------------------------------

    def _read_device(self, index: int) -> DeviceReading | DeviceUnreadable:
        name, uuid = self._identity.get(index, ("", ""))
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._call("nvmlDeviceGetHandleByIndex", index, what="the device", device=index)
                self._handles[index] = handle
            if index not in self._identity:
                name = _text(self._call("nvmlDeviceGetName", handle, what="the name", device=index))
                uuid = _text(self._call("nvmlDeviceGetUUID", handle, what="the UUID", device=index))
                self._identity[index] = (name, uuid)
            total, used, free, reserved = self._memory(handle, index)
            utilization = self._optional("nvmlDeviceGetUtilizationRates", handle, index, "utilisation")
            display = self._optional("nvmlDeviceGetDisplayActive", handle, index, "the display state")
            mig = self._mig_mode(handle, index)
            processes = self._processes(handle, index, mig)
        except _DeviceGone as gone:
            if gone.why.code == GPU_LOST:
                self._handles.pop(index, None)  # a reset GPU comes back with a new handle
            return DeviceUnreadable(index=index, why=gone.why, name=name, uuid=uuid)
        return DeviceReading(
            index=index,
            name=name,
            uuid=uuid,
            total_bytes=total,
            used_bytes=used,
            free_bytes=free,
            reserved_bytes=reserved,
            utilization_percent=utilization if isinstance(utilization, NotAvailable) else int(utilization.gpu),
            display_active=display if isinstance(display, NotAvailable) else bool(display),
            mig_mode=mig,
            processes=processes,
        )

    def _identity_of(self, index: int) -> GpuIdentity:
        try:
            handle = self._handles.get(index)
            if handle is None:
                handle = self._call("nvmlDeviceGetHandleByIndex", index, what="the device", device=index)
                self._handles[index] = handle
            uuid = _text(self._call("nvmlDeviceGetUUID", handle, what="the UUID", device=index))
            pci = self._optional("nvmlDeviceGetPciInfo", handle, index, "its PCI bus id")
        except _DeviceGone:
            return GpuIdentity(index, "")
        bus_id = None if isinstance(pci, NotAvailable) else _text(getattr(pci, "busId", "")) or None
        return GpuIdentity(index, uuid, bus_id)

    def _memory(self, handle: Any, index: int) -> tuple[int, int, int, int | NotAvailable]:
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        if self._memory_v2 and version is not None:
            try:
                info = self._call("nvmlDeviceGetMemoryInfo", handle, what="memory", device=index, version=version)
                return int(info.total), int(info.used), int(info.free), int(info.reserved)
            except _DeviceGone as gone:
                if gone.value not in _V2_REFUSALS:
                    raise
                self._memory_v2 = False  # an older driver or binding: v1 from now on
        info = self._call("nvmlDeviceGetMemoryInfo", handle, what="memory", device=index)
        # v1 counts reserved memory as used and cannot tell it apart.
        reserved = NotAvailable(NOT_SUPPORTED, "this driver does not report reserved memory (NVML memory info v1)")
        return int(info.total), int(info.used), int(info.free), reserved

    def _mig_mode(self, handle: Any, index: int) -> bool | NotAvailable:
        mode = self._optional("nvmlDeviceGetMigMode", handle, index, "MIG mode")
        if isinstance(mode, NotAvailable):
            # A GPU that cannot do MIG answers NOT_SUPPORTED: for it, MIG is simply off.
            return False if mode.code == NOT_SUPPORTED else mode
        current = mode[0] if isinstance(mode, (list, tuple)) else mode
        return int(current) == 1

    def _running_processes(self, handle: Any, index: int) -> Any:
        """The compute processes, asked the newest way the binding knows; a driver without that
        query (before 510, under nvidia-ml-py 11.515 or later, which call the v3 function) is
        asked through the binding's v2 function instead, from then on."""
        v2 = getattr(self._nvml, "nvmlDeviceGetComputeRunningProcesses_v2", None)
        if not self._processes_v2:
            try:
                return self._call("nvmlDeviceGetComputeRunningProcesses", handle, what="its processes", device=index)
            except _DeviceGone as gone:
                if gone.why.code == GPU_LOST:
                    raise
                if gone.value != _FUNCTION_NOT_FOUND or v2 is None:
                    return gone.why
            self._processes_v2 = True
        return self._optional("nvmlDeviceGetComputeRunningProcesses_v2", handle, index, "its processes")

    def _processes(
        self, handle: Any, index: int, mig: bool | NotAvailable
    ) -> tuple[ProcessReading, ...] | NotAvailable:
        mig_hidden = NotAvailable(
            PIDS_HIDDEN,
            f"GPU {index} is in MIG mode: NVML reports memory per MIG instance, not per process on the whole GPU",
        )
        procs = self._running_processes(handle, index)
        if isinstance(procs, NotAvailable):
            return mig_hidden if mig is True else procs
        readings = []
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            if used is None or used == _NOT_AVAILABLE_ULL:
                used = NotAvailable(
                    PIDS_HIDDEN,
                    "the driver does not report this process's memory (as in MIG mode, and always under Windows WDDM)",
                )
            else:
                used = int(used)
            readings.append(ProcessReading(pid=int(proc.pid), used_bytes=used))
        if mig is True and (not readings or any(isinstance(p.used_bytes, NotAvailable) for p in readings)):
            return mig_hidden
        return tuple(readings)
