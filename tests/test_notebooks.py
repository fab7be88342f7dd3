"""The example notebooks: committed with the outputs of one run, executed here, and their key
outputs checked.

Every notebook runs in a real kernel. ``make test`` first runs them as a user gets them, from the
built wheel installed outside the repository, in a folder outside it (tests/wheel_notebooks.py),
and points ``GPUMEM_EXECUTED_NOTEBOOKS`` at the result; without it, each runs here in the
python3 kernel of this environment (nbclient). Each has check cells of its own (tagged ``test``)
that fail the run when a lesson's numbers are wrong; the tests below add what a cell cannot check
about itself: error outputs, the OOM report shown after the error, the messages a machine without
a GPU must print. The user's guide, the troubleshooting page and the README are checked here too:
their links resolve, and each test the README's comparison table names exists.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from wheel_notebooks import RUN_NOTES_KEY, kernel_env  # a kernel starts from JAX's defaults whatever the shell had

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
NAMES = [
    "quickstart",
    "02-preallocation-and-processes",
    "03-fragmentation",
    "04-cuda-async",
    "05-oom-diagnosed",
    "06-jax-with-tensorflow-or-pytorch",
    "07-where-memory-came-from",
    "08-a-replicated-array-on-a-mesh",
]

_executed: dict[str, nbformat.NotebookNode] = {}


def _gpu_visible() -> bool:
    from conftest import _cuda_visible

    return _cuda_visible()


def _from_the_wheel(name: str) -> pathlib.Path | None:
    """The notebook as ``make test`` ran it from the installed wheel, where that run is given."""
    folder = os.environ.get("GPUMEM_EXECUTED_NOTEBOOKS")
    path = pathlib.Path(folder) / f"{name}.ipynb" if folder else None
    return path if path is not None and path.is_file() else None


def executed(name: str) -> nbformat.NotebookNode:
    """The notebook run top to bottom in a fresh kernel, once per test session: the wheel's run
    where ``make test`` made one, else a run here."""
    ran = _from_the_wheel(name)
    if ran is not None and name not in _executed:
        _executed[name] = nbformat.read(ran, as_version=4)
    if name not in _executed:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        env = kernel_env()
        # IPC sockets: TCP port picking races with other processes on a busy machine
        # ("ZMQError: Address already in use").
        # The socket path is absolute: the kernel runs in notebooks/, the client here.
        km = KernelManager(
            kernel_name="python3", transport="ipc", ip=os.path.join(tempfile.mkdtemp(prefix="gpumem-nb-"), "kernel")
        )
        client = NotebookClient(
            nb,
            km=km,
            timeout=120,
            startup_timeout=60,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        client.execute(env=env)
        _executed[name] = nb
    return _executed[name]


def tagged(nb: nbformat.NotebookNode, tag: str) -> list:
    return [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]


def text_of(cell) -> str:
    """Everything a code cell showed: streams, plain text and HTML of displays, errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
        else:
            data = out.get("data", {})
            parts.append(data.get("text/plain", ""))
            parts.append(data.get("text/html", ""))
    return "\n".join(parts)


def raised(cell) -> tuple[str, str] | None:
    """(name, message) of the error a cell raised, or None. IPython shows a UsageError (a
    refused %gpumem line) as text without a traceback; the cell still fails."""
    for out in cell.get("outputs", []):
        if out["output_type"] == "error":
            return out["ename"], out["evalue"]
        if out["output_type"] == "stream" and out["text"].startswith("UsageError: "):
            return "UsageError", out["text"][len("UsageError: ") :]
    return None


def cell_with(nb: nbformat.NotebookNode, source_part: str):
    found = [c for c in nb.cells if c.cell_type == "code" and source_part in c.source]
    assert len(found) == 1, f"{len(found)} code cells contain {source_part!r}"
    return found[0]


# --- the committed files -------------------------------------------------------------------------


def committed(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    return nb


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_carries_the_outputs_of_one_run_from_the_wheel(name):
    nb = committed(name)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run it again: make notebooks"
    ran = nb.metadata[RUN_NOTES_KEY]
    assert ran["executed_from"].startswith("jupyter_gpumem-") and ran["executed_from"].endswith(".whl")
    assert not [
        o
        for c in code
        for o in c.outputs
        if o["output_type"] == "error" and "raises-exception" not in c.metadata.get("tags", [])
    ]


# What the panel reads from metadata.jupyter_gpumem (labextension/src/allocatorSettings.ts,
# EMPTY_SETTINGS): any other key there makes it ignore the notebook's settings and warn.
_PANEL_SETTING_KEYS = {"preallocate", "fraction", "allocator"}


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_metadata_holds_no_run_notes_where_the_panel_reads_settings(name):
    metadata = committed(name).metadata
    assert set(metadata.get("jupyter_gpumem", {})) <= _PANEL_SETTING_KEYS
    assert {"executed_from", "jax", "gpu", "note"} <= set(metadata[RUN_NOTES_KEY])


def test_a_run_from_the_wheel_writes_its_notes_beside_the_notebooks_settings():
    from wheel_notebooks import trimmed

    nb = nbformat.v4.new_notebook(metadata={"jupyter_gpumem": {"fraction": 0.5}})
    notes = {"executed_from": "jupyter_gpumem-0.1.0-py3-none-any.whl", "jax": "0.10.2", "gpu": False, "note": "n"}
    out = trimmed(nb, notes)
    assert out.metadata["jupyter_gpumem"] == {"fraction": 0.5}
    assert out.metadata[RUN_NOTES_KEY] == notes


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_of_a_run_without_a_gpu_say_so_and_label_replays_synthetic(name):
    # No GPU run has happened: outputs from a CPU run must not pass for real ones.
    nb = committed(name)
    if nb.metadata[RUN_NOTES_KEY]["gpu"]:
        pytest.skip("these outputs are from a run on a GPU")
    assert "without a GPU" in nb.metadata[RUN_NOTES_KEY]["note"]
    shown = text_of(cell_with(nb, "gpu_or_replay()"))
    # Read on a machine with GPUs (the panel beside it lists them), the output says where it was made.
    assert "No GPU for JAX on the machine this cell ran on" in shown and "JAX runs on its CPU" in shown
    assert "REPLAY" in shown and "SYNTHETIC" in shown


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_are_small_and_hold_no_widget_state(name):
    nb = committed(name)
    assert "widgets" not in nb.metadata
    mimes = {k for c in nb.cells if c.cell_type == "code" for o in c.outputs for k in o.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" not in mimes
    attachments = sum(len(json.dumps(c.get("attachments", {}))) for c in nb.cells)
    assert (NOTEBOOKS / f"{name}.ipynb").stat().st_size - attachments < 100_000


@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_have_the_shape_of_a_fresh_run(name):
    """Outputs left from an older version of a cell show up here: each cell of a fresh run shows
    the same kinds of output (streams, displays by MIME type, errors by name) as committed."""
    if _from_the_wheel(name) is None:
        pytest.skip("needs make test's run from the wheel (GPUMEM_EXECUTED_NOTEBOOKS)")
    fresh, kept = executed(name), committed(name)
    if fresh.metadata[RUN_NOTES_KEY]["gpu"] != kept.metadata[RUN_NOTES_KEY]["gpu"]:
        pytest.skip("one run had a GPU and the other had not")

    def shape(nb):
        kinds = [
            [(o["output_type"], o.get("name") or o.get("ename") or sorted(o.get("data", {}))) for o in c.outputs]
            for c in nb.cells
            if c.cell_type == "code"
        ]
        # adjacent writes to one stream count once: how the kernel split them is timing
        return [[k for i, k in enumerate(cell) if i == 0 or k[0] != "stream" or k != cell[i - 1]] for cell in kinds]

    assert shape(fresh) == shape(kept), "the committed outputs are stale: make notebooks"


@pytest.mark.parametrize("name", NAMES)
def test_images_in_notebooks_are_embedded(name):
    nb = committed(name)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", cell.source):
            assert target.startswith("attachment:"), target
            assert target[len("attachment:") :] in cell.get("attachments", {}), target


@pytest.mark.parametrize("name", NAMES)
def test_notebook_code_does_not_look_for_the_repository(name):
    code = "\n".join(c.source for c in committed(name).cells if c.cell_type == "code")
    assert "tests/data" not in code and "parents" not in code and "../" not in code


def test_notebooks_folder_holds_exactly_the_tested_notebooks():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_notebook_has_checks_and_says_what_they_are(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    assert len(tagged(nb, "test")) >= 2
    assert any("tagged `test`" in c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("name", NAMES)
def test_check_cells_are_collapsed_out_of_the_learners_way(name):
    """JupyterLab and Notebook 7 collapse a cell's input and output by ``metadata.jupyter``
    (``source_hidden``, ``outputs_hidden``: nbformat 4.x's documented cell metadata)."""
    nb = committed(name)
    for cell in tagged(nb, "test"):
        assert cell.metadata.get("jupyter") == {"source_hidden": True, "outputs_hidden": True}, cell.source[:80]
    visible = [c for c in nb.cells if "test" not in c.metadata.get("tags", [])]
    assert [c.source[:60] for c in visible if c.cell_type == "markdown" and c.source.lstrip().startswith("Check")] == []


@pytest.mark.parametrize("name", NAMES)
def test_each_notebook_opens_with_one_public_call_for_whether_it_runs_live(name):
    opener = next(c for c in committed(name).cells if c.cell_type == "code")
    assert opener.source.splitlines()[0] == "%load_ext jupyter_gpumem"
    assert "LIVE = jupyter_gpumem.gpu_or_replay()" in opener.source
    assert len(opener.source.splitlines()) <= 4 and "jupyter_gpumem." not in opener.source.replace(
        "jupyter_gpumem.gpu_or_replay", ""
    )


MAX_MARKDOWN_WORDS = 200


@pytest.mark.parametrize("name", NAMES)
def test_markdown_cells_are_short_enough_to_read_between_cells(name):
    long = {
        c.source[:50]: len(c.source.split())
        for c in committed(name).cells
        if c.cell_type == "markdown" and len(c.source.split()) > MAX_MARKDOWN_WORDS
    }
    assert long == {}


def test_quickstart_where_next_names_every_other_notebook():
    (where_next,) = [c.source for c in committed("quickstart").cells if c.source.startswith("## Where next")]
    assert [n for n in NAMES if n != "quickstart" and f"{n}.ipynb" not in where_next] == []


def test_quickstart_says_run_all_goes_on_past_the_refused_cell_as_its_tag_makes_it():
    nb = committed("quickstart")
    cells = nb.cells
    refused = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "%gpumem fraction .8" in c.source)
    assert "raises-exception" in cells[refused].metadata.get("tags", [])
    before = cells[refused - 1].source
    assert "would stop" not in before and '"Run All" goes on past it' in before
    ran = executed("quickstart")
    assert all(c.execution_count is not None for c in ran.cells[refused + 1 :] if c.cell_type == "code")


def test_fragmentation_text_quotes_only_numbers_its_table_shows():
    nb = executed("03-fragmentation")
    (text,) = [c.source for c in nb.cells if c.source.startswith("## An OOM with plenty free in total")]
    table = text_of(cell_with(nb, "def stats_at(t):"))
    end_row = next(line for line in table.splitlines() if line.split()[:1] == ["end"])
    quoted = re.findall(r"\d+\.\d+ GiB", text)
    assert len(quoted) >= 3
    assert [q for q in quoted if q not in end_row] == []


# --- executed ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_and_every_check_cell_passes(name):
    nb = executed(name)  # a failing cell outside raises-exception fails the run
    for cell in tagged(nb, "test"):
        assert cell.execution_count is not None
        assert not [o for o in cell.outputs if o["output_type"] == "error"], text_of(cell)


@pytest.mark.parametrize("name", NAMES)
def test_cells_tagged_raises_exception_really_raise(name):
    nb = executed(name)
    for cell in tagged(nb, "raises-exception"):
        assert raised(cell) is not None, cell.source


@pytest.mark.parametrize("name", NAMES)
def test_without_a_gpu_the_notebook_says_so_and_labels_replays_synthetic(name):
    if _gpu_visible():
        pytest.skip("a GPU is visible: the notebooks run live")
    shown = text_of(cell_with(executed(name), "gpu_or_replay()"))  # the setup cell
    assert "No GPU for JAX on the machine this cell ran on" in shown
    assert "REPLAY" in shown and "SYNTHETIC" in shown


def test_quickstart_without_a_gpu_shows_the_live_arrays_on_the_cpu_and_leaves_the_monitor_open():
    nb = executed("quickstart")
    if not _gpu_visible():
        shown = text_of(cell_with(nb, 'Monitor(replay="synthetic_bfc_growth_fragmenting")'))
        assert "JAX runs on the CPU here: the live monitor above draws its live arrays in host memory" in shown
        assert "CPU: JAX arrays:</span> <b>" in shown and "in host memory (not a GPU's)" in shown
    closing = [c for c in nb.cells if c.cell_type == "code" and re.search(r"^mon\.close\(\)", c.source, re.M)]
    assert closing == []


def test_quickstart_refuses_a_late_fraction_and_says_to_restart():
    cell = cell_with(executed("quickstart"), "%gpumem fraction .8")
    name, message = raised(cell)
    assert name == "UsageError"
    assert "restart the kernel" in message and "fraction is 0.5" in message


def test_oom_notebook_shows_the_report_after_the_error():
    cell = cell_with(executed("05-oom-diagnosed"), "jnp.zeros((2**46,)")
    kinds = [o["output_type"] for o in cell.outputs]
    assert "error" in kinds
    error = cell.outputs[kinds.index("error")]
    assert error["ename"] in ("JaxRuntimeError", "XlaRuntimeError")
    assert "RESOURCE_EXHAUSTED" in error["evalue"]
    after = cell.outputs[kinds.index("error") + 1 :]
    report = "\n".join(o.get("data", {}).get("text/plain", "") for o in after)
    assert "JAX ran out of memory (jupyter-gpumem doctor)" in report
    assert "What to do, best first:" in report


def test_where_notebook_names_the_library_that_started_jax_and_the_failing_call():
    nb = executed("07-where-memory-came-from")
    name, message = raised(cell_with(nb, "%gpumem preallocate off"))
    assert name == "UsageError" and "JAX was started by eager_demo_lib.py:2 (imported in cell [" in message
    report = text_of(cell_with(nb, "y = blow_up(x)"))
    assert "The failing call's program (compiled again, not run):" in report
    assert "blow_up (cell [" in report and "outputs 256.00 TiB" in report


def test_framework_notebook_says_which_frameworks_are_missing():
    import importlib.util

    shown = text_of(cell_with(executed("06-jax-with-tensorflow-or-pytorch"), "HAVE_TF ="))
    for module, name in (("tensorflow", "TensorFlow"), ("torch", "PyTorch")):
        if importlib.util.find_spec(module) is None:
            assert f"{name} is not installed in this kernel" in shown
        else:
            assert f"{name} is installed" in shown


# --- the docs ------------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _relative_links(text: str) -> list[str]:
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_links_in_the_guide_and_readme_resolve(page):
    path = ROOT / page
    links = _relative_links(path.read_text())
    assert links or page not in ("README.md", "docs/guide.md")  # the extractor still finds links
    missing = [t for t in links if not (path.parent / t).exists()]
    assert missing == []


@pytest.mark.parametrize("name", NAMES)
def test_links_in_notebooks_resolve(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    missing = [t for t in _relative_links(text) if not (NOTEBOOKS / t).exists()]
    assert missing == []


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def _comparison_rows() -> list[tuple[str, list[str]]]:
    """``(what jupyter-gpumem's column says, the tests named as proof)`` per row of README's table."""
    table = _section((ROOT / "README.md").read_text(), "Compared with")
    rows = [r for r in table.splitlines() if r.startswith("|") and not r.startswith("|---")][1:]
    out = []
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]  # "\|" is a "|" in a cell
        out.append((cells[1], re.findall(r"`([^`]+)`", cells[-1])))
    return out


def _claimed(ours: str) -> bool:
    return ours.lower().startswith(("yes", "partly"))


def _spec_titles(spec: pathlib.Path) -> set[str]:
    """The titles of a Playwright spec's tests, as declared: ``test('title', ...)``."""
    return {m.group(2) for m in re.finditer(r"""\btest(?:\.\w+)?\(\s*(['"`])(.*?)(?<!\\)\1""", spec.read_text(), re.S)}


def test_every_yes_in_the_comparison_names_a_test_that_exists():
    rows = _comparison_rows()
    assert len(rows) >= 10
    python, browser = [], []
    for ours, named in rows:
        if _claimed(ours):
            assert named, f"no test named for: {ours}"
            for ref in named:
                (browser if ref.startswith("ui-tests/") else python).append(ref)
    # pytest collects each named Python test: a name that is only a substring of another fails.
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *sorted(set(python))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ids = {line.split("[")[0] for line in collected.stdout.splitlines() if "::" in line}
    assert sorted(set(python) - ids) == []
    for ref in browser:
        path, _, title = ref.partition("::")
        assert title in _spec_titles(ROOT / path), f"{ref}: no test with that title"


def test_a_claim_that_rests_on_a_stand_in_says_so():
    """A test module whose docstring says it runs on a stand-in (TensorFlow, the CUDA driver,
    PyTorch) proves less than the real thing: the README's row must say "stand-in"."""
    for ours, named in _comparison_rows():
        for ref in named:
            path = ROOT / ref.partition("::")[0]
            if path.suffix == ".py" and "stand-in" in (ast.get_docstring(ast.parse(path.read_text())) or ""):
                assert "stand-in" in ours, f"{ref} runs on a stand-in; the README row says only: {ours}"


def test_readme_screenshots_exist():
    shots = _section((ROOT / "README.md").read_text(), "Screenshots")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", shots)
    assert len(images) >= 2
    assert all((ROOT / i).is_file() for i in images)
