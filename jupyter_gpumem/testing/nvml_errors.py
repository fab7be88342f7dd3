"""NVML's error codes and exception classes, as nvidia-ml-py defines them (pynvml.py, 12.x)."""

from __future__ import annotations

from typing import Any

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


ERROR_NAMES = {value: name for name, value in ERROR_CODES.items()}


ERROR_TEXT = {
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
        return ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")

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


class NVMLLibraryMismatchError(Exception):
    """What nvidia-ml-py 13.x raises when an unversioned call (``nvmlDeviceGetComputeRunningProcesses``)
    resolves to a versioned driver function the driver lacks: not an ``NVMLError``, no ``.value``
    (``throwOnVersionMismatch`` in pynvml.py, nvidia-ml-py 13.615.71; absent in 12.535.108).
    """

    __module__ = "pynvml"


def library_mismatch(function: str) -> NVMLLibraryMismatchError:
    """The error nvidia-ml-py 13.615.71 raises for unversioned ``function``, message included."""
    return NVMLLibraryMismatchError(
        "Unversioned function called and the pyNVML version does not match the NVML lib version. "
        "Either use matching pyNVML and NVML lib versions or use a versioned function such as " + function + "_v2"
    )


def error_value(error: int | str) -> int:
    """An NVML error code from ``15``, ``"GPU_IS_LOST"`` or ``"NVML_ERROR_GPU_IS_LOST"``."""
    if isinstance(error, bool):
        raise ValueError(f"not an NVML error: {error!r}")
    if isinstance(error, int):
        if error in ERROR_NAMES:
            return error
        raise ValueError(f"unknown NVML error code {error}; valid codes: {sorted(ERROR_NAMES)}")
    if isinstance(error, str):
        name = error.upper().removeprefix("NVML_ERROR_")
        if name in ERROR_CODES:
            return ERROR_CODES[name]
    raise ValueError(f"unknown NVML error {error!r}; valid names: {', '.join(ERROR_CODES)}")
