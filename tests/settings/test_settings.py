"""%gpumem settings against the real (CPU) JAX, each in a fresh interpreter.

JAX reads its variables once per process, so every scenario runs in its own Python with an
IPython InteractiveShell that loads the extension and runs magics as a notebook would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.jax_versions

_PRELUDE = '''
import contextlib, io, json, os, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jupyter_gpumem")

def cell(source):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        result = shell.run_cell(source)
    error = result.error_in_exec or result.error_before_exec
    return {"ok": result.success, "out": out.getvalue(), "error": str(error or "")}

def allocator_env():
    return {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "TF_CUDA", "TF_GPU", "JAX_COMPILER"))}

def jax_reads():
    """What JAX's own option generator makes of the real os.environ now."""
    from jaxlib.xla_client import generate_pjrt_gpu_plugin_options
    return dict(generate_pjrt_gpu_plugin_options())

R = {}
'''


def _run_child(body: str, env: dict[str, str] | None = None) -> dict:
    """Run ``body`` after the prelude in a new interpreter; return its ``R`` dict."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_", "JAX_"))}
    child_env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    child_env.update(env or {})
    script = _PRELUDE + body + '\nprint("RESULT=" + json.dumps(R, default=str))\n'
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=child_env, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT=")]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1][len("RESULT=") :])


# Each scenario needs its own interpreter; two run at a time so the module stays quick.
_pool: ThreadPoolExecutor | None = None
_started: dict[tuple, Future] = {}
_declared: list[tuple] = []


def scenario(body: str, env: dict[str, str] | None = None) -> tuple:
    key = (body, tuple(sorted((env or {}).items())))
    _declared.append(key)
    return key


@pytest.fixture(scope="module", autouse=True)
def _children():
    global _pool
    _pool = ThreadPoolExecutor(max_workers=2)
    yield
    _pool.shutdown(cancel_futures=True)
    _pool = None
    _started.clear()


def run_in_fresh_kernel(key: tuple) -> dict:
    """The result of a declared scenario, starting the scenarios not yet started two at a time."""
    assert _pool is not None
    if key not in _started:
        for item in [key] + [k for k in _declared if k != key]:
            if item not in _started:
                _started[item] = _pool.submit(_run_child, item[0], dict(item[1]))
    return _started[key].result()


WRITTEN_VARIABLES = scenario("""
R["cell"] = cell("%gpumem preallocate off fraction .4 allocator cuda_async async-prealloc 2GiB")
R["options"] = jax_reads()
R["env"] = allocator_env()
""")


def test_written_variables_are_what_jax_reads_back():
    r = run_in_fresh_kernel(WRITTEN_VARIABLES)
    assert r["cell"]["ok"], r["cell"]
    assert r["options"]["preallocate"] is False
    assert r["options"]["memory_fraction"] == 0.4
    assert r["options"]["allocator"] == "cuda_async"
    assert r["env"]["TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"] == str(2 * 2**30)


ONE_LINE = scenario("""
R["cell"] = cell("%gpumem preallocate off fraction 50%")
""")


def test_settings_print_one_line_saying_when_they_take_effect():
    r = run_in_fresh_kernel(ONE_LINE)
    lines = r["cell"]["out"].strip().splitlines()
    assert len(lines) == 1
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in lines[0] and "when JAX's backend starts" in lines[0]


PYTHON_CONFIGURE = scenario("""
import jupyter_gpumem
jupyter_gpumem.configure(preallocate=False, fraction=0.4)
R["options"] = jax_reads()
""")


def test_python_configure_writes_the_same_variables_as_the_magic():
    r = run_in_fresh_kernel(PYTHON_CONFIGURE)
    assert r["options"]["preallocate"] is False and r["options"]["memory_fraction"] == 0.4


FRACTION_AFTER_START = scenario("""
cell("import jax.numpy as jnp; jnp.ones(4).sum().block_until_ready()")
before = allocator_env()
R["cell"] = cell("%gpumem fraction .5")
R["unchanged"] = allocator_env() == before
""")


def test_fraction_after_backend_start_is_refused():
    r = run_in_fresh_kernel(FRACTION_AFTER_START)
    assert r["cell"]["ok"] is False  # the cell fails, so "Run All" stops
    assert "UsageError" in r["cell"]["out"] and "Traceback" not in r["cell"]["out"]
    assert "0.75" in r["cell"]["error"]  # what is in effect
    assert "restart the kernel" in r["cell"]["error"] and "once" in r["cell"]["error"]
    assert r["unchanged"]


SAME_AFTER_START = scenario("""
cell("%gpumem fraction .4")
cell("import jax.numpy as jnp; jnp.ones(4).sum().block_until_ready()")
R["cell"] = cell("%gpumem fraction 40% preallocate on")
""")


def test_same_fraction_after_backend_start_is_a_quiet_no_op():
    r = run_in_fresh_kernel(SAME_AFTER_START)
    assert r["cell"] == {"ok": True, "out": "", "error": ""}


REMAT_AFTER_START = scenario("""
cell("import jax.numpy as jnp; jnp.ones(4).sum().block_until_ready()")
R["cell"] = cell("%gpumem remat off")
import jax
R["remat"] = jax.config.jax_compiler_enable_remat_pass
""")


def test_remat_off_after_start_updates_jax_config_and_says_compiled_programs_were_cleared():
    r = run_in_fresh_kernel(REMAT_AFTER_START)
    assert r["cell"]["ok"] and r["remat"] is False
    assert "JAX's compiled programs were cleared (jax.clear_caches())" in r["cell"]["out"]


# Spies on jax._src.compiler.get_compile_options, where JAX reads the switch
# (``if not config.enable_remat_opt_pass.value: debug_options.xla_disable_hlo_passes =
# "rematerialization"``, jax/_src/compiler.py, jax-v0.4.38 to jax-v0.11.0; pxla calls it through
# the module, ``compiler.get_compile_options(...)``). The switch is not in the jit cache key
# (``bool_state`` without ``include_in_jit_key``, jax/_src/config.py, the same versions).
REMAT_RERUN = scenario("""
import jax, jax.numpy as jnp
from jax._src import compiler
passes = []
_options = compiler.get_compile_options
def _spy(*args, **kwargs):
    options = _options(*args, **kwargs)
    passes.append(str(options.executable_build_options.debug_options.xla_disable_hlo_passes))
    return options
compiler.get_compile_options = _spy
shell.user_ns.update(jnp=jnp, f=jax.jit(lambda x: jnp.sin(x) * 2))
R["run"] = cell("y = f(jnp.ones(8)); y.block_until_ready()")
R["first"] = list(passes)
R["magic"] = cell("%gpumem remat off")
del passes[:]
R["again"] = cell("y = f(jnp.ones(8)); y.block_until_ready()")
R["rerun"] = list(passes)
""")


@pytest.mark.jax_versions
def test_a_jitted_function_run_again_after_remat_off_compiles_again_without_the_pass():
    """Before: the re-run took the program compiled with remat on from the jit cache, and
    compiled nothing."""
    r = run_in_fresh_kernel(REMAT_RERUN)
    assert r["run"]["ok"] and r["magic"]["ok"] and r["again"]["ok"]
    assert r["first"] and "rematerialization" not in r["first"]
    assert r["rerun"] and all(p == "rematerialization" for p in r["rerun"])


BAD_FRACTION = scenario("""
before = dict(os.environ)
R["cell"] = cell("%gpumem preallocate off fraction 1.5")
R["unchanged"] = dict(os.environ) == before
""")


def test_bad_value_changes_nothing():
    r = run_in_fresh_kernel(BAD_FRACTION)
    assert r["cell"]["ok"] is False and "(0, 1]" in r["cell"]["error"]
    assert r["unchanged"]


BAD_ALLOCATOR = scenario("""
before = dict(os.environ)
R["cell"] = cell("%gpumem preallocate off allocator nonsense")
R["unchanged"] = dict(os.environ) == before
""")


def test_allocator_jax_rejects_changes_nothing_and_names_valid_values():
    r = run_in_fresh_kernel(BAD_ALLOCATOR)
    assert r["cell"]["ok"] is False
    assert "bfc" in r["cell"]["error"] and "cuda_async" in r["cell"]["error"]
    assert r["unchanged"]


OLD_FRACTION_NAME_SET = scenario(
    """
R["cell"] = cell("%gpumem fraction .3")
R["env"] = allocator_env()
R["options"] = jax_reads()
""",
    env={"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"},
)


def test_fraction_never_leaves_both_names_set():
    r = run_in_fresh_kernel(OLD_FRACTION_NAME_SET)
    names = {"XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"} & set(r["env"])
    assert len(names) == 1
    assert r["options"]["memory_fraction"] == 0.3


CUDA_MALLOC_ASYNC = scenario("""
R["cell"] = cell("%gpumem allocator cuda_malloc_async")
R["env"] = allocator_env()
""")


def test_cuda_malloc_async_is_written_as_cuda_async_with_a_note():
    r = run_in_fresh_kernel(CUDA_MALLOC_ASYNC)
    assert r["env"]["XLA_PYTHON_CLIENT_ALLOCATOR"] == "cuda_async"
    assert "TF_GPU_ALLOCATOR" in r["cell"]["out"]


ADDRESS = scenario("""
os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] = "address"
try:
    jax_reads()
    R["jax_accepts"] = True
except ValueError:
    R["jax_accepts"] = False
del os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"]
R["cell"] = cell("%gpumem allocator address")
R["env"] = allocator_env()
""")


def test_address_allocator_follows_what_the_installed_jax_accepts():
    r = run_in_fresh_kernel(ADDRESS)
    assert r["cell"]["ok"] is r["jax_accepts"]
    if r["jax_accepts"]:
        assert r["env"]["XLA_PYTHON_CLIENT_ALLOCATOR"] == "address"
    else:
        assert "XLA_PYTHON_CLIENT_ALLOCATOR" not in r["env"]
        assert "valid: default, bfc" in r["cell"]["error"]


HEAVY = (
    "jax",
    "jaxlib",
    "pynvml",
    "plotly",
    "ipywidgets",
    "jupyter_gpumem.doctor.after_cell",
    "jupyter_gpumem.doctor.report",
    "jupyter_gpumem.doctor.arrays",
    "jupyter_gpumem.settings.apply",
    "jupyter_gpumem.sources.jax_backend",
)
LOADING = scenario(f"""
R["loaded"] = [m for m in {HEAVY!r} if m in sys.modules]
R["magic"] = "gpumem" in shell.magics_manager.magics["line"]
cell("x = 1 + 1")
R["after_a_plain_cell"] = [m for m in {HEAVY!r} if m in sys.modules]
""")


def test_loading_imports_no_heavy_modules():
    # Neither loading nor a cell without JAX pulls in JAX, NVML, plotting or the doctor's work
    # modules (only its light hooks module loads).
    r = run_in_fresh_kernel(LOADING)
    assert r == {"loaded": [], "magic": True, "after_a_plain_cell": []}


RESET = scenario(
    """
cell("%gpumem preallocate off fraction .3")
R["cell"] = cell("%gpumem reset")
R["env"] = allocator_env()
""",
    env={"XLA_PYTHON_CLIENT_PREALLOCATE": "true"},
)


def test_reset_restores_what_the_environment_held():
    r = run_in_fresh_kernel(RESET)
    assert r["cell"]["ok"]
    assert r["env"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}


RESET_AFTER_START = scenario("""
cell("%gpumem preallocate off")
cell("import jax.numpy as jnp; jnp.ones(4).block_until_ready()")
R["cell"] = cell("%gpumem reset")
R["env"] = allocator_env()
""")


def test_reset_after_backend_start_is_refused_and_changes_nothing():
    r = run_in_fresh_kernel(RESET_AFTER_START)
    assert r["cell"]["ok"] is False and "restart the kernel" in r["cell"]["error"]
    assert r["env"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


SOURCES = scenario(
    """
cell("%gpumem fraction .5")
import jupyter_gpumem
R["sources"] = {s.name: s.source for s in jupyter_gpumem.status().settings}
""",
    env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
)


def test_status_names_each_source():
    r = run_in_fresh_kernel(SOURCES)
    assert r["sources"] == {
        "preallocate": "environment",
        "fraction": "%gpumem",
        "allocator": "JAX default",
        "async_prealloc": "JAX default",
        "remat": "JAX default",
    }


def test_a_traces_recorded_environment_gives_its_settings_not_this_processs(monkeypatch):
    """A replayed OOM shows the settings of the process that was recorded (its header's
    settings.env, as the recorder writes it: tests/data/traces/*.jsonl), whatever this one has."""
    from jupyter_gpumem.settings.effective import recorded_settings

    monkeypatch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    monkeypatch.setenv("JAX_COMPILER_ENABLE_REMAT_PASS", "false")
    states = recorded_settings({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "1.0", "X": 3})
    assert [(s.name, s.shown, s.source) for s in states] == [
        ("preallocate", "off", "recorded"),
        ("fraction", "1", "recorded"),
        ("allocator", "default (bfc)", "JAX default"),
        ("async_prealloc", "not set", "JAX default"),
        ("remat", "on", "JAX default"),
    ]
    remat = recorded_settings({"JAX_COMPILER_ENABLE_REMAT_PASS": "0"})[-1]
    assert (remat.value, remat.source) == (False, "recorded")
