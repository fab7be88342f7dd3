"""The fake NVML world as other programs see it: the drop-in pynvml, JSON worlds, reloads, and
the drivers and nvidia-ml-py releases it can act as."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from jupyter_gpumem.testing import (
    DROPIN_DIR,
    ENV_VAR,
    NVIDIA_ML_PY_VERSIONS,
    FakeWorld,
    NVMLError,
    WorldFromEnv,
    make_pynvml_module,
    scenario,
)
from jupyter_gpumem.testing.nvml_errors import NVMLLibraryMismatchError

GiB = 1024**3


def dropin_env(spec: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([DROPIN_DIR, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env[ENV_VAR] = spec
    return env


def run_with_dropin(spec: str, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=dropin_env(spec),
        capture_output=True,
        text=True,
        timeout=60,
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
    out = run_with_dropin(
        "no_library",
        """
        import pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound as e:
            print(type(e).__name__, e.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, str(e))
    """,
    )
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
        [sys.executable, "-c", textwrap.dedent(READ_ON_REQUEST)],
        env=dropin_env(str(path)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
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


# --- driver and binding variants ---------------------------------------------------------------


def _outcome(call) -> object:
    """What a pynvml call gives: its answer, or the name of what it raised."""
    try:
        return call()
    except (NVMLError, NVMLLibraryMismatchError) as exc:
        return type(exc).__name__


@pytest.mark.parametrize(
    "driver_version, v2_processes, v3_processes, memory_info_v2",
    [
        ("440.100", "NVMLError_FunctionNotFound", "NVMLError_FunctionNotFound", "NVMLError_FunctionNotFound"),
        ("450.66", [4200201], "NVMLError_FunctionNotFound", "NVMLError_FunctionNotFound"),
        ("470.256.02", [4200201], "NVMLError_FunctionNotFound", "NVMLError_FunctionNotFound"),
        ("510.39.01", [4200201], [4200201], 10 * GiB),
    ],
)
def test_the_driver_version_decides_which_versioned_functions_it_has(
    driver_version, v2_processes, v3_processes, memory_info_v2
):
    world = scenario("three_gpus")
    world.driver_version = driver_version
    module = make_pynvml_module(world, "12.535.108")
    module.nvmlInit()
    gpu1 = module.nvmlDeviceGetHandleByIndex(1)
    assert [
        _outcome(lambda: [p.pid for p in module.nvmlDeviceGetComputeRunningProcesses_v2(gpu1)]),
        _outcome(lambda: [p.pid for p in module.nvmlDeviceGetComputeRunningProcesses_v3(gpu1)]),
        _outcome(lambda: module.nvmlDeviceGetMemoryInfo(gpu1, version=module.nvmlMemory_v2).used),
        _outcome(lambda: module.nvmlDeviceGetMemoryInfo(gpu1).used),
    ] == [v2_processes, v3_processes, memory_info_v2, 10 * GiB + 512 * 1024**2]


UNVERSIONED_PROCESSES_ON_R470 = {
    "11.495.46": [4200201],  # calls the driver's _v2, which R470 has
    "12.535.108": "NVMLError_FunctionNotFound",  # calls _v3
    "13.615.71": "NVMLLibraryMismatchError",  # calls _v3, and says so its own way
}


def test_the_unversioned_process_query_on_an_old_driver_fails_as_the_binding_does(nvidia_ml_py):
    world = scenario("three_gpus")
    world.driver_version = "470.256.02"
    module = make_pynvml_module(world, nvidia_ml_py)
    module.nvmlInit()
    gpu1 = module.nvmlDeviceGetHandleByIndex(1)
    outcome = _outcome(lambda: [p.pid for p in module.nvmlDeviceGetComputeRunningProcesses(gpu1)])
    assert outcome == UNVERSIONED_PROCESSES_ON_R470[nvidia_ml_py]


# (name, uuid, driver version, has nvmlMemory_v2, has the _v3 process queries)
BINDING_SURFACE = {
    "11.495.46": (b"NVIDIA H100 80GB HBM3", b"GPU-5a1e0064-0000-4000-8000-000000000064", b"560.35.03", False, False),
    "12.535.108": ("NVIDIA H100 80GB HBM3", "GPU-5a1e0064-0000-4000-8000-000000000064", "560.35.03", True, True),
    "13.615.71": ("NVIDIA H100 80GB HBM3", "GPU-5a1e0064-0000-4000-8000-000000000064", "560.35.03", True, True),
}


def test_strings_memory_query_and_process_queries_are_those_of_the_binding(nvidia_ml_py):
    module = make_pynvml_module(scenario("single_h100"), nvidia_ml_py)
    module.nvmlInit()
    h100 = module.nvmlDeviceGetHandleByIndex(0)
    assert (
        module.nvmlDeviceGetName(h100),
        module.nvmlDeviceGetUUID(h100),
        module.nvmlSystemGetDriverVersion(),
        hasattr(module, "nvmlMemory_v2"),
        hasattr(module, "nvmlDeviceGetComputeRunningProcesses_v3"),
    ) == BINDING_SURFACE[nvidia_ml_py]


def test_nvidia_ml_py_11_495_takes_no_memory_info_version():
    module = make_pynvml_module(scenario("single_h100"), "11.495.46")
    module.nvmlInit()
    with pytest.raises(TypeError):
        module.nvmlDeviceGetMemoryInfo(module.nvmlDeviceGetHandleByIndex(0), version=0x02000028)


def _installed_pynvml(monkeypatch):
    """The real pynvml from site-packages, loaded apart from any fake (it needs no driver to load)."""
    spec = importlib.machinery.PathFinder.find_spec("pynvml")
    if spec is None or spec.origin.endswith(os.path.join("pynvml_dropin", "pynvml.py")):
        pytest.skip("nvidia-ml-py is not installed")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", module)  # it looks itself up there while loading
    spec.loader.exec_module(module)
    return module


def test_the_fake_fails_a_missing_driver_function_as_the_installed_nvidia_ml_py_does(monkeypatch):
    installed = importlib.metadata.version("nvidia-ml-py")
    if installed not in NVIDIA_ML_PY_VERSIONS:
        pytest.skip(f"the fake does not act as nvidia-ml-py {installed}")
    real = _installed_pynvml(monkeypatch)

    def driver_without(name):
        raise real.NVMLError(real.NVML_ERROR_FUNCTION_NOT_FOUND)

    monkeypatch.setattr(real, "_nvmlGetFunctionPointer", driver_without)
    with pytest.raises(Exception) as from_real:
        real.nvmlDeviceGetComputeRunningProcesses(None)

    world = scenario("three_gpus")
    world.driver_version = "440.100"  # lacks every versioned process query
    fake = make_pynvml_module(world, installed)
    fake.nvmlInit()
    with pytest.raises(Exception) as from_fake:
        fake.nvmlDeviceGetComputeRunningProcesses(fake.nvmlDeviceGetHandleByIndex(0))
    assert (type(from_fake.value).__name__, str(from_fake.value)) == (
        type(from_real.value).__name__,
        str(from_real.value),
    )


def test_unknown_nvidia_ml_py_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"valid: 11\.495\.46, 12\.535\.108, 13\.615\.71"):
        make_pynvml_module(scenario("three_gpus"), "11.0.0")


def test_a_driver_version_that_is_not_a_version_is_refused():
    with pytest.raises(ValueError, match=r'driver_version must look like "550\.54\.15"'):
        FakeWorld(driver_version="415.27.mock")


def test_saving_a_world_writes_nothing_through_a_link_planted_at_the_old_temporary_name(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("secret")
    os.symlink(secret, tmp_path / f".world.json.{os.getpid()}.tmp")  # the name saving used to pick
    scenario("single_h100").save(tmp_path / "world.json")
    assert secret.read_text() == "secret"
    assert FakeWorld.load(tmp_path / "world.json").to_json() == scenario("single_h100").to_json()
