"""Where memory came from: each live array's allocation site in ``%gpumem arrays``, from its
real traceback.

jaxlib 0.10.2 records a ``Traceback`` on every array it makes (``Array.traceback``); its
``frames`` run innermost first, each with ``file_name``, ``line_num`` and ``function_name``
(checked against the installed jaxlib: ``type(x.traceback).__name__ == "Traceback"``, the first
frame is in jax/_src/interpreters/pxla.py and the last is the caller's ``<module>``). IPython
9.18's ``CachingCompiler.cache`` maps each cell's file name to its execution count in
``_filename_map`` (IPython/core/compilerop.py), ipykernel 7.4's hashed cell files included.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jupyter_gpumem.core import sites

from kernel_session import run_session as session

pytestmark = pytest.mark.jax_versions

# A comprehension's own frame: Python 3.12 inlines comprehensions (PEP 709), so its lines are the
# enclosing function's ("make"), or the cell's own at a cell's top level (no function named).
IN_MAKE = "make.<listcomp>" if sys.version_info < (3, 12) else "make"
AT_TOP = " in <listcomp>" if sys.version_info < (3, 12) else ""


def write_sources(tmp_path: Path) -> None:
    """A module of the user's beside the notebook, and a library installed in a site-packages."""
    lib = tmp_path / "site-packages" / "fakelib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("import jax.numpy as jnp\ndef build():\n    return jnp.ones((50,))\n")
    (tmp_path / "helpers_mod.py").write_text("import jax.numpy as jnp\n\ndef build():\n    return jnp.ones((2000,))\n")


CELLS = [
    "import sys, jax, jax.numpy as jnp\nsys.path[:0] = ['site-packages', '.']\nimport fakelib, helpers_mod\n"
    "def make(n):\n    return [jnp.ones((1000,)) for _ in range(n)]",
    "a = make(3)\nb = jnp.zeros((10,))\nc = helpers_mod.build()\nd = fakelib.build()",
    "%gpumem arrays --by line",
    "%gpumem arrays",
    "from jupyter_gpumem.doctor import live_arrays\nprint(sorted({r.site for r in live_arrays()}))",
    "%gpumem cells on",
    "e = helpers_mod.build()\nf = [jnp.ones((100,)) for _ in range(3)]\ng = jnp.ones((9,))\ndel g\nh = make(1)",
    "m = jnp.ones((7,))\nprint([(r.cell, r.site) for r in live_arrays() if r.shape == (7,)])",
    "%gpumem arrays --by shape --top 2",
]


@pytest.fixture(scope="module")
def listed(tmp_path_factory) -> list[dict]:
    tmp_path = tmp_path_factory.mktemp("sites")
    write_sources(tmp_path)
    return session(tmp_path, CELLS)


def test_each_array_names_the_first_line_outside_jax_and_installed_packages(listed):
    """A function defined in cell 1 and called in cell 2 names cell 1's line; a library's
    array names the cell line that called the library; a user module names its file."""
    assert all(c["ok"] for c in listed), listed
    assert eval(listed[4]["out"]) == [
        f"cell [1] line 5 in {IN_MAKE}",
        "cell [2] line 2",
        "cell [2] line 4",
        "helpers_mod.py:4 in build",
    ]


def test_arrays_by_line_groups_counts_and_totals_per_site(listed):
    lines = listed[2]["out"].splitlines()
    assert lines[0].startswith("6 live JAX arrays, 19.77 KiB in host memory (CPU devices); 4 shown, grouped by line.")
    rows = [line.split("  ") for line in lines[1:]]
    rows = [[c.strip() for c in row if c.strip()] for row in rows]
    assert rows == [
        ["line", "arrays", "bytes", "first cell"],
        [f"cell [1] line 5 in {IN_MAKE}", "3", "11.72 KiB", "2"],
        ["helpers_mod.py:4 in build", "1", "7.81 KiB", "2"],
        ["cell [2] line 4", "1", "200 B", "2"],
        ["cell [2] line 2", "1", "40 B", "2"],
    ]


def test_the_array_table_has_an_allocated_at_column(listed):
    lines = listed[3]["out"].splitlines()
    assert lines[1].split()[-3:] == ["cell", "allocated", "at"]
    assert lines[2].endswith("helpers_mod.py:4 in build") and "float32[2000]" in lines[2]


# --- the reduction itself, on stacks written as jaxlib's frames are (innermost first) -----------

JAX_FRAME = ("/env/lib/python3.11/site-packages/jax/_src/interpreters/pxla.py", 395, "ExecuteReplicated.__call__")
FLAX_FRAME = ("/env/lib/python3.11/site-packages/flax/linen/module.py", 700, "init")
PLUGIN_FRAME = ("/usr/lib/python3/dist-packages/jax_cuda12_plugin/__init__.py", 10, "initialize")


def test_installed_packages_are_libraries_and_jax_and_its_plugins_are_internal():
    assert [sites.kind_of(f[0]) for f in (JAX_FRAME, FLAX_FRAME, PLUGIN_FRAME)] == ["internal", "library", "internal"]
    assert sites.kind_of("/home/me/project/train.py") == "user"
    assert sites.kind_of("<frozen importlib._bootstrap>") == "internal"
    assert sites.kind_of(sites.__file__) == "internal"


def test_a_library_call_from_a_cell_is_named_by_the_cell_line():
    cells = {"/tmp/ipykernel_7/123.py": 4}
    found = sites.origin_of([JAX_FRAME, FLAX_FRAME, ("/tmp/ipykernel_7/123.py", 2, "<module>")], cells)
    assert (str(found.first), str(found.user), str(found.cell)) == (
        "flax/linen/module.py:700 in init",
        "cell [4] line 2",
        "cell [4] line 2",
    )
    assert found.first.library and str(found.site) == "cell [4] line 2"


def test_a_stack_only_inside_libraries_names_the_library():
    found = sites.origin_of([JAX_FRAME, FLAX_FRAME], {})
    assert found.user is None and str(found.site) == "flax/linen/module.py:700 in init"


def test_plain_ipython_cell_names_give_their_number_without_a_map():
    found = sites.origin_of([("<ipython-input-12-0a1b2c3d4e5f>", 3, "f")], {})
    assert str(found.site) == "cell [12] line 3 in f"


def test_an_array_without_a_traceback_says_so():
    assert sites.site_labeller({})(None) == "(no traceback)"


def test_the_per_cell_line_names_the_top_three_sites_of_what_the_cell_added(listed):
    """Sites of the arrays the cell made and kept, largest first; the array it freed (g) is not
    among them."""
    assert listed[6]["out"].splitlines()[-1] == (
        "gpumem: cell 7: live arrays +12.89 KiB (now 32.66 KiB); no allocator statistics here (CPU), so peak and "
        "pool growth are not measured; allocated at helpers_mod.py:4 in build (7.81 KiB), "
        f"cell [1] line 5 in {IN_MAKE} (3.91 KiB), cell [7] line 2{AT_TOP} (1.17 KiB)"
    )


def test_an_array_listed_while_its_cell_runs_belongs_to_that_cell(listed):
    """IPython counts the cell up before ``pre_run_cell`` (run_cell_async, IPython 9.18), so the
    running cell is the count less one; a listing inside cell 8 gives its new array cell 8."""
    assert listed[7]["out"].strip().splitlines()[0] == "[(8, 'cell [8] line 1')]"


def test_other_groupings_name_the_line_that_allocated_most_of_each_group(listed):
    """float32[1000]: four arrays from make's line in cell 1 (three made in cell 2, one in cell
    7); float32[2000]: two from helpers_mod (cells 2 and 7); equal bytes, so by name."""
    lines = [line for line in listed[8]["out"].splitlines() if not line.startswith("gpumem: cell")]
    rows = [[c.strip() for c in line.split("  ") if c.strip()] for line in lines[1:]]
    assert rows == [
        ["shape", "arrays", "bytes", "first cell", "allocated at"],
        ["float32[1000]", "4", "15.62 KiB", "2", f"cell [1] line 5 in {IN_MAKE}"],
        ["float32[2000]", "2", "15.62 KiB", "2", "helpers_mod.py:4 in build"],
    ]


def test_a_group_from_several_lines_names_the_largest_and_counts_the_others():
    from jupyter_gpumem.doctor.arrays import ArrayRecord, _main_site

    records = [
        ArrayRecord.of((4,), "float32", {0: 16}, site="a.py:1"),
        ArrayRecord.of((4,), "float32", {0: 16}, site="b.py:2"),
        ArrayRecord.of((8,), "float32", {0: 32}, site="b.py:2"),
        ArrayRecord.of((1,), "float32", {0: 4}, site="c.py:3"),
    ]
    assert _main_site(records) == "b.py:2 (+2 more)"


# --- growth: lines whose live arrays come from several runs (Allocation as the labeller makes it)

XS = ("cell", "<module>", "xs.append(x)")


def made(cell: int, run: sites.Run, line: tuple = XS) -> sites.Allocation:
    return sites.Allocation(f"cell [{cell}] line 2", line, cell, run)


def test_a_line_with_arrays_from_two_runs_of_its_statement_grows_named_by_its_newest_run():
    """Plain IPython: each run has a file of its own."""
    first, second = (
        sites.Run("xs.append(x)", "<ipython-input-3-a>", (2, 0), 1),
        sites.Run("xs.append(x)", "<ipython-input-5-a>", (2, 0), 2),
    )
    found = sites.growing([(made(3, first), 2, 32), (made(5, second), 2, 32)])
    assert [str(g) for g in found] == ["cell [5] line 2 keeps arrays from 2 runs (4 arrays, 64 B)"]


def test_two_statements_of_one_run_reaching_one_line_are_not_runs():
    """``a = make()`` and ``b = make()`` in one cell: one site, two statements, one run each."""
    line = ("cell", "make", "return jnp.ones(3)")
    a, b = sites.Run("a = make()", "c.py", (2, 0), 1), sites.Run("b = make()", "c.py", (3, 0), 2)
    assert sites.growing([(made(3, a, line), 1, 12), (made(3, b, line), 1, 12)]) == []


def test_two_statements_on_one_line_are_one_execution():
    """``ws = jnp.ones(...) * 1e-3; x = jnp.ones(...)``: two code objects, two places, one run."""
    text = "ws = jnp.ones((100, 256, 256)) * 1e-3; x = jnp.ones((64, 256))"
    runs = [
        sites.Run(text, "/tmp/ipykernel_1/9.py", (1, 5), 101),
        sites.Run(text, "/tmp/ipykernel_1/9.py", (1, 44), 102),
    ]
    assert sites.executions(runs) == 1
    assert sites.growing([(made(4, run, ("cell", "<module>", text)), 1, 4) for run in runs]) == []


def test_the_same_place_compiled_twice_in_one_file_is_two_executions():
    """ipykernel names identical code by one file: two code objects at one place are two runs."""
    runs = [sites.Run("xs.append(x)", "/tmp/ipykernel_1/9.py", (2, 0), code) for code in (101, 102)]
    assert sites.executions(runs) == 2


def test_a_statement_written_twice_in_a_cell_counts_the_cells_executions():
    """The same text on lines 2 and 3 of one cell, run twice: four code objects, two runs."""
    path = "/tmp/ipykernel_1/9.py"
    runs = [
        sites.Run("xs.append(make())", path, place, code)
        for place, code in (((2, 0), 1), ((3, 0), 2), ((2, 0), 3), ((3, 0), 4))
    ]
    assert sites.executions(runs) == 2
    assert sites.executions(runs[:2]) == 1


def test_executions_add_up_across_the_files_of_an_edited_cell():
    """Runs 1 and 2 of one version of the cell, run 3 after an edit moved the line."""
    runs = [
        sites.Run("xs.append(x)", "/tmp/ipykernel_1/9.py", (2, 0), 1),
        sites.Run("xs.append(x)", "/tmp/ipykernel_1/9.py", (2, 0), 2),
        sites.Run("xs.append(x)", "/tmp/ipykernel_1/7.py", (3, 0), 3),
    ]
    assert sites.executions(runs) == 3


def statements_of(source: str) -> list:
    """Each top-level statement of ``source`` compiled as IPython's ``run_ast_nodes`` does."""
    import ast

    return [compile(ast.Module([node], []), "<cell>", "exec") for node in ast.parse(source).body]


def test_statements_on_one_line_start_at_two_places_and_again_at_the_same():
    source = "import math\nws = math.sqrt(4) * 1e-3; x = math.sqrt(9)\nfor i in range(2):\n    y = i\n"
    places = [sites.statement_place(code) for code in statements_of(source)]
    again = [sites.statement_place(code) for code in statements_of(source)]
    assert places == again and len(set(places)) == 4
    if sys.version_info >= (3, 11):
        assert places == [(1, 0), (2, 0), (2, 26), (3, 0)]  # where each statement starts


def test_the_same_statement_on_two_lines_starts_at_two_places():
    first, second = statements_of("xs.append(f())\nxs.append(f())")
    assert sites.statement_place(first) != sites.statement_place(second)


def test_arrays_made_outside_any_cell_never_grow():
    outside = sites.Allocation("train.py:4 in step", ("train.py", 4, "step"))
    assert sites.growing([(outside, 100, 400)]) == []
