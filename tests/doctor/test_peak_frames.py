"""XLA's "Peak buffers" name their source by stack frame id on JAX 0.8 and later: the OOM report
reads the line from the failing call's program.

Since JAX 0.8 an HLO instruction's metadata carries ``stack_frame_id=N``, an index into the
module's ``FileNames``/``FunctionNames``/``FileLocations``/``StackFrames`` tables, and no
``source_file``/``source_line`` (seen in ``Compiled.as_text()`` of 0.8.3, 0.9.2 and 0.10.2; 0.4.38
and 0.7.2 print the source inline). The OOM text's "Operator:" line prints that metadata, so it
names a frame id only. Each text here is built around the installed JAX's real compiled program
(``tests/xla_texts.py``: its instructions, op names, metadata and shapes; only XLA's wrapper is
written by hand, from ``BufferAssignment::ToVerboseString``, since no CPU run raises it), so the
matrix (``jax_versions``) reads both forms. The report's own path is run in a fresh IPython
process: a jitted call that really runs out of memory on the CPU, its error re-raised with XLA's
GPU text for the same program, so the report finds the call in the traceback as it would.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from child_env import pythonpath
from xla_texts import entry_instructions, verbose_oom_text

from jupyter_gpumem.doctor import peak_buffers
from jupyter_gpumem.doctor.hlo_sources import ops_at_frames, stack_frames
from jupyter_gpumem.doctor.oom_text import OomError
from jupyter_gpumem.doctor.peak_buffers import parse_oom_text

from kernel_session import run_session

pytestmark = pytest.mark.jax_versions

TESTS = Path(__file__).parents[1]


def step(w, x):
    import jax.numpy as jnp

    h = jnp.tanh(x @ w)
    return jnp.sin(h) * 2.0


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


LINE_OF_OPERATION = {"dot_general": _line_of(step, "x @ w"), "tanh": _line_of(step, "x @ w")}
LINE_OF_OPERATION |= {"sin": _line_of(step, "jnp.sin"), "mul": _line_of(step, "jnp.sin")}


def _where(row: str) -> str:
    return row.split("%  ", 1)[1] if "%  " in row else ""


def _frame_ids_or_skip(text: str) -> None:
    if "stack_frame_id=" not in text:
        pytest.skip("this JAX prints the source inline (before 0.8): there is no frame id to resolve")


def _budget_of(hlo: str, call: str):
    from jupyter_gpumem.doctor.program_budget import ProgramBudget

    # the sizes are not read here; the frames and their operations are the module's own
    return ProgramBudget(call, 0, 0, 0, 0, 0, frames=stack_frames(hlo), frame_ops=ops_at_frames(hlo))


# Compiled in a fresh interpreter: a compile starts JAX's backend, and the rest of the test run
# expects this process's JAX not started (settings before the start, the panel's pushes).
_COMPILE = """
import json, sys
sys.path[:0] = [{doctor!r}, {tests!r}]
import jax, jax.numpy as jnp
from test_peak_frames import step
print(json.dumps({{
    "step": jax.jit(step).lower(jnp.ones((128, 256)), jnp.ones((64, 128))).compile().as_text(),
    "other": jax.jit(lambda v: jnp.cos(v) + 1.0).lower(jnp.ones(4)).compile().as_text(),
}}))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    """The real optimised modules (``Compiled.as_text()``) of ``step`` on (64, 128) @ (128, 256)
    and of another function, from the installed JAX."""
    script = _COMPILE.format(doctor=str(Path(__file__).parent), tests=str(TESTS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    env.update(PYTHONPATH=pythonpath(), JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def program(compiled):
    """``(hlo, text)``: ``step``'s module, and an OOM text whose peak buffers are every value of
    its entry computation but constants."""
    hlo = compiled["step"]
    values = [i for i in entry_instructions(hlo) if i.opcode != "constant"]
    return hlo, verbose_oom_text(1 << 30, values, 160 * 1024, 64 * 1024, 64 * 1024)


def test_a_real_programs_peak_buffers_read_back_to_the_lines_that_made_them(program):
    hlo, text = program
    peak = parse_oom_text(text, stack_frames(hlo))
    made = [b for b in peak.buffers if b.role != peak_buffers.ARGUMENT]
    assert made and {b.operation for b in made} <= set(LINE_OF_OPERATION), [b.op_name for b in made]
    # JAX 0.8 and later name the function through the frame tables; inline metadata has none
    function = "step" if "stack_frame_id=" in text else ""
    assert [(b.source_file, b.source_line, b.function) for b in made] == [
        (__file__, LINE_OF_OPERATION[b.operation], function) for b in made
    ]


def test_without_the_program_a_frame_id_is_named_with_the_command_that_gives_its_line(program):
    from jupyter_gpumem.doctor.oom_peak import peak_section

    hlo, text = program
    _frame_ids_or_skip(text)
    error = OomError("gpu_human", 1 << 30, False, None, "JaxRuntimeError", text)
    title, rows = peak_section(error, None, SimpleNamespace(compile=SimpleNamespace(_filename_map={})))
    assert peak_buffers.NO_SOURCE not in "\n".join(rows)
    ids = {part.split("=")[1] for part in text.split() if part.startswith("stack_frame_id=")}
    named = {_where(r).split(":")[0] for r in rows if "%  stack frame" in r}
    assert named == {f"stack frame {i} (no line in XLA's text)" for i in ids}, rows
    assert any("`%gpumem peak CALL`" in r for r in rows), rows


def test_the_failing_programs_own_tables_name_the_lines_in_the_report(program):
    from jupyter_gpumem.doctor.oom_peak import peak_section

    hlo, text = program
    _frame_ids_or_skip(text)
    error = OomError("gpu_human", 1 << 30, False, None, "JaxRuntimeError", text)
    _, rows = peak_section(error, _budget_of(hlo, "step (cell [9] line 1)"), None)
    made = [_where(r) for r in rows if "%  " in r and "(arguments)" not in r]
    assert made and all(w.split(": ", 1)[0].endswith(" in step") for w in made), rows
    assert not any("stack frame" in r for r in rows), rows


def test_another_programs_tables_are_not_lent_to_the_text(program, compiled):
    """Frame ids are per module: a call in the traceback whose program carries other operations
    at those ids (here a real program of another function) would name wrong lines, so its tables
    are not used and the ids are kept, with the reason."""
    from jupyter_gpumem.doctor.oom_peak import peak_section

    hlo, text = program
    _frame_ids_or_skip(text)
    other = compiled["other"]
    assert stack_frames(other), "the other program has tables a blind reading would use"
    error = OomError("gpu_human", 1 << 30, False, None, "JaxRuntimeError", text)
    _, rows = peak_section(error, _budget_of(other, "other (cell [9] line 1)"), None)
    made = [_where(r) for r in rows if "%  " in r and "(arguments)" not in r]
    assert made and all(w.startswith("stack frame ") for w in made), rows
    assert any("operations differ: `%gpumem peak other(...)`" in r for r in rows), rows


SETUP = f"""\
import sys, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
sys.path.insert(0, {str(TESTS)!r})
from xla_texts import entry_instructions, verbose_oom_text
class JaxRuntimeError(RuntimeError):
    pass
@jax.jit
def blow(x):
    return jnp.zeros((2**46,), jnp.float32) + x.sum()
mesh = Mesh(jax.devices(), ("d",))
@jax.jit
def blow_sharded(x):
    out = jnp.zeros((2**46,), jnp.float32) + x.sum()
    return jax.lax.with_sharding_constraint(out, NamedSharding(mesh, P("d")))
x = jnp.ones(8)
xs = jax.device_put(jnp.ones(8), NamedSharding(mesh, P("d")))
def as_gpu_oom(compiled):
    hlo = compiled.as_text()
    values = [i for i in entry_instructions(hlo) if i.opcode != "constant"]
    m = compiled.memory_analysis()
    m = m[0] if isinstance(m, (list, tuple)) else m
    return verbose_oom_text(max(v.size for v in values), values, m.argument_size_in_bytes,
                            m.output_size_in_bytes, m.temp_size_in_bytes), hlo
"""
BLOW_LINE = 1 + SETUP.splitlines().index("    return jnp.zeros((2**46,), jnp.float32) + x.sum()")
SHARDED_LINE = 1 + SETUP.splitlines().index("    out = jnp.zeros((2**46,), jnp.float32) + x.sum()")
RAISE_AS_GPU = """\
try:
    y = {call}.block_until_ready()
except Exception as e:
    {name}, {name}_HLO = as_gpu_oom({lowered}.compile())
    raise JaxRuntimeError({name}).with_traceback(e.__traceback__) from None
"""


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> list[dict]:
    """A fresh IPython process on 8 CPU devices: the plain and the sharded call each really run
    out of memory, and are re-raised with the GPU text for their program; then the plain text is
    raised from a line that calls nothing; then each text and module is printed."""
    cells = [
        SETUP,
        RAISE_AS_GPU.format(call="blow(x)", name="TEXT", lowered="blow.lower(x)"),
        RAISE_AS_GPU.format(call="blow_sharded(xs)", name="SHARDED", lowered="blow_sharded.lower(xs)"),
        "raise JaxRuntimeError(TEXT)",
        "print(TEXT)",
        "print(SHARDED)\nprint(SHARDED_HLO)",
    ]
    return run_session(
        tmp_path_factory.mktemp("frames"),
        cells,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
        plain_tracebacks=True,  # the report is read, not the traceback (kernel_session.PLAIN_TRACEBACKS)
    )


def _peak_title(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("Live at the peak"))


def _peak_rows(out: str) -> list[str]:
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Live at the peak"))
    return lines[at + 1 : lines.index("", at)]


def _largest_has_an_operator(text: str) -> bool:
    """Whether the text's first (largest) buffer has an Operator line: 0.4.38's CPU compiler
    makes the big broadcast a ``call`` with no metadata, which XLA prints without one."""
    return "Operator:" in text.split("Buffer 1:", 1)[1].split("Buffer 2:", 1)[0]


def test_the_oom_report_reads_each_peak_buffers_line_from_the_failing_calls_program(session):
    # the call's line is the one the traceback names, not the cell's `raise` (line 5)
    assert _peak_title(session[1]["out"]).startswith("Live at the peak of blow (cell [2] line 2), by source line")
    rows, text = _peak_rows(session[1]["out"]), session[4]["out"]
    where = f"cell [1] line {BLOW_LINE}" + (" in blow" if "stack_frame_id=" in text else "")
    if _largest_has_an_operator(text):
        assert _where(rows[0]).startswith(f"{where}: output or temporary 256.00 TiB; add f32[70368744177664]"), rows
    assert any(_where(r).startswith(f"{where}: ") for r in rows), rows
    assert "stack frame" not in session[1]["out"]


def test_a_sharded_programs_per_device_module_resolves_its_frames_too(session):
    """The program compiled for 8 devices is the per-device module (each holds an eighth of the
    output); its tables name the line as the unsharded one's do."""
    text = session[5]["out"]
    assert "f32[8796093022208]" in text  # 2**46 / 8: the module is one device's
    # on 8 CPU devices the error comes from block_until_ready, after the call returned: the call
    # is read from the line the traceback names
    title = _peak_title(session[2]["out"])
    assert title.startswith("Live at the peak of blow_sharded (cell [3] line 2), by source line"), title
    rows = _peak_rows(session[2]["out"])
    where = f"cell [1] line {SHARDED_LINE}" + (" in blow_sharded" if "stack_frame_id=" in text else "")
    if _largest_has_an_operator(text):
        assert _where(rows[0]).startswith(f"{where}: output or temporary 32.00 TiB;"), rows
    assert any(_where(r).startswith(f"{where}: ") for r in rows), rows
    assert "stack frame" not in session[2]["out"]


def test_where_no_call_is_found_the_report_names_the_frame_and_gpumem_peak(session):
    out, text = session[3]["out"], session[4]["out"]
    rows = _peak_rows(out)
    if "stack_frame_id=" in text:
        frame = text.split("stack_frame_id=", 1)[1].split()[0]
        assert _where(rows[0]).startswith(f"stack frame {frame} (no line in XLA's text):"), rows
        assert any("`%gpumem peak CALL`" in r for r in rows), rows
        assert peak_buffers.NO_SOURCE not in out
    else:  # the source is inline: the line is there without a program
        assert any(_where(r).startswith(f"cell [1] line {BLOW_LINE}:") for r in rows), rows
