"""The GPU proof: one command for a machine with a CUDA GPU (bench/README.md, "On a GPU").

    python bench/gpu_proof.py            (bench/gpu_proof.sh runs this; OUT names the results folder)

Steps, each with its own time limit, inside one budget (GPU_PROOF_BUDGET_S, default 480 s):
install the carried wheels; note the versions; record real traces, each in its own process
with its own allocator settings; check the facts marked unverified (bench/gpu_proof_facts.py);
time one sample; run the ``gpu`` tests; look at the host's memory overcommit; run the
``jax_versions`` tests and tests/server file by file under the installed JAX; pack the results.
The whole proof no longer fits one device call: bench/README.md, "On a GPU", gives the two.
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
RESULT_PREFIX = "GPU_PROOF_RESULT "  # a job's observations, as bench/gpu_proof_jobs/_gpu.py prints them

# Variables that choose JAX's allocator: every recording starts without them and sets its own.
_CLEARED_PREFIXES = ("XLA_", "TF_CUDA", "TF_GPU", "TF_FORCE", "JAX_PJRT", "JAX_PLATFORMS")


@dataclass(frozen=True)
class Recording:
    """One trace: its name, the job it records, the environment it runs under, and the exit
    status the job is meant to end with (1 where it ends in a real OOM). ``judge``, where given,
    reads what the job wrote as ``$GPU_PROOF_REPORTS/<name>.json`` and says what is wrong with
    it (None: nothing)."""

    name: str
    job: str
    env: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()
    expect_rc: int = 0
    texts: tuple[str, ...] = ()  # error texts the job must have kept (a prefix of the file name)
    judge: Callable[[dict], str | None] | None = None


PEAK_BUFFERS = "Peak buffers:"
FRAME_ID = "stack_frame_id="


def peak_rows(report: str) -> list[str]:
    """The rows under the OOM report's "Live at the peak ..." title, up to the blank line."""
    lines = report.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("Live at the peak")), None)
    if at is None:
        return []
    rows = []
    for line in lines[at + 1 :]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def peak_buffers_problem(result: dict) -> str | None:
    """What keeps the job's OOM from being the "Peak buffers" text the doctor reads to source
    lines: no such section in XLA's text, no report, or a report whose peak rows do not name the
    job's file at one of ``lines`` (the lines of the program's body), or leave a stack frame
    unresolved. None when the text has the section and the report names the job's lines."""
    text = result.get("text") or ""
    if PEAK_BUFFERS not in text:
        first = text.strip().splitlines()[0][:160] if text.strip() else "no error at all"
        return f"no '{PEAK_BUFFERS}' in XLA's text ({first})"
    report = result.get("report")
    if not report:
        return f"the doctor gave no report: {result.get('report_error') or 'oom_report returned None'}"
    rows = peak_rows(report)
    if not rows:
        return "the report has no 'Live at the peak' rows"
    named = [r for r in rows if result["file"] in r and any(f"line {n}" in r for n in result["lines"])]
    if not named:
        return f"no peak row names {result['file']} at lines {result['lines']}: {rows[:3]}"
    if any("stack frame" in r for r in rows):
        return f"a peak row leaves a stack frame unresolved: {[r for r in rows if 'stack frame' in r][:2]}"
    return None


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
    # JAX's defaults (BFC, preallocated): the copy of a donated input that was not donated
    # (the job's docstring cites XLA), the one run-time path that attaches "Peak buffers".
    Recording(
        "oom_peak_buffers",
        "oom_peak_buffers.py",
        expect_rc=1,
        texts=("oom_peak_buffers_",),
        judge=peak_buffers_problem,
    ),
)

# Recorded at once, as two processes on one GPU, as two kernels would be: one with JAX's
# defaults (BFC, 75% of the card taken at the first operation), one with preallocation off that
# takes a fifth of the card, so that between them they hold over 90% of it.
TWO_PROCESSES: tuple[Recording, ...] = (
    Recording("two_processes_a", "two_processes.py", {}, ("a",)),
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


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def result_of(output: str) -> dict | None:
    """A job's observations: its last ``GPU_PROOF_RESULT {json}`` line, or None."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                return json.loads(line[len(RESULT_PREFIX) :])
            except ValueError:
                return None
    return None


def overcommit_warning_verdict(result: dict | None) -> tuple[bool, str]:
    """Whether the server warned of over-commit on the two processes' busiest reading, in words."""
    if result is None:
        return False, "the warning job gave no result"
    if result.get("unavailable"):
        return False, f"the server's warning could not be read here: {result['unavailable']}"
    held = ", ".join(f"pid {p['pid']} {p['share']:.0%}" for p in result.get("processes", []))
    warnings = [w for w in result.get("warnings", []) if w.get("kind") == "overcommit"]
    if not warnings:
        return False, f"no over-commit warning on the busiest reading ({held or 'no processes'})"
    return True, f"the server warns ({held}): {warnings[0]['message'][:200]}"


# --- the host's memory overcommit (why 2**42 float32 failed where 2**46 is now used) ----------

# A host allocation is stopped once the process holds this much: enough to tell "granted, and
# being written" from "refused", far below what would trouble a 128 GiB machine.
HOST_RSS_CAP = 4 << 30
HOST_ALLOCATION = (
    "import jax, jax.numpy as jnp\n"
    "x = jnp.zeros(({n},), jnp.float32)\n"
    "x.block_until_ready()\n"
    "print('granted and filled', flush=True)\n"
)


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes by field (its kB are KiB)."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def vm_rss(status_text: str) -> int:
    """VmRSS from /proc/<pid>/status, in bytes (0 where absent: a process exiting)."""
    return meminfo(status_text).get("VmRSS", 0)


def allocation_outcome(rc: int | None, stopped_at_cap: bool, rss_peak: int, seconds: float, output: str) -> str:
    """How a host allocation ended, in words: refused with XLA's error, granted (the process was
    writing into it when the proof stopped it at the cap), killed by a signal it did not get
    from the proof, still running at the limit, or filled."""
    if stopped_at_cap:
        return f"granted: the process held {gib(rss_peak)} after {seconds:.1f} s and rising (stopped by the proof)"
    if rc is None:
        return f"still running after {seconds:.1f} s, holding {gib(rss_peak)} (stopped by the proof)"
    if rc == 0:
        return f"granted and filled in {seconds:.1f} s"
    if "RESOURCE_EXHAUSTED" in output or "out of memory" in output.lower():
        line = next((x for x in output.splitlines() if "RESOURCE_EXHAUSTED" in x or "emory" in x), "")
        return f"refused in {seconds:.1f} s: {line.strip()[:160]}"
    if rc < 0:
        return f"killed by signal {-rc} after {seconds:.1f} s, having held {gib(rss_peak)}"
    last = (output.strip().splitlines() or ["no output"])[-1]
    return f"failed with exit {rc} in {seconds:.1f} s: {last[:160]}"


def overcommit_note(found: dict) -> str:
    """The overcommit step's one line: the kernel's policy, the memory, and each allocation."""
    info = found.get("meminfo", {})
    head = (
        f"vm.overcommit_memory={found.get('overcommit_memory', '?')}, "
        f"MemAvailable {gib(info.get('MemAvailable', 0))}, CommitLimit {gib(info.get('CommitLimit', 0))}"
    )
    tried = "; ".join(f"{name} float32: {found[name]['outcome']}" for name in ("2**42", "2**46") if name in found)
    return f"{head}; {tried}"


# --- tests run file by file, so that a file that hangs costs only its own limit --------------------


@dataclass
class FileRun:
    file: str
    status: str  # passed, failed, timed out, no tests, not run
    seconds: float
    summary: str


def file_status(rc: int | None) -> str:
    return "timed out" if rc is None else {0: "passed", 5: "no tests"}.get(rc, "failed")


def verbose_progress(output: str) -> str:
    """What ``pytest -v`` had reported before it was stopped: counts, and the last test named."""
    results = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", output, re.MULTILINE)
    counts: dict[str, int] = {}
    for _, outcome in results:
        counts[outcome.lower()] = counts.get(outcome.lower(), 0) + 1
    started = re.findall(r"^(\S+::\S+)", output, re.MULTILINE)
    done = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no test finished"
    return done + (f"; last started: {started[-1]}" if started else "")


def file_runs_note(runs: list[FileRun]) -> str:
    """The step's note: how many files passed, and which did not, with what they said."""
    good = [r for r in runs if r.status in ("passed", "no tests")]
    bad = [f"{r.file} {r.status} ({r.summary[:100]})" for r in runs if r.status not in ("passed", "no tests")]
    return f"{len(good)} of {len(runs)} files passed" + (": " + "; ".join(bad) if bad else "")


def render_file_runs(runs: list[FileRun]) -> str:
    width = max((len(r.file) for r in runs), default=4)
    return "\n".join(f"{r.status:<10} {r.seconds:6.1f} s  {r.file:<{width}}  {r.summary}" for r in runs)


def sample_cost_verdict(result: dict | None) -> tuple[bool, str]:
    """Whether the cost job timed a whole sample that read NVML, JAX's statistics on a GPU and
    the driver's pool, and the one line that gives the medians."""
    if result is None:
        return False, "the job gave no result"
    missing = [k for k in ("sample_us", "nvml_us", "stats_us", "pool_us") if result.get(k) is None]
    if missing:
        return False, f"no reading of {', '.join(missing)}: {result.get('why', '')}"
    if not result.get("pool_in_sample") or result.get("platform") not in ("gpu", "cuda"):
        return False, f"the sample read no driver pool on a GPU (platform {result.get('platform')})"
    return True, (
        f"one sample {result['sample_us']:.0f} µs against NVML alone {result['nvml_us']:.0f} µs "
        f"(memory_stats {result['stats_us']:.0f} µs, the pool {result['pool_us']:.0f} µs), "
        f"medians of {result['calls']}; thread CPU {result['sample_cpu_us']:.0f} against {result['nvml_cpu_us']:.0f} µs"
    )


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
        self.reports = os.path.join(work, "reports")
        self.env = clean_env(
            dict(os.environ),
            {"GPU_PROOF_TEXTS": os.path.join(work, "texts"), "GPU_PROOF_REPORTS": self.reports},
            self.pythonpath,
        )

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
        warned, note = self.overcommit_warning(os.path.join(traces, f"{recs[0].name}.jsonl"))
        return ok and warned, "; ".join([*notes, note])

    def overcommit_warning(self, trace: str) -> tuple[bool, str]:
        """The server's over-commit warning on the busiest reading of ``trace`` (both processes
        are in each one's NVML readings), kept as reports/two_processes_warning.json."""
        rc, out = run([self.python, os.path.join(JOBS, "overcommit_warning.py"), trace], self.env, 60, self.log)
        result = result_of(out)
        self._keep("two_processes_warning", result)
        return overcommit_warning_verdict(result)

    def _keep(self, name: str, result) -> None:
        with open(os.path.join(self.reports, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, default=repr)

    def _judge_recording(self, rec: Recording, rc: int | None) -> tuple[bool, str]:
        if rc is None:
            return False, "timed out"
        if rec.judge is not None:  # first: what the job kept says more than a missing oom event
            try:
                with open(os.path.join(self.reports, f"{rec.name}.json"), encoding="utf-8") as f:
                    problem = rec.judge(json.load(f))
            except (OSError, ValueError) as exc:
                problem = f"no result kept: {exc}"
            if problem:
                return False, f"exit {rc}; {problem}"
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

    def sample_cost(self, limit: float) -> tuple[bool, str]:
        """One whole sample (NVML, memory_stats, the driver's pool) against NVML alone, under
        cuda_async so that the pool is read; medians of 100 (bench/gpu_proof_jobs/sample_cost.py)."""
        env = clean_env(
            self.env,
            {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
            self.pythonpath,
        )
        rc, out = run([self.python, os.path.join(JOBS, "sample_cost.py"), "--calls", "100"], env, limit, self.log)
        result = result_of(out)
        self._keep("sample_cost", result)
        ok, note = sample_cost_verdict(result)
        return ok and rc == 0, note if rc == 0 else f"exit {rc}; {note}"

    def host_allocation(self, elements: int, seconds: float) -> dict:
        """A CPU JAX process asked for ``elements`` float32 zeros, watched: stopped once it holds
        HOST_RSS_CAP (granted, and being written) or at ``seconds``."""
        env = clean_env(self.env, {"JAX_PLATFORMS": "cpu"}, self.pythonpath)
        proc = subprocess.Popen(
            [self.python, "-c", HOST_ALLOCATION.format(n=elements)],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        began, peak, stopped, late = time.monotonic(), 0, False, False
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status", encoding="utf-8") as f:
                    peak = max(peak, vm_rss(f.read()))
            except OSError:
                pass  # exiting
            stopped = peak >= HOST_RSS_CAP
            late = time.monotonic() - began > seconds
            if stopped or late:
                os.killpg(proc.pid, signal.SIGKILL)  # this child's own process group only
                break
            time.sleep(0.05)
        out, _ = proc.communicate()
        took = time.monotonic() - began
        rc = None if (stopped or late) else proc.returncode
        self.log(f"$ {elements} float32 zeros on the CPU: exit {proc.returncode}, {gib(peak)} held\n{out[-2000:]}")
        return {
            "rc": rc,
            "stopped_at_cap": stopped,
            "rss_peak": peak,
            "seconds": round(took, 2),
            "output": out[-3000:],
            "outcome": allocation_outcome(rc, stopped, peak, took, out),
        }

    def overcommit(self, limit: float) -> tuple[bool, str]:
        """Whether memory overcommit is why 2**42 float32 (16 TiB) failed the jax_versions tests
        here: the kernel's policy and memory, and how a 16 TiB and a 256 TiB request end."""
        found: dict = {}
        try:
            with open("/proc/sys/vm/overcommit_memory", encoding="utf-8") as f:
                found["overcommit_memory"] = f.read().strip()
            with open("/proc/meminfo", encoding="utf-8") as f:
                info = meminfo(f.read())
            found["meminfo"] = {k: info.get(k) for k in ("MemTotal", "MemAvailable", "CommitLimit", "Committed_AS")}
        except OSError as exc:
            found["proc_error"] = str(exc)
        each = max(5.0, min(30.0, (limit - 5) / 2))
        for name, elements in (("2**42", 2**42), ("2**46", 2**46)):
            found[name] = self.host_allocation(elements, each)
        self._keep("overcommit", found)
        read = all(found[n]["rc"] is not None or found[n]["stopped_at_cap"] for n in ("2**42", "2**46"))
        return read, overcommit_note(found)

    def pytest_by_file(
        self, name: str, files: list[str], expression: str | None, limit: float, per_file: float
    ) -> tuple[bool, str]:
        """``files`` one pytest process each (pytest -v, its own JUnit XML under reports/<name>/),
        each stopped at ``per_file`` seconds, so that what ran is known whatever hangs; the files'
        outcomes go to reports/<name>.json and the log."""
        if not files:
            return False, "no test files"
        files, left_out = runnable_test_files(files, self.python, self.env)
        if left_out:
            self.log(f"left out of {name}: {', '.join(left_out)}")
        folder = os.path.join(self.reports, name)
        os.makedirs(folder, exist_ok=True)
        per_test = ["--timeout=60"] if importlib.util.find_spec("pytest_timeout") else []
        selection = ["-m", expression] if expression else []
        end = time.monotonic() + limit
        runs: list[FileRun] = []
        for path in files:
            rel = os.path.relpath(path, REPO)
            left = end - time.monotonic() - 1
            if left < 5:
                runs.append(FileRun(rel, "not run", 0.0, "the step's limit was spent"))
                continue
            report = os.path.join(folder, os.path.splitext(rel.replace(os.sep, "."))[0] + ".xml")
            cmd = [self.python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rfEs", *per_test, *selection]
            began = time.monotonic()
            rc, out = run([*cmd, f"--junitxml={report}", path], self.env, min(per_file, left), self.log)
            status = file_status(rc)
            summary = pytest_summary(out) if rc is not None else verbose_progress(out)
            runs.append(FileRun(rel, status, round(time.monotonic() - began, 1), summary))
        self._keep(name, [r.__dict__ for r in runs])
        self.log(f"{name}, file by file:\n{render_file_runs(runs)}")
        ok = all(r.status in ("passed", "no tests") for r in runs)
        return ok, file_runs_note(runs) + (f"; left out: {', '.join(left_out)}" if left_out else "")

    def pytest(self, name: str, marker: str, expression: str, limit: float) -> tuple[bool, str]:
        files = marked_test_files(os.path.join(REPO, "tests"), marker)
        if not files:
            return False, f"no test file carries @pytest.mark.{marker} yet"
        files, left_out = runnable_test_files(files, self.python, self.env)
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


def runnable_test_files(files: Sequence[str], python: str, env: dict | None = None) -> tuple[list[str], list[str]]:
    """``files`` split into those ``python`` can import and the folders left out (as "tests/server
    (no jupyter_server)"), asking that interpreter, which may not be this one, under ``env`` (the
    tests' own, whose PYTHONPATH holds the carried wheels; default this process's)."""
    left_out = []
    for folder, module in sorted(NEEDS_STACK.items()):
        inside = [f for f in files if f"{os.sep}tests{os.sep}{folder}{os.sep}" in os.path.abspath(f)]
        if not inside:
            continue
        found = subprocess.run(
            [python, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
            capture_output=True,
            timeout=60,
            env=env,
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
    proof.step("record two_processes", 90, lambda limit: proof.record_together(TWO_PROCESSES, limit))
    for rec in RECORDINGS[6:]:
        proof.step(f"record {rec.name}", 90, lambda limit, rec=rec: proof.record(rec, limit))
    proof.step("facts", 200, proof.facts)
    proof.step("sample_cost", 60, proof.sample_cost)
    proof.step("pytest gpu", 180, lambda limit: proof.pytest("pytest_gpu", "gpu", "gpu", limit))
    proof.step("overcommit", 40, proof.overcommit)
    tests = os.path.join(REPO, "tests")
    # File by file: as one run the step did not finish in 286 s on an H100 (2026-11-26).
    proof.step(
        "pytest jax_versions",
        240,
        lambda limit: proof.pytest_by_file(
            "pytest_jax_versions", marked_test_files(tests, "jax_versions"), "jax_versions and not gpu", limit, 90
        ),
    )
    proof.step(
        "pytest server",
        200,
        lambda limit: proof.pytest_by_file(
            "pytest_server", sorted(glob.glob(os.path.join(tests, "server", "test_*.py"))), None, limit, 90
        ),
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
