"""Which GPU is which: each JAX/CUDA device is joined to its NVML GPU on identity, never on
ordinal alone, and says why where no join holds.

CUDA numbers GPUs fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA C Programming
Guide, "CUDA Environment Variables"); NVML numbers them by PCI bus id, and nvml.h warns that
its index "may not correlate with other APIs, such as the CUDA device index". The fake worlds
below set ``FakeWorld.cuda_order`` so that the two orders differ, and ``FakeCudaDriver`` answers
for that world as libcuda would (tests/doubles.py).
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.doctor import report
from jupyter_gpumem.doctor.oom_text import OomError
from jupyter_gpumem.settings import apply as shim
from jupyter_gpumem.sources import jax_backend, libcuda
from jupyter_gpumem.sources.device_identity import (
    CudaDeviceIdentity,
    GpuIdentity,
    NvmlMatch,
    match_nvml,
    normalise_pci_bus_id,
    uuid_hex,
)
from jupyter_gpumem.sources.nvml import NvmlSource
from jupyter_gpumem.testing import fake_nvml, scenario

from doubles import FakeCudaDriver

BFC = {"bytes_in_use": 1024, "bytes_limit": 8 << 30, "pool_bytes": 4 << 20}


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "XLA_PYTHON_CLIENT_ALLOCATOR"):
        monkeypatch.delenv(var, raising=False)
    jax_backend.forget_device_identities()
    yield
    jax_backend.forget_device_identities()


def three_gpus_fastest_last() -> FakeWorld:  # noqa: F821
    """three_gpus, where CUDA counts NVML's GPU 2 first (say it is the fastest)."""
    world = scenario("three_gpus")
    world.cuda_order = [2, 0, 1]
    return world


def fake_jax(monkeypatch, devices, cuda_visible_devices="all"):
    """Synthetic ``jax`` and ``jax._src.xla_bridge``: a started CUDA backend with ``devices``."""
    jax = types.ModuleType("jax")
    jax.__version__ = "0.0-synthetic"
    jax.config = SimpleNamespace(read=lambda name: {"jax_cuda_visible_devices": cuda_visible_devices}[name])
    bridge = types.ModuleType("jax._src.xla_bridge")
    client = SimpleNamespace(platform="cuda", local_devices=lambda: list(devices))
    bridge._backends = {"cuda": client}
    bridge._default_backend = client
    bridge.backends_are_initialized = lambda: True
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax._src.xla_bridge", bridge)


def gpu_device(jax_id, hw_id, stats=BFC):
    return SimpleNamespace(
        id=jax_id, local_hardware_id=hw_id, platform="cuda", device_kind="Synthetic GPU", memory_stats=lambda: stats
    )


def libcuda_for(monkeypatch, driver):
    """libcuda, answering through ``driver`` (a FakeCudaDriver), as JAX's process would load it."""
    monkeypatch.setattr(jax_backend, "read_device_identity", lambda o: libcuda.read_device_identity(o, driver=driver))


# --- the fake world models CUDA's numbering ------------------------------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, [2, 0, 1]),
        ({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, [0, 1, 2]),
        ({"CUDA_VISIBLE_DEVICES": "1,2"}, [0, 1]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-5a1e0001"}, [1]),
        ({"CUDA_VISIBLE_DEVICES": "0,bogus,1"}, [2]),
    ],
    ids=["fastest-first", "pci-order", "indices", "uuid-prefix", "stops-at-a-bad-entry"],
)
def test_a_fake_world_numbers_its_gpus_as_cuda_would(env, expected):
    assert three_gpus_fastest_last().cuda_devices(env) == expected


def test_a_world_keeps_its_cuda_order_through_json():
    assert scenario("three_gpus").copy().cuda_order is None
    assert three_gpus_fastest_last().copy().cuda_order == [2, 0, 1]


# --- the two sides' identities -----------------------------------------------------------------


def test_libcuda_reports_the_uuid_and_pci_bus_id_of_the_ordinal_asked_for():
    """cuda.h: ``CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)`` writes 16 bytes, and
    ``cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)`` "[domain]:[bus]:[device].[function]"."""
    driver = FakeCudaDriver(world=three_gpus_fastest_last())
    found = libcuda.read_device_identity(0, driver=driver)
    assert found == CudaDeviceIdentity(uuid_hex="5a1e0002000040008000000000000002", pci_bus_id="00000000:38:00.0")
    assert [call[0] for call in driver.log] == ["cuDeviceGet", "cuDeviceGetUuid_v2", "cuDeviceGetPCIBusId"]


def test_a_uuid_with_zero_bytes_keeps_all_sixteen():
    world = scenario("single_h100")
    world.gpus[0].uuid = "GPU-00000000-0000-0000-0000-000000000001"
    assert libcuda.read_device_identity(0, driver=FakeCudaDriver(world=world)).uuid_hex == "0" * 31 + "1"


def test_a_driver_without_the_identity_calls_says_so_and_keeps_what_it_has():
    driver = FakeCudaDriver(world=scenario("three_gpus"), fail={"cuDeviceGetUuid_v2": 801})
    found = libcuda.read_device_identity(1, driver=driver)
    assert found.uuid_hex is None and found.pci_bus_id == "00000000:28:00.0"
    assert "cuDeviceGetUuid_v2" in found.why


def test_without_libcuda_loaded_the_identity_is_not_available(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("")
    assert libcuda.read_device_identity(0, maps_path=str(maps)).code == model.NOT_STARTED


def test_nvml_lists_each_gpu_with_its_uuid_and_pci_bus_id():
    with fake_nvml("three_gpus") as world:
        found = NvmlSource().identities()
    assert found == tuple(GpuIdentity(i, world.gpus[i].uuid, world.pci_bus_id(i)) for i in range(3))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("00000000:3B:00.0", "00000000:3b:00.0"),
        ("0000:3b:00.0", "00000000:3b:00.0"),
        ("3b:00.0", "00000000:3b:00.0"),
        ("not a bus", None),
    ],
)
def test_pci_bus_ids_from_nvml_and_cuda_compare_equal(text, expected):
    assert normalise_pci_bus_id(text) == expected


def test_uuids_compare_on_their_hex_digits():
    assert uuid_hex("GPU-5A1E0000-0000-4000-8000-000000000000") == uuid_hex("MIG-5a1e0000-0000-4000-8000-000000000000")
    assert uuid_hex("GPU-5a1e") is None


# --- the join -----------------------------------------------------------------------------------

GPUS = (
    GpuIdentity(0, "GPU-00000000-0000-4000-8000-00000000000a", "00000000:18:00.0"),
    GpuIdentity(1, "GPU-00000000-0000-4000-8000-00000000000b", "00000000:28:00.0"),
)


def test_the_uuid_decides_whatever_the_ordinal():
    cuda = CudaDeviceIdentity(uuid_hex=uuid_hex(GPUS[1].uuid), pci_bus_id=None)
    assert match_nvml(0, cuda, GPUS) == NvmlMatch(1, "uuid")


def test_the_pci_bus_id_decides_when_the_driver_gives_no_uuid():
    assert match_nvml(0, CudaDeviceIdentity(None, "00000000:28:00.0"), GPUS) == NvmlMatch(1, "pci_bus_id")


def test_a_mig_instance_is_not_joined_to_its_whole_gpu():
    """cuDeviceGetUuid_v2 gives a MIG instance its own UUID; NVML's device UUID is the card's."""
    match = match_nvml(0, CudaDeviceIdentity("ab" * 16, "00000000:28:00.0"), GPUS)
    assert match.nvml_index is None and "MIG instance" in match.why_not and "NVML GPU 1" in match.why_not


def test_a_cuda_visible_devices_uuid_names_the_gpu_without_libcuda():
    assert match_nvml(0, None, GPUS, visible=("GPU-00000000-0000-4000-8000-00000000000b",)) == NvmlMatch(
        1, "cuda_visible_devices"
    )


def test_a_cuda_visible_devices_mig_entry_is_said_not_guessed():
    match = match_nvml(0, None, GPUS, visible=("MIG-5a1e0000-0000-4000-8000-000000000000",))
    assert match.nvml_index is None and "MIG instance" in match.why_not


def test_indices_without_pci_order_are_not_guessed():
    match = match_nvml(1, None, GPUS, visible=("1", "0"))
    assert match.nvml_index is None and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in match.why_not


def test_indices_in_pci_order_are_nvml_s_indices():
    assert match_nvml(1, None, GPUS, visible=("1", "0"), device_order="PCI_BUS_ID") == NvmlMatch(0, "pci_order")


def test_a_single_gpu_needs_no_identity():
    assert match_nvml(0, None, GPUS[:1]) == NvmlMatch(0, "single_gpu")


def test_nvml_that_cannot_be_read_is_the_reason():
    match = match_nvml(0, None, None, nvml_problem="synthetic: no driver")
    assert match == NvmlMatch(None, why_not="NVML cannot be read: synthetic: no driver")


# --- read_jax_devices ----------------------------------------------------------------------------


def test_jax_devices_are_joined_to_nvml_by_uuid_when_cuda_counts_differently(monkeypatch):
    world = three_gpus_fastest_last()
    libcuda_for(monkeypatch, FakeCudaDriver(world=world))
    fake_jax(monkeypatch, [gpu_device(0, 0), gpu_device(1, 1), gpu_device(2, 2)])
    with fake_nvml(world):
        readings = shim.read_jax_devices()
    assert [(r.jax_id, r.nvml_index) for r in readings] == [(0, 2), (1, 0), (2, 1)]
    assert [r.cuda_ordinal for r in readings] == [0, 1, 2]


def test_the_join_reads_nvml_once_per_process(monkeypatch):
    world = three_gpus_fastest_last()
    libcuda_for(monkeypatch, FakeCudaDriver(world=world))
    fake_jax(monkeypatch, [gpu_device(0, 0)])
    with fake_nvml(world):
        for _ in range(3):
            shim.read_jax_devices()
    assert world.calls["nvmlInit"] == 1 and world.calls["nvmlDeviceGetUUID"] == 3


def test_a_cuda_visible_devices_uuid_is_honoured_without_libcuda(monkeypatch):
    world = three_gpus_fastest_last()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", world.gpus[1].uuid[:12])
    fake_jax(monkeypatch, [gpu_device(0, 0)])
    with fake_nvml(world):
        assert shim.read_jax_devices()[0].nvml_index == 1


def test_a_gpu_that_cannot_be_joined_says_why(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    fake_jax(monkeypatch, [gpu_device(0, 0), gpu_device(1, 1)])
    with fake_nvml(three_gpus_fastest_last()):
        readings = shim.read_jax_devices()
    assert [r.nvml_index for r in readings] == [None, None]
    assert "fastest first" in readings[0].nvml_unmatched


def test_jax_cuda_visible_devices_gives_the_cuda_ordinal_where_jax_has_no_hardware_id(monkeypatch):
    """``jax_cuda_visible_devices`` reaches the plugin as ``visible_devices`` (jax/_src/xla_bridge.py
    ``_options_from_jax_configs``, v0.10.2 and v0.11.0); XLA numbers the devices it builds from 0
    (``BuildDistributedDevices``, se_gpu_pjrt_client.cc), so JAX's id is not the CUDA ordinal."""
    world = three_gpus_fastest_last()
    libcuda_for(monkeypatch, FakeCudaDriver(world=world))
    fake_jax(monkeypatch, [gpu_device(0, None), gpu_device(1, None)], cuda_visible_devices="1,2")
    with fake_nvml(world):
        readings = shim.read_jax_devices()
    assert [(r.jax_id, r.cuda_ordinal, r.nvml_index) for r in readings] == [(0, 1, 0), (1, 2, 1)]


# --- the OOM message's device ordinal -------------------------------------------------------------


def test_the_oom_message_s_device_ordinal_is_the_cuda_ordinal_not_the_jax_id():
    """ "on device ordinal N" is the stream executor's ordinal (XLA's ``local_device_ordinal``),
    which JAX shows as ``local_hardware_id``: with jax_cuda_visible_devices=1,2 ordinal 2 is JAX's
    device 1. The other device has less room, so a guess would pick it."""
    roomy = model.normalise_stats({"bytes_in_use": 1 << 30, "bytes_limit": 60 << 30, "pool_bytes": 2 << 30}, "bfc")
    tight = model.normalise_stats({"bytes_in_use": 9 << 30, "bytes_limit": 10 << 30, "pool_bytes": 10 << 30}, "bfc")
    readings = (
        model.JaxDeviceReading(0, "gpu", "Synthetic GPU", 0, tight, cuda_ordinal=1),
        model.JaxDeviceReading(1, "gpu", "Synthetic GPU", 1, roomy, cuda_ordinal=2),
    )
    error = OomError("platform", 32 << 20, True, 2, "JaxRuntimeError", "synthetic")
    assert report._failing_device(error, readings).jax_id == 1


def test_an_oom_ordinal_no_device_has_falls_back_to_the_device_with_least_room():
    tight = model.normalise_stats({"bytes_in_use": 9 << 30, "bytes_limit": 10 << 30, "pool_bytes": 10 << 30}, "bfc")
    roomy = model.normalise_stats({"bytes_in_use": 1 << 30, "bytes_limit": 60 << 30, "pool_bytes": 2 << 30}, "bfc")
    readings = (
        model.JaxDeviceReading(0, "gpu", "", 0, roomy, cuda_ordinal=1),
        model.JaxDeviceReading(1, "gpu", "", 1, tight, cuda_ordinal=2),
    )
    error = OomError("platform", 32 << 20, True, 0, "JaxRuntimeError", "synthetic")
    assert report._failing_device(error, readings).jax_id == 1


# --- on a GPU --------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_on_a_gpu_every_jax_device_is_found_in_nvml_by_its_uuid():
    import subprocess

    script = (
        "import json, jax, jax.numpy as jnp\n"
        "jnp.ones(3).block_until_ready()\n"
        "from jupyter_gpumem import allocator_shim\n"
        "from jupyter_gpumem.sources import jax_backend\n"
        "r = allocator_shim.read_jax_devices()\n"
        "print(json.dumps([(x.cuda_ordinal, x.nvml_index, x.nvml_unmatched, jax_backend._nvml_match('cuda', x.cuda_ordinal).how) for x in r]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    rows = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert rows and all(index is not None and how == "uuid" for _, index, _, how in rows), rows
