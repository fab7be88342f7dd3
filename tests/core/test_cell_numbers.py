"""Cell numbers are the cell's own on every IPython the package allows (``ipython>=8``).

``InteractiveShell.run_cell_async`` (IPython/core/interactiveshell.py, read at each tag) adds one
to ``execution_count`` after the cell ran in 8.x and 9.0 to 9.7 (8.39.0 line 3352, 9.7.0 line
3417; ``pre_run_cell`` at 8.39.0 line 3249 and 9.7.0 line 3307 sees the cell's own number), and
before ``pre_run_cell`` from 9.8.0 (``execution_count = result.execution_count =
self.execution_count`` then ``+= 1``, lines 3296-3299; ``pre_run_cell`` at line 3315 sees the
next number). ``result.execution_count`` is the cell's own number everywhere, and in 9.8+ is set
for a cell kept out of the history as well (line 3296).

Each interpreter runs the same script in a fresh process with a real ``InteractiveShell``: the
development environment's IPython, and the environments ``ipython8`` (IPython 8.x) and
``ipython9.7`` (IPython 9.7.0) of tests/jax_matrix.py's ``IPYTHON_ENVIRONMENTS``, each with jax
0.10.2, which the version matrix makes before its releases (``make test`` runs it before pytest;
``python tests/jax_matrix.py --versions ""`` makes only them). Where one is not made its tests
are reported skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax_matrix
import pytest
from child_env import pythonpath

from jupyter_gpumem.core.sites import counts_cells_first, finished_cell_number, running_cell_number

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = r"""
import json, sys
from types import SimpleNamespace
import IPython
from IPython.core.interactiveshell import InteractiveShell
import jax.numpy as jnp  # imported before the cells: the doctor notes arrays once jax is imported
from jupyter_gpumem.core import sites
from jupyter_gpumem.doctor import array_cells, hooks
from jupyter_gpumem.doctor.arrays import census
from jupyter_gpumem.doctor.session import SESSION
from jupyter_gpumem.sampling.sampler import register_cell_events

shell = InteractiveShell.instance()
R = {"ipython": IPython.__version__, "pre": [], "post": [], "events": []}
shell.events.register("pre_run_cell", lambda info: R["pre"].append(sites.running_cell_number(shell, info.store_history)))
shell.events.register("post_run_cell", lambda result: R["post"].append(sites.finished_cell_number(result)))
register_cell_events(shell, SimpleNamespace(add_event=lambda name, **data: R["events"].append([name, data.get("execution_count")])))
hooks.install(shell)
SESSION.turn("cells", True)  # the per-cell line keeps the arrays each cell made
shell.user_ns.update(sites=sites, during=[], jnp=jnp)
counts = []
for source in ("during.append(sites.running_cell_number(get_ipython()))",
               "a = jnp.ones(4); during.append(sites.running_cell_number(get_ipython()))"):
    counts.append(shell.run_cell(source, store_history=True).execution_count)
R["made_by_last_cell"] = len(array_cells.made_by_last_cell())
R["cell_of_a"] = next(r.cell for r in census(shell).records if "a" in r.names)
shell.run_cell("1 + 1", store_history=False)
R["counts"], R["during"] = counts, shell.user_ns["during"]
R["filename_map"] = sorted(v for v in shell.compile._filename_map.values())
print("RESULT=" + json.dumps(R))
"""


def _interpreters() -> list:
    """This interpreter, then each IPython environment of the matrix. Under a release of the
    matrix, only this interpreter: the IPython environments hold their own JAX, whatever the
    release, so the main run's result would be repeated."""
    here = pytest.param(sys.executable, id="installed-ipython")
    if os.environ.get(jax_matrix.RELEASE_VARIABLE):
        return [here]
    cached = []
    for name in jax_matrix.IPYTHON_ENVIRONMENTS:
        python = jax_matrix.ipython_environment(name)
        reason = f"{name} is not made: this module's docstring says how"
        cached.append(pytest.param(str(python), id=name, marks=pytest.mark.skipif(python is None, reason=reason)))
    return [here, *cached]


def _run(python: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_", "JAX_"))}
    # this interpreter keeps what it was given (where its IPython may come from); another keeps its own
    path = pythonpath() if python == sys.executable else str(REPO)
    env.update(PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")
    proc = subprocess.run([python, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=180, cwd=REPO)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT=") :])


@pytest.fixture(scope="module", params=_interpreters())
def shell_run(request) -> dict:
    return _run(request.param)


@pytest.mark.parametrize(
    "version, first",
    [((8, 39), False), ((9, 0), False), ((9, 7), False), ((9, 8), True), ((9, 18), True), ((10, 0), True)],
)
def test_ipython_counts_the_cell_first_from_9_8(version, first):
    assert counts_cells_first(version) is first


def test_the_number_before_a_cell_runs_is_the_cells_own(shell_run):
    """Before: the doctor's pre_run_cell took one off on every IPython, so on 8.x and 9.0-9.7 it
    named the cell before."""
    assert shell_run["pre"] == shell_run["counts"] + [None]


def test_code_in_a_cell_gets_the_cells_own_number(shell_run):
    assert shell_run["during"] == shell_run["counts"]


def test_the_number_after_a_cell_is_its_own_and_none_for_a_cell_out_of_the_history(shell_run):
    assert shell_run["post"] == shell_run["counts"] + [None]


def test_cell_events_carry_each_cells_own_number(shell_run):
    """Before: the sampler guessed IPython 9's order from the major version, so the first cell
    on 9.0-9.7 started as the cell before."""
    a, b = shell_run["counts"]
    assert shell_run["events"] == [
        ["cell_start", a],
        ["cell_end", a],
        ["cell_start", b],
        ["cell_end", b],
        ["cell_start", None],
        ["cell_end", None],
    ]


@pytest.mark.jax_versions
def test_the_doctor_keeps_the_arrays_a_cell_made_for_its_allocation_sites(shell_run):
    """With ``cells on``, the cell's new array is kept for the per-cell line's allocation sites,
    and its cell, read from its traceback, is the number the cell ran as. Before, on IPython 8:
    the cell began as the one before and ended as its own, so the arrays it made were not
    kept."""
    assert shell_run["cell_of_a"] == shell_run["counts"][1]
    assert shell_run["made_by_last_cell"] == 1


def test_allocation_sites_name_cells_by_the_number_the_cell_was_run_as(shell_run):
    # the third file is the cell out of the history, which IPython files under the next number
    assert shell_run["filename_map"][:2] == shell_run["counts"]


def test_a_result_out_of_the_history_has_no_number_even_where_ipython_gives_it_one():
    result = type("Result", (), {"execution_count": 5, "info": type("Info", (), {"store_history": False})()})()
    assert finished_cell_number(result) is None


def test_a_shell_without_a_count_has_no_running_number():
    assert running_cell_number(object()) is None


def test_under_a_release_of_the_matrix_only_this_interpreter_runs(monkeypatch):
    """The IPython environments hold JAX 0.10.2 whatever the matrix's release: run under each
    release they would repeat the main run's result six times."""
    monkeypatch.delenv(jax_matrix.RELEASE_VARIABLE, raising=False)
    assert [p.id for p in _interpreters()] == ["installed-ipython", *jax_matrix.IPYTHON_ENVIRONMENTS]
    monkeypatch.setenv(jax_matrix.RELEASE_VARIABLE, "0.7.2")
    assert [p.id for p in _interpreters()] == ["installed-ipython"]
