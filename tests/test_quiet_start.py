"""The extension adds nothing to what JAX prints: checking a setting does not load jaxlib's C++.

jax/__init__.py (jax-ml/jax at jax-v0.10.2 and jax-v0.11.0) opens with
``os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')`` "before any logging happens". jaxlib's
extension (``jaxlib/xla_client.py``: ``from jaxlib import _jax``) loaded before that logs at
INFO for the whole process, and XLA's ``pjrt_client.cc`` then prints ``PjRt-IFRT device count``
lines at JAX's first operation. Settings are checked with JAX's option generator; it is compiled
from ``jaxlib/xla_client.py``'s source so that the extension stays unloaded until JAX loads it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from jupyter_gpumem.sources import jax_options

_SHELL = """
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
"""

_FIRST_OP = """
assert shell.run_cell("import jax.numpy as jnp; x = (jnp.ones(3) + 1).block_until_ready()").success
"""

WITH_EXTENSION = (
    _SHELL
    + """
shell.run_line_magic("load_ext", "jupyter_gpumem")
assert shell.run_cell("%gpumem preallocate off").success
"""
    + _FIRST_OP
)

PLAIN_JAX = (
    _SHELL
    + """
import os
os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
"""
    + _FIRST_OP
)

# glog's prefix: severity, date, time, thread id. The rest of a line is what was said.
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", re.M)


def _stderr(script: str, log_level: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_", "JAX_"))}
    if log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = log_level
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return _GLOG_PREFIX.sub("", proc.stderr)


@pytest.mark.parametrize("log_level", [None, "0"], ids=["TF_CPP_MIN_LOG_LEVEL-unset", "TF_CPP_MIN_LOG_LEVEL-0"])
def test_a_setting_adds_nothing_to_what_jax_prints_at_its_first_operation(log_level):
    assert _stderr(WITH_EXTENSION, log_level) == _stderr(PLAIN_JAX, log_level)


def test_plain_jax_with_the_log_level_unset_prints_nothing_here():
    # The comparison above could pass with both printing the lines; on CPU JAX, plain JAX is silent.
    assert "PjRt-IFRT" not in _stderr(PLAIN_JAX, None)


@pytest.mark.jax_versions
def test_checking_settings_and_status_leave_jaxlib_s_extension_unloaded():
    script = _SHELL + textwrap.dedent("""
        import sys
        shell.run_line_magic("load_ext", "jupyter_gpumem")
        assert shell.run_cell("%gpumem preallocate off fraction .5 allocator cuda_async async-prealloc 1GiB").success
        assert shell.run_cell("%gpumem status").success
        assert shell.run_cell("%gpumem reset").success
        print("LOADED=" + ",".join(m for m in ("jax", "jaxlib._jax", "jaxlib.xla_client") if m in sys.modules))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_", "JAX_"))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED=\n" in proc.stdout


_ENVIRONMENTS = [
    {},
    {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_CLIENT_MEM_FRACTION": ".4",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "CUDA_ASYNC",
    },
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "FALSE", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"},
    {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_malloc_async"},
    {"XLA_CLIENT_MEM_FRACTION": ".5", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".6"},
    {"XLA_CLIENT_MEM_FRACTION": "abc"},
    {"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": "64", "XLA_PYTHON_CLIENT_ABORT_COLLECTIVES_ON_FAILURE": "1"},
    {"XLA_PYTHON_CLIENT_USE_TFRT_GPU_CLIENT": "x"},
]


def _outcome(generate) -> tuple[str, object]:
    try:
        return "options", dict(generate())
    except ValueError as err:
        return "rejected", str(err)


@pytest.mark.jax_versions
@pytest.mark.parametrize("env", _ENVIRONMENTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "empty")
def test_the_generator_from_source_answers_as_jaxlib_s_own(monkeypatch, env):
    from jaxlib import xla_client  # this test process may load the extension: it compares with it

    for var in [k for k in os.environ if k.startswith("XLA_")]:
        monkeypatch.delenv(var)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    jaxlib_s = _outcome(xla_client.generate_pjrt_gpu_plugin_options)
    ours = ("options", jax_options.jax_gpu_options(env)) if jaxlib_s[0] == "options" else None
    if ours is None:
        with pytest.raises(ValueError) as err:
            jax_options.jax_gpu_options(env)
        ours = ("rejected", str(err.value))
    assert ours == jaxlib_s


def test_a_generator_that_needs_more_of_its_module_is_not_compiled_alone(tmp_path):
    source = tmp_path / "xla_client.py"
    source.write_text(
        textwrap.dedent("""
        import os
        _ALLOWED = ("default", "bfc")   # a literal: kept
        _LOADED = object()              # not a literal: left out
        def generate_pjrt_gpu_plugin_options():
            assert _LOADED is not None
            return {"allocator": os.getenv("XLA_PYTHON_CLIENT_ALLOCATOR", "default")}
    """)
    )
    assert jax_options.generator_from_source(str(source)) is None


def test_module_constants_the_generator_reads_are_compiled_with_it(tmp_path):
    source = tmp_path / "xla_client.py"
    source.write_text(
        textwrap.dedent("""
        import os
        _ALLOWED = ("default", "bfc")
        def generate_pjrt_gpu_plugin_options() -> "_NameValueMapping":
            allocator = os.getenv("XLA_PYTHON_CLIENT_ALLOCATOR", "default")
            if allocator not in _ALLOWED:
                raise ValueError(allocator)
            return {"allocator": allocator}
    """)
    )
    assert jax_options.generator_from_source(str(source))() == {"allocator": "default"}
