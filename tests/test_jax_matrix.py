"""The JAX version matrix (tests/jax_matrix.py): which releases it runs, which tests, and where
their environments are kept."""

from __future__ import annotations

import os
import re
import subprocess
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


def test_the_oldest_release_runs_every_marked_test_and_the_others_share_them():
    releases = [v for v in jax_matrix.JAX_VERSIONS if v != "0.10.2"]
    shares = jax_matrix.plan(list(reversed(releases)))
    assert list(shares) == releases and shares[releases[0]] is None
    assert [shares[v] for v in releases[1:]] == [f"{i}/5/2" for i in range(5)]
    assert set(jax_matrix.plan(releases, full=True).values()) == {None}
    # with no more than SHARED_BY after the oldest, sharing would save nothing: each runs all
    assert set(jax_matrix.plan(["0.4.38", "0.8.3", "0.9.2"]).values()) == {None}


def test_each_marked_test_falls_to_two_of_the_five_sharing_releases_and_each_gets_its_part():
    ids = [f"tests/doctor/test_oom.py::test_case[{n}]" for n in range(2000)]
    count = [0] * 5
    for test_id in ids:
        picked = [i for i in range(5) if jax_matrix.in_share(test_id, f"{i}/5/2")]
        assert len(picked) == 2 and tuple(picked) == jax_matrix.shares_of(test_id, 5, 2)
        for i in picked:
            count[i] += 1
    assert all(700 <= c <= 900 for c in count), count  # two fifths of 2,000 is 800


def test_a_test_falls_to_the_same_releases_in_every_process():
    test_id = "tests/test_do_no_harm.py::test_a_debug_print_training_loop_does_not_hang"
    code = f"import sys; sys.path.insert(0, 'tests'); import jax_matrix; print(jax_matrix.shares_of({test_id!r}, 5, 2))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env={"PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {str(jax_matrix.shares_of(test_id, 5, 2))}


def test_a_sharing_release_collects_exactly_its_share_of_the_marked_tests():
    path = "tests/settings/test_cuda_async_limits.py"

    def collected(share: str | None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != jax_matrix.SHARE_VARIABLE}
        if share:
            env[jax_matrix.SHARE_VARIABLE] = share
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "jax_versions",
                path,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        ).stdout
        return [line for line in out.splitlines() if line.startswith(path + "::")]

    whole = collected(None)
    assert len(whole) >= 20
    share = collected("3/5/2")
    assert share == [t for t in whole if 3 in jax_matrix.shares_of(t, 5, 2)] and 0 < len(share) < len(whole)
