"""The CUDA driver's answers for JAX: each device's default memory pool (behind the cuda_async
allocator) and what the device is (its UUID and PCI bus id, to find it in NVML).

This is the only module that touches ``libcuda`` (through ctypes). It never starts CUDA: it
reads only when ``libcuda`` is already loaded into this process (JAX's GPU backend loads it),
and it never calls ``cuInit``. If CUDA was loaded but not initialised, the driver answers
CUDA_ERROR_NOT_INITIALIZED and the reading says so.

It reads the device's DEFAULT pool (cuDeviceGetDefaultMemPool). XLA's cuda_async allocator
uses that pool (the client asks for it with ``create_new_pool=false``), and on an H100 with JAX
0.11.2 the default pool held exactly what JAX's cuda_async ``bytes_in_use`` said (1.00 GiB both:
docs/gpu-facts.md, 2026-11-26). Only the optional separate-colour temp allocator makes a pool of
its own. See docs/fake-gpu.md.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from jupyter_gpumem.core.readings import (
    ERROR,
    NO_LIBRARY,
    NOT_STARTED,
    NOT_SUPPORTED,
    CudaPoolReading,
    NotAvailable,
)
from jupyter_gpumem.sources.device_identity import CudaDeviceIdentity, normalise_pci_bus_id

__all__ = [
    "read_default_pool",
    "read_device_identity",
    "loaded_libcuda_path",
    "POOL_ATTRIBUTES",
    "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT",
    "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH",
    "CU_MEMPOOL_ATTR_USED_MEM_CURRENT",
    "CU_MEMPOOL_ATTR_USED_MEM_HIGH",
]

# CUmemPool_attribute (cuda.h, CUDA 11.3+); each of these is a cuuint64_t.
CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5
CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6
CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7
CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8

POOL_ATTRIBUTES = (
    ("reserved_bytes", CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
    ("reserved_high_bytes", CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
    ("used_bytes", CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
    ("used_high_bytes", CU_MEMPOOL_ATTR_USED_MEM_HIGH),
)

# CUresult values (cuda.h) that mean something to a user.
_CUDA_RESULTS = {
    1: "CUDA_ERROR_INVALID_VALUE",
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    100: "CUDA_ERROR_NO_DEVICE",
    101: "CUDA_ERROR_INVALID_DEVICE",
    801: "CUDA_ERROR_NOT_SUPPORTED",
}

_LIBCUDA_NAME = "libcuda.so"


class _CUuuid(ctypes.Structure):
    """``CUuuid`` (cuda.h): ``struct CUuuid_st { char bytes[16]; }``. Unsigned here, so that a
    zero byte is kept rather than ending the value as a char array would."""

    _fields_ = [("bytes", ctypes.c_ubyte * 16)]


_PCI_BUS_ID_LEN = 32  # cuDeviceGetPCIBusId writes "[domain]:[bus]:[device].[function]" (13 chars) and a NUL

_lock = threading.Lock()
_driver_cache: dict[str, Any] = {}


def loaded_libcuda_path(maps_path: str = "/proc/self/maps") -> str | None:
    """The path of the libcuda already mapped into this process, or None if it is not."""
    try:
        with open(maps_path) as maps:
            for line in maps:
                # address perms offset dev inode [path]; the path may hold spaces
                parts = line.split(None, 5)
                if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(_LIBCUDA_NAME):
                    return parts[5].strip()
    except OSError:
        return None
    return None


def _open_loaded_driver(path: str) -> Any:
    """ctypes handle on the libcuda already loaded from ``path``; never loads a new copy."""
    with _lock:
        if path in _driver_cache:
            return _driver_cache[path]
        # RTLD_NOLOAD: succeed only if the library is already in the process.
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        lib.cuDeviceGet.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        lib.cuDeviceGet.restype = ctypes.c_int
        lib.cuDeviceGetDefaultMemPool.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        lib.cuDeviceGetDefaultMemPool.restype = ctypes.c_int
        lib.cuMemPoolGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
        lib.cuMemPoolGetAttribute.restype = ctypes.c_int
        # Optional: a driver without them still reads pools (cuDeviceGetUuid_v2 came with CUDA 11.4).
        for name, argtypes in (
            ("cuDeviceGetUuid_v2", [ctypes.POINTER(_CUuuid), ctypes.c_int]),
            ("cuDeviceGetPCIBusId", [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
        ):
            function = getattr(lib, name, None)
            if function is not None:
                function.argtypes = argtypes
                function.restype = ctypes.c_int
        _driver_cache[path] = lib
        return lib


def _explain(result: int, call: str, ordinal: int) -> NotAvailable:
    name = _CUDA_RESULTS.get(result, f"CUresult {result}")
    if result in (3, 4):
        return NotAvailable(NOT_STARTED, f"CUDA is not initialised in this process yet ({call}: {name})")
    if result in (100, 101):
        return NotAvailable(ERROR, f"no CUDA device with ordinal {ordinal} in this process ({call}: {name})")
    if result == 801:
        return NotAvailable(NOT_SUPPORTED, f"CUDA device {ordinal} does not support memory pools ({call}: {name})")
    return NotAvailable(ERROR, f"{call} failed for CUDA device {ordinal}: {name}")


def _driver_for(ordinal: Any, driver: Any, maps_path: str, not_loaded: str) -> Any:
    """The driver to ask about ``ordinal``: the one given, else the libcuda already loaded here;
    NotAvailable (saying ``not_loaded`` when none is) for a bad ordinal or an unusable driver."""
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
        return NotAvailable(ERROR, f"a CUDA device ordinal is a non-negative int, got {ordinal!r}")
    if driver is not None:
        return driver
    path = loaded_libcuda_path(maps_path)
    if path is None:
        return NotAvailable(NOT_STARTED, not_loaded)
    try:
        return _open_loaded_driver(path)
    except (OSError, AttributeError) as exc:  # not loadable, or a libcuda without memory pools
        return NotAvailable(NO_LIBRARY, f"the loaded CUDA driver at {path} cannot be used: {exc}")


def read_default_pool(
    ordinal: int, *, driver: Any = None, maps_path: str = "/proc/self/maps"
) -> CudaPoolReading | NotAvailable:
    """Reserved and used bytes (and their high-water marks) of CUDA device ``ordinal``'s default pool.

    ``driver`` stands in for libcuda in tests: an object with ``cuDeviceGet``,
    ``cuDeviceGetDefaultMemPool`` and ``cuMemPoolGetAttribute`` that take ctypes pointers as the
    C functions do and return a CUresult int. Without it, libcuda is used only if ``maps_path``
    shows it already loaded in this process. Never raises: the driver answers with CUresult
    codes, and ctypes refuses arguments with ``ctypes.ArgumentError``.
    """
    driver = _driver_for(
        ordinal,
        driver,
        maps_path,
        "CUDA is not loaded in this process: JAX has not started its GPU backend (or runs on CPU)",
    )
    if isinstance(driver, NotAvailable):
        return driver
    try:
        return _read(driver, ordinal)
    except ctypes.ArgumentError as exc:
        return NotAvailable(ERROR, f"reading the CUDA memory pool failed: {type(exc).__name__}: {exc}")


def _read(driver: Any, ordinal: int) -> CudaPoolReading | NotAvailable:
    device = ctypes.c_int(-1)
    result = driver.cuDeviceGet(ctypes.pointer(device), ordinal)
    if result != 0:
        return _explain(result, "cuDeviceGet", ordinal)
    pool = ctypes.c_void_p()
    result = driver.cuDeviceGetDefaultMemPool(ctypes.pointer(pool), device.value)
    if result != 0:
        return _explain(result, "cuDeviceGetDefaultMemPool", ordinal)
    if not pool.value:
        return NotAvailable(NOT_SUPPORTED, f"CUDA device {ordinal} has no default memory pool")
    values = {}
    for field, attribute in POOL_ATTRIBUTES:
        value = ctypes.c_uint64(0)
        result = driver.cuMemPoolGetAttribute(pool, attribute, ctypes.pointer(value))
        if result != 0:
            return _explain(result, "cuMemPoolGetAttribute", ordinal)
        values[field] = int(value.value)
    return CudaPoolReading(**values)


def read_device_identity(
    ordinal: int, *, driver: Any = None, maps_path: str = "/proc/self/maps"
) -> CudaDeviceIdentity | NotAvailable:
    """What CUDA device ``ordinal`` is: its UUID and PCI bus id, to find it among NVML's GPUs.

    ``cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)`` (cuda.h, CUDA 11.4+) writes 16 bytes: the
    device's UUID, or a MIG instance's own. ``cuDeviceGetPCIBusId(char *pciBusId, int len,
    CUdevice dev)`` writes "[domain]:[bus]:[device].[function]" in hex. Neither needs a current
    context. ``driver`` stands in for libcuda as in ``read_default_pool``; a driver without one
    of the two functions leaves that field None. Never raises, and never loads or starts CUDA.
    """
    driver = _driver_for(
        ordinal, driver, maps_path, "CUDA is not loaded in this process, so it cannot say which GPU is which"
    )
    if isinstance(driver, NotAvailable):
        return driver
    try:
        return _read_identity(driver, ordinal)
    except ctypes.ArgumentError as exc:
        return NotAvailable(ERROR, f"asking the CUDA driver about device {ordinal} failed: {exc}")


def _read_identity(driver: Any, ordinal: int) -> CudaDeviceIdentity | NotAvailable:
    device = ctypes.c_int(-1)
    result = driver.cuDeviceGet(ctypes.pointer(device), ordinal)
    if result != 0:
        return _explain(result, "cuDeviceGet", ordinal)
    missing = []
    uuid = None
    get_uuid = getattr(driver, "cuDeviceGetUuid_v2", None)
    if get_uuid is None:
        missing.append("this CUDA driver has no cuDeviceGetUuid_v2 (CUDA 11.4+)")
    else:
        raw = _CUuuid()
        result = get_uuid(ctypes.pointer(raw), device.value)
        if result == 0:
            uuid = bytes(raw.bytes).hex()
        else:
            missing.append(_explain(result, "cuDeviceGetUuid_v2", ordinal).reason)
    bus_id = None
    get_bus = getattr(driver, "cuDeviceGetPCIBusId", None)
    if get_bus is None:
        missing.append("this CUDA driver has no cuDeviceGetPCIBusId")
    else:
        text = ctypes.create_string_buffer(_PCI_BUS_ID_LEN)
        result = get_bus(text, _PCI_BUS_ID_LEN, device.value)
        if result == 0:
            bus_id = normalise_pci_bus_id(text.value)
        else:
            missing.append(_explain(result, "cuDeviceGetPCIBusId", ordinal).reason)
    return CudaDeviceIdentity(uuid_hex=uuid, pci_bus_id=bus_id, why="; ".join(missing))
