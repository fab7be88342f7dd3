"""The CUDA pool reader: it never starts CUDA, and it asks the driver in the right order.

The driver here is a stand-in (``doubles.FakeCudaDriver``) that answers libcuda's calls by their
names and attribute numbers; no test here has run on a real CUDA driver.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

from jupyter_gpumem.core.readings import ERROR, NO_LIBRARY, NOT_STARTED, NOT_SUPPORTED, CudaPoolReading, NotAvailable
from jupyter_gpumem.sources.libcuda import (
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH,
    loaded_libcuda_path,
    read_default_pool,
)

from doubles import POOL_HANDLE, FakeCudaDriver

GiB = 1024**3
ATTRIBUTES = {
    CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: 6 * GiB,
    CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: 8 * GiB,
    CU_MEMPOOL_ATTR_USED_MEM_CURRENT: 5 * GiB,
    CU_MEMPOOL_ATTR_USED_MEM_HIGH: 7 * GiB,
}


def test_attribute_values_are_cudas():
    # CUmemPool_attribute in cuda.h: RESERVED_MEM_CURRENT = 5 ... USED_MEM_HIGH = 8.
    assert (
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
        CU_MEMPOOL_ATTR_USED_MEM_HIGH,
    ) == (5, 6, 7, 8)


def test_reads_the_default_pool_of_the_device_asked_for():
    driver = FakeCudaDriver(ATTRIBUTES, devices=2)
    reading = read_default_pool(1, driver=driver)
    assert reading == CudaPoolReading(
        reserved_bytes=6 * GiB, reserved_high_bytes=8 * GiB, used_bytes=5 * GiB, used_high_bytes=7 * GiB
    )
    assert driver.log == [
        ("cuDeviceGet", 1),
        ("cuDeviceGetDefaultMemPool", 101),
        ("cuMemPoolGetAttribute", POOL_HANDLE, 5),
        ("cuMemPoolGetAttribute", POOL_HANDLE, 6),
        ("cuMemPoolGetAttribute", POOL_HANDLE, 7),
        ("cuMemPoolGetAttribute", POOL_HANDLE, 8),
    ]


def test_never_calls_cuinit():
    driver = FakeCudaDriver(ATTRIBUTES, fail={"cuDeviceGet": 3})  # not initialised: still no cuInit
    driver.cuInit = lambda flags: driver.log.append(("cuInit", flags)) or 0
    read_default_pool(0, driver=driver)
    assert ("cuInit", 0) not in driver.log


def test_uninitialised_cuda_is_not_started():
    driver = FakeCudaDriver(ATTRIBUTES, fail={"cuDeviceGet": 3})  # CUDA_ERROR_NOT_INITIALIZED
    reading = read_default_pool(0, driver=driver)
    assert isinstance(reading, NotAvailable) and reading.code == NOT_STARTED
    assert "CUDA_ERROR_NOT_INITIALIZED" in reading.reason
    assert driver.log == [("cuDeviceGet", 0)]


def test_unknown_ordinal_names_it():
    reading = read_default_pool(3, driver=FakeCudaDriver(ATTRIBUTES, devices=1))
    assert reading == NotAvailable(
        ERROR, "no CUDA device with ordinal 3 in this process (cuDeviceGet: CUDA_ERROR_INVALID_DEVICE)"
    )


def test_device_without_pools_is_not_supported():
    reading = read_default_pool(0, driver=FakeCudaDriver(ATTRIBUTES, fail={"cuDeviceGetDefaultMemPool": 801}))
    assert isinstance(reading, NotAvailable) and reading.code == NOT_SUPPORTED


def test_failed_attribute_stops_the_reading():
    driver = FakeCudaDriver(ATTRIBUTES, fail={"cuMemPoolGetAttribute": 999})
    reading = read_default_pool(0, driver=driver)
    assert reading == NotAvailable(ERROR, "cuMemPoolGetAttribute failed for CUDA device 0: CUresult 999")
    assert len(driver.log) == 3


def test_a_driver_that_raises_is_an_error_not_an_exception():
    class Broken:
        def cuDeviceGet(self, *args):
            raise ctypes.ArgumentError("bad argument")

    reading = read_default_pool(0, driver=Broken())
    assert isinstance(reading, NotAvailable) and reading.code == ERROR
    assert "ArgumentError" in reading.reason


def test_bad_ordinal_is_refused_without_touching_the_driver():
    driver = FakeCudaDriver(ATTRIBUTES)
    assert read_default_pool(-1, driver=driver).code == ERROR
    assert read_default_pool("0", driver=driver).code == ERROR
    assert driver.log == []


def test_not_loaded_libcuda_is_not_started():
    # This machine has no CUDA, and nothing in the test process has loaded it.
    assert loaded_libcuda_path() is None
    reading = read_default_pool(0)
    assert reading == NotAvailable(
        NOT_STARTED, "CUDA is not loaded in this process: JAX has not started its GPU backend (or runs on CPU)"
    )


def test_maps_parsing_finds_libcuda(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 42  /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 43  /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
        "7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0   [stack]\n"
    )
    assert loaded_libcuda_path(str(maps)) == "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"


def test_listed_but_unopenable_libcuda_is_not_loaded_fresh(tmp_path):
    # RTLD_NOLOAD refuses a library that is not already in the process: nothing gets loaded.
    maps = tmp_path / "maps"
    maps.write_text("7f0000002000-7f0000003000 r-xp 00000000 08:01 43  /nonexistent/libcuda.so.1\n")
    reading = read_default_pool(0, maps_path=str(maps))
    assert isinstance(reading, NotAvailable) and reading.code == NO_LIBRARY
    assert "/nonexistent/libcuda.so.1" in reading.reason


def test_import_loads_no_cuda():
    code = (
        "import jupyter_gpumem.sources.libcuda as c, sys; "
        "c.read_default_pool(0); "
        "print(c.loaded_libcuda_path() is None, 'jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]
