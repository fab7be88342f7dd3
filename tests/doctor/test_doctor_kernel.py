"""The OOM report in a real kernel: the error still fails the cell, and the report follows it.

A real CPU out-of-memory error, `jnp.zeros((2**46,), jnp.float32)`, in an ipykernel started
through jupyter_client, as nbclient and papermill drive one.
"""

from __future__ import annotations

import re

import pytest
from child_env import ipython_dir, pythonpath
from jupyter_client.manager import KernelManager

from awaiting import WITHIN, waking_blocking

OOM_CELL = "x = jnp.zeros((2**46,), jnp.float32)"


@pytest.fixture(scope="module")
def kernel():
    km = KernelManager(kernel_name="python3")
    # PYTHONPATH: where ipykernel is a carried wheel (the GPU proof), the kernel finds it there.
    km.start_kernel(env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), **ipython_dir()})
    kc = km.client()
    kc.start_channels()
    try:
        with waking_blocking(km):  # a request the kernel has not noticed is read (awaiting.py)
            kc.wait_for_ready(timeout=WITHIN)
            yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc, code: str) -> tuple[dict, list[dict]]:
    """The execute_reply content and the cell's iopub output messages, in order."""
    outputs: list[dict] = []

    def hook(msg: dict) -> None:
        if msg["msg_type"] in ("error", "display_data", "stream", "execute_result"):
            outputs.append({"type": msg["msg_type"], **msg["content"]})

    reply = kc.execute_interactive(code, timeout=WITHIN, output_hook=hook)
    return reply["content"], outputs


@pytest.fixture(scope="module")
def loaded(kernel):
    content, _ = run(kernel, "%load_ext jupyter_gpumem\nimport jax.numpy as jnp")
    assert content["status"] == "ok"
    return kernel


@pytest.fixture(scope="module")
def oom_outputs(loaded):
    return run(loaded, OOM_CELL)


def test_oom_cell_still_replies_error_with_jax_error_name(oom_outputs):
    content, _ = oom_outputs
    assert (content["status"], content["ename"]) == ("error", "JaxRuntimeError")
    assert "Out of memory allocating 281474976710656 bytes" in content["evalue"]


def test_oom_traceback_is_shown_then_the_report(oom_outputs):
    _, outputs = oom_outputs
    kinds = [o["type"] for o in outputs]
    assert kinds.index("error") < kinds.index("display_data")
    report = next(o for o in outputs if o["type"] == "display_data")["data"]
    assert "Requested: 256.00 TiB (281,474,976,710,656 bytes)." in report["text/plain"]
    assert "larger than host memory" in report["text/plain"]
    assert "JAX ran out of memory" in report["text/html"]


def test_kernel_runs_the_next_cell_after_an_oom(oom_outputs, loaded):
    content, outputs = run(loaded, "1 + 1")
    assert content["status"] == "ok" and outputs[-1]["data"]["text/plain"] == "2"


def test_other_errors_get_no_report(loaded):
    content, outputs = run(loaded, "1 / 0")
    assert content["ename"] == "ZeroDivisionError"
    assert [o["type"] for o in outputs] == ["error"]


def test_doctor_off_leaves_the_error_alone(loaded):
    run(loaded, "%gpumem doctor off")
    content, outputs = run(loaded, OOM_CELL)
    run(loaded, "%gpumem doctor on")
    assert content["status"] == "error"
    assert [o["type"] for o in outputs] == ["error"]


GROW = "for i in range(2):\n    xs.append(jnp.ones((4,)))"


@pytest.fixture(scope="module")
def grown_in_kernel(loaded) -> tuple[list[int], str]:
    """The same code run twice as two cells, then ``%gpumem arrays --by line``: the counts the
    two runs got, and the listing's text."""
    run(loaded, "xs = []")
    counts = [run(loaded, GROW)[0]["execution_count"] for _ in range(2)]
    _, outputs = run(loaded, "%gpumem arrays --by line")
    return counts, next(o for o in outputs if o["type"] == "display_data")["data"]["text/plain"]


def test_re_running_unchanged_code_in_a_kernel_counts_each_run(grown_in_kernel):
    """ipykernel names a cell's file by a hash of its code (ipykernel/compiler.py at v7.3.0:
    ``XCachingCompiler.get_code_name`` returns ``get_file_name(raw_code)``), so both runs share
    one file name; each run still compiles its own code object, which tells them apart."""
    counts, text = grown_in_kernel
    assert f"Growing, run after run: cell [{counts[1]}] line 2 keeps arrays from 2 runs (4 arrays, 64 B)" in text


def test_under_ipykernel_identical_runs_take_the_newest_number(grown_in_kernel):
    """The one file name maps to the newest execution count (``CachingCompiler.cache``), so the
    site's first cell is the second run's: the documented limit."""
    counts, text = grown_in_kernel
    rows = [[c.strip() for c in row.split("  ") if c.strip()] for row in text.splitlines() if row.startswith("  ")]
    assert [f"cell [{counts[1]}] line 2", "4", "64 B", str(counts[1])] in rows, text


TWO_ON_A_LINE = "ys.append(jnp.ones((4,))); ys.append(jnp.ones((4,)))"


@pytest.fixture(scope="module")
def cells_lines_in_kernel(loaded) -> list[str]:
    """The ``cells on`` lines of a cell with two statements on one line, run once, then of a
    cell that keeps two arrays per run on one line, run twice as identical code."""
    run(loaded, "ys = []\n%gpumem cells on")
    try:
        cells = ["ws = jnp.ones((100, 256, 256)) * 1e-3; x = jnp.ones((64, 256))", TWO_ON_A_LINE, TWO_ON_A_LINE]
        found = []
        for cell in cells:
            content, outputs = run(loaded, cell)
            assert content["status"] == "ok", content
            found.append("".join(o["text"] for o in outputs if o["type"] == "stream").strip().splitlines()[-1])
        return found
    finally:
        run(loaded, "%gpumem cells off\ndel ws, x, ys")


@pytest.mark.jax_versions
def test_two_statements_on_one_line_run_once_in_a_kernel_are_not_growing(cells_lines_in_kernel):
    """The issue's own cell: IPython compiles each statement of the line as a code object of its
    own, both in one run."""
    line = cells_lines_in_kernel[0]
    assert re.fullmatch(
        r"gpumem: cell (\d+): live arrays \+25.06 MiB .*; allocated at cell \[\1\] line 1 \(25.06 MiB\)", line
    ), line


@pytest.mark.jax_versions
def test_identical_code_run_twice_in_a_kernel_grows_by_two_runs_not_four_statements(cells_lines_in_kernel):
    """Both runs share one file name (ipykernel's hash of the code); four code objects at two
    places of it are two runs."""
    first, second = cells_lines_in_kernel[1:]
    assert re.fullmatch(
        r"gpumem: cell (\d+): live arrays \+32 B .*; allocated at cell \[\1\] line 1 \(32 B\)", first
    ), first
    assert re.fullmatch(
        r"gpumem: cell (\d+): .*; growing: cell \[\1\] line 1 keeps arrays from 2 runs \(4 arrays, 64 B\)", second
    ), second
