"""The session script the kernel tests share (tests/kernel_session.py): a cell that must raise a
real out-of-memory error raises it however slow the machine is.

Real CPU JAX: with a computation still pending, JAX dispatches the next call asynchronously,
and ``jnp.zeros((2**46,), jnp.float32)`` then returns an array that failed instead of raising;
IPython displaying it aborts the process (seen in a matrix run on a loaded machine, jaxlib
0.4.38; reproduced on 0.4.38 and 0.10.2 with the pending matmul below). ``settle`` waits for
the earlier cells' work before each cell, outside the cell.
"""

from __future__ import annotations

import pytest

from kernel_session import run_session

# About 3 x 10^10 floating point operations: a second or more on these machines, still running
# when the next call is dispatched.
PENDING = "import jax, jax.numpy as jnp\na = jnp.ones((2000, 2000))\nw = a @ a @ a @ a"
OOM = "jnp.zeros((2**46,), jnp.float32)"


@pytest.mark.jax_versions
def test_an_out_of_memory_cell_after_pending_work_raises_its_error(tmp_path):
    first, second = run_session(tmp_path, [PENDING, OOM], settle=True)
    assert first["ok"], first
    assert not second["ok"] and second["error"] in {"XlaRuntimeError", "JaxRuntimeError"}, second
    assert "RESOURCE_EXHAUSTED" in second["out"] and "JAX ran out of memory (jupyter-gpumem doctor)" in second["out"]


@pytest.mark.jax_versions
def test_settling_leaves_a_failed_array_alone(tmp_path):
    """A failed array the user kept (the call returned it while work was pending) is passed over
    by ``settle``: the next cells run, and the user meets its error where JAX gives it."""
    cells = [PENDING + "\nz = jnp.zeros((2**46,), jnp.float32)", "1 + 1", "z.block_until_ready()"]
    records = run_session(tmp_path, cells, settle=True)
    assert [r["ok"] for r in records] == [True, True, False], records
    # jaxlib 0.4.38 words it "FAILED_PRECONDITION: Buffer Definition Event: Error preparing
    # computation: %sOut of memory allocating ..."; later ones "RESOURCE_EXHAUSTED: Out of memory ..."
    assert "Out of memory allocating 281474976710656 bytes" in records[2]["out"], records[2]
