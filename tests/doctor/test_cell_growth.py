"""Arrays kept across cells: a line that keeps more arrays every time a cell runs is called out
as growing, in ``%gpumem arrays`` and in ``%gpumem cells on``, with re-runs of a cell counted
as one site.

A real IPython ``InteractiveShell`` (tests/kernel_session.py) on CPU JAX. What the tests rely
on, read in the sources:

- IPython names each run's cell file apart (``<ipython-input-N-hash>``: ``code_name`` in
  IPython/core/compilerop.py, 8.39.0 and 9.8.0), maps it to its execution count
  (``CachingCompiler.cache``: ``self._filename_map[name] = number``) and puts the cell's code
  in ``linecache.cache`` under that name;
- ``run_ast_nodes`` compiles each top-level statement of a cell anew on every run
  (IPython/core/interactiveshell.py, 9.8.0 lines 3629-3639: ``Module([node], [])`` then
  ``compiler(mod, cell_name, mode)``), so two runs of one statement have two code objects;
- an error is shown as ``%xmode Plain`` shows it (kernel_session.PLAIN_TRACEBACKS): these tests
  read the report, not the traceback;
- jaxlib records a Traceback on every array it makes, holding each frame's code object
  (jaxlib/traceback.cc at jax-v0.7.2 and jax-v0.11.0: ``Traceback::Get`` increfs
  ``f_code``/``f_executable``; ``raw_frames()`` gives them back; tracebacks are on by default,
  ``traceback_enabled_ = true``); jaxlib 0.4.38 (then built from openxla/xla) has the same
  ``raw_frames()``, checked on its CPU wheel.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import IPython
import pytest

from jupyter_gpumem.core.sites import counts_cells_first

from kernel_session import run_session

GROW = "for i in range(2):\n    xs.append(jnp.ones((4,)))"
# A comprehension at a cell's top level has a frame of its own before Python 3.12 (PEP 709).
AT_TOP = " in <listcomp>" if sys.version_info < (3, 12) else ""


def session(tmp_path: Path, cells: list[str]) -> list[dict]:
    """Each cell's record (``ok``, ``out``) from a fresh IPython with the extension loaded."""
    records = run_session(tmp_path, cells, plain_tracebacks=True)
    assert all(c["ok"] for c in records), records
    return records


def table(text: str) -> list[list[str]]:
    """The rows under a ``%gpumem arrays`` summary, split on the column gaps."""
    return [[c.strip() for c in row.split("  ") if c.strip()] for row in text.splitlines()[1:] if row.startswith("  ")]


# Cells 1 to 10. The growing cell runs as 2 and 3, and again as 5 after an edit that moves its
# line; ``make`` keeps arrays from two runs of cell 6; cell 7 rebinds a name three times; cell 9
# makes 50 arrays in one run.
CELLS = [
    "import jax, jax.numpy as jnp\nxs, kept = [], []\ndef keep():\n    kept.append(jnp.zeros((2,)))",
    GROW,
    GROW,
    "%gpumem arrays --by line",
    "# edited: the line moved down one\n" + GROW,
    "keep()",
    "for _ in range(3):\n    w = jnp.ones((8,))",
    "keep()",
    "once = [jnp.ones((1,)) for _ in range(50)]",
    "%gpumem arrays --by line",
]


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> list[dict]:
    return session(tmp_path_factory.mktemp("growth"), CELLS)


@pytest.mark.jax_versions
def test_a_list_that_grows_each_run_is_called_out_in_arrays(grown):
    assert (
        grown[3]["out"]
        .splitlines()[0]
        .endswith("Growing, run after run: cell [3] line 2 keeps arrays from 2 runs (4 arrays, 64 B).")
    ), grown[3]["out"]


@pytest.mark.jax_versions
def test_re_runs_of_a_cell_are_one_site_in_arrays_by_line(grown):
    """The line of cells 2 and 3 is one row, named by its newest run, first made in cell 2."""
    assert ["cell [3] line 2", "4", "64 B", "2"] in table(grown[3]["out"])
    assert not [row for row in table(grown[3]["out"]) if row[0] == "cell [2] line 2"]


@pytest.mark.jax_versions
def test_a_line_moved_by_an_edit_is_still_the_same_site(grown):
    rows = table(grown[9]["out"])
    assert ["cell [5] line 3", "6", "96 B", "2"] in rows, rows
    assert "cell [5] line 3 keeps arrays from 3 runs (6 arrays, 96 B)" in grown[9]["out"]


@pytest.mark.jax_versions
def test_a_function_that_keeps_an_array_on_each_call_grows_at_its_own_line(grown):
    assert "cell [1] line 4 in keep keeps arrays from 2 runs (2 arrays, 16 B)" in grown[9]["out"]


def test_a_name_rebound_on_each_run_is_not_growing(grown):
    """Cell 7 made three arrays at one line; two died as ``w`` was rebound."""
    assert ["cell [7] line 2", "1", "32 B", "7"] in table(grown[9]["out"])
    assert "cell [7] line 2 keeps" not in grown[9]["out"]


def test_many_arrays_from_one_run_are_not_growing(grown):
    assert ["cell [9] line 1 in <listcomp>", "50", "200 B", "9"] in table(grown[9]["out"])
    assert "cell [9] line 1 in <listcomp> keeps" not in grown[9]["out"]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory) -> list[dict]:
    cells = ["import jax, jax.numpy as jnp\nxs = []", "%gpumem cells on", GROW, GROW, "y = jnp.ones((3,))"]
    return session(tmp_path_factory.mktemp("tracked"), cells)


@pytest.mark.jax_versions
def test_cells_on_calls_out_the_line_that_grew_again(tracked):
    line = tracked[3]["out"].strip().splitlines()[-1]
    assert re.fullmatch(
        r"gpumem: cell 4: live arrays \+32 B \(now [\d.]+ B\); allocated at cell \[4\] line 2 \(32 B\); "
        r"growing: cell \[4\] line 2 keeps arrays from 2 runs \(4 arrays, 64 B\)",
        line,
    ), line


def test_cells_on_says_nothing_of_growth_for_a_line_run_once(tracked):
    assert "growing" not in tracked[2]["out"] and "growing" not in tracked[4]["out"]
    assert "allocated at cell [5] line 1 (12 B)" in tracked[4]["out"]


OOM = "jnp.zeros((2**46,), jnp.float32)"  # 256 TiB: a real out-of-memory error on CPU


@pytest.mark.jax_versions
def test_the_oom_report_names_a_line_that_kept_arrays_from_earlier_runs(tmp_path):
    """A cell that ran out of memory after a list grew over re-runs: the report's live-array
    section says which line keeps arrays run after run (the same sentence as ``%gpumem arrays``).
    Its fix (``oom_rules.kept_runs``) is not offered here: a 256 TiB request is larger than the
    host, and then only the program's own fix is (tests/doctor/test_oom_rules_*.py)."""
    cells = session_allowing_errors(tmp_path, [CELLS[0], GROW, GROW, OOM])
    report = cells[3]["out"]
    assert "Largest live arrays:" in report, report
    growing = [line.strip() for line in report.splitlines() if "Growing, run after run" in line]
    assert growing == ["Growing, run after run: cell [3] line 2 keeps arrays from 2 runs (4 arrays, 64 B)."], report


@pytest.mark.jax_versions
def test_the_oom_report_names_no_growing_line_when_each_run_rebinds_its_name(tmp_path):
    cells = session_allowing_errors(tmp_path, [CELLS[0], CELLS[6], CELLS[6], OOM])
    assert "Largest live arrays:" in cells[3]["out"] and "Growing" not in cells[3]["out"], cells[3]["out"]


CAUGHT = (
    "from jupyter_gpumem.doctor import oom_report\n"
    "try:\n    jnp.zeros((2**46,), jnp.float32)\nexcept Exception as e:\n    report = oom_report(e)\n"
    "print(json.dumps(report.to_json()['growing']))\nprint(report._repr_html_())"
)


@pytest.mark.jax_versions
def test_the_oom_reports_json_and_html_carry_the_growing_lines(tmp_path):
    """Tools read ``to_json()['growing']``; a notebook shows the same sentence as the text."""
    out = session(tmp_path, [CELLS[0] + "\nimport json", GROW, GROW, CAUGHT])[3]["out"].splitlines()
    assert json.loads(out[0]) == [{"site": "cell [3] line 2", "runs": 2, "arrays": 4, "nbytes": 64}]
    assert "<p>Growing, run after run: cell [3] line 2 keeps arrays from 2 runs (4 arrays, 64 B).</p>" in out[1]


def session_allowing_errors(tmp_path: Path, cells: list[str]) -> list[dict]:
    """Each cell's record; only the last cell may fail, and it must fail for want of memory."""
    records = run_session(tmp_path, cells, plain_tracebacks=True)
    assert all(c["ok"] for c in records[:-1]), records
    assert records[-1]["error"] in ("XlaRuntimeError", "JaxRuntimeError"), records[-1]
    return records


# A cell that %%capture runs inside cell 3 is numbered 3 by IPython 8.x, and 4 from 9.8 on:
# run_cell_async gives the inner cell ``self.execution_count``, which the outer cell has already
# counted up (IPython/core/interactiveshell.py, 9.18.1 lines 3437-3440; sites.counts_cells_first).
CAPTURED_IN_3 = 4 if counts_cells_first(IPython.version_info) else 3

# One run of each cell: a line with two statements (the issue's own cell), two identical loops, two
# comprehensions on one line, a function called four times (twice on one line), and cells run
# under %%time and %%capture. None grows, however many code objects IPython compiled for the cell.
ONCE = [
    "import jax, jax.numpy as jnp\nxs = []\ndef make():\n    return jnp.ones((4,))",
    "%gpumem cells on",
    "ws = jnp.ones((100, 256, 256)) * 1e-3; x = jnp.ones((64, 256))",
    "for _ in range(3): xs.append(jnp.ones((2,)))\nfor _ in range(3): xs.append(jnp.ones((2,)))",
    "zs = [jnp.ones((3,)) for _ in range(2)]; zs2 = [jnp.ones((3,)) for _ in range(2)]",
    "xs.append(make())\nxs.append(make())\na = make(); b = make()",
    "%%time\nt1 = jnp.ones((8,)); t2 = jnp.ones((8,))",
    "%%capture\nc1 = jnp.ones((16,)); c2 = jnp.ones((16,))",
    "%gpumem arrays --by line",
]


@pytest.fixture(scope="module")
def once(tmp_path_factory) -> list[dict]:
    return session(tmp_path_factory.mktemp("once"), ONCE)


def cells_line(record: dict) -> str:
    """The ``%gpumem cells on`` line a cell printed (its last line)."""
    return record["out"].strip().splitlines()[-1]


@pytest.mark.jax_versions
@pytest.mark.parametrize(
    ("cell", "allocated"),
    [
        (2, "allocated at cell [3] line 1 (25.06 MiB)"),
        (3, "allocated at cell [4] line 1 (24 B), cell [4] line 2 (24 B)"),
        (4, f"allocated at cell [5] line 1{AT_TOP} (48 B)"),
        (5, "allocated at cell [1] line 4 in make (64 B)"),
        (6, "allocated at <timed exec>:1 (64 B)"),
    ],
    ids=["two statements on a line", "two identical loops", "two comprehensions", "a function called 4 times", "time"],
)
def test_one_run_of_a_cell_is_not_growing(once, cell, allocated):
    line = cells_line(once[cell])
    assert line.startswith(f"gpumem: cell {cell + 1}: live arrays") and line.endswith(allocated), line


@pytest.mark.jax_versions
def test_a_captured_cell_run_once_is_not_growing(once):
    """``%%capture`` runs its body as a cell of its own (``self.shell.run_cell(cell)``,
    IPython/core/magics/execution.py, 9.18.1 line 1593) and captures what it prints, so its
    arrays are read in the listing: one row, not called growing."""
    inner = CAPTURED_IN_3 + 5  # the cell that %%capture runs inside cell 8
    assert [f"cell [{inner}] line 1", "2", "128 B", "8"] in table(once[8]["out"]), once[8]["out"]
    assert "Growing" not in once[8]["out"].splitlines()[0]


@pytest.mark.jax_versions
def test_arrays_names_no_growing_line_after_cells_run_once(once):
    summary = once[8]["out"].splitlines()[0]
    assert (
        summary.startswith("20 live JAX arrays, 25.06 MiB in host memory (CPU devices)") and "Growing" not in summary
    ), summary


@pytest.mark.jax_versions
def test_the_oom_report_names_no_growing_line_after_two_statements_on_a_line(tmp_path):
    cells = session_allowing_errors(tmp_path, [CELLS[0], ONCE[2], OOM])
    assert "Largest live arrays:" in cells[2]["out"] and "Growing" not in cells[2]["out"], cells[2]["out"]


# Cells run twice that keep arrays in a list: each is growth, counted in runs of the cell, not in
# code objects (two statements on a line, a statement written twice, a magic's cell).
TWICE = {
    "two statements on a line": ("xs.append(jnp.ones((4,))); xs.append(jnp.ones((4,)))", "cell [3] line 1", 4),
    "a statement written twice": ("xs.append(jnp.ones((4,)))\nxs.append(jnp.ones((4,)))", "cell [3] line 2", 4),
    "time": ("%%time\nxs.append(jnp.ones((4,)))", "<timed eval>:1", 2),
    "capture": ("%%capture\nxs.append(jnp.ones((4,)))", f"cell [{CAPTURED_IN_3}] line 1", 2),
}


@pytest.mark.jax_versions
@pytest.mark.parametrize("shape", list(TWICE))
def test_a_cell_run_twice_that_keeps_arrays_grows_by_two_runs(tmp_path, shape):
    cell, site, arrays = TWICE[shape]
    out = session(tmp_path, [CELLS[0], cell, cell, "%gpumem arrays"])[3]["out"]
    sentence = f"Growing, run after run: {site} keeps arrays from 2 runs ({arrays} arrays, {arrays * 16} B)."
    assert out.splitlines()[0].endswith(sentence), out
