"""``%gpumem peak CALL``: real CPU programs compiled with XLA's dump on, never run.

The dump's files and layout are XLA's (openxla/xla xla/service/buffer_assignment.cc
``BufferAssignment::ToString`` and ``HloLiveRange::ToString``; read on CPU JAX 0.4.38, 0.7.2 and
0.10.2: 0.4.38 and 0.7.2 write the values and live ranges into ``*buffer-assignment.txt``,
0.10.2 into ``*buffer-assignment-values.txt`` and ``*-live-range.txt``, and its HLO gives
sources through ``stack_frame_id``; 0.5.3 and 0.6.2 as 0.7.2, but their "Live ranges at T
(peak)" lists an instruction's name and its whole shape's bytes, and their forward scan of a
gradient is named ``jit(f)/jit(main)/while``). Totals are asserted against the compiled program's
own ``memory_analysis()``.
"""

from __future__ import annotations

import builtins
import inspect
import os
import re
import tempfile

import pytest
from child_env import pythonpath

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from jupyter_gpumem.core.magic_args import MagicUsageError  # noqa: E402
from jupyter_gpumem.doctor import peak_buffers  # noqa: E402
from jupyter_gpumem.doctor.peak_buffers import PeakBuffer  # noqa: E402
from jupyter_gpumem.doctor.peak_report import magic_peak, peak  # noqa: E402
from jupyter_gpumem.kernel.magics import parse_line, run_command  # noqa: E402

MiB = 1 << 20


def _compiler_options_supported() -> bool:
    compile_ = getattr(getattr(jax, "stages", None), "Lowered", None)
    return compile_ is not None and "compiler_options" in inspect.signature(compile_.compile).parameters


pytestmark = [
    pytest.mark.jax_versions,
    pytest.mark.skipif(
        not _compiler_options_supported(),
        reason="this JAX's Lowered.compile takes no compiler_options, so no dump can be asked for",
    ),
]


def layer(h, w):
    return jnp.tanh(h @ w), None


def scan_loss(w, x):
    h, _ = jax.lax.scan(layer, x, w)
    return (h**2).sum()


def checkpointed_scan_loss(w, x):
    h, _ = jax.lax.scan(jax.checkpoint(layer), x, w)
    return (h**2).sum()


def upcast_matmul(x, w):
    return x.astype(jnp.float32) @ w


def update(p, g):
    return p - 0.1 * g


def outer(x):
    return jnp.outer(x, x)


def _memory_of(fn, *args):
    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    return analysis[0] if isinstance(analysis, (list, tuple)) else analysis


def _agrees_with_memory_analysis(report, fn, *args):
    m = _memory_of(fn, *args)
    p = report.peak
    assert (p.argument_bytes, p.output_bytes, p.temp_bytes, p.alias_bytes) == (
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.temp_size_in_bytes,
        m.alias_size_in_bytes,
    )
    assert (report.memory.argument_bytes, report.memory.output_bytes, report.memory.temp_bytes) == (
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.temp_size_in_bytes,
    )


def _scan_args():
    return jnp.ones((16, 256, 256)) * 0.01, jnp.ones((512, 256))


def test_scan_under_grad_puts_the_scan_line_first_and_asks_for_checkpoint():
    w, x = _scan_args()
    report = peak(jax.grad(scan_loss), w, x)
    _agrees_with_memory_analysis(report, jax.grad(scan_loss), w, x)
    top = report.lines_by_source[0]
    scan_line = inspect.getsourcelines(scan_loss)[1] + 1
    assert top.where.endswith(f"test_peak_report.py:{scan_line} in scan_loss") or top.where.endswith(
        f"test_peak_report.py:{scan_line}"
    )  # 0.4.38/0.7.2 print no function names
    # the forward scan stacks three f32[16,512,256] per-step values for the backward pass
    stacked = [b for b in top.buffers if b.shape == "f32[16,512,256]"]
    assert sum(b.size for b in stacked) >= 2 * 16 * 512 * 256 * 4
    assert report.fixes[0].kind == "checkpoint"
    assert "jax.checkpoint" in report.fixes[0].text and top.where in report.fixes[0].text


def test_scan_under_grad_peak_counts_the_loop_bodys_values_as_xprofs_memory_viewer():
    """The peak is every whole-program allocation plus the most temporaries live at once (XProf's
    ``peak_heap_mib``, openxla/xprof xprof/convert/hlo_proto_to_memory_visualization_utils.cc at
    a27d00aa). XLA's own "Live ranges at T (peak)" moment sizes a loop's state by its tuple
    (xla/hlo/utils/hlo_live_range.cc ``ComputePeakMemoryMoment``), so it lands outside the
    backward loop and misses the 1 MiB its body holds beside the stacked values.

    How many per-step values the forward loop stacks for the backward one is JAX's choice: three
    f32[16,512,256] up to 0.10.2, two from 0.11.2 (both read in the peak's buffers on CPU)."""
    w, x = _scan_args()
    p = peak(jax.grad(scan_loss), w, x).peak
    n_stacked = _stacked_values(p)
    assert n_stacked >= 2
    stacked, body = n_stacked * 16 * 512 * 256 * 4, 2 * 512 * 256 * 4
    assert p.argument_bytes + p.output_bytes + stacked + body <= p.peak_bytes <= p.total_bytes
    assert p.total_bytes - p.peak_bytes < 1024  # what the temporaries' heap leaves unused


_JAX_MINOR = tuple(int(p) for p in jax.__version__.split(".")[:2])


def _stacked_values(p) -> int:
    """The per-step values of the scan stacked over its 16 steps among the peak's buffers."""
    return sum(1 for b in p.buffers if b.shape == "f32[16,512,256]")


def test_a_scan_of_a_checkpointed_function_is_not_sent_to_checkpoint_again():
    """The fix applied: the peak falls (of the stacked values one is kept, the carry), and the
    advice is to checkpoint chunks of steps. Before JAX 0.7 the backward loop carries no name
    of its own and every scan of a gradient has the same forward name
    (``jit(f)/jit(main)/jvp(while)``), so it cannot be told which scan is checkpointed: the
    advice stays jax.checkpoint (read in the dumps of 0.4.38, 0.5.3, 0.7.2 and 0.10.2)."""
    w, x = _scan_args()
    before = peak(jax.grad(scan_loss), w, x)
    after = peak(jax.grad(checkpointed_scan_loss), w, x)
    stacked, step = 16 * 512 * 256 * 4, 512 * 256 * 4
    assert _stacked_values(after.peak) == 1
    # all stacked arrays but one go; recomputing a step holds up to two of its values
    gone = _stacked_values(before.peak) - 1
    assert gone >= 1 and before.peak.peak_bytes - after.peak.peak_bytes >= gone * stacked - 2 * step
    kinds = [f.kind for f in after.fixes]
    assert ("chunk" in kinds and "checkpoint" not in kinds) if _JAX_MINOR >= (0, 7) else "checkpoint" in kinds
    if _JAX_MINOR >= (0, 7):
        assert next(f for f in after.fixes if f.kind == "chunk").saves == 0


def test_an_upcast_that_dominates_gets_the_dtype_fix():
    x, w = jnp.ones((2048, 1024), jnp.bfloat16), jnp.ones((1024, 8), jnp.float32)
    report = peak(upcast_matmul, x, w)
    _agrees_with_memory_analysis(report, upcast_matmul, x, w)
    fix = next(f for f in report.fixes if f.kind == "dtype")
    assert "f32[2048,1024]" in fix.text and fix.saves == 4 * MiB  # half of the 8 MiB float32 copy


def test_an_update_not_donated_gets_donate_argnums_for_its_first_argument():
    p, g = jnp.ones((1024, 1024)), jnp.ones((1024, 1024))
    report = peak(jax.jit(update), p, g)
    _agrees_with_memory_analysis(report, update, p, g)
    fix = next(f for f in report.fixes if f.kind == "donate")
    assert "donate_argnums=(0,)" in fix.text and fix.saves == 4 * MiB


def test_a_donated_update_gets_no_donate_fix_and_counts_the_alias():
    p, g = jnp.ones((1024, 1024)), jnp.ones((1024, 1024))
    report = peak(jax.jit(update, donate_argnums=0), p, g)
    assert report.peak.alias_bytes == report.memory.alias_bytes == 4 * MiB
    assert not [f for f in report.fixes if f.kind == "donate"]


def test_outputs_that_dominate_are_said_not_to_be_a_remat_matter():
    x = jnp.ones((2048,))
    report = peak(outer, x)
    _agrees_with_memory_analysis(report, outer, x)
    assert [f.kind for f in report.fixes] == ["outputs"]
    assert report.lines_by_source[0].roles == "output 16.00 MiB"


def test_peak_adds_nothing_to_the_jitted_functions_cache_and_leaves_no_folder(tmp_path, monkeypatch):
    # A temporary folder of this test's own: other test processes (the JAX version matrix runs
    # two at once) make and remove their own gpumem-peak-* folders in the shared one.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    jitted = jax.jit(update)
    p, g = jnp.ones((64,)), jnp.ones((64,))
    before = jitted._cache_size()
    report = peak(jitted, p, g)
    assert jitted._cache_size() == before
    assert os.listdir(tmp_path) == []
    assert report.seconds > 0 and "compiled in" in str(report)


class _Shell:
    def __init__(self, ns):
        self.user_ns = ns


def test_the_magic_evaluates_the_arguments_and_does_not_run_the_call():
    calls = []

    def counted(p, g):
        calls.append(1)  # runs while traced: once per compile (the peak's, and each fix checked)
        return p - g

    ns = {"counted": counted, "p": jnp.ones((256, 256)), "g": jnp.ones((256, 256))}
    command = parse_line("peak counted(p, g)")
    assert command.argv == ("counted(p, g)",)
    report = magic_peak(list(command.argv), _Shell(ns))
    assert report.trials.compiles == 1  # donating p, checked
    assert report.expression == "counted(p, g)" and calls == [1, 1]
    assert report.to_json()["output_bytes"] == 256 * 256 * 4


@pytest.mark.parametrize(
    "line, words",
    [
        ("peak", "CALL"),
        ("peak step", "takes a call"),
        ("peak step(", "not a Python expression"),
        ("peak nothing_here(x)", "evaluating 'nothing_here' failed"),
        ("peak value(x)", "is not callable"),
    ],
)
def test_bad_call_input_gets_a_clear_error_and_changes_nothing(line, words):
    # IPython's user namespace holds __builtins__ (InteractiveShell.init_user_ns)
    ns = {"__builtins__": builtins, "value": 3, "x": jnp.ones((4,))}
    before = {k: id(v) for k, v in ns.items()}
    with pytest.raises(MagicUsageError, match=words.replace("(", r"\(")):
        run_command(parse_line(line), _Shell(ns))
    assert {k: id(v) for k, v in ns.items()} == before


def test_dump_parser_reads_the_while_state_as_its_loops_line():
    """The state of a while loop (a scan's stacked values) is a parameter of its body and
    condition, with no metadata of its own: ``loop_states`` names the loop's."""
    hlo = (
        "%region_1.5 (arg_tuple.3: (s32[], f32[4])) -> pred[] {\n}\n"
        "ENTRY %main.1 (x.1: f32[4]) -> f32[4] {\n"
        "  %while.13 = (s32[], f32[4]{0}) while(%tuple.1), condition=%region_1.5, body=%region_0.4, "
        'metadata={op_name="jit(loss)/jvp()/while" source_file="/x/cell.py" source_line=5}\n}\n'
    )  # synthetic
    loop = 'op_name="jit(loss)/jvp()/while" source_file="/x/cell.py" source_line=5}'
    assert peak_buffers.loop_states(hlo) == {"arg_tuple.3": loop, "while.13": loop}


def test_loop_state_is_found_where_computation_headers_list_no_parameters():
    """JAX 0.4.38's XLA prints a computation's header as ``region_0.20 {`` and its parameters
    as instructions (read in its dump)."""
    hlo = (
        "region_0.20 {\n  arg_tuple.21 = (s32[], f32[4]{0}) parameter(0)\n}\n"
        "ENTRY main.148 {\n"
        "  while.68 = (s32[], f32[4]{0}) while(tuple.25), condition=region_1.58, body=region_0.20, "
        'metadata={op_name="jit(loss)/jvp()/while" source_file="/x/cell.py" source_line=5}\n}\n'
    )  # synthetic, in the layout of JAX 0.4.38's optimised HLO
    assert set(peak_buffers.loop_states(hlo)) == {"arg_tuple.21", "while.68"}


def test_a_forward_loop_named_for_no_transform_gets_its_bodys_jvp_name():
    """JAX 0.5.3 and 0.6.2 name the forward scan of a gradient ``jit(f)/jit(main)/while`` and
    its body's operations ``jit(f)/jit(main)/jvp(while)/body/...`` (read in their dumps)."""
    hlo = (
        "%region_0.20 (arg_tuple.21: (s32[], f32[4])) -> (s32[], f32[4]) {\n"
        '  %tanh.1 = f32[4]{0} tanh(%x), metadata={op_name="jit(loss)/jit(main)/jvp(while)/body/tanh"}\n}\n'
        "ENTRY %main.1 (x.1: f32[4]) -> f32[4] {\n"
        "  %while.5 = (s32[], f32[4]{0}) while(%tuple.1), condition=%region_1.45, body=%region_0.20, "
        'metadata={op_name="jit(loss)/jit(main)/while" source_file="/x/cell.py" source_line=5}\n}\n'
    )  # synthetic, in the layout of JAX 0.5.3's optimised HLO
    states = peak_buffers.loop_states(hlo)
    assert states["arg_tuple.21"] == states["while.5"]
    assert 'op_name="jit(loss)/jit(main)/jvp(while)"' in states["while.5"]
    assert PeakBuffer(8, "temporary", op_name="jit(loss)/jit(main)/jvp(while)").saved_for_backward


SESSION = os.path.join(os.path.dirname(os.path.dirname(__file__)), "kernel_session.py")


def test_a_real_cpu_oom_of_a_known_call_points_its_report_to_gpumem_peak(tmp_path):
    """A jitted call that really fails on the CPU (256 TiB): the CPU's text has no peak buffers,
    so the report names the call and the command, and compiles nothing more for it."""
    import json
    import subprocess
    import sys

    setup = (
        "import jax, jax.numpy as jnp\n@jax.jit\ndef blow(x):\n"
        "    return jnp.zeros((2**46,), jnp.float32) + x.sum()\nx = jnp.ones(8)"
    )
    public = (
        "import jupyter_gpumem\nreport = jupyter_gpumem.oom_report()  # the last error's\n"
        "print('PROGRAM', report.readings.program.call, report.readings.program.output_bytes)\n"
        "print('NOT OOM', jupyter_gpumem.oom_report(ValueError('x')))"
    )
    (tmp_path / "cells.json").write_text(json.dumps([setup, "y = blow(x)", public]))
    proc = subprocess.run(
        [sys.executable, SESSION, "cells.json", "--ext"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={
            "JAX_PLATFORMS": "cpu",
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            # this checkout first; a JAX put on the path by the matrix kept
            "PYTHONPATH": pythonpath(),
        },
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(line[4:])[1]["out"]
    lines = out[out.index("JAX ran out of memory (jupyter-gpumem doctor)") :].splitlines()
    # the call's place is program_budget's (cell [2] line 1 where JAX is an installed package)
    at = next(i for i, x in enumerate(lines) if x.startswith("Live at the peak of blow ("))
    assert "`%gpumem peak blow(...)`" in lines[at + 1]
    assert at < lines.index("Allocator settings in effect:")
    # The same report as a value, through the package's public face.
    shown = json.loads(line[4:])[2]["out"].splitlines()
    assert shown == [f"PROGRAM blow (cell [2] line 1) {2**48}", "NOT OOM None"], shown


def _scan_twice_script() -> str:
    """Notebook 07's programs (this module's ``layer``, ``scan_loss`` and
    ``checkpointed_scan_loss``) as a script: with "fresh" it compiles only the checkpointed
    gradient's peak; otherwise ``scan_loss``'s first, then with "cleared" empties JAX's caches."""
    functions = "\n".join(inspect.getsource(f) for f in (layer, scan_loss, checkpointed_scan_loss))
    return (
        "import sys\nimport jax, jax.numpy as jnp\nimport jupyter_gpumem\n\n"
        + functions
        + "\nws, seq = jnp.ones((32, 256, 256)) * 0.01, jnp.ones((1024, 256))\n"
        'if sys.argv[1] != "fresh":\n    jupyter_gpumem.peak(jax.jit(jax.grad(scan_loss)), ws, seq)\n'
        'if sys.argv[1] == "cleared":\n    jax.clear_caches()\n'
        "report = jupyter_gpumem.peak(jax.jit(jax.grad(checkpointed_scan_loss)), ws, seq)\n"
        'print("JITTED", hasattr(jax.lax.dynamic_index_in_dim, "lower"))\n'
        "for row in report.lines_by_source:\n"
        '    print("ROW", row.where, row.size, ",".join(b.op_name for b in row.buffers))\n'
    )


@pytest.mark.parametrize("before", ["fresh", "after_loss", "cleared"])
def test_the_checkpointed_scan_names_loss_s_line_only_for_a_slicing_traced_by_the_first_scan(tmp_path, before):
    """Notebook 07's programs, each run in a fresh interpreter: the checkpointed gradient's peak
    names a line of ``scan_loss``, which it does not run, only after ``scan_loss``'s gradient was
    compiled first, and then only for the scan's per-step slicing (``jax.lax.dynamic_index_in_dim``,
    a jitted function whose trace JAX caches with its first caller's source lines);
    ``jax.clear_caches()`` takes the row away, as does a fresh interpreter. Where the installed
    JAX's ``dynamic_index_in_dim`` is a plain function (0.4.38 to 0.9.2; jitted from 0.10), no
    trace is shared and no line of ``scan_loss`` is named; releases before 0.8 name a line
    without its function."""
    import subprocess
    import sys

    script = _scan_twice_script()
    line_of = {text.strip(): n for n, text in enumerate(script.splitlines(), 1)}
    (tmp_path / "scan_twice.py").write_text(script)
    proc = subprocess.run(
        [sys.executable, "scan_twice.py", before],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": pythonpath()},
    )
    rows = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    assert rows, proc.stdout[-3000:] + proc.stderr[-3000:]
    checkpointed = line_of["h, _ = jax.lax.scan(jax.checkpoint(layer), x, w)"]
    assert re.match(rf"scan_twice\.py:{checkpointed}( in checkpointed_scan_loss)? ", rows[0]), rows[0]
    first_scan = line_of["h, _ = jax.lax.scan(layer, x, w)"]
    from_loss = [r for r in rows if re.match(rf"scan_twice\.py:{first_scan}( in scan_loss)? ", r)]
    if before != "after_loss" or "JITTED False" in proc.stdout:
        assert from_loss == [], rows
        return
    assert len(from_loss) == 1 and from_loss[0].startswith(f"scan_twice.py:{first_scan} in scan_loss "), rows
    ops = from_loss[0].rsplit(" ", 1)[1].split(",")
    assert ops and all(op.endswith("/jit(dynamic_index_in_dim)/dynamic_slice") for op in ops), ops
