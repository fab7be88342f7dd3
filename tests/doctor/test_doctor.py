"""%gpumem arrays, free, cells, estimate, doctor, track() and defragment() on CPU JAX.

One fresh interpreter runs an IPython shell through a short session and reports what it saw
as JSON; the tests below each check one behaviour of that session. Argument errors are
checked in this process, without JAX.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from child_env import ipython_dir, pythonpath
from ipython_script import run_script

from jupyter_gpumem import doctor

pytestmark = pytest.mark.jax_versions

SESSION = r"""
cell("import jax, jax.numpy as jnp\nimport jupyter_gpumem")
cell("a = jnp.ones((256, 256))\nb = a\nparams = {'w': jnp.zeros((100,), jnp.int8)}")
cell("jnp.arange(1000.0)")
from jupyter_gpumem import doctor
from jupyter_gpumem.doctor.session import SESSION
recs = doctor.live_arrays(ip)
out["records"] = [r.to_json() | {"history_only": r.history_only} for r in recs]
out["arrays_by_dtype"] = str(doctor.magic_arrays(["--by", "dtype"], ip))
out["arrays_top1"] = str(doctor.magic_arrays(["--top", "1"], ip))
fr = doctor.magic_free(["--history"], ip)
out["free"] = {"before": fr.before, "after": fr.after, "freed": fr.freed, "measure": fr.measure, "text": str(fr)}
out["after_free_names"] = sorted(n for r in doctor.live_arrays(ip) for n in r.names)

cell("%gpumem cells on")
out["cells_line"] = cell("c = jnp.ones((256, 256))")
out["cells_second_line"] = cell("c2 = jnp.ones((8,))")
cell("%gpumem cells off")
out["cells_off_line"] = cell("d = jnp.ones(8)")

import jupyter_gpumem, jax.numpy as jnp
with jupyter_gpumem.track() as t:
    e = jnp.ones(1024)
out["track"] = t.to_json()

cell("f = jax.jit(lambda x: x @ x)")
est = doctor.magic_estimate(["f(a)"], ip)
out["estimate"] = {"verdict": est.verdict, "output": est.memory.output_bytes, "argument": est.memory.argument_bytes,
                   "jitted": est.memory.jitted, "text": str(est)}

def estimated(line):
    rep = doctor.magic_estimate([line], ip)
    return {"verdict": rep.verdict, "needed": rep.needed, "free": rep.total_free, "text": str(rep)}

out["estimate_ones"] = estimated("jnp.ones((1 << 20,))")
out["estimate_256tib"] = estimated("jnp.zeros((2**46,), jnp.float32)")
out["estimate_mixed"] = estimated("jnp.reshape(a, (65536,), order='C')")
cell("def scaled(x, k, *, by):\n    return jnp.tile(x, k) * by")
out["estimate_kw"] = estimated("scaled(a, [2, 3], by=jnp.float32(2))")

cell("tree = {'p': jnp.full((64,), 3.0), 'q': jnp.arange(4)}\nold = tree['p']")
cell("tree, summary = jupyter_gpumem.defragment(tree)")
ns = ip.user_ns
out["defrag"] = {"moved": ns["summary"].arrays_moved, "bytes": ns["summary"].bytes_moved,
                 "old_deleted": ns["old"].is_deleted(), "new_sum": float(ns["tree"]["p"].sum()),
                 "other_names": list(ns["summary"].other_names), "text": str(ns["summary"])}

before = (SESSION.doctor, SESSION.cells)
out["usage"] = {
    "by": usage("arrays --by colour"),
    "top": usage("arrays --top 0"),
    "free": usage("free --all"),
    "estimate_not_call": usage("estimate a"),
    "estimate_name": usage("estimate nosuch(a)"),
    "doctor": usage("doctor maybe"),
    "allocator": usage("allocator cuda-async"),
}
out["state_unchanged"] = before == (SESSION.doctor, SESSION.cells)

cell("ties = [jnp.ones((3,), jnp.float32), jnp.ones((3,), jnp.int32), jnp.ones((5,)), jnp.ones((3,), jnp.float32)]")
from jupyter_gpumem.doctor import arrays as listing
found = listing.census(ip)
out["ranked"] = [(r.device_bytes, r.shape, list(r.names)) for r in found.records]
out["counted_as_alike"] = [(id(r), n) for r, n in found.counted] == [
    (id(r), n) for r, n in listing.alike(found.records)
]
"""


@pytest.fixture(scope="module")
def session() -> dict:
    return run_script(SESSION, timeout=180)


def record(session: dict, shape: list) -> dict:
    """The named record of that shape. On CPU, printing an array makes JAX keep a second,
    unnamed array object on the same buffer (its host view); it is listed too."""
    return next(r for r in session["records"] if r["shape"] == shape and r["names"])


def test_two_names_for_one_buffer_are_one_record_with_both_names(session):
    rec = record(session, [256, 256])
    assert sorted(rec["names"]) == ["a", "b"]
    assert rec["nbytes"] == 256 * 256 * 4 and rec["bytes_per_device"] == {"0": 262144}
    assert len([r for r in session["records"] if r["shape"] == [256, 256]]) == 1


def test_names_inside_containers_are_shown_with_their_path(session):
    assert record(session, [100])["names"] == ["params['w']"]


def test_arrays_are_attributed_to_the_cell_that_made_them(session):
    assert record(session, [256, 256])["cell"] == 2
    assert record(session, [1000])["cell"] == 3


def test_an_array_shown_as_output_is_held_only_by_history(session):
    rec = record(session, [1000])
    assert rec["history_only"] is True
    assert "Out[3]" in rec["names"] and "_3" in rec["names"]


def test_arrays_by_dtype_groups_bytes(session):
    text = session["arrays_by_dtype"]
    assert "float32" in text and "int8" in text and "grouped by dtype" in text


def test_arrays_top_limits_the_rows(session):
    lines = session["arrays_top1"].splitlines()
    assert "1 shown" in lines[0] and len(lines) == 3  # summary, header, one row


def test_free_history_frees_the_output_array_and_says_the_measure(session):
    fr = session["free"]
    # float32[1000], shown as Out[3]: 4000 bytes, once, although CPU JAX keeps a second array
    # object on the same buffer once the array was printed (jax_arrays.cpu_buffer_key). Up to
    # JAX 0.9.2 asking for the buffer's address would itself add an array the user sees, so
    # there the two objects are counted one by one: 8000 bytes.
    import jax

    counted_once = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 10)
    assert fr["freed"] == (4000 if counted_once else 8000)
    assert fr["measure"] == "live JAX array bytes (no allocator statistics here)"
    freed_text = "Freed 3.91 KiB: " if counted_once else "Freed 7.81 KiB: "
    assert fr["text"].startswith(freed_text) and ", counted as live JAX array bytes (no allocator" in fr["text"]
    assert not any(n.startswith(("Out", "_")) for n in session["after_free_names"])


def test_cells_on_prints_a_line_with_what_cpu_can_measure(session):
    line = session["cells_line"].strip()
    assert line.startswith("gpumem: cell ") and "live arrays +256.00 KiB" in line
    assert "peak and pool growth are not measured" in line


def test_cells_on_says_the_cpu_caveat_once_per_kernel(session):
    line = session["cells_second_line"].strip()
    assert re.fullmatch(
        r"gpumem: cell (\d+): live arrays \+32 B \(now [\d.]+ KiB\); allocated at cell \[\1\] line 1 \(32 B\)", line
    ), line


def test_cells_off_prints_nothing(session):
    assert session["cells_off_line"] == ""


def test_track_measures_live_array_bytes_on_cpu(session):
    t = session["track"]
    assert (t["measure"], t["delta"], t["peak_rise"], t["pool_growth"]) == ("live_arrays", 4096, None, None)


def test_estimate_compiles_without_running_and_reports_sizes(session):
    est = session["estimate"]
    assert (est["argument"], est["output"], est["jitted"]) == (262144, 262144, True)
    assert est["verdict"] == "fits" and "host memory available" in est["text"]


def test_estimate_treats_a_shape_tuple_as_static_and_answers_4_mib(session):
    est = session["estimate_ones"]
    assert (est["verdict"], est["needed"]) == ("fits", 4 * 2**20)
    first = est["text"].splitlines()[0]
    assert first.startswith("jnp.ones((1 << 20,)): fits: needs 4.00 MiB, ") and first.endswith(
        " (not jitted: estimated as jax.jit of it, its array arguments traced)"
    )


def test_estimate_of_256_tib_does_not_fit_and_says_needed_against_free(session):
    est = session["estimate_256tib"]
    assert (est["verdict"], est["needed"]) == ("does not fit", 2**46 * 4)
    first = est["text"].splitlines()[0]
    assert re.fullmatch(
        r"jnp\.zeros\(\(2\*\*46,\), jnp\.float32\): does not fit: needs 256\.00 TiB, "
        r"only [\d.]+ [KMG]iB free .*",
        first,
    ), first
    assert 0 < est["free"] < 2**44


def test_estimate_traces_array_arguments_and_keeps_the_others(session):
    # a: float32[256, 256] traced; the shape and the order keyword passed as they are; the
    # reshape aliases nothing on the CPU, so it needs its 256 KiB output.
    assert (session["estimate_mixed"]["verdict"], session["estimate_mixed"]["needed"]) == ("fits", 256 * 1024)
    # a list (unhashable, so no static_argnums could take it) bound as it is; a tiled 2 x 3 times
    kw = session["estimate_kw"]
    assert kw["verdict"] == "fits" and kw["needed"] >= 6 * 256 * 1024, kw["text"]


def test_defragment_moves_the_tree_and_keeps_values(session):
    d = session["defrag"]
    assert (d["moved"], d["bytes"], d["new_sum"]) == (2, 64 * 4 + 4 * 4, 192.0)


def test_defragment_deletes_the_old_arrays_and_names_other_holders(session):
    d = session["defrag"]
    assert d["old_deleted"] is True
    assert "old" in d["other_names"]
    assert "These names held the moved arrays and now hold deleted ones: " in d["text"]
    assert "Rebind any that is not the tree you rebound to the result." in d["text"]
    assert "fragmentation cannot be measured" in d["text"]


@pytest.mark.parametrize(
    "key, words",
    [
        ("by", "--by takes one of shape, dtype, cell, name, line, device, got 'colour'"),
        ("top", "--top takes a whole number of rows, 1 or more"),
        ("free", "unknown argument '--all'; valid: --history, --caches, --gc"),
        ("estimate_not_call", "estimate takes a call such as train_step(params, batch)"),
        ("estimate_name", "NameError"),
        ("doctor", "%gpumem doctor takes on or off, got 'maybe'"),
        ("estimate_not_call", "%gpumem estimate takes a call such as"),
        (
            "allocator",
            "allocator 'cuda-async' is not accepted by the installed JAX (did you mean 'cuda_async'?); valid: ",
        ),
    ],
)
def test_bad_arguments_are_usage_errors_naming_valid_values(session, key, words):
    assert words in (session["usage"][key] or "")


def test_bad_arguments_change_nothing(session):
    assert session["state_unchanged"] is True


# --- in this process, without JAX ------------------------------------------------------------


def test_doctor_is_on_by_default():
    assert str(doctor.magic_doctor([], None)) == "gpumem: doctor is on"


def test_arrays_before_jax_starts_say_so_without_starting_it():
    code = textwrap.dedent("""
        import sys
        from jupyter_gpumem import doctor
        print(doctor.magic_arrays([], None).summary(), "jax" in sys.modules)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), **ipython_dir()},
    ).stdout.strip()
    assert out.startswith("JAX's backend has not started") and out.endswith("False")


def test_fix_lines_say_run_for_code_and_do_for_actions_in_words():
    from jupyter_gpumem.doctor.text import action_label

    assert action_label("%gpumem fraction 0.45") == "Run"
    assert action_label("jax.clear_caches()") == "Run"
    assert action_label("Restart the kernel, then run the settings cell first") == "Do"


# --- %gpumem free and a failed cell: a fresh IPython shell (tests/kernel_session.py) ----------

# Where IPython 9.18 on Python 3.11 keeps a failed cell's traceback, each enough to keep the
# frames and a failed function's arrays alive (jax#14934): sys.last_traceback/last_value
# (InteractiveShell._get_exc_info, IPython/core/interactiveshell.py); InteractiveTB.tb
# (AutoFormattedTB.structured_traceback, IPython/core/ultratb.py); last_execution_result's
# error_in_exec.__traceback__ (run_cell_async, interactiveshell.py); after %debug, the
# debugger's curframe_locals (Pdb.forget() leaves it, Python 3.11 Lib/pdb.py). And frame.clear()
# leaves the f_locals snapshot the traceback display read (frame_tp_clear, Objects/frameobject.c).
FAILED_SETUP = """\
import io, sys, weakref, jax, jax.numpy as jnp
refs = {}
def allocate_then_raise(key):
    x = jnp.ones((16 * 2**20,), jnp.float32)  # 64 MiB
    refs[key] = weakref.ref(x)
    raise ValueError("after allocating")
def allocate_then_oom(key):
    x = jnp.ones((16 * 2**20,), jnp.float32)
    refs[key] = weakref.ref(x)
    return jnp.zeros((2**46,), jnp.float32) + x[0]
keep = None
def allocate_keep_then_raise(key):
    global keep
    x = keep = jnp.ones((16 * 2**20,), jnp.float32)
    refs[key] = weakref.ref(x)
    raise ValueError("after allocating")
def gone(key):
    import gc; gc.collect()
    print(refs[key]() is None, len(jax.live_arrays()))"""

FAILED_CELLS = [
    FAILED_SETUP,
    "%gpumem free --gc",  # 1: nothing has failed yet
    "allocate_then_raise('raise')",  # 2
    "gone('raise')",  # 3: alive before free
    "%gpumem free --gc",  # 4
    "gone('raise')",  # 5
    "allocate_then_oom('oom')",  # 6: a real out-of-memory error, with the report
    "%gpumem free",  # 7: all three steps
    "gone('oom')",  # 8
    "allocate_then_raise('debug')",  # 9
    "sys.stdin = io.StringIO('q\\n')\n%debug\nsys.stdin = sys.__stdin__",  # 10
    "%gpumem free --gc",  # 11
    "gone('debug')",  # 12
    "allocate_keep_then_raise('kept')",  # 13
    "%gpumem free --gc",  # 14
    "gone('kept')",  # 15
]


def runtime_error_name() -> str:
    """The class the installed JAX raises for a failed computation: ``jax.errors.JaxRuntimeError``
    names jaxlib's ``XlaRuntimeError`` up to 0.7.2 and is a class of its own, so named, from 0.8
    (read on the CPU wheels of 0.4.38, 0.7.2, 0.8.3 and 0.10.2)."""
    import jax.errors

    return getattr(jax.errors, "JaxRuntimeError", RuntimeError).__name__


@pytest.fixture(scope="module")
def failed_cells(tmp_path_factory) -> list[dict]:
    path = tmp_path_factory.mktemp("failed") / "cells.json"
    path.write_text(json.dumps(FAILED_CELLS))
    script = Path(__file__).parents[1] / "kernel_session.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(path), "--ext"],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath(), **ipython_dir()},
        cwd=path.parent,
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])


def test_free_releases_the_array_a_failed_function_allocated(failed_cells):
    """The exact case: a function allocates 64 MiB, then raises; after %gpumem free it is gone."""
    assert failed_cells[2]["error"] == "ValueError"
    assert failed_cells[3]["out"].split()[0] == "False"  # held by the traceback until then
    assert failed_cells[5]["out"].split() == ["True", "0"]
    out = failed_cells[4]["out"]
    assert out.startswith("Freed 64.00 MiB: 64.00 MiB -> 0 B")
    # A cell ran in between, so the failed cell's result is no longer the shell's last one.
    assert (
        "the last error (ValueError): traceback dropped from sys.last_traceback, the traceback display "
        "(InteractiveTB.tb); 1 frame cleared; its frames held 1 array (64.00 MiB): all freed"
    ) in out


def test_free_releases_the_array_of_a_function_that_ran_out_of_memory(failed_cells):
    assert failed_cells[6]["error"] == runtime_error_name()
    out = failed_cells[7]["out"]
    assert out.startswith("Freed 64.00 MiB: 64.00 MiB -> 0 B")
    assert "the failed cell's result (last_execution_result)" in out and "(64.00 MiB): all freed" in out
    assert failed_cells[8]["out"].split() == ["True", "0"]


def test_free_releases_what_the_debugger_kept_after_debug(failed_cells):
    assert failed_cells[10]["ok"], failed_cells[10]["out"]
    out = failed_cells[11]["out"]
    assert "the debugger's last frame (InteractiveTB.pdb)" in out and "all freed" in out
    assert failed_cells[12]["out"].split() == ["True", "0"]


def test_free_says_what_still_holds_an_array_the_frames_shared(failed_cells):
    """Never a release that did not happen: the array is also a global, and the report says so."""
    out = failed_cells[14]["out"]
    assert out.startswith("Freed 0 B: 64.00 MiB -> 64.00 MiB")
    assert (
        "its frames held 1 array (64.00 MiB): 0 freed (0 B), 1 still alive, held by keep in the namespace of __main__"
        in out
    )
    assert "all freed" not in out
    assert failed_cells[15]["out"].split() == ["False", "1"]


def test_free_with_no_failed_cell_speaks_of_no_error(failed_cells):
    assert re.search(r"^  - garbage: gc\.collect\(\) found \d+ objects$", failed_cells[1]["out"], re.M), failed_cells[
        1
    ]["out"]


def test_arrays_are_largest_first_and_newest_first_among_equals(session):
    """Two float32 and one int32 array of 12 bytes, made between others: one rank (bytes, then
    shape), kept newest first, as JAX lists them; the counts per kind of array are those of the
    listed order."""
    ranked = session["ranked"]
    assert [(b, s) for b, s, _ in ranked] == sorted(((b, s) for b, s, _ in ranked), key=lambda r: (-r[0], r[1]))
    ties = [names for _, _, names in ranked if any(n.startswith("ties") for n in names)]
    assert ties == [["ties[2]"], ["ties[3]"], ["ties[1]"], ["ties[0]"]]
    assert session["counted_as_alike"]
