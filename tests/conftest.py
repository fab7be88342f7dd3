"""Shared test configuration.

``gpu`` tests run only where a CUDA device is visible; elsewhere they are reported as skipped
(never counted as passed).

The fake NVML world as fixtures, one axis each, so a test that takes ``world`` runs once per
combination and says which in its id (``[three_gpus-r470-nvidia-ml-py-13.615.71]``):

- ``scenario_name``: every named world in ``jupyter_gpumem.testing.SCENARIOS``
- ``driver``: the NVIDIA driver's version, which decides the NVML functions it has
- ``nvidia_ml_py``: the pynvml binding release (``jupyter_gpumem.testing.NVIDIA_ML_PY_VERSIONS``)
- ``world``: that scenario, on that driver, served as ``pynvml`` by that binding

Test doubles shared by several test modules live in ``doubles.py``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile

import jax_matrix
import pytest

from jupyter_gpumem.testing import NVIDIA_ML_PY_VERSIONS, SCENARIOS, fake_nvml, scenario

try:
    import pytest_jupyter  # noqa: F401
except ImportError:
    # A machine that carries only what the GPU tests need (bench/gpu_proof.sh, docs in
    # bench/README.md): the server tests' fixtures are missing there, and those tests are not run.
    pytest_plugins: tuple[str, ...] = ()
else:
    pytest_plugins = ("pytest_jupyter.jupyter_server",)


def pytest_configure(config):
    """The run's IPython shells and kernels get a profile folder of the run's own, whose history
    is kept in memory: never the user's ~/.ipython. With one history.sqlite shared by every kernel
    of a run, IPython 9.18 (HistoryManager, IPython/core/history.py) that finds it locked moves the
    user's file aside ("Failed to open SQLite history ... (database is locked)", then "History
    file was moved to ...history-corrupt-<time>.sqlite and a new file created"), and the server
    tests ran slower beside it: tests/core to tests/server's api and culling files took
    311 s with one cell unanswered for 60 s, and 204 s with every test passing once the history
    moved out. Shells made in this process (not started as an app) read no config file and keep
    theirs on disk there. An IPYTHONDIR set by the caller is kept."""
    if os.environ.get("IPYTHONDIR"):
        return
    folder = tempfile.mkdtemp(prefix="gpumem-tests-ipython-")
    profile = os.path.join(folder, "profile_default")
    os.makedirs(profile)
    with open(os.path.join(profile, "ipython_config.py"), "w", encoding="utf-8") as f:
        f.write('c.HistoryManager.hist_file = ":memory:"\n')
    os.environ["IPYTHONDIR"] = folder
    # removed at exit, after the shells made in this process wrote their last history there
    # (each registers its own atexit hook when made, later than this one, so it runs first)
    atexit.register(shutil.rmtree, folder, True)


@pytest.fixture(autouse=True)
def fresh_start_read():
    """Each test starts with no copy of what JAX read at its start: a test that fakes JAX's
    modules, or changes the environment around an in-process JAX, gets a copy made from its own
    environment when first asked, as a process that loaded the extension after JAX started would.
    Tests of the real start run JAX in a fresh process."""
    from jupyter_gpumem.settings import started_with
    from jupyter_gpumem.sources import jax_start

    jax_start.forget_start_read()
    started_with.forget()
    yield


@pytest.fixture(params=list(SCENARIOS))
def scenario_name(request) -> str:
    """The name of a fake NVML scenario (docs/fake-gpu.md lists them)."""
    return request.param


# 470.256.02: a late R470 release, before 510.39.01 brought the _v3 process queries and memory
# info v2. 550.54.15: a current driver that has both (the fake world's default).
DRIVERS = {"r470": "470.256.02", "r550": "550.54.15"}


@pytest.fixture(params=list(DRIVERS.values()), ids=list(DRIVERS))
def driver(request) -> str:
    """The NVIDIA driver version the fake world reports and whose NVML functions it has."""
    return request.param


@pytest.fixture(params=NVIDIA_ML_PY_VERSIONS, ids=[f"nvidia-ml-py-{v}" for v in NVIDIA_ML_PY_VERSIONS])
def nvidia_ml_py(request) -> str:
    """The nvidia-ml-py release the fake pynvml acts as (strings, memory query, process query)."""
    return request.param


def impossible_world(scenario_name: str, driver: str) -> bool:
    """No driver before 520 runs a Hopper GPU (compute capability 9.0 came with CUDA 11.8)."""
    return int(driver.split(".")[0]) < 520 and any(
        gpu.compute_capability >= (9, 0) for gpu in scenario(scenario_name).gpus
    )


@pytest.fixture
def world(scenario_name, driver, nvidia_ml_py):
    """The scenario's world on ``driver``, served as ``pynvml`` by ``nvidia_ml_py`` for the test."""
    fresh = scenario(scenario_name)
    fresh.driver_version = driver
    with fake_nvml(fresh, nvidia_ml_py=nvidia_ml_py) as served:
        yield served


@pytest.fixture
def jp_serverapp(jp_serverapp):
    """pytest-jupyter's server, with jupyter-gpumem unloaded after the test as a stopping server
    would: its NVML reader thread does not outlive the test."""
    yield jp_serverapp
    from jupyter_gpumem import server as extension

    extension._unload_jupyter_server_extension(jp_serverapp)


def _leave_other_releases_shares(config, items):
    """Under a release of the JAX matrix that shares the marked tests with others
    (tests/jax_matrix.py, ``SHARE_VARIABLE``), the marked tests of the other releases' shares are
    not collected."""
    share = os.environ.get(jax_matrix.SHARE_VARIABLE)
    if not share:
        return
    others = {i for i in items if jax_matrix.MARKER in i.keywords and not jax_matrix.in_share(i.nodeid, share)}
    if others:
        config.hook.pytest_deselected(items=list(others))
        items[:] = [item for item in items if item not in others]


def _cuda_visible() -> bool:
    if os.environ.get("JUPYTER_GPUMEM_FORCE_GPU_TESTS") == "1":
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except Exception:
        return False
    return out.returncode == 0 and "GPU" in out.stdout


# Tests that start JAX's backend in this pytest process; JAX cannot stop it again, so they run
# last: the settings and status tests before them read a process whose JAX has not started.
# (tests/doctor/ sorts before tests/settings/, so file order alone would run them first.)
_STARTS_JAX_HERE = ("tests/doctor/test_peak_report.py",)

# The files that take longest, first: pytest-xdist hands whole files to its two workers in the
# order collected (``--dist loadfile``), and a long file handed out last keeps one worker busy
# after the other has ended (tests/test_do_no_harm.py is a fifth of the main run's test time and
# sorted among the last). Seconds are of one quiet 2-core run (2026-12-07); the order is all that
# matters, and a file missing here keeps its place after them.
_LONGEST_FIRST = (
    "tests/test_do_no_harm.py",  # 177 s
    "tests/test_notebooks.py",  # 51 s
    "tests/server/test_metrics_listener_limits.py",  # 44 s
    "tests/server/test_hub_end_to_end.py",  # 42 s
    "tests/server/test_server_culling.py",  # 33 s
    "tests/doctor/test_cell_growth.py",  # 33 s
)


def _file_order(item) -> tuple[bool, int]:
    path = item.nodeid.split("::", 1)[0]
    first = _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)
    return path in _STARTS_JAX_HERE, first


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_order)  # stable: the others keep their order
    _leave_other_releases_shares(config, items)
    # Worlds no machine can have are not collected at all (rather than skipped).
    params = [getattr(getattr(item, "callspec", None), "params", {}) for item in items]
    drop = [
        i
        for i, p in zip(items, params)
        if "scenario_name" in p and "driver" in p and impossible_world(p["scenario_name"], p["driver"])
    ]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]
    if _cuda_visible():
        return
    skip = pytest.mark.skip(reason="no CUDA device visible on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
