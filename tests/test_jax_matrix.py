"""The JAX version matrix (tests/jax_matrix.py): which releases it runs, which tests, and where
their environments are kept."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import jax_matrix  # noqa: E402


def release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read as text: tomllib needs Python 3.11


def declared_floor() -> str:
    (floor,) = re.findall(r'^\s*"jax>=([0-9.]+)"', PYPROJECT, re.M)
    return floor


def test_the_matrix_starts_at_the_floor_pyproject_declares():
    assert jax_matrix.JAX_VERSIONS[0] == declared_floor()


def test_the_matrix_holds_one_release_per_minor_after_the_floor_in_order():
    versions = [release(v) for v in jax_matrix.JAX_VERSIONS]
    assert versions == sorted(set(versions))
    minors = [v[:2] for v in versions[1:]]
    assert len(minors) == len(set(minors)), jax_matrix.JAX_VERSIONS


def test_the_marker_is_registered_where_pytest_reads_it(pytestconfig):
    assert any(m.startswith(f"{jax_matrix.MARKER}:") for m in pytestconfig.getini("markers"))


def test_the_matrix_collects_the_files_that_name_the_marker_and_no_others():
    files = jax_matrix.marked_files()
    assert "tests/sources/test_jax_start.py" in files
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        named = re.search(r"\bmark\.jax_versions\b", path.read_text()) is not None
        assert (str(path.relative_to(ROOT)) in files) == named, path.name


def test_an_environment_is_kept_per_release_and_requirements(monkeypatch):
    key = jax_matrix.environment_key("0.7.2")
    assert key.startswith("jax-0.7.2-") and key != jax_matrix.environment_key("0.6.2")
    monkeypatch.setattr(jax_matrix, "TEST_PACKAGES", jax_matrix.TEST_PACKAGES + ("numpy<2",))
    assert jax_matrix.environment_key("0.7.2") != key


@pytest.mark.parametrize(
    "output, line",
    [
        ("....\n12 passed in 3.10s\n", "12 passed in 3.10s"),
        ("F.\n=== 1 failed, 1 passed in 2.00s ===\n", "1 failed, 1 passed in 2.00s"),
        ("", "(no output)"),
    ],
)
def test_each_release_is_summed_up_by_pytest_s_last_line(output, line):
    assert jax_matrix.last_line(output) == line
