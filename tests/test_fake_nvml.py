"""The fake NVML world as other programs see it: the drop-in pynvml, JSON worlds, reloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR, FakeWorld, scenario
from jupyter_gpumem.testing import NVMLError, WorldFromEnv, make_pynvml_module

GiB = 1024**3


def dropin_env(spec: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([DROPIN_DIR, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[ENV_VAR] = spec
    return env


def run_with_dropin(spec: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=dropin_env(spec), capture_output=True, text=True, timeout=60,
    )


# A program written against pynvml the way dashboards use it, unchanged for the fake.
DASHBOARD_LOOP = """
    import pynvml
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    try:
        pynvml.nvmlDeviceGetNvLinkVersion(handles[0], 0)
    except (IndexError, pynvml.nvml.NVMLError_NotSupported):
        nvlink = None
    print(pynvml.__file__.endswith("pynvml_dropin/pynvml.py"), nvlink,
          pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handles[0]))
    for h in handles:
        print(pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
              pynvml.nvmlDeviceGetMemoryInfo(h).used,
              pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
              [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)])
    print(pynvml.nvmlSystemGetDriverVersion())
    pynvml.nvmlShutdown()
"""


def test_dropin_serves_a_scenario_to_unchanged_code():
    out = run_with_dropin("three_gpus", DASHBOARD_LOOP)
    assert out.returncode == 0, out.stderr
    reserved = 512 * 1024**2  # v1 memory info counts reserved memory as used
    assert out.stdout.splitlines() == [
        "True None 4",
        f"NVIDIA A100-SXM4-40GB 87 {32 * GiB + reserved} 1024 [4200101, 4200102]",
        f"NVIDIA A100-SXM4-40GB 12 {10 * GiB + reserved} 1024 [4200201]",
        f"NVIDIA A100-SXM4-40GB 0 {reserved} 1024 []",
        "550.54.15",
    ]


def test_dropin_raises_nvml_errors_that_callers_can_catch():
    out = run_with_dropin("no_library", """
        import pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            print(type(e).__name__, e.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, str(e))
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "NVMLError_LibraryNotFound True NVML Shared Library Not Found"


def test_dropin_refuses_an_unknown_world_by_name():
    out = run_with_dropin("four_gpus", "import pynvml")
    assert out.returncode != 0
    assert "'four_gpus' is neither a fake NVML scenario (three_gpus, single_h100" in out.stderr


READ_ON_REQUEST = """
    import sys
    from jupyter_gpumem.sources.nvml import NvmlSource
    source = NvmlSource()
    for _ in sys.stdin:
        result = source.read()
        print([d.why.code if hasattr(d, "why") else d.used_bytes for d in result], flush=True)
"""


def test_dropin_rereads_a_json_world_changed_from_outside(tmp_path):
    path = tmp_path / "world.json"
    world = scenario("three_gpus")
    world.save(path)
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(READ_ON_REQUEST)], env=dropin_env(str(path)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        def ask() -> str:
            proc.stdin.write("read\n")
            proc.stdin.flush()
            return proc.stdout.readline().strip()

        assert ask() == f"[{32 * GiB}, {10 * GiB}, 0]"
        world.add_process(2, os.getpid(), 5 * GiB)
        world.inject_fault(1, "GPU_IS_LOST", times=1)
        world.save(path)
        assert ask() == f"[{32 * GiB}, 'gpu_lost', {5 * GiB}]"
        assert ask() == f"[{32 * GiB}, {10 * GiB}, {5 * GiB}]"  # the fault was for one call
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_world_from_a_file_reloads_and_keeps_counting_calls(tmp_path):
    path = tmp_path / "world.json"
    scenario("single_h100").save(path)
    source = WorldFromEnv(str(path))
    module = make_pynvml_module(source.current)
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(0)
    assert module.nvmlDeviceGetMemoryInfo(handle).used == 566 * 1024**2
    changed = FakeWorld.load(path)
    changed.set_used(0, 7 * GiB)
    changed.save(path)
    assert module.nvmlDeviceGetMemoryInfo(handle).used == 7 * GiB + 566 * 1024**2
    assert source.current().calls["nvmlDeviceGetMemoryInfo"] == 2


def test_world_file_that_is_not_json_keeps_the_last_good_world(tmp_path):
    path = tmp_path / "world.json"
    scenario("single_h100").save(path)
    source = WorldFromEnv(str(path))
    first = source.current()
    path.write_text("{ half a wor")
    assert source.current() is first


def test_json_round_trip_keeps_everything():
    world = scenario("display_gpu")
    world.inject_fault(1, "TIMEOUT", times=3, function="nvmlDeviceGetName")
    world.slow_down(0.5, device=0)
    world.remove_driver("LIB_RM_VERSION_MISMATCH")
    data = world.to_json()
    assert data["synthetic"] is True
    assert FakeWorld.from_json(json.loads(json.dumps(data))).to_json() == data


def test_save_and_load(tmp_path):
    world = scenario("mig")
    world.save(tmp_path / "mig.json")
    assert FakeWorld.load(tmp_path / "mig.json").to_json() == world.to_json()
    assert list(tmp_path.iterdir()) == [tmp_path / "mig.json"]  # no temporary file left behind


def test_json_that_is_not_a_world_is_refused():
    with pytest.raises(ValueError, match='"format": 1'):
        FakeWorld.from_json({"gpus": []})


def test_nvml_error_builds_the_matching_subclass():
    module = make_pynvml_module(scenario("three_gpus"))
    error = module.NVMLError(module.NVML_ERROR_GPU_IS_LOST)
    assert type(error) is module.NVMLError_GpuIsLost
    assert isinstance(error, NVMLError) and error.value == 15
    assert module.NVMLError_NotSupported().value == module.NVML_ERROR_NOT_SUPPORTED


def test_calls_before_init_raise_uninitialized():
    module = make_pynvml_module(scenario("three_gpus"))
    with pytest.raises(module.NVMLError_Uninitialized):
        module.nvmlDeviceGetCount()


def test_calls_are_counted_per_function_failed_ones_included():
    world = scenario("lost_gpu")
    module = make_pynvml_module(world)
    module.nvmlInit()
    with pytest.raises(module.NVMLError_GpuIsLost):
        module.nvmlDeviceGetHandleByIndex(1)
    module.nvmlDeviceGetHandleByIndex(0)
    assert world.calls == {"nvmlInit": 1, "nvmlDeviceGetHandleByIndex": 2}


def test_add_process_beyond_free_memory_is_refused_and_changes_nothing():
    world = scenario("single_h100")
    with pytest.raises(ValueError, match="bytes free"):
        world.add_process(0, os.getpid(), 100 * GiB)
    assert world.gpu(0).processes == [] and world.gpu(0).used_bytes == 0


def test_remove_process_that_is_not_there_names_those_that_are():
    world = scenario("three_gpus")
    with pytest.raises(ValueError, match=r"pids there: \[4200201\]"):
        world.remove_process(1, 12345)


def test_unknown_device_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"valid devices: \[0, 1, 2\]"):
        scenario("three_gpus").lose_gpu(3)
