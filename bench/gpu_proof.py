"""The GPU proof: one command for a machine with a CUDA GPU (bench/README.md, "On a GPU").

    python bench/gpu_proof.py            (bench/gpu_proof.sh runs this; OUT names the results folder)

Steps, each with its own time limit, inside one budget (GPU_PROOF_BUDGET_S, default 480 s):
install the carried wheels; note the versions; record real traces, each in its own process
with its own allocator settings; check the facts marked unverified (bench/gpu_proof_facts.py);
run the ``gpu`` tests and the ``jax_versions`` tests under the installed JAX; pack the results.
A failing step is reported and the next one runs. GPU_PROOF_ONLY=a,b (step names, or their
last word: ``oom_compile``, ``facts``, ``gpu``) reruns only those; GPU_PROOF_SKIP=a,b leaves
those out and reports them as failed; GPU_PROOF_PROBES=a,b runs only those fact probes. Under OUT: ``gpu_proof.log``,
``steps.json``, ``facts.md``, ``facts.json`` and ``gpu_proof_results.tar.gz`` (the traces,
the whole error texts, the pytest reports, the versions).

Exit status: 0 when every step passed and every fact held, 1 otherwise, 3 with no CUDA device
(checked first, in seconds: "no CUDA device visible: nothing to prove").
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
JOBS = os.path.join(HERE, "gpu_proof_jobs")

NO_GPU_MESSAGE = "no CUDA device visible: nothing to prove"
NO_GPU_EXIT = 3
DEFAULT_BUDGET_S = 480.0
PACK_RESERVE_S = 20.0  # kept back from the budget for packing the results
RESULTS_TAR = "gpu_proof_results.tar.gz"

# Variables that choose JAX's allocator: every recording starts without them and sets its own.
_CLEARED_PREFIXES = ("XLA_", "TF_CUDA", "TF_GPU", "TF_FORCE", "JAX_PJRT", "JAX_PLATFORMS")


@dataclass(frozen=True)
class Recording:
    """One trace: its name, the job it records, the environment it runs under, and the exit
    status the job is meant to end with (1 where it ends in a real OOM)."""

    name: str
    job: str
    env: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()
    expect_rc: int = 0
    texts: tuple[str, ...] = ()  # error texts the job must have kept (a prefix of the file name)


RECORDINGS: tuple[Recording, ...] = (
    Recording("bfc_preallocated", "allocation_story.py"),
    Recording("bfc_growing", "allocation_story.py", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    Recording(
        "cuda_async_growing",
        "allocation_story.py",
        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
    ),
    Recording(
        "cuda_async_async_prealloc",
        "allocation_story.py",
        {
            "XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC": str(4 << 30),
        },
    ),
    Recording("cuda_async_preallocated", "allocation_story.py", {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"}),
    Recording("platform", "allocation_story.py", {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
    Recording("oom_runtime", "oom_runtime.py", expect_rc=1, texts=("oom_runtime_",)),
    Recording(
        "oom_compile",
        "oom_compile.py",
        {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "1.0"},
        expect_rc=1,
        texts=("oom_compile_",),
    ),
)

# Recorded at once, as two processes on one GPU.
TWO_PROCESSES: tuple[Recording, ...] = (
    Recording("two_processes_a", "two_processes.py", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, ("a",)),
    Recording("two_processes_b", "two_processes.py", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, ("b",)),
)


# --- pure parts ------------------------------------------------------------------------------


def clean_env(base: dict, extra: dict, pythonpath: str) -> dict:
    """``base`` without the allocator variables, then ``extra``, with ``pythonpath`` first."""
    env = {k: v for k, v in base.items() if not k.startswith(_CLEARED_PREFIXES)}
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, base.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def nvidia_smi_lists_a_gpu(smi_output: str, returncode: int) -> bool:
    return returncode == 0 and re.search(r"^GPU \d+:", smi_output, re.MULTILINE) is not None


def step_timeout(wanted: float, now: float, deadline: float) -> float:
    """The step's own limit, cut to what the budget leaves (less the packing reserve)."""
    return max(0.0, min(wanted, deadline - PACK_RESERVE_S - now))


def recording_command(python: str, rec: Recording, traces: str) -> list[str]:
    out = os.path.join(traces, f"{rec.name}.jsonl")
    cmd = [
        python,
        "-m",
        "jupyter_gpumem.record",
        out,
        "--force",
        "--interval",
        "0.1",
        "--seconds",
        "0.5",
        "--run",
        os.path.join(JOBS, rec.job),
    ]
    return cmd + (["--", *rec.args] if rec.args else [])


def trace_problem(path: str, want_oom: bool = False) -> str | None:
    """Why the trace at ``path`` is not a usable real recording (None when it is); with
    ``want_oom``, also when it holds no "oom" event."""
    if not os.path.exists(path):
        return "no trace written"
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from jupyter_gpumem.core.tracefile import TraceError, read_trace

    try:
        trace = read_trace(path, strict=True)
    except (TraceError, OSError) as exc:
        return f"unreadable: {exc}"
    if trace.synthetic:
        return "marked synthetic: NVML was the fake one"
    if len(trace.samples) < 3:
        return f"only {len(trace.samples)} samples"
    if not any(on_gpu(sample) for sample in trace.samples):
        return "no sample has a JAX reading on a GPU (JAX ran on the CPU?)"
    if want_oom and not any(event.name == "oom" for event in trace.events):
        return "no oom event: the job's error was not RESOURCE_EXHAUSTED"
    return None


def is_oom_text(text: str) -> bool:
    """Whether an error text is an out-of-memory error (XLA's status, or CUDA's own code)."""
    return "RESOURCE_EXHAUSTED" in text or "CUDA_ERROR_OUT_OF_MEMORY" in text or "out of memory" in text.lower()


def on_gpu(sample) -> bool:
    """Whether a sample holds a JAX reading of a GPU device."""
    return isinstance(sample.jax, tuple) and any(reading.platform in ("gpu", "cuda") for reading in sample.jax)


# --- running ---------------------------------------------------------------------------------


class Log:
    """Everything said, to stdout and to OUT/gpu_proof.log."""

    def __init__(self, path: str):
        self.file = open(path, "a", encoding="utf-8")

    def __call__(self, text: str) -> None:
        text = text if text.endswith("\n") else text + "\n"
        sys.stdout.write(text)
        sys.stdout.flush()
        self.file.write(text)
        self.file.flush()


def run(cmd: Sequence[str], env: dict, timeout: float, log: Log, cwd: str = REPO) -> tuple[int | None, str]:
    """Run ``cmd`` in its own process group; its output goes to the log. Returns (exit status,
    output), the status None when it ran past ``timeout`` (then its whole group is killed)."""
    log(f"$ {' '.join(cmd)}   (limit {timeout:.0f} s)")
    proc = subprocess.Popen(
        list(cmd), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # this command's own process group only
        out, _ = proc.communicate()
        rc = None
    log(out.rstrip()[-20000:] if out else "(no output)")
    return rc, out or ""


@dataclass
class StepResult:
    name: str
    ok: bool
    seconds: float
    note: str


def wheel_install_command(python: str, site: str, wheels: list[str]) -> list[str]:
    """pip installing the carried wheels into ``site``, as the device machine's README says: no
    index, no dependencies, nothing compiled or cached."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        site,
        *wheels,
    ]


class Proof:
    def __init__(self, out: str, work: str, python: str, wheels: str, site: str, budget: float):
        self.out, self.work, self.python, self.wheels, self.site = out, work, python, wheels, site
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.results: list[StepResult] = []
        # Steps left out on purpose (a rehearsal on a CPU cannot fill a GPU): reported as failed.
        self.skip = {n.strip() for n in os.environ.get("GPU_PROOF_SKIP", "").split(",") if n.strip()}
        # GPU_PROOF_PROBES=a,b: only those fact probes (bench/gpu_proof_facts.py names them).
        probes = [n.strip() for n in os.environ.get("GPU_PROOF_PROBES", "").split(",") if n.strip()]
        self.probes = ["--only", *probes] if probes else []
        # A rerun of some steps only (install and versions always run).
        self.only = {n.strip() for n in os.environ.get("GPU_PROOF_ONLY", "").split(",") if n.strip()}
        os.makedirs(out, exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        for sub in ("traces", "texts", "reports"):
            os.makedirs(os.path.join(work, sub), exist_ok=True)
        self.log = Log(os.path.join(out, "gpu_proof.log"))
        self.pythonpath = os.pathsep.join([REPO, site])
        self.env = clean_env(dict(os.environ), {"GPU_PROOF_TEXTS": os.path.join(work, "texts")}, self.pythonpath)

    def step(self, name: str, wanted: float, body: Callable[[float], tuple[bool, str]]) -> bool:
        """Run ``body(limit)`` as one step; a failure or exception is recorded, never raised."""
        if self.only and not ({name, name.split()[-1]} & (self.only | {"install", "versions"})):
            return True  # a rerun of named steps: the others are neither run nor reported
        limit = step_timeout(wanted, time.monotonic(), self.deadline)
        began = time.monotonic()
        self.log(f"\n=== {name} ===")
        if name in self.skip or name.split()[-1] in self.skip:
            ok, note = False, "skipped: named in GPU_PROOF_SKIP"
        elif limit < 5:
            ok, note = False, "skipped: the time budget is spent"
        else:
            try:
                ok, note = body(limit)
            except Exception as exc:  # a broken step must not stop the rest
                ok, note = False, f"{type(exc).__name__}: {exc}"
        result = StepResult(name, ok, round(time.monotonic() - began, 1), note)
        self.results.append(result)
        self.log(f"--- {name}: {'ok' if ok else 'FAILED'} in {result.seconds} s: {note}")
        return ok

    # the steps

    def install(self, limit: float) -> tuple[bool, str]:
        wheels = sorted(glob.glob(os.path.join(self.wheels, "*.whl")))
        if not wheels:
            return (
                False,
                f"no wheels in {self.wheels}: carry .whl (make gpu-proof-wheels); IPython-based tests will fail",
            )
        rc, _ = run(
            wheel_install_command(self.python, self.site, wheels),
            self.env,
            limit,
            self.log,
        )
        return rc == 0, f"{len(wheels)} wheels into {self.site}" if rc == 0 else f"pip exit {rc}"

    def versions(self, limit: float) -> tuple[bool, str]:
        code = (
            "import json, platform, importlib.metadata as m\n"
            "names = ['jax', 'jaxlib', 'jax-cuda13-plugin', 'jax-cuda13-pjrt', 'nvidia-ml-py', 'numpy', 'pytest', 'ipython']\n"
            "v = {}\n"
            "for n in names:\n"
            "    try: v[n] = m.version(n)\n"
            "    except Exception: v[n] = None\n"
            "import jax\n"
            "d = jax.devices()\n"
            "v['python'] = platform.python_version()\n"
            "v['devices'] = [(x.platform, x.device_kind, x.id) for x in d]\n"
            "print(json.dumps(v))\n"
        )
        rc, out = run([self.python, "-c", code], self.env, limit, self.log)
        _, smi = run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,uuid", "--format=csv"], self.env, 20, self.log
        )
        with open(os.path.join(self.work, "reports", "versions.txt"), "w", encoding="utf-8") as f:
            f.write(out + "\n" + smi)
        platforms = jax_platforms(out) if rc == 0 else []
        on_gpu = any(p in ("gpu", "cuda") for p in platforms)
        return on_gpu, f"JAX devices on {', '.join(platforms) or 'nothing'}"

    def record(self, rec: Recording, limit: float) -> tuple[bool, str]:
        env = clean_env(self.env, rec.env, self.pythonpath)
        rc, _ = run(recording_command(self.python, rec, os.path.join(self.work, "traces")), env, limit, self.log)
        return self._judge_recording(rec, rc)

    def record_together(self, recs: Sequence[Recording], limit: float) -> tuple[bool, str]:
        traces = os.path.join(self.work, "traces")
        procs = []
        for rec in recs:
            cmd = recording_command(self.python, rec, traces)
            self.log(f"$ {' '.join(cmd)} &")
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=clean_env(self.env, rec.env, self.pythonpath),
                    cwd=REPO,
                    text=True,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        end = time.monotonic() + limit
        notes, ok = [], True
        for rec, proc in zip(recs, procs):
            try:
                out, _ = proc.communicate(timeout=max(1.0, end - time.monotonic()))
                rc: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                rc = None
            self.log(f"[{rec.name}]\n{out.rstrip()[-8000:]}")
            rec_ok, note = self._judge_recording(rec, rc)
            ok &= rec_ok
            notes.append(f"{rec.name}: {note}")
        return ok, "; ".join(notes)

    def _judge_recording(self, rec: Recording, rc: int | None) -> tuple[bool, str]:
        if rc is None:
            return False, "timed out"
        problem = trace_problem(os.path.join(self.work, "traces", f"{rec.name}.jsonl"), want_oom=bool(rec.texts))
        if problem:
            return False, f"exit {rc}; {problem}"
        folder = os.path.join(self.work, "texts")
        texts = os.listdir(folder)
        missing = [
            p for p in rec.texts if not any(t.startswith(p) and _oom_file(os.path.join(folder, t)) for t in texts)
        ]
        if missing:
            return False, f"exit {rc}; no out-of-memory text kept for {', '.join(missing)}"
        if rc != rec.expect_rc:
            return False, f"exit {rc}, expected {rec.expect_rc}"
        kept = [t for t in texts if any(t.startswith(p) for p in rec.texts)]
        return True, "trace written" + (f"; texts {', '.join(sorted(kept))}" if kept else "")

    def facts(self, limit: float) -> tuple[bool, str]:
        # The probes stop starting 10 s before the step's limit, so the table is always written.
        rc, out = run(
            [
                self.python,
                os.path.join(HERE, "gpu_proof_facts.py"),
                "--out",
                self.out,
                "--timeout",
                "45",
                "--budget",
                str(max(1.0, limit - 10)),
                *self.probes,
            ],
            self.env,
            limit,
            self.log,
        )
        summary = re.findall(r"^\d+ hold, \d+ do not hold, \d+ without a reading\.$", out, re.MULTILINE)
        return rc == 0, summary[-1] if summary else f"exit {rc}"

    def pytest(self, name: str, marker: str, expression: str, limit: float) -> tuple[bool, str]:
        files = marked_test_files(os.path.join(REPO, "tests"), marker)
        if not files:
            return False, f"no test file carries @pytest.mark.{marker} yet"
        files, left_out = runnable_test_files(files, self.python)
        if left_out:
            self.log(f"left out of {name}: {', '.join(left_out)}")
        report = os.path.join(self.work, "reports", f"{name}.xml")
        per_test = ["--timeout=120"] if importlib.util.find_spec("pytest_timeout") else []  # the plugin loads itself
        cmd = [
            self.python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rfEs",
            *per_test,
            "-m",
            expression,
            f"--junitxml={report}",
            *files,
        ]
        rc, out = run(cmd, self.env, limit, self.log)
        if rc == 5:
            return False, f"no test selected by -m {expression!r}"
        summary = pytest_summary(out) if rc is not None else "timed out"
        return rc == 0, summary + (f"; left out: {', '.join(left_out)}" if left_out else "")

    def pack(self) -> str:
        path = os.path.join(self.out, RESULTS_TAR)
        with tarfile.open(path, "w:gz") as tar:
            tar.add(self.work, arcname="gpu_proof")
        return path

    def write_steps(self) -> None:
        with open(os.path.join(self.out, "steps.json"), "w", encoding="utf-8") as f:
            json.dump([r.__dict__ for r in self.results], f, indent=1)


def _oom_file(path: str) -> bool:
    with open(path, encoding="utf-8", errors="replace") as f:
        return is_oom_text(f.read())


def pytest_summary(output: str) -> str:
    """pytest's closing count line ("3 passed, 1 failed in 9.1s"), else the output's last line."""
    lines = [line.strip("= ") for line in output.splitlines() if line.strip()]
    counted = [
        line for line in lines if re.search(r"\d+ (passed|failed|errors?|skipped|deselected)|no tests ran", line)
    ]
    return (counted or lines or ["(no output)"])[-1][:200]


def jax_platforms(output: str) -> list[str]:
    """The platforms of the devices in the versions step's JSON line (its last line)."""
    for line in reversed(output.splitlines()):
        try:
            return [d[0] for d in json.loads(line)["devices"]]
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return []


def marked_test_files(tests_dir: str, marker: str) -> list[str]:
    """Test files that mention ``pytest.mark.<marker>`` (as a decorator or in pytestmark)."""
    pattern = re.compile(rf"pytest\.mark\.{re.escape(marker)}\b")
    found = []
    for path in sorted(glob.glob(os.path.join(tests_dir, "**", "test_*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            if pattern.search(f.read()):
                found.append(path)
    return found


# Test folders that import a stack the GPU machine's image lacks (no Jupyter there), and a module
# that stands for it: the proof leaves such a folder out, and says so, where the module is missing.
NEEDS_STACK = {"server": "jupyter_server"}


def runnable_test_files(files: Sequence[str], python: str) -> tuple[list[str], list[str]]:
    """``files`` split into those ``python`` can import and the folders left out (as "tests/server
    (no jupyter_server)"), asking that interpreter, which may not be this one."""
    left_out = []
    for folder, module in sorted(NEEDS_STACK.items()):
        inside = [f for f in files if f"{os.sep}tests{os.sep}{folder}{os.sep}" in os.path.abspath(f)]
        if not inside:
            continue
        found = subprocess.run(
            [python, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
            capture_output=True,
            timeout=60,
        )
        if found.returncode != 0:
            left_out.append(f"tests/{folder} (no {module})")
            files = [f for f in files if f not in inside]
    return list(files), left_out


def gpu_visible(smi: str = "nvidia-smi") -> bool:
    if shutil.which(smi) is None:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return nvidia_smi_lists_a_gpu(done.stdout, done.returncode)


def main() -> int:
    if not gpu_visible(os.environ.get("GPU_PROOF_NVIDIA_SMI", "nvidia-smi")):
        print(
            f"{NO_GPU_MESSAGE} (nvidia-smi -L lists no GPU here); run this on the device machine: "
            "bench/README.md, 'On a GPU'",
            file=sys.stderr,
        )
        return NO_GPU_EXIT
    out = os.environ.get("OUT") or os.path.join(REPO, "bench", "results", "gpu-proof")
    proof = Proof(
        out=out,
        work=os.environ.get("GPU_PROOF_WORK", "/tmp/gpu-proof"),
        python=os.environ.get("GPU_PROOF_PYTHON", sys.executable),
        wheels=os.environ.get("GPU_PROOF_WHEELS", os.path.join(REPO, ".whl")),
        site=os.environ.get("GPU_PROOF_SITE", "/tmp/site"),
        budget=float(os.environ.get("GPU_PROOF_BUDGET_S", DEFAULT_BUDGET_S)),
    )
    proof.log(f"GPU proof from {REPO} into {out}, budget {proof.deadline - proof.start:.0f} s")
    proof.step("install", 120, proof.install)
    proof.step("versions", 90, proof.versions)
    for rec in RECORDINGS[:6]:
        proof.step(f"record {rec.name}", 60, lambda limit, rec=rec: proof.record(rec, limit))
    proof.step("record two_processes", 60, lambda limit: proof.record_together(TWO_PROCESSES, limit))
    for rec in RECORDINGS[6:]:
        proof.step(f"record {rec.name}", 90, lambda limit, rec=rec: proof.record(rec, limit))
    proof.step("facts", 200, proof.facts)
    proof.step("pytest gpu", 180, lambda limit: proof.pytest("pytest_gpu", "gpu", "gpu", limit))
    proof.step(
        "pytest jax_versions",
        300,  # 120 s ran out on an H100 machine with 98% of the tests run (2026-11-26)
        lambda limit: proof.pytest("pytest_jax_versions", "jax_versions", "jax_versions and not gpu", limit),
    )
    proof.write_steps()
    try:
        packed = proof.pack()
        proof.log(f"packed {packed} ({os.path.getsize(packed):,} bytes)")
    except OSError as exc:
        proof.log(f"packing failed: {exc}")
        proof.results.append(StepResult("pack", False, 0.0, str(exc)))
    proof.write_steps()
    facts_table = os.path.join(out, "facts.md")
    if os.path.exists(facts_table):  # again at the end, where a caller reading the tail sees it
        with open(facts_table, encoding="utf-8") as f:
            proof.log("\n=== facts ===\n" + f.read())
    width = max(len(r.name) for r in proof.results)
    proof.log("\n=== summary ===")
    for r in proof.results:
        proof.log(f"{r.name:<{width}}  {'ok    ' if r.ok else 'FAILED'}  {r.seconds:6.1f} s  {r.note}")
    total = time.monotonic() - proof.start
    passed = all(r.ok for r in proof.results)
    proof.log(f"{'all steps passed' if passed else 'some steps failed'} in {total:.0f} s; results in {out}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
