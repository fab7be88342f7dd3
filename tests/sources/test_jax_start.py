"""Who started JAX: a library that starts JAX's backend at import, written to a temporary
folder, in a real IPython shell (tests/kernel_session.py), with CPU JAX, under every JAX of the
version matrix (tests/jax_matrix.py).

JAX creates each backend in ``jax._src.xla_bridge._init_backend``, called only from
``backends()`` and looked up there as a module global (jax/_src/xla_bridge.py: 0.4.30 lines
879 and 959, 0.4.38 917 and 992, 0.7.2 812 and 885, 0.10.2 839 and 912, 0.11.2 827 and 900,
0.12.0.1 851 and 924). The extension wraps that global without importing jax: at load where jax
is imported, else from an import finder when ``jax._src.xla_bridge`` is imported
(tests/test_quiet_start.py checks that loading imports no jax); the wrapper puts JAX's function
back after the first backend is created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import pythonpath

from jupyter_gpumem.core.sites import origin_of
from jupyter_gpumem.settings.started_by import describe
from jupyter_gpumem.sources import jax_start

pytestmark = pytest.mark.jax_versions

SESSION = Path(__file__).parents[1] / "kernel_session.py"
EAGER_LIB = "import jax\njax.devices()\n"  # line 2 starts the backend, at import
EAGER_PKG = "import jax.numpy as jnp\n\nZERO = jnp.zeros(())\n"  # line 3, in an installed package


def session(tmp_path: Path, cells: list[str], ext: bool = True, env: dict | None = None) -> list[dict]:
    (tmp_path / "eager_lib.py").write_text(EAGER_LIB)
    package = tmp_path / "site-packages" / "eagerpkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(EAGER_PKG)
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    proc = subprocess.run(
        [sys.executable, str(SESSION), "cells.json"] + (["--ext"] if ext else []),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        # this checkout's package first, then whatever the caller's path holds (a JAX of the matrix)
        env={
            "JAX_PLATFORMS": "cpu",
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": pythonpath(),
            **(env or {}),
        },
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


PATHS = "import sys\nsys.path[:0] = ['.', 'site-packages']"
SENTENCE = (
    "JAX was started by eager_lib.py:2 (imported in cell [2] line 1); run the settings before that import, "
    "or restart the kernel and run them first."
)


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> list[dict]:
    return session(
        tmp_path_factory.mktemp("eager"),
        [
            PATHS,
            "import eager_lib",
            "%gpumem preallocate off",
            "%gpumem status",
            "import jax._src.xla_bridge as bridge\n"
            "print('exec_module' in vars(bridge.__spec__.loader), [type(f).__name__ for f in sys.meta_path "
            "if type(f).__module__.startswith('jupyter_gpumem')], bridge._init_backend.__code__.co_filename == bridge.__file__)",
        ],
    )


def test_a_refused_setting_names_the_library_that_started_jax_and_the_cell_that_imported_it(eager):
    assert eager[1]["ok"] and eager[2]["error"] == "UsageError"
    assert eager[2]["out"].strip().endswith(SENTENCE), eager[2]["out"]


def test_once_jax_has_started_the_watch_leaves_no_trace(eager):
    """The loader is as it was, the import finder is gone, and JAX's ``_init_backend`` is JAX's
    own function again."""
    assert eager[4]["out"].split() == ["False", "[]", "True"]


def test_status_names_who_started_jax_without_the_advice_a_refusal_gives(eager):
    backend = next(l for l in eager[3]["out"].splitlines() if l.startswith("Backend: "))
    # The session runs with JAX_PLATFORMS=cpu, which status words as a choice (test_cpu_fallback).
    assert backend == (
        "Backend: JAX's backend has started on cpu (0: cpu). The CPU was chosen: jax_platforms is "
        '"cpu". JAX was started by eager_lib.py:2 (imported in cell [2] line 1).'
    )


def test_status_after_a_cell_that_started_jax_gives_no_advice_when_nothing_was_refused(tmp_path):
    out = session(tmp_path, ["import jax.numpy as jnp\nx = 1\ny = jnp.ones(3)", "%gpumem status"])
    backend = next(l for l in out[1]["out"].splitlines() if l.startswith("Backend: "))
    assert backend.endswith("JAX was started by cell [1] line 3."), backend
    assert "run the settings" not in out[1]["out"] and "restart" not in out[1]["out"]


def test_jax_imported_before_loading_is_watched_from_then_on(tmp_path):
    """jax already imported (not started) when the extension loads: the hook goes straight in."""
    out = session(
        tmp_path,
        [PATHS + "\nimport jax", "%load_ext jupyter_gpumem", "import eagerpkg", "%gpumem fraction .5"],
        ext=False,
    )
    assert out[3]["error"] == "UsageError"
    assert (
        out[3]["out"]
        .strip()
        .endswith(
            "JAX was started by eagerpkg/__init__.py:3 (imported in cell [3] line 1); run the settings before that "
            "import, or restart the kernel and run them first."
        )
    ), out[3]["out"]


def test_a_cell_that_starts_jax_itself_is_named_by_its_line(tmp_path):
    out = session(tmp_path, ["import jax.numpy as jnp\nx = 1\ny = jnp.ones(3)", "%gpumem preallocate off"])
    assert (
        out[1]["out"]
        .strip()
        .endswith(
            "JAX was started by cell [1] line 3; run the settings before that line, or restart the kernel and run "
            "them first."
        )
    ), out[1]["out"]


def test_started_before_loading_says_it_cannot_know(tmp_path):
    out = session(
        tmp_path,
        ["import jax.numpy as jnp\njnp.ones(3)", "%load_ext jupyter_gpumem", "%gpumem preallocate off"],
        ext=False,
    )
    assert (
        out[2]["out"]
        .strip()
        .endswith(
            "JAX was started before jupyter_gpumem loaded, so where it was started is not known; load the extension "
            "first to see it."
        )
    ), out[2]["out"]


def test_a_library_called_from_a_cell_is_named_with_the_call():
    frames = [
        ("/env/lib/python3.11/site-packages/jax/_src/xla_bridge.py", 840, "backends"),
        ("/env/lib/python3.11/site-packages/trainer/setup.py", 12, "init_devices"),
        ("<ipython-input-4-0123456789ab>", 2, "<module>"),
    ]
    assert describe(origin_of(frames, {})) == (
        "JAX was started by trainer/setup.py:12 in init_devices (called in cell [4] line 2); run the settings "
        "before that call, or restart the kernel and run them first."
    )


COUNT_OUR_CALLS = (
    "import sys\n"
    "calls = []\n"
    "def count(frame, event, arg):\n"
    "    if event == 'call' and frame.f_code.co_filename.endswith(('jax_start.py', 'import_watch.py')):\n"
    "        calls.append(frame.f_code.co_name)\n"
    "sys.setprofile(count)"
)


def test_who_started_jax_costs_nothing_per_cell(tmp_path):
    """Cells before jax is imported, and every cell after it started (JAX work, new imports),
    call nothing of the watch; the start itself goes through the wrapper once."""
    out = session(
        tmp_path,
        [
            COUNT_OUR_CALLS,
            "x = 1",
            "x += 1",
            "before_jax = list(calls)",
            "import jax, jax.numpy as jnp\ny = jnp.ones(3)",
            "at_start = list(calls)",
            "z = jax.jit(lambda a: a * 2)(y)\nimport decimal, fractions",
            "w = (jnp.zeros(3) + z).block_until_ready()",
            "sys.setprofile(None)\nprint(before_jax, calls[len(at_start):], '_init_backend' in at_start)",
        ],
    )
    assert all(c["ok"] for c in out), out
    assert out[-1]["out"].split() == ["[]", "[]", "True"], out[-1]["out"]


def test_a_backend_that_fails_to_start_fails_as_it_does_without_the_extension(tmp_path):
    """JAX_PLATFORMS names a platform JAX has no factory for: ``_init_backend`` raises "Backend
    'nosuch' is not in the list of known backends" and ``backends()`` re-raises it as "Unable to
    initialize backend 'nosuch'" (jax/_src/xla_bridge.py: 0.4.30 lines 963 and 886, 0.10.2 lines
    916 and 846, 0.12.0.1 lines 928 and 858). Through the wrapper the error is the same, and the
    next try fails the same way."""
    cells = ["import jax", "jax.devices()", "jax.devices()", "1 + 1"]
    failing = {"JAX_PLATFORMS": "nosuch"}
    plain = session(tmp_path, cells, ext=False, env=failing)
    loaded = session(tmp_path, cells, ext=True, env=failing)

    def last_line(c):
        return c["out"].strip().splitlines()[-1]

    assert [(c["ok"], c["error"]) for c in loaded] == [(c["ok"], c["error"]) for c in plain]
    assert not loaded[1]["ok"] and "Unable to initialize backend 'nosuch'" in last_line(loaded[1])
    assert [last_line(c) for c in loaded[1:3]] == [last_line(c) for c in plain[1:3]]


class Bridge:
    """The part of ``jax._src.xla_bridge`` the watch uses: ``backends_are_initialized()`` and
    ``_init_backend(platform)``, which returns a client whose ``platform`` names it
    (jax/_src/xla_bridge.py, 0.4.30 to 0.12.0.1)."""

    def __init__(self):
        self.started = False
        self.backends_are_initialized = lambda: self.started
        self._init_backend = self.jax_init_backend

    def jax_init_backend(self, platform: str):
        self.started = True
        return type("Client", (), {"platform": platform})()


@pytest.fixture
def fresh_watch(monkeypatch):
    monkeypatch.setattr(
        jax_start,
        "_state",
        dict(jax_start._state, frames=None, platform=None, wrapped=None, before_watch=False, failures={}),
    )


def test_the_wrapper_returns_what_jax_returns_and_puts_jax_s_function_back_after_the_start(fresh_watch):
    bridge = Bridge()
    jax_start._install(bridge)
    assert jax_start.watching() and bridge._init_backend != bridge.jax_init_backend
    client = bridge._init_backend("cpu")
    assert client.platform == "cpu" and jax_start._state["platform"] == "cpu"
    # backends() goes on to the GPU plugin's backend: the wrapper stays until the cell ends
    assert jax_start.watching()
    jax_start.settle(True)
    assert bridge._init_backend == bridge.jax_init_backend and not jax_start.watching()


def test_a_gpu_backend_that_fails_after_the_cpu_one_started_is_noted_and_its_error_passes_through(fresh_watch):
    """JAX creates the CPU backend first (registered at import) and the CUDA plugin's after it;
    the plugin registers with fail_quietly=False, so ``backends()`` raises its error and keeps
    nothing (jax/_src/xla_bridge.py, 0.10.2 lines 826-846, 0.12.0.1 lines 838-858)."""
    bridge = Bridge()

    def jax_init_backend(platform):
        if platform == "cuda":
            raise RuntimeError("synthetic: CUDA_ERROR_OUT_OF_MEMORY")
        return Bridge.jax_init_backend(bridge, platform)

    bridge._init_backend = bridge.jax_init_backend = jax_init_backend
    jax_start._install(bridge)
    bridge._init_backend("cpu")
    with pytest.raises(RuntimeError, match="^synthetic: CUDA_ERROR_OUT_OF_MEMORY$"):
        bridge._init_backend("cuda")
    assert jax_start.start_failure("cuda") == "RuntimeError: synthetic: CUDA_ERROR_OUT_OF_MEMORY"
    assert jax_start.start_failure("cpu") is None


def test_a_wrapper_installed_after_ours_is_left_in_place(fresh_watch):
    bridge = Bridge()
    jax_start._install(bridge)
    ours = bridge._init_backend
    bridge._init_backend = theirs = lambda platform: ours(platform)
    theirs("cpu")
    assert bridge._init_backend is theirs and jax_start._state["frames"] is not None


def test_unwatch_before_the_start_puts_jax_s_function_back(fresh_watch):
    bridge = Bridge()
    jax_start._install(bridge)
    jax_start.unwatch()
    assert bridge._init_backend == bridge.jax_init_backend and not jax_start.watching()


def test_a_backend_already_started_is_left_alone_and_said_so(fresh_watch):
    bridge = Bridge()
    bridge.started = True
    jax_start._install(bridge)
    assert bridge._init_backend == bridge.jax_init_backend and jax_start.started_before_watch()
