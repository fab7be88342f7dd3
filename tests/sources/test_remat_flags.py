"""Turning the remat pass off in a JAX that then drops the passes XLA_FLAGS disabled (jax#37391).

Source: jax/_src/compiler.py at jax-v0.11.0 assigns
``debug_options.xla_disable_hlo_passes = "rematerialization"`` when
``jax_compiler_enable_remat_pass`` is False; commit ce0a773 ("Don't overwrite XLA_FLAGS-disabled
HLO passes when disabling the remat pass", fixes jax#37391) appends instead, and JAX's
CHANGELOG.md on main lists it under the release after 0.11.0.
https://github.com/jax-ml/jax/blob/jax-v0.11.0/jax/_src/compiler.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jupyter_gpumem.settings.effective import disabled_passes, remat_flags_problem
from jupyter_gpumem.sources import jax_remat

pytestmark = pytest.mark.jax_versions

FLAGS = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1 --xla_disable_hlo_passes=algsimp,cse"}


def test_remat_off_in_an_affected_jax_names_the_passes_that_run_again():
    text = remat_flags_problem(False, FLAGS, replaces=True)
    assert text == (
        "jax_compiler_enable_remat_pass=False makes the installed JAX replace XLA_FLAGS' "
        "--xla_disable_hlo_passes, so algsimp, cse run again (jax#37391, fixed after JAX 0.11.0). "
        "Instead, leave remat on and add rematerialization to that XLA_FLAGS list, before JAX's "
        "backend starts."
    )


@pytest.mark.parametrize(
    "remat, env, replaces",
    [
        pytest.param(False, FLAGS, False, id="fixed-jax"),
        pytest.param(True, FLAGS, True, id="remat-on"),
        pytest.param(None, FLAGS, True, id="jax-not-imported"),
        pytest.param(False, {}, True, id="no-xla-flags"),
        pytest.param(False, {"XLA_FLAGS": "--xla_disable_hlo_passes=rematerialization"}, True, id="only-remat"),
        pytest.param(False, FLAGS, None, id="unknown-jax"),
    ],
)
def test_no_remat_warning_when_nothing_is_lost(remat, env, replaces):
    assert remat_flags_problem(remat, env, replaces) is None


def test_disabled_passes_are_read_from_every_flag():
    env = {"XLA_FLAGS": "--xla_disable_hlo_passes=a, --foo=1 --xla_disable_hlo_passes=b,c"}
    assert disabled_passes(env) == ["a", "b", "c"]


def test_release_boundary_is_the_last_affected_release():
    assert jax_remat.REMAT_OVERWRITE_LAST_AFFECTED == (0, 11, 0)
    assert jax_remat.release_tuple("0.11.0") <= jax_remat.REMAT_OVERWRITE_LAST_AFFECTED
    assert not jax_remat.release_tuple("0.11.1") <= jax_remat.REMAT_OVERWRITE_LAST_AFFECTED


_PROBE = """
import json, jax
from jax._src import compiler
jax.config.update("jax_compiler_enable_remat_pass", False)
options = compiler.get_compile_options(num_replicas=1, num_partitions=1)
print(json.dumps(options.executable_build_options.debug_options.xla_disable_hlo_passes))
"""


def test_detection_agrees_with_what_the_installed_jax_compiles_with():
    pytest.importorskip("jax")
    replaces = jax_remat.remat_off_replaces_disabled_passes()
    assert replaces is not None
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **FLAGS}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    passes = json.loads(out.stdout.strip().splitlines()[-1]).split(",")
    assert ("algsimp" not in passes) is replaces
    assert "rematerialization" in passes
