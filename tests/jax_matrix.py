"""Run the tests marked ``jax_versions`` under every JAX release in ``JAX_VERSIONS``.

    python tests/jax_matrix.py [--versions 0.4.38,0.7.2] [--jobs 2] [pytest args...]

``JAX_VERSIONS`` is the one list of the releases the package is tested on: the floor that
pyproject declares (``jax>=...``, checked by tests/test_jax_matrix.py), then the last release
of each minor that installs on Python 3.11. The main test run covers whatever JAX the
development environment has; this covers the others.

For each release:

1. a virtual environment with ``jax==X jaxlib==X`` and the packages the selected tests import
   (``TEST_PACKAGES``), made once with uv and kept under
   ``~/.cache/jupyter-gpumem/jax-matrix/jax-X-HASH`` (HASH: of the Python version and the
   requirement lines, so a change to either makes a new one; a half-made one is made again);
2. a throwaway environment for this run whose only ``.pth`` puts this repository on the path
   and adds the cached environment as a site directory, so the tests' own subprocesses (run with
   ``sys.executable`` and a bare environment) import this repository's ``jupyter_gpumem`` and
   that release's JAX, and two checkouts can share one cache;
3. ``python -m pytest -m jax_versions`` over the test files that name the marker.

The oldest release runs every marked test. The others share them: each marked test runs under
``SHARED_BY`` (2) of them, the same ones in every run (picked by its id, ``shares_of``), so each
of the five releases between the floor and the development environment's runs two fifths of
them, and every marked test runs under three releases here and once more in the main run.
``--full`` runs every marked test under every release.

Releases run ``--jobs`` at a time (2 by default). Each release's result is one line; a failing
release's output follows it. Exits 1 naming every release that failed.

The release the development environment has is left out (the main test run covers it, with every
test); ``--all`` runs it here too.

Before the releases, the environments of ``IPYTHON_ENVIRONMENTS`` are made in the same cache
(tests/core/test_cell_numbers.py runs its script under each IPython the package allows; the main
test run, after this, finds them with ``ipython_environment``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
MARKER = "jax_versions"

# The floor first (pyproject's jax>=), then the last release of each minor for Python 3.11.
JAX_VERSIONS = ("0.4.38", "0.5.3", "0.6.2", "0.7.2", "0.8.3", "0.9.2", "0.10.2")

# ml_dtypes, which JAX imports on start, as the releases of the matrix knew it: 0.7.0 takes 1.3 to
# 1.7 s to import where 0.5.4 and 0.6.0 take about 0.5 s (numpy 2.4.6, Python 3.11, a quiet 2-core
# machine), and each session of the marked tests imports JAX afresh. With JAX 0.9.2 the marked
# tests took 208 s of test time against 331 s with 0.7.0. Every release here accepts it (jax and
# jaxlib 0.4.38 to 0.9.2 require ml_dtypes>=0.4.0 or >=0.5.0), and so do the IPython environments
# below. The main run keeps the newest, which is what a fresh install gets.
ML_DTYPES = "ml_dtypes<0.7"

# What the marked tests and tests/conftest.py import besides JAX; the package itself comes from
# the repository.
TEST_PACKAGES = (
    "pytest>=8",
    "pytest-jupyter[server]>=0.10",  # tests/conftest.py loads its plugin
    "hypothesis>=6.100",
    "ipython>=8",
    "ipywidgets>=8",
    "anywidget>=0.9",
    "plotly>=6",
    "nvidia-ml-py>=12",
    "psutil>=5.9",
    "prometheus_client>=0.17",
    ML_DTYPES,
)


# IPython releases whose cell counting differs from the development environment's
# (tests/core/test_cell_numbers.py): name -> requirements.
IPYTHON_ENVIRONMENTS = {
    "ipython8": ("ipython>=8,<9", "jax==0.10.2", "jaxlib==0.10.2", ML_DTYPES),
    "ipython9.7": ("ipython==9.7.0", "jax==0.10.2", "jaxlib==0.10.2", ML_DTYPES),
}


# Set for the tests run under a release of the matrix: that release.
RELEASE_VARIABLE = "GPUMEM_JAX_MATRIX_RELEASE"

# Under how many of the releases after the oldest each marked test runs. A JAX change shows in
# every test that meets it; each release still runs its share, and the oldest one all of them.
SHARED_BY = 2
# Set for a release that runs a share of the marked tests: "I/N/K", release I of the N that share
# them, each test under K (tests/conftest.py leaves out the others).
SHARE_VARIABLE = "GPUMEM_JAX_MATRIX_SHARE"


def shares_of(test_id: str, releases: int, shared_by: int) -> tuple[int, ...]:
    """The ``shared_by`` of ``releases`` (their indices) that run the marked test ``test_id``:
    one of the sets of that size, picked by a hash of the id that every process agrees on."""
    sets = list(itertools.combinations(range(releases), min(shared_by, releases)))
    digest = int.from_bytes(hashlib.sha256(test_id.encode()).digest()[:8], "big")
    return sets[digest % len(sets)]


def in_share(test_id: str, share: str) -> bool:
    """Whether the release of ``share`` (a ``SHARE_VARIABLE`` value) runs ``test_id``."""
    index, releases, shared_by = (int(p) for p in share.split("/"))
    return index in shares_of(test_id, releases, shared_by)


def plan(versions: list[str], shared_by: int = SHARED_BY, full: bool = False) -> dict[str, str | None]:
    """Each release and its share (a ``SHARE_VARIABLE`` value), None for one that runs every
    marked test: the oldest, and all of them with ``full`` or where no more than ``shared_by``
    others would share."""
    ordered = sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
    if full or len(ordered) - 1 <= shared_by:
        return {v: None for v in ordered}
    oldest, *rest = ordered
    return {oldest: None, **{v: f"{i}/{len(rest)}/{shared_by}" for i, v in enumerate(rest)}}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jupyter-gpumem" / "jax-matrix"


def requirements(version: str) -> list[str]:
    return [f"jax=={version}", f"jaxlib=={version}", *TEST_PACKAGES]


def environment_key(version: str) -> str:
    """``jax-X-HASH``: the release, and a hash of the interpreter and the requirement lines."""
    text = "\n".join([sys.version.split()[0], *requirements(version)])
    return f"jax-{version}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def uv() -> list[str]:
    return [sys.executable, "-m", "uv"]


def site_packages(home: Path) -> Path:
    return home / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def cached_environment(version: str, log) -> tuple[Path, float]:
    """The cached environment for ``version`` (made now where it is missing or half made), and
    the seconds spent making it."""
    return made_environment(cache_root() / environment_key(version), requirements(version), log)


def ipython_key(name: str) -> str:
    text = "\n".join([sys.version.split()[0], *IPYTHON_ENVIRONMENTS[name]])
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def ipython_environment(name: str) -> Path | None:
    """The python of the cached IPython environment ``name``, or None where it is not made (or
    half made)."""
    home = cache_root() / ipython_key(name)
    return home / "bin" / "python" if (home / ".complete").exists() else None


def made_environment(home: Path, requirement_lines: list[str] | tuple[str, ...], log) -> tuple[Path, float]:
    """``home`` with ``requirement_lines`` installed (made now where it is missing or half made),
    and the seconds spent making it."""
    done = home / ".complete"
    if done.exists():
        return home, 0.0
    t0 = time.perf_counter()
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)

    def run(*args, **kw):
        return subprocess.run([*uv(), *args], check=True, stdout=log, stderr=subprocess.STDOUT, **kw)

    run("venv", "-q", "--python", sys.executable, str(home))
    run("pip", "install", "-q", "--python", str(home / "bin" / "python"), *requirement_lines)
    frozen = subprocess.run(
        [*uv(), "pip", "freeze", "--python", str(home / "bin" / "python")], capture_output=True, text=True, check=True
    ).stdout
    done.write_text(frozen)
    return home, time.perf_counter() - t0


def run_environment(cached: Path, into: Path) -> Path:
    """A venv at ``into`` that sees this repository, then the cached environment; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(into)], check=True)
    site = site_packages(into)
    (site / "jupyter_gpumem_matrix.pth").write_text(
        f"{ROOT}\nimport site; site.addsitedir({str(site_packages(cached))!r})\n"
    )
    return into / "bin" / "python"


def marked_files() -> list[str]:
    """The test files that name the marker: collecting only these keeps the run from importing
    test modules whose packages the matrix does not install."""
    mark = re.compile(rf"\bmark\.{MARKER}\b")
    return sorted(str(p.relative_to(ROOT)) for p in TESTS.rglob("test_*.py") if mark.search(p.read_text()))


@dataclass
class Outcome:
    version: str
    ok: bool
    summary: str
    output: str
    build_seconds: float
    test_seconds: float
    share: str | None = None


def last_line(output: str) -> str:
    lines = [l.strip("= ") for l in output.strip().splitlines() if l.strip()]
    return lines[-1] if lines else "(no output)"


def run_version(version: str, files: list[str], pytest_args: list[str], share: str | None = None) -> Outcome:
    with tempfile.TemporaryDirectory(prefix=f"jax-matrix-{version}-") as tmp:
        log_path = Path(tmp) / "build.log"
        with open(log_path, "w") as log:
            try:
                cached, build = cached_environment(version, log)
            except subprocess.CalledProcessError:
                log.flush()
                return Outcome(version, False, "the environment could not be made", log_path.read_text(), 0.0, 0.0)
        python = run_environment(cached, Path(tmp) / "venv")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{python.parent}:{env.get('PATH', '/usr/bin:/bin')}"
        env[RELEASE_VARIABLE] = version
        env.pop(SHARE_VARIABLE, None)
        if share:
            env[SHARE_VARIABLE] = share
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKER, "-rfE", *files, *pytest_args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        output = proc.stdout + proc.stderr
        return Outcome(version, proc.returncode == 0, last_line(proc.stdout), output, build, seconds, share)


def installed_jax() -> str | None:
    """The JAX release of the interpreter running this script, or None where it has none."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax")
    except PackageNotFoundError:
        return None


def make_ipython_environments() -> bool:
    """Each of ``IPYTHON_ENVIRONMENTS`` made where missing; False (after its log) where one could
    not be."""
    for name, lines in IPYTHON_ENVIRONMENTS.items():
        with tempfile.TemporaryFile("w+") as log:
            try:
                _, seconds = made_environment(cache_root() / ipython_key(name), lines, log)
            except subprocess.CalledProcessError:
                log.seek(0)
                print(f"{name}: the environment could not be made\n{log.read()[-5000:]}", flush=True)
                return False
        if seconds:
            print(f"{name}: environment made in {seconds:.0f} s", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--versions",
        default=",".join(JAX_VERSIONS),
        help=f"comma-separated JAX releases (default: {','.join(JAX_VERSIONS)})",
    )
    parser.add_argument("--jobs", type=int, default=2, help="releases run at once (default 2)")
    parser.add_argument("--all", action="store_true", help="run the development environment's release too")
    parser.add_argument("--full", action="store_true", help="every marked test under every release (no shares)")
    args, pytest_args = parser.parse_known_args(argv)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    here = installed_jax()
    if here in versions and not args.all:
        versions.remove(here)
        print(f"jax {here}: the development environment's release, tested by the main run (--all runs it here)")
    if not make_ipython_environments():
        return 1
    files = marked_files()
    if not files:
        print(f"no test file names pytest.mark.{MARKER}", file=sys.stderr)
        return 1
    shares = plan(versions, full=args.full)
    shared = [v for v, share in shares.items() if share]
    print(
        f"JAX matrix: {len(versions)} releases x {len(files)} files, {args.jobs} at a time; "
        f"environments in {cache_root()}",
        flush=True,
    )
    if shared:
        print(
            f"every marked test runs under jax {next(iter(shares))} and under {SHARED_BY} of the {len(shared)} "
            f"after it ({', '.join(shared)}), picked by its id; --full runs them all under each",
            flush=True,
        )
    t0 = time.perf_counter()
    failed = []

    def report(outcome: Outcome) -> None:
        built = f", environment made in {outcome.build_seconds:.0f} s" if outcome.build_seconds else ""
        part = " (its share)" if outcome.share else ""
        print(
            f"jax {outcome.version}{part}: {'ok' if outcome.ok else 'FAILED'}: {outcome.summary} "
            f"({outcome.test_seconds:.0f} s{built})",
            flush=True,
        )
        if not outcome.ok:
            failed.append(outcome.version)
            print(
                f"----- jax {outcome.version} output -----\n{outcome.output[-20000:]}\n"
                f"----- end of jax {outcome.version} -----",
                flush=True,
            )

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_version, v, files, pytest_args, share) for v, share in shares.items()]
        for future in futures:
            report(future.result())
    took = time.perf_counter() - t0
    if failed:
        print(f"JAX matrix FAILED on jax {', '.join(failed)} ({took:.0f} s)", flush=True)
        return 1
    print(f"JAX matrix: all {len(versions)} releases passed ({took:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
