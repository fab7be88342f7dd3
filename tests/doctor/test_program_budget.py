"""Which part of the program: the OOM report finds the failing jitted call in the traceback,
compiles it again without running it, and weighs the program's own budget.

Real CPU JAX in a fresh IPython shell (tests/kernel_session.py): a jitted function whose output
is 2**46 float32 (256 TiB) really runs out of memory, called from a cell and from a function.
Under IPython JAX keeps its frames in the traceback (mode "tracebackhide",
jax/_src/traceback_util.py 0.10.2), among them ``cache_miss(*args, **kwargs)`` in
jax/_src/pjit.py, which holds the call's arguments. The donation case compiles a real
``w - 0.1 * g`` program for its budget and weighs it against synthetic GPU readings, since no
CPU allocation of a few MiB fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import pythonpath

from jupyter_gpumem.doctor.oom_readings import OomReadings
from jupyter_gpumem.doctor.oom_rules import advise
from jupyter_gpumem.doctor.program_budget import ProgramBudget, _call_on_line, donation_gain

pytestmark = pytest.mark.jax_versions

SESSION = Path(__file__).parents[1] / "kernel_session.py"
MiB = 1 << 20

SETUP = (
    "import json, jax, jax.numpy as jnp\n@jax.jit\ndef blow(x):\n"
    "    return jnp.zeros((2**46,), jnp.float32) + x.sum()\nx = jnp.ones(8)"
)
BUDGETS = """\
from jupyter_gpumem.sources import jax_arrays
from jupyter_gpumem.doctor.program_budget import donation_gain
w, g = jnp.ones((1024, 1024)), jnp.ones((1024, 1024))
for f in (jax.jit(lambda w, g: w - 0.1 * g), jax.jit(lambda w, g: w - 0.1 * g, donate_argnums=0)):
    m = jax_arrays.compile_memory(f, (w, g), {})
    print(json.dumps([m.argument_bytes, m.output_bytes, m.temp_bytes, m.code_bytes, m.alias_bytes,
                      any(i[3] for i in m.inputs), donation_gain(m.inputs, m.outputs)]))"""


# The budget's compilation is the one the failing call made: with jax.log_compiles on, JAX logs
# each compilation it really runs ("Finished XLA compilation of jit(blow) ...", jax/_src/dispatch.py).
COMPILES = """\
import logging, sys
from jupyter_gpumem.doctor.program_budget import program_budget
seen = []
handler = logging.Handler()
handler.emit = lambda record: seen.append(record.getMessage())
logging.getLogger("jax").addHandler(handler)
with jax.log_compiles():
    budget = program_budget(sys.last_value)
    jax.jit(lambda v: v * 3).lower(x).compile()
print(budget.output_bytes, sum("XLA compilation of jit(blow)" in m for m in seen), sum("XLA compilation" in m for m in seen))"""


# a cell that catches the error and raises it again: its frame is at the `raise` by then
RERAISED = "try:\n    w = blow(x)\nexcept RuntimeError:\n    print('caught')\n    raise"


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> list[dict]:
    tmp_path = tmp_path_factory.mktemp("program")
    (tmp_path / "cells.json").write_text(
        json.dumps(
            [
                SETUP,
                "y = blow(x)",
                "def outer(v):\n    return blow(v)\nouter(x)",
                BUDGETS,
                COMPILES,
                "z = jnp.zeros((2**46,), jnp.float32)",
                RERAISED,
            ]
        )
    )
    proc = subprocess.run(
        # the reports are read, not the tracebacks (kernel_session.PLAIN_TRACEBACKS)
        [sys.executable, str(SESSION), "cells.json", "--ext", "--plain-tracebacks"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={
            "JAX_PLATFORMS": "cpu",
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "PYTHONPATH": pythonpath(),
        },
    )  # this checkout, not the installed one
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


def _report(out: str) -> list[str]:
    return out[out.index("JAX ran out of memory (jupyter-gpumem doctor)") :].splitlines()


def test_the_report_names_the_jitted_call_and_its_compiled_budget(cells):
    lines = _report(cells[1]["out"])
    at = lines.index("The failing call's program (compiled again, not run):")
    assert lines[at + 1] == (
        "  blow (cell [2] line 1): arguments 32 B, outputs 256.00 TiB, temporaries 4 B, code 0 B, "
        "aliased 0 B; no argument donated."
    )


@pytest.mark.jax_versions
def test_a_program_no_setting_can_fit_is_sent_to_the_program_first(cells):
    lines = _report(cells[1]["out"])
    fixes = lines[lines.index("What to do, best first:") + 1 :]
    assert fixes[0].startswith(
        "  1. blow (cell [2] line 1): its outputs and temporaries (256.00 TiB) exceed what is free ("
    )
    # all outputs (256.00 TiB) and 4 B of temporaries: checkpointing, which shrinks only
    # temporaries, is not the fix (before, it was the one offered)
    assert fixes[1] == (
        "     Do: Make its outputs smaller: a smaller batch or array, a lower precision dtype, or outputs "
        "sharded across devices (jax.sharding); jax.checkpoint shrinks only temporaries"
    )
    assert "no allocator setting changes what the program itself needs" in fixes[2]
    assert fixes[3].startswith("  2. The request (256.00 TiB) is larger than host memory")


@pytest.mark.jax_versions
def test_an_eager_operation_is_named_as_the_line_calls_it_not_by_its_primitive(cells):
    """jnp.zeros outside jit runs as jit(prim_fun), prim_fun named broadcast_in_dim
    (xla_primitive_callable, jax/_src/dispatch.py, jax-v0.4.38 to jax-v0.11.0). Before, the
    report named the call "broadcast_in_dim" alone."""
    lines = _report(cells[5]["out"])
    at = lines.index("The failing call's program (compiled again, not run):")
    assert lines[at + 1].startswith("  jnp.zeros (run eagerly as broadcast_in_dim) (cell [6] line 1): arguments ")


def test_an_error_raised_again_names_the_line_of_the_call_not_of_the_raise(cells):
    """The traceback's entry for the cell says line 2 (``tb_lineno``); the cell's frame itself is
    at its ``raise`` (line 5), where the report read it before."""
    lines = _report(cells[6]["out"])
    at = lines.index("The failing call's program (compiled again, not run):")
    assert lines[at + 1].startswith("  blow (cell [7] line 2): arguments 32 B, outputs 256.00 TiB"), lines[at + 1]


def test_a_call_inside_a_function_is_named_by_the_function_line(cells):
    assert any(l.startswith("  blow (cell [3] line 2 in outer): arguments 32 B") for l in _report(cells[2]["out"]))


@pytest.fixture(scope="module")
def budgets(cells) -> tuple[ProgramBudget, ProgramBudget]:
    """The real compiled budgets of w - 0.1 * g on two 4 MiB arrays: plain, and w donated."""
    plain, donated = (json.loads(l) for l in cells[3]["out"].strip().splitlines())
    return tuple(
        ProgramBudget("update (cell [9] line 1)", *row[:5], donated=row[5], donation_gain=row[6])
        for row in (plain, donated)
    )


def test_compiled_budgets_see_the_donation(budgets):
    plain, donated = budgets
    assert (plain.argument_bytes, plain.output_bytes, plain.alias_bytes, plain.donation_gain) == (
        8 * MiB,
        4 * MiB,
        0,
        4 * MiB,
    )
    assert (donated.alias_bytes, donated.donated, donated.donation_gain) == (4 * MiB, True, 0)


def _gpu(program: ProgramBudget) -> OomReadings:
    """Synthetic: a BFC pool at its 1 GiB limit with 2 MiB free in one block; the call asks 4 MiB."""
    return OomReadings(
        requested=4 * MiB,
        device_total=1 << 30,
        device_free=0,
        bytes_in_use=(1 << 30) - 2 * MiB,
        pool_bytes=1 << 30,
        bytes_limit=1 << 30,
        largest_free_block=2 * MiB,
        allocator="bfc",
        live_bytes=(1 << 30) - 2 * MiB,
        remat=True,
        program=program,
        synthetic=True,
    )


def test_donation_that_would_fit_is_the_first_fix(budgets):
    plain, _ = budgets
    fixes = advise(_gpu(plain))
    assert (fixes[0].kind, fixes[0].gain_bytes, fixes[0].enough) == ("donation", 4 * MiB, True)
    assert fixes[0].title == "update (cell [9] line 1): donate the arguments its outputs replace (saves 4.00 MiB)"
    assert "the call would add " in fixes[0].why and "against 2.00 MiB free" in fixes[0].why
    assert "program" not in [f.kind for f in fixes]


def test_an_already_donated_program_gets_no_donation_fix(budgets):
    _, donated = budgets
    kinds = [f.kind for f in advise(_gpu(donated))]
    assert "donation" not in kinds and "program" not in kinds


def test_a_request_larger_than_the_programs_temporaries_is_not_called_temporaries():
    """Synthetic: a 4 MiB output of a program with 1 KiB of temporaries, beyond all live arrays:
    remat cannot shrink an output (before, the remat rule named it "a program's temporaries")."""
    budget = ProgramBudget("make (cell [3] line 1)", 0, 4 * MiB, 1024, 0, 0)
    readings = OomReadings(
        requested=4 * MiB,
        device_total=8 * MiB,
        device_free=0,
        bytes_in_use=1 * MiB,
        pool_bytes=8 * MiB,
        bytes_limit=8 * MiB,
        largest_free_block=1 * MiB,
        allocator="bfc",
        live_bytes=1 * MiB,
        remat=True,
        program=budget,
        synthetic=True,
    )
    assert "remat" not in [f.kind for f in advise(readings)]


def test_temporaries_alone_over_what_is_free_point_at_the_program():
    """Hand-worked: 3 MiB of temporaries against 2 MiB free; donation would save 4 MiB of outputs
    but the temporaries still do not fit."""
    budget = ProgramBudget("step (train.py:12)", 8 * MiB, 4 * MiB, 3 * MiB, 0, 0, donation_gain=4 * MiB)
    fix = next(f for f in advise(_gpu(budget)) if f.kind == "program")
    assert fix.title == "step (train.py:12): its temporaries alone (3.00 MiB) exceed what is free (2.00 MiB)"
    assert "donating its arguments would not be enough" in fix.why


def test_donation_gain_matches_outputs_to_arguments_one_to_one():
    f32 = "float32"
    inputs = (((4,), f32, 16, False), ((4,), f32, 16, True), ((2,), f32, 8, False))
    outputs = (((4,), f32, 16), ((4,), f32, 16), ((4,), f32, 16), ((3,), f32, 12))
    assert donation_gain(inputs, outputs) == 16  # one output aliases the donated input, one takes the other


def test_a_call_on_the_line_is_found_by_its_plain_names():
    """The fast path (no JAX frame in the traceback): the jitted call on the user's line. The
    stand-in has the type name and module of jaxlib's PjitFunction (jaxlib._jax, 0.10.2), which
    is all that is read of it before it is taken."""
    PjitFunction = type("PjitFunction", (), {"__module__": "jaxlib._jax", "__call__": lambda self, *a: a})
    step, params, batch = PjitFunction(), object(), object()
    found = _call_on_line(sys._getframe()) or step(params, batch)
    assert found == (step, (params, batch), {})


def test_objects_that_are_not_jitted_are_never_asked_for_attributes():
    class Trap:
        def __getattr__(self, name):
            raise KeyError(name)

    trap, params = Trap(), object()
    found = [_call_on_line(sys._getframe()), lambda: trap(params)][0]  # trap(params) is on the line, not run
    assert found is None


def test_the_budget_reuses_the_program_the_call_compiled(cells):
    """No compilation of blow is logged while its budget is read; a new program is (the check
    can fail: it sees the compilation of the lambda)."""
    assert cells[4]["out"].split() == [str(2**48), "0", "1"], cells[4]["out"]


def test_on_the_cpu_the_program_is_weighed_against_the_hosts_available_memory():
    """Hand-worked: 16 GiB of RAM, 1 GiB in live arrays, 10 GiB available (the rest of the
    machine holds 5 GiB); a program that needs 12 GiB is weighed against the 10 GiB, as
    ``%gpumem estimate`` weighs it, not against 16 - 1 = 15 GiB."""
    GiB = 1 << 30
    budget = ProgramBudget("step (cell [3] line 1)", 0, 12 * GiB, 0, 0, 0)
    r = OomReadings(
        requested=12 * GiB, device_total=16 * GiB, device_free=10 * GiB, live_bytes=GiB, platform="cpu", program=budget
    )
    fix = next(f for f in advise(r) if f.kind == "program")
    assert (
        fix.title == "step (cell [3] line 1): its outputs and temporaries (12.00 GiB) exceed what is free (10.00 GiB)"
    )


def test_on_the_cpu_a_program_that_fits_in_available_memory_is_not_blamed():
    """Hand-worked: 6 GiB needed, 10 GiB available: the program is not the fix."""
    GiB = 1 << 30
    budget = ProgramBudget("step (cell [3] line 1)", 0, 6 * GiB, 0, 0, 0)
    r = OomReadings(
        requested=6 * GiB, device_total=16 * GiB, device_free=10 * GiB, live_bytes=GiB, platform="cpu", program=budget
    )
    assert "program" not in [f.kind for f in advise(r)]
