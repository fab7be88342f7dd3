"""Who started JAX: a library that starts JAX's backend at import, written to a temporary
folder, in a real IPython shell (tests/kernel_session.py), with CPU JAX.

The hook is JAX's own: ``register_backend_initialization_hook`` in jax/_src/xla_bridge.py
(0.10.2) runs each registered function with every backend ``_init_backend`` creates, inside
``backends()``, on the thread that asked for it. The extension registers it without importing
jax: at load where jax is imported, else from an import finder when ``jax._src.xla_bridge``
is imported (tests/test_quiet_start.py checks that loading imports no jax).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_gpumem.settings.started_by import describe
from jupyter_gpumem.sites import origin_of

SESSION = Path(__file__).parent / "kernel_session.py"
EAGER_LIB = "import jax\njax.devices()\n"  # line 2 starts the backend, at import
EAGER_PKG = "import jax.numpy as jnp\n\nZERO = jnp.zeros(())\n"  # line 3, in an installed package


def session(tmp_path: Path, cells: list[str], ext: bool = True) -> list[dict]:
    (tmp_path / "eager_lib.py").write_text(EAGER_LIB)
    package = tmp_path / "site-packages" / "eagerpkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(EAGER_PKG)
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    proc = subprocess.run([sys.executable, str(SESSION), "cells.json"] + (["--ext"] if ext else []),
                          capture_output=True, text=True,
                          timeout=180, cwd=tmp_path,
                          # this checkout's package, not whichever one the environment installed
                          env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "PYTHONPATH": str(SESSION.parents[1])})
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


PATHS = "import sys\nsys.path[:0] = ['.', 'site-packages']"
SENTENCE = ("JAX was started by eager_lib.py:2 (imported in cell [2] line 1); run the settings before that import, "
            "or restart the kernel and run them first.")


@pytest.fixture(scope="module")
def eager(tmp_path_factory) -> list[dict]:
    return session(tmp_path_factory.mktemp("eager"), [
        PATHS, "import eager_lib", "%gpumem preallocate off", "%gpumem status",
        "import jax._src.xla_bridge as bridge\n"
        "print('exec_module' in vars(bridge.__spec__.loader), [type(f).__name__ for f in sys.meta_path "
        "if type(f).__module__.startswith('jupyter_gpumem')], len(bridge._backend_initialization_hooks))"])


def test_a_refused_setting_names_the_library_that_started_jax_and_the_cell_that_imported_it(eager):
    assert eager[1]["ok"] and eager[2]["error"] == "UsageError"
    assert eager[2]["out"].strip().endswith(SENTENCE), eager[2]["out"]


def test_the_watch_leaves_no_trace_but_its_one_hook(eager):
    """The loader is as it was, the import finder is gone, and JAX's hook list holds ours alone."""
    assert eager[4]["out"].split() == ["False", "[]", "1"]


def test_status_names_who_started_jax_without_the_advice_a_refusal_gives(eager):
    backend = next(l for l in eager[3]["out"].splitlines() if l.startswith("Backend: "))
    # The session runs with JAX_PLATFORMS=cpu, which status words as a choice (test_cpu_fallback).
    assert backend == ("Backend: JAX's backend has started on cpu (0: cpu). The CPU was chosen: jax_platforms is "
                       "\"cpu\". JAX was started by eager_lib.py:2 (imported in cell [2] line 1).")


def test_status_after_a_cell_that_started_jax_gives_no_advice_when_nothing_was_refused(tmp_path):
    out = session(tmp_path, ["import jax.numpy as jnp\nx = 1\ny = jnp.ones(3)", "%gpumem status"])
    backend = next(l for l in out[1]["out"].splitlines() if l.startswith("Backend: "))
    assert backend.endswith("JAX was started by cell [1] line 3."), backend
    assert "run the settings" not in out[1]["out"] and "restart" not in out[1]["out"]


def test_jax_imported_before_loading_is_watched_from_then_on(tmp_path):
    """jax already imported (not started) when the extension loads: the hook goes straight in."""
    out = session(tmp_path, [PATHS + "\nimport jax", "%load_ext jupyter_gpumem", "import eagerpkg", "%gpumem fraction .5"],
                  ext=False)
    assert out[3]["error"] == "UsageError"
    assert out[3]["out"].strip().endswith(
        "JAX was started by eagerpkg/__init__.py:3 (imported in cell [3] line 1); run the settings before that "
        "import, or restart the kernel and run them first."), out[3]["out"]


def test_a_cell_that_starts_jax_itself_is_named_by_its_line(tmp_path):
    out = session(tmp_path, ["import jax.numpy as jnp\nx = 1\ny = jnp.ones(3)", "%gpumem preallocate off"])
    assert out[1]["out"].strip().endswith(
        "JAX was started by cell [1] line 3; run the settings before that line, or restart the kernel and run "
        "them first."), out[1]["out"]


def test_started_before_loading_says_it_cannot_know(tmp_path):
    out = session(tmp_path, ["import jax.numpy as jnp\njnp.ones(3)", "%load_ext jupyter_gpumem", "%gpumem preallocate off"],
                  ext=False)
    assert out[2]["out"].strip().endswith(
        "JAX was started before jupyter_gpumem loaded, so where it was started is not known; load the extension "
        "first to see it."), out[2]["out"]


def test_a_library_called_from_a_cell_is_named_with_the_call():
    frames = [("/env/lib/python3.11/site-packages/jax/_src/xla_bridge.py", 840, "backends"),
              ("/env/lib/python3.11/site-packages/trainer/setup.py", 12, "init_devices"),
              ("<ipython-input-4-0123456789ab>", 2, "<module>")]
    assert describe(origin_of(frames, {})) == (
        "JAX was started by trainer/setup.py:12 in init_devices (called in cell [4] line 2); run the settings "
        "before that call, or restart the kernel and run them first.")
