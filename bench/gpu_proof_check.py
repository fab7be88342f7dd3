"""The GPU proof's dry run, for a machine without a GPU: ``make gpu-proof-dry``.

    python bench/gpu_proof_check.py [--wheels DIR]

Checks, in seconds:
- structure: every recording's job and every fact probe compiles, names are unique, every
  allocator variable they set is one that env_table knows;
- wheels: DIR (default .whl/) holds exactly the pins of bench/gpu_proof_wheels.txt, one version
  each, for CPython 3.12 on x86-64 Linux; every requirement of each (markers read for Python 3.12
  on Linux) is a carried wheel or already on the GPU machine; they and the repository fit the
  64 MiB that travels;
- imports, when GPU_PROOF_CHECK_PYTHON names a Python 3.12 with jax 0.11.2 (``make
  gpu-proof-py312`` makes one): the wheels install as the device installs them, the recorder
  runs, the over-commit warning job reads the synthetic two-kernel trace through the carried
  server stack, and pytest collects the ``gpu`` and ``jax_versions`` test files and tests/server;
- the no-GPU answer: bench/gpu_proof.sh, where nvidia-smi lists no GPU, says "no CUDA device
  visible: nothing to prove" and exits 3 within 10 seconds.

Prints one line per check; exits 0 when all pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, REPO]

import gpu_proof  # noqa: E402
import gpu_proof_facts  # noqa: E402

PINS_FILE = os.path.join(HERE, "gpu_proof_wheels.txt")
TRAVEL_LIMIT = 64 << 20  # what a device call carries: the working tree and the carried paths
WHEELS_LIMIT = (
    24 << 20
)  # the wheels' own share (IPython, and Jupyter for tests/server), leaving room for the repository
NO_GPU_SECONDS = 10.0
DEMO_TWO_KERNELS = os.path.join(REPO, "jupyter_gpumem", "demo_traces", "synthetic_two_kernels.jsonl")

# Python packages on the GPU machine's image (its package list as read on 2026-11-17), those a
# carried wheel may need or the proof imports.
DEVICE_PACKAGES = frozenset(
    {
        "jax",
        "jaxlib",
        "jax-cuda13-plugin",
        "jax-cuda13-pjrt",
        "numpy",
        "ml-dtypes",
        "opt-einsum",
        "scipy",
        "nvidia-ml-py",
        "psutil",
        "pygments",
        "pytest",
        "pytest-timeout",
        "pytest-xdist",
        "pluggy",
        "iniconfig",
        "packaging",
        "hypothesis",
        "attrs",
        "sortedcontainers",
        "typing-extensions",
        "colorama",
        "setuptools",
        "wheel",
        "pip",
        "six",
        "matplotlib",
        "pyyaml",
        "jinja2",
        "markupsafe",
    }
)

# What pip's markers see on the GPU machine.
DEVICE_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


# --- pure checks ---------------------------------------------------------------------------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name."""
    parts = os.path.basename(filename).split("-")
    return canonical(parts[0]), parts[1]


def wheel_fits_device(filename: str) -> bool:
    """Whether a wheel's tags install on CPython 3.12, x86-64 Linux (glibc)."""
    parts = os.path.basename(filename)[: -len(".whl")].split("-")
    python, abi, platform = parts[-3], parts[-2], parts[-1]
    py_ok = any(
        t in ("py3", "py2.py3", "cp312") or re.fullmatch(r"cp3(\d+)", t) and abi == "abi3" and int(t[3:]) <= 12
        for t in python.split(".")
    )
    platform_ok = platform == "any" or any(
        re.fullmatch(r"manylinux(1|2010|2014|_2_\d+)_x86_64", t) for t in platform.split(".")
    )
    return bool(py_ok) and platform_ok


def parse_pins(text: str) -> dict[str, str]:
    """``name==version`` lines (comments and blank lines skipped), by canonical name."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise ValueError(f"{PINS_FILE}: {line!r} is not name==version")
        pins[canonical(name)] = version.strip()
    return pins


def duplicate_packages(filenames: list[str]) -> list[str]:
    """Packages carried in more than one version (pip refuses to install such a set)."""
    seen: dict[str, list[str]] = {}
    for f in filenames:
        name, version = wheel_name_version(f)
        seen.setdefault(name, []).append(version)
    return [f"{n} ({', '.join(v)})" for n, v in sorted(seen.items()) if len(v) > 1]


def pin_gaps(pins: dict[str, str], filenames: list[str]) -> list[str]:
    """What differs between the pins and the wheels: missing, other versions, unpinned extras."""
    have = dict(wheel_name_version(f) for f in filenames)
    gaps = [f"{n}=={v} missing" for n, v in pins.items() if n not in have]
    gaps += [f"{n} is {have[n]}, pinned {v}" for n, v in pins.items() if n in have and have[n] != v]
    gaps += [f"{n} {v} is not pinned" for n, v in have.items() if n not in pins]
    return gaps


def requirement_gaps(metadata_by_wheel: dict[str, str], available: set[str]) -> list[str]:
    """Requirements (``Requires-Dist``, markers read as on the GPU machine, extras skipped) that
    neither a carried wheel nor the machine provides, as "wheel needs requirement"."""
    from packaging.requirements import Requirement

    gaps = []
    for wheel, metadata in sorted(metadata_by_wheel.items()):
        for line in Parser().parsestr(metadata).get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(DEVICE_MARKERS):
                continue
            if canonical(req.name) not in available:
                gaps.append(f"{wheel} needs {line.strip()}")
    return gaps


def wheel_metadata(path: str) -> str:
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode("utf-8")


# --- the checks, each (ok, what) -----------------------------------------------------------


def check_structure() -> list[tuple[bool, str]]:
    from jupyter_gpumem.core import env_table

    known_vars = {
        env_table.PREALLOCATE_VAR,
        env_table.FRACTION_VAR,
        env_table.OLD_FRACTION_VAR,
        env_table.ALLOCATOR_VAR,
        env_table.ASYNC_PREALLOC_VAR,
        env_table.STALE_ALLOCATOR_VAR,
    }
    results = []
    recordings = gpu_proof.RECORDINGS + gpu_proof.TWO_PROCESSES
    names = [r.name for r in recordings]
    results.append((len(names) == len(set(names)), f"{len(names)} recordings, names unique"))
    for rec in recordings:
        path = os.path.join(gpu_proof.JOBS, rec.job)
        try:
            with open(path, encoding="utf-8") as f:
                compile(f.read(), path, "exec")
            ok, what = True, f"job {rec.job} for {rec.name} compiles"
        except (OSError, SyntaxError) as exc:
            ok, what = False, f"job {rec.job} for {rec.name}: {exc}"
        unknown = set(rec.env) - known_vars
        results.append((ok and not unknown, what + (f"; unknown variables {sorted(unknown)}" if unknown else "")))
    probe_names = [p.name for p in gpu_proof_facts.PROBES]
    results.append((len(probe_names) == len(set(probe_names)), f"{len(probe_names)} fact probes, names unique"))
    for probe in gpu_proof_facts.PROBES:
        try:
            compile(gpu_proof_facts._PRELUDE + probe.code, probe.name, "exec")
            ok, what = True, f"probe {probe.name} compiles, {len(probe.checks)} checks"
        except SyntaxError as exc:
            ok, what = False, f"probe {probe.name}: {exc}"
        unknown = set(probe.env) - known_vars
        results.append(
            (
                ok and not unknown and bool(probe.checks),
                what + (f"; unknown variables {sorted(unknown)}" if unknown else ""),
            )
        )
    for path in sorted(glob.glob(os.path.join(gpu_proof.JOBS, "*.py"))):
        try:
            with open(path, encoding="utf-8") as f:
                compile(f.read(), path, "exec")
            results.append((True, f"job file {os.path.basename(path)} compiles"))
        except SyntaxError as exc:
            results.append((False, f"job file {os.path.basename(path)}: {exc}"))
    script = os.path.join(HERE, "gpu_proof.sh")
    results.append((os.access(script, os.X_OK), "bench/gpu_proof.sh is executable"))
    return results


def repository_bytes() -> int:
    """What travels besides carried paths: tracked and untracked-not-ignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return sum(os.path.getsize(os.path.join(REPO, p)) for p in listed if p and os.path.isfile(os.path.join(REPO, p)))


def check_wheels(folder: str) -> list[tuple[bool, str]]:
    wheels = sorted(glob.glob(os.path.join(folder, "*.whl")))
    if not wheels:
        return [(False, f"no wheels in {folder}: run `make gpu-proof-wheels`")]
    with open(PINS_FILE, encoding="utf-8") as f:
        pins = parse_pins(f.read())
    results = []
    dups = duplicate_packages(wheels)
    results.append((not dups, "one version of each wheel" if not dups else f"several versions of {', '.join(dups)}"))
    gaps = pin_gaps(pins, wheels)
    results.append((not gaps, f"the {len(pins)} pinned wheels, nothing else" if not gaps else "; ".join(gaps)))
    misfits = [os.path.basename(w) for w in wheels if not wheel_fits_device(w)]
    results.append(
        (
            not misfits,
            "every wheel installs on CPython 3.12, x86-64 Linux"
            if not misfits
            else f"not for CPython 3.12 x86-64 Linux: {', '.join(misfits)}",
        )
    )
    available = set(DEVICE_PACKAGES) | {wheel_name_version(w)[0] for w in wheels}
    needs = requirement_gaps({os.path.basename(w): wheel_metadata(w) for w in wheels}, available)
    results.append((not needs, "every requirement is carried or on the GPU machine" if not needs else "; ".join(needs)))
    size = sum(os.path.getsize(w) for w in wheels)
    repo = repository_bytes()
    results.append((size <= WHEELS_LIMIT, f"wheels {size / 2**20:.1f} MiB (limit {WHEELS_LIMIT >> 20} MiB)"))
    results.append(
        (
            size + repo <= TRAVEL_LIMIT,
            f"wheels and repository {(size + repo) / 2**20:.1f} MiB of the {TRAVEL_LIMIT >> 20} MiB that travels",
        )
    )
    return results


def check_imports(python: str, folder: str) -> list[tuple[bool, str]]:
    """Install the wheels as the device does, into a fresh folder, then import what the proof runs."""
    wheels = sorted(glob.glob(os.path.join(folder, "*.whl")))
    with tempfile.TemporaryDirectory(prefix="gpu-proof-site-") as site, tempfile.TemporaryDirectory() as tmp:
        install = subprocess.run(
            gpu_proof.wheel_install_command(python, site, wheels),
            capture_output=True,
            text=True,
        )
        results = [
            (
                install.returncode == 0,
                f"wheels install with {python}"
                if install.returncode == 0
                else f"pip failed: {install.stderr.strip()[-300:]}",
            )
        ]
        env = gpu_proof.clean_env(dict(os.environ), {"JAX_PLATFORMS": "cpu"}, os.pathsep.join([REPO, site]))
        trace = os.path.join(tmp, "t.jsonl")
        rec = subprocess.run(
            [python, "-m", "jupyter_gpumem.record", trace, "--seconds", "0.2", "--interval", "0.1"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        results.append(
            (
                rec.returncode == 0 and os.path.exists(trace),
                "python -m jupyter_gpumem.record runs"
                if rec.returncode == 0
                else f"the recorder failed: {rec.stderr.strip()[-300:]}",
            )
        )
        warning = subprocess.run(
            [python, os.path.join(gpu_proof.JOBS, "overcommit_warning.py"), DEMO_TWO_KERNELS],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        warned, what = gpu_proof.overcommit_warning_verdict(gpu_proof.result_of(warning.stdout))
        results.append((warned, f"the server's over-commit warning, on the synthetic two kernels: {what[:120]}"))
        tests = os.path.join(REPO, "tests")
        files, left_out = gpu_proof.runnable_test_files(
            sorted(
                set(
                    gpu_proof.marked_test_files(tests, "gpu")
                    + gpu_proof.marked_test_files(tests, "jax_versions")
                    + glob.glob(os.path.join(tests, "server", "test_*.py"))
                )
            ),
            python,
            env,
        )
        collect = subprocess.run(
            [
                python,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--collect-only",
                *files,
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        last = (collect.stdout.strip().splitlines() or ["(no output)"])[-1]
        results.append(
            (
                collect.returncode == 0,
                f"pytest collects {len(files)} files: {last}"
                + (f"; left out: {', '.join(left_out)}" if left_out else "")
                if collect.returncode == 0
                else f"pytest cannot collect: {collect.stdout.strip()[-600:]}",
            )
        )
    return results


def check_no_gpu() -> list[tuple[bool, str]]:
    """Run the real script where nvidia-smi cannot be found: the clear, fast, non-zero answer."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(
            os.environ, GPU_PROOF_NVIDIA_SMI=os.path.join(out, "no-nvidia-smi"), OUT=os.path.join(out, "results")
        )
        env.pop("GPU_PROOF_DRY", None)
        began = time.monotonic()
        done = subprocess.run([os.path.join(HERE, "gpu_proof.sh")], env=env, capture_output=True, text=True, timeout=60)
        seconds = time.monotonic() - began
        said = gpu_proof.NO_GPU_MESSAGE in done.stderr
        wrote = os.path.exists(os.path.join(out, "results"))
    ok = said and done.returncode == gpu_proof.NO_GPU_EXIT and seconds < NO_GPU_SECONDS and not wrote
    return [
        (
            ok,
            f"with no GPU: exit {done.returncode} in {seconds:.2f} s, "
            f"{'says' if said else 'does NOT say'} {gpu_proof.NO_GPU_MESSAGE!r}{', wrote results' if wrote else ''}",
        )
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default=os.environ.get("GPU_PROOF_WHEELS", os.path.join(REPO, ".whl")))
    args = parser.parse_args(argv)
    began = time.monotonic()
    results = check_structure() + check_wheels(args.wheels)
    python = os.environ.get("GPU_PROOF_CHECK_PYTHON")
    if python:
        results += check_imports(python, args.wheels)
    else:
        print("imports not checked: set GPU_PROOF_CHECK_PYTHON to a Python 3.12 with jax 0.11.2 (make gpu-proof-py312)")
    results += check_no_gpu()
    for ok, what in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {what}")
    passed = all(ok for ok, _ in results)
    print(f"dry run {'passed' if passed else 'FAILED'} in {time.monotonic() - began:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
