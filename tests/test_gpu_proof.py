"""The GPU proof (bench/gpu_proof.sh) where there is no GPU: its fast, clear refusal, its dry run,
and the pure parts that decide what it reports (bench/README.md, "On a GPU")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)
import gpu_proof  # noqa: E402
import gpu_proof_check  # noqa: E402
import gpu_proof_facts  # noqa: E402

SCRIPT = os.path.join(BENCH, "gpu_proof.sh")


def _run_script(tmp_path, **env_extra) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_PROOF_")}
    env.update(GPU_PROOF_PYTHON=sys.executable, OUT=str(tmp_path / "out"), **env_extra)
    began = time.monotonic()
    done = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - began


# --- no GPU: a clear answer in seconds ------------------------------------------------------


def test_without_nvidia_smi_the_proof_says_there_is_nothing_to_prove_and_exits_3_within_seconds(tmp_path):
    done, seconds = _run_script(tmp_path, GPU_PROOF_NVIDIA_SMI=str(tmp_path / "no-such-nvidia-smi"))
    assert done.returncode == 3
    assert "no CUDA device visible: nothing to prove" in done.stderr
    assert seconds < 10
    assert not (tmp_path / "out").exists()  # nothing written, nothing installed


def test_an_nvidia_smi_that_finds_no_device_counts_as_no_gpu(tmp_path):
    # What nvidia-smi -L prints, exit 6, where the driver is loaded but no GPU is visible.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    smi.chmod(0o755)
    done, seconds = _run_script(tmp_path, GPU_PROOF_NVIDIA_SMI=str(smi))
    assert done.returncode == 3 and "nothing to prove" in done.stderr and seconds < 10


def test_nvidia_smi_lists_a_gpu_only_on_its_gpu_lines():
    assert gpu_proof.nvidia_smi_lists_a_gpu("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n", 0)
    assert not gpu_proof.nvidia_smi_lists_a_gpu("No devices were found\n", 6)
    assert not gpu_proof.nvidia_smi_lists_a_gpu("GPU 0: NVIDIA H100 80GB HBM3\n", 9)


# --- the dry run --------------------------------------------------------------------------


def test_the_dry_run_without_wheels_says_how_to_get_them_and_fails(tmp_path):
    (tmp_path / "wheels").mkdir()
    done, seconds = _run_script(tmp_path, GPU_PROOF_DRY="1", GPU_PROOF_WHEELS=str(tmp_path / "wheels"))
    assert done.returncode == 1
    assert f"FAIL  no wheels in {tmp_path / 'wheels'}: run `make gpu-proof-wheels`" in done.stdout
    assert "ok    with no GPU: exit 3" in done.stdout  # the other checks still ran
    assert "ok    bench/gpu_proof.sh is executable" in done.stdout
    assert seconds < 30


def test_every_job_and_probe_of_the_proof_compiles_with_known_variables():
    failed = [what for ok, what in gpu_proof_check.check_structure() if not ok]
    assert failed == []


def test_the_proof_records_at_least_six_traces_in_separate_processes():
    names = [r.name for r in gpu_proof.RECORDINGS + gpu_proof.TWO_PROCESSES]
    assert len(names) >= 6 and len(set(names)) == len(names)
    assert {"oom_runtime", "oom_compile", "platform", "two_processes_a", "two_processes_b"} <= set(names)


# --- the wheel set ------------------------------------------------------------------------


def test_a_requirement_counts_only_where_its_marker_holds_on_the_gpu_machine():
    metadata = (
        "Name: demo\nVersion: 1\n"
        'Requires-Dist: colorama>=0.4.4; sys_platform == "win32"\n'
        'Requires-Dist: typing_extensions>=4.6; python_version < "3.12"\n'
        'Requires-Dist: pexpect>4.6; sys_platform != "win32"\n'
        'Requires-Dist: pytest; extra == "test"\n'
        "Requires-Dist: Stack_Data>=0.6\n"
    )
    gaps = gpu_proof_check.requirement_gaps({"demo.whl": metadata}, {"stack-data"})
    assert gaps == ['demo.whl needs pexpect>4.6; sys_platform != "win32"']


def test_two_versions_of_one_package_are_refused():
    names = [
        "traitlets-5.16.1-py3-none-any.whl",
        "traitlets-5.14.0-py3-none-any.whl",
        "jedi-0.20.1-py2.py3-none-any.whl",
    ]
    assert gpu_proof_check.duplicate_packages(names) == ["traitlets (5.16.1, 5.14.0)"]


def test_the_wheels_must_be_the_pins_exactly():
    pins = gpu_proof_check.parse_pins("# comment\nprompt_toolkit==3.0.53\nparso==0.8.7\n")
    wheels = ["prompt_toolkit-3.0.52-py3-none-any.whl", "wcwidth-0.9.4-cp310-abi3-manylinux2014_x86_64.whl"]
    assert gpu_proof_check.pin_gaps(pins, wheels) == [
        "parso==0.8.7 missing",
        "prompt-toolkit is 3.0.52, pinned 3.0.53",
        "wcwidth 0.9.4 is not pinned",
    ]


@pytest.mark.parametrize(
    "wheel, fits",
    [
        ("ipython-9.18.1-py3-none-any.whl", True),
        ("wcwidth-0.9.4-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
        ("psutil-7.0.0-cp312-cp312-manylinux_2_28_x86_64.whl", True),
        ("psutil-7.0.0-cp311-cp311-manylinux_2_28_x86_64.whl", False),
        ("psutil-7.0.0-cp312-cp312-manylinux_2_28_aarch64.whl", False),
        ("psutil-7.0.0-cp312-cp312-macosx_11_0_arm64.whl", False),
    ],
)
def test_a_wheel_fits_the_gpu_machine_only_for_cpython_312_on_x86_64_linux(wheel, fits):
    assert gpu_proof_check.wheel_fits_device(wheel) is fits


def test_the_pinned_wheels_list_parses_and_names_ipython():
    with open(gpu_proof_check.PINS_FILE, encoding="utf-8") as f:
        pins = gpu_proof_check.parse_pins(f.read())
    assert "ipython" in pins and "plotly" not in pins  # the gpu tests drive IPython; nothing draws


# --- what the proof runs and reports ------------------------------------------------------


def test_each_recording_starts_without_the_callers_allocator_variables():
    base = {
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
        "TF_GPU_ALLOCATOR": "cuda_malloc_async",
        "HOME": "/root",
        "PYTHONPATH": "/elsewhere",
    }
    env = gpu_proof.clean_env(base, {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, "/repo:/tmp/site")
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "XLA_PYTHON_CLIENT_ALLOCATOR" not in env and "TF_GPU_ALLOCATOR" not in env
    assert env["PYTHONPATH"] == os.pathsep.join(["/repo:/tmp/site", "/elsewhere"]) and env["HOME"] == "/root"


def test_a_step_never_runs_past_the_budget_less_the_packing_reserve():
    assert gpu_proof.step_timeout(60, now=0, deadline=480) == 60
    assert gpu_proof.step_timeout(60, now=440, deadline=480) == 40 - gpu_proof.PACK_RESERVE_S
    assert gpu_proof.step_timeout(60, now=479, deadline=480) == 0


def test_the_gpu_tests_are_found_by_their_marker():
    tests = os.path.dirname(os.path.abspath(__file__))
    found = {os.path.basename(p) for p in gpu_proof.marked_test_files(tests, "gpu")}
    assert {"test_gpu_settings.py", "test_gpu_cuda_async.py", "test_device_identity.py"} <= found
    assert "test_units.py" not in found


def _probe(name):
    return next(p for p in gpu_proof_facts.PROBES if p.name == name)


def test_a_probe_that_crashed_gives_no_reading_rather_than_a_verdict():
    crashed = {"_rc": 1, "_result": False, "_timed_out": False, "_stderr": "Traceback ...\nRuntimeError: no GPU"}
    rows = gpu_proof_facts.judge(_probe("bfc_growing"), crashed)
    assert {r.verdict for r in rows} == {gpu_proof_facts.NO_READING}
    assert "RuntimeError: no GPU" in rows[0].seen


def test_a_probe_meant_to_abort_is_judged_by_its_exit():
    probe = _probe("async_prealloc_malformed")
    aborted = {"_rc": -6, "_result": False, "_timed_out": False, "_stderr": "F0000 ... INVALID_ARGUMENT\n"}
    ran = {"_rc": 0, "_result": True, "_timed_out": False, "_stderr": "", "error": None, "platform": "gpu"}
    assert gpu_proof_facts.judge(probe, aborted)[0].verdict == gpu_proof_facts.HOLDS
    assert gpu_proof_facts.judge(probe, ran)[0].verdict == gpu_proof_facts.FAILS


def test_cuda_async_exactness_is_judged_on_the_rise_in_bytes_in_use():
    probe = _probe("cuda_async_growing")
    exact = {
        "_result": True,
        "s0": {"bytes_in_use": 4096},
        "s1": {"bytes_in_use": 4096 + 4_000_004},
        "requested": 4_000_004,
    }
    rounded = dict(exact, s1={"bytes_in_use": 4096 + 4_000_256})
    check = probe.checks[0]
    assert check.judge(exact)[1] is True
    assert check.judge(rounded) == ("bytes_in_use rose by 4,000,256 for 4,000,004 requested", False)


def test_the_oom_size_is_read_in_xlas_human_units_only():
    assert (
        gpu_proof_facts.human_oom_size("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 21.88GiB.")
        == "21.88GiB"
    )
    assert gpu_proof_facts.human_oom_size("Out of memory while trying to allocate 7406166528 bytes.") is None


def test_the_fact_table_has_a_row_per_check_and_counts_each_verdict():
    rows = [
        gpu_proof_facts.Row("p", "a | b", "page", "x", "y", gpu_proof_facts.HOLDS),
        gpu_proof_facts.Row("p", "c", "page", "x", "z", gpu_proof_facts.NO_READING),
    ]
    table = gpu_proof_facts.render_table(rows)
    assert "| p | a \\| b | x | y | **holds** |" in table
    assert table.rstrip().endswith("1 hold, 0 do not hold, 1 without a reading.")


def test_an_unknown_probe_name_is_refused_with_the_valid_ones():
    with pytest.raises(SystemExit, match="unknown probe.*nope.*valid: cuda_async_growing"):
        gpu_proof_facts.select(["nope"])


def test_a_probe_that_ran_on_the_cpu_gives_no_reading_whatever_it_saw():
    # A CPU's memory_stats() is None too: that must not count as "platform: memory_stats() is None".
    on_cpu = {
        "_rc": 0,
        "_result": True,
        "_timed_out": False,
        "_stderr": "",
        "stats_is_none": True,
        "s": None,
        "platform": "cpu",
        "error": "RESOURCE_EXHAUSTED: Out of memory allocating 412316860416 bytes.",
    }
    rows = gpu_proof_facts.judge(_probe("platform"), on_cpu)
    assert [r.verdict for r in rows] == [gpu_proof_facts.NO_READING] * 2
    assert rows[0].seen == "JAX ran on cpu, not on a GPU"


def test_a_backend_that_failed_to_start_is_still_judged():
    raised = {
        "_rc": 0,
        "_result": True,
        "_timed_out": False,
        "_stderr": "",
        "platform": None,
        "error": "RuntimeError: Unable to initialize backend 'cuda'",
        "cuda_plugins": ["jax-cuda13-plugin"],
    }
    row = gpu_proof_facts.judge(_probe("bad_allocator"), raised)[0]
    assert row.verdict == gpu_proof_facts.FAILS and row.seen.startswith("raised: RuntimeError: Unable to initialize")


@pytest.mark.parametrize(
    "text, is_oom",
    [
        ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 128.00GiB.", True),
        ("INTERNAL: Failed to load in-memory CUBIN: CUDA_ERROR_OUT_OF_MEMORY: out of memory", True),
        ("jax.errors.JaxRuntimeError: INTERNAL: ptxas exited with non-zero error code 255", False),
    ],
)
def test_only_an_out_of_memory_text_counts_as_the_oom_a_recording_wanted(text, is_oom):
    assert gpu_proof.is_oom_text(text) is is_oom


def test_a_trace_without_a_gpu_reading_is_not_a_recording_of_the_gpu(tmp_path):
    from jupyter_gpumem.core.readings import NotAvailable, Sample
    from jupyter_gpumem.core.tracefile import TraceWriter

    path = tmp_path / "t.jsonl"
    with TraceWriter(path, {"synthetic": False}) as writer:
        for t in range(3):
            writer.write_sample(
                Sample(
                    float(t),
                    1,
                    NotAvailable("no_library", "no NVML"),
                    NotAvailable("not_started", "JAX has not started"),
                )
            )
    assert gpu_proof.trace_problem(str(path)) == "no sample has a JAX reading on a GPU (JAX ran on the CPU?)"
    assert gpu_proof.trace_problem(str(tmp_path / "absent.jsonl")) == "no trace written"


def test_a_test_folder_whose_stack_is_missing_is_left_out_and_named(monkeypatch, tmp_path):
    """The GPU machine has no Jupyter: tests/server cannot be imported there, so the proof leaves
    it out and says so, asking the interpreter that runs the tests, not this one."""
    files = [str(tmp_path / "tests" / "server" / "test_a.py"), str(tmp_path / "tests" / "core" / "test_b.py")]
    monkeypatch.setattr(gpu_proof, "NEEDS_STACK", {"server": "no_such_module_here"})
    assert gpu_proof.runnable_test_files(files, sys.executable) == (
        [files[1]],
        ["tests/server (no no_such_module_here)"],
    )
    monkeypatch.setattr(gpu_proof, "NEEDS_STACK", {"server": "json"})
    assert gpu_proof.runnable_test_files(files, sys.executable) == (files, [])


# --- the jax_versions tests, file by file, and the host's overcommit -----------------------------


def test_each_file_is_passed_failed_timed_out_or_without_tests_by_its_exit():
    assert [gpu_proof.file_status(rc) for rc in (0, 1, 2, 5, None)] == [
        "passed",
        "failed",
        "failed",
        "no tests",
        "timed out",
    ]


def test_a_file_stopped_at_its_limit_says_how_far_pytest_got():
    output = (
        "tests/doctor/test_oom.py::test_a PASSED                    [ 10%]\n"
        "tests/doctor/test_oom.py::test_b FAILED                    [ 20%]\n"
        "tests/doctor/test_oom.py::test_c PASSED                    [ 30%]\n"
        "tests/doctor/test_oom.py::test_d "
    )
    assert gpu_proof.verbose_progress(output) == "2 passed, 1 failed; last started: tests/doctor/test_oom.py::test_d"
    assert gpu_proof.verbose_progress("") == "no test finished"


def test_the_file_by_file_note_names_each_file_that_did_not_pass():
    runs = [
        gpu_proof.FileRun("tests/a.py", "passed", 3.0, "4 passed in 2.9s"),
        gpu_proof.FileRun("tests/b.py", "timed out", 120.0, "2 passed; last started: tests/b.py::test_x"),
        gpu_proof.FileRun("tests/c.py", "no tests", 1.0, "4 deselected"),
        gpu_proof.FileRun("tests/d.py", "not run", 0.0, "the step's limit was spent"),
    ]
    assert gpu_proof.file_runs_note(runs) == (
        "2 of 4 files passed: tests/b.py timed out (2 passed; last started: tests/b.py::test_x); "
        "tests/d.py not run (the step's limit was spent)"
    )
    assert gpu_proof.render_file_runs(runs).splitlines()[1] == (
        "timed out   120.0 s  tests/b.py  2 passed; last started: tests/b.py::test_x"
    )


MEMINFO = """MemTotal:       131891740 kB
MemFree:        120000000 kB
MemAvailable:   125829120 kB
CommitLimit:    65945868 kB
Committed_AS:    4194304 kB
HugePages_Total:       0
"""


def test_meminfo_is_read_in_bytes_and_counts_stay_counts():
    info = gpu_proof.meminfo(MEMINFO)
    assert info["MemAvailable"] == 125829120 * 1024 == 120 * 2**30
    assert info["HugePages_Total"] == 0
    assert gpu_proof.vm_rss("Name:\tpython\nVmRSS:\t  409600 kB\n") == 400 * 2**20
    assert gpu_proof.vm_rss("Name:\tpython\n") == 0


@pytest.mark.parametrize(
    "rc, stopped, output, outcome",
    [
        (None, True, "", "granted: the process held 4.0 GiB after 1.5 s and rising (stopped by the proof)"),
        (None, False, "", "still running after 1.5 s, holding 4.0 GiB (stopped by the proof)"),
        (0, False, "granted and filled\n", "granted and filled in 1.5 s"),
        (
            1,
            False,
            "Traceback ...\njaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 bytes.\n",
            "refused in 1.5 s: jaxlib._jax.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 bytes.",
        ),
        (-9, False, "", "killed by signal 9 after 1.5 s, having held 4.0 GiB"),
        (1, False, "ImportError: no jax\n", "failed with exit 1 in 1.5 s: ImportError: no jax"),
    ],
)
def test_a_host_allocation_is_told_apart_as_refused_granted_or_killed(rc, stopped, output, outcome):
    assert gpu_proof.allocation_outcome(rc, stopped, 4 << 30, 1.5, output) == outcome


def test_the_overcommit_note_gives_the_policy_the_memory_and_both_requests():
    found = {
        "overcommit_memory": "1",
        "meminfo": gpu_proof.meminfo(MEMINFO),
        "2**42": {"outcome": "granted: ..."},
        "2**46": {"outcome": "refused in 0.2 s: ..."},
    }
    assert gpu_proof.overcommit_note(found) == (
        "vm.overcommit_memory=1, MemAvailable 120.0 GiB, CommitLimit 62.9 GiB; "
        "2**42 float32: granted: ...; 2**46 float32: refused in 0.2 s: ..."
    )


# --- a "Peak buffers" text, read to source lines ------------------------------------------------

PEAK_TEXT = (
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 57.75GiB "
    "with allocator GPU_0_bfc on device 0.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n"
    "Peak buffers:\n\tBuffer 1:\n\t\tSize: 57.75GiB\n"
)
REPORT = """Out of memory on GPU 0 (NVIDIA H200): 57.75 GiB asked for.

Live at the peak of step (oom_peak_buffers.py line 36), by source line:
  oom_peak_buffers.py line 37 in step: output or temporary 57.75 GiB; multiply f32[15502147584]
  (no source line: made by XLA): parameter 57.75 GiB

Fixes:
"""


def _peak_result(**changes):
    return {"file": "oom_peak_buffers.py", "lines": [37, 38], "text": PEAK_TEXT, "report": REPORT, **changes}


def test_the_peak_rows_are_the_lines_under_their_title():
    assert gpu_proof.peak_rows(REPORT) == REPORT.splitlines()[3:5]
    assert gpu_proof.peak_rows("no peak here") == []


def test_a_peak_buffers_text_whose_report_names_the_jobs_lines_is_what_was_wanted():
    assert gpu_proof.peak_buffers_problem(_peak_result()) is None


@pytest.mark.parametrize(
    "changes, problem",
    [
        (
            {"text": "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.00GiB"},
            "no 'Peak buffers:' in XLA's text (jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 9.00GiB)",
        ),
        ({"text": None}, "no 'Peak buffers:' in XLA's text (no error at all)"),
        ({"report": None, "report_error": "KeyError: 'x'"}, "the doctor gave no report: KeyError: 'x'"),
        ({"report": "Out of memory.\n"}, "the report has no 'Live at the peak' rows"),
        ({"lines": [50]}, "no peak row names oom_peak_buffers.py at lines [50]"),
        (
            {"report": REPORT.replace("(no source line: made by XLA)", "stack frame 7 (no line in XLA's text)")},
            "a peak row leaves a stack frame unresolved",
        ),
    ],
)
def test_a_peak_buffers_result_says_what_it_lacks(changes, problem):
    assert gpu_proof.peak_buffers_problem(_peak_result(**changes)).startswith(problem)


def test_the_peak_buffers_recording_is_judged_on_what_the_job_kept():
    rec = next(r for r in gpu_proof.RECORDINGS if r.name == "oom_peak_buffers")
    assert rec.judge is gpu_proof.peak_buffers_problem and rec.expect_rc == 1 and rec.env == {}


# --- two kernels on one GPU, the sample's cost ------------------------------------------------------


def test_the_two_processes_are_one_preallocating_and_one_growing():
    a, b = gpu_proof.TWO_PROCESSES
    assert a.env == {} and b.env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_the_warning_job_finds_the_servers_overcommit_warning_on_two_kernels(tmp_path):
    """The job the proof runs on the two processes' trace, here on the synthetic trace of two
    kernels holding 75% and 20% of a card."""
    trace = os.path.join(os.path.dirname(BENCH), "jupyter_gpumem", "demo_traces", "synthetic_two_kernels.jsonl")
    done = subprocess.run(
        [sys.executable, os.path.join(gpu_proof.JOBS, "overcommit_warning.py"), trace],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(BENCH), os.environ.get("PYTHONPATH", "")])),
    )
    ok, note = gpu_proof.overcommit_warning_verdict(gpu_proof.result_of(done.stdout))
    assert ok, done.stderr
    assert note.startswith("the server warns (pid 41234 76%, pid 41000 22%): 2 kernels share GPU 0 and hold 97%")


@pytest.mark.parametrize(
    "result, verdict",
    [
        (None, (False, "the warning job gave no result")),
        (
            {"unavailable": "ModuleNotFoundError: No module named 'zmq'"},
            (False, "the server's warning could not be read here: ModuleNotFoundError: No module named 'zmq'"),
        ),
        (
            {"processes": [{"pid": 7, "share": 0.75}, {"pid": 8, "share": 0.05}], "warnings": []},
            (False, "no over-commit warning on the busiest reading (pid 7 75%, pid 8 5%)"),
        ),
    ],
)
def test_no_overcommit_warning_is_a_failure_that_says_why(result, verdict):
    assert gpu_proof.overcommit_warning_verdict(result) == verdict


def test_a_jobs_result_is_its_last_result_line():
    out = 'noise\nGPU_PROOF_RESULT {"a": 1}\nmore\nGPU_PROOF_RESULT {"a": 2}\ntrailing\n'
    assert gpu_proof.result_of(out) == {"a": 2}
    assert gpu_proof.result_of("GPU_PROOF_RESULT {broken") is None


SAMPLE_COST = {
    "calls": 100,
    "platform": "gpu",
    "pool_in_sample": True,
    "sample_us": 412.3,
    "nvml_us": 180.2,
    "stats_us": 20.4,
    "pool_us": 11.9,
    "sample_cpu_us": 300.0,
    "nvml_cpu_us": 120.0,
}


def test_the_sample_cost_names_the_medians_of_the_whole_sample_and_its_parts():
    assert gpu_proof.sample_cost_verdict(SAMPLE_COST) == (
        True,
        "one sample 412 µs against NVML alone 180 µs (memory_stats 20 µs, the pool 12 µs), medians of 100; "
        "thread CPU 300 against 120 µs",
    )


@pytest.mark.parametrize(
    "changes, note",
    [
        ({"pool_in_sample": False}, "the sample read no driver pool on a GPU (platform gpu)"),
        ({"platform": "cpu"}, "the sample read no driver pool on a GPU (platform cpu)"),
        ({"pool_us": None, "why": "no libcuda"}, "no reading of pool_us: no libcuda"),
    ],
)
def test_a_sample_cost_without_the_pool_on_a_gpu_fails(changes, note):
    assert gpu_proof.sample_cost_verdict({**SAMPLE_COST, **changes}) == (False, note)


# --- late settings and the cuda_async pool: their judges -----------------------------------------


def test_a_late_fraction_holds_where_the_limit_stays_and_the_change_is_named():
    probe = _probe("late_fraction")
    seen = {
        "_result": True,
        "platform": "gpu",
        "s": {"bytes_limit": 60_000_000_000},
        "total": 80_000_000_000,
        "fraction_shown": "0.75",
        "fraction_source": "JAX default",
        "late": {"variable": "XLA_PYTHON_CLIENT_MEM_FRACTION", "asked": "0.3", "in_effect": "0.75"},
        "warnings": ["XLA_PYTHON_CLIENT_MEM_FRACTION was changed after JAX started to '0.3' ..."],
    }
    rows = gpu_proof_facts.judge(probe, seen)
    assert [r.verdict for r in rows] == [gpu_proof_facts.HOLDS] * 2
    applied = dict(seen, s={"bytes_limit": 24_000_000_000}, fraction_shown="0.3", late=None)
    assert [r.verdict for r in gpu_proof_facts.judge(probe, applied)] == [gpu_proof_facts.FAILS] * 2


def _pool(*reserved):
    order = ["holding", "deleted", "effects_barrier", "small_op_synced", "clear_caches", "waited_3s", "op_after_wait"]
    seen = {k: {"reserved": r, "nvml_used": 1 << 30} for k, r in zip(order, reserved)}
    return {"_result": True, "platform": "gpu", "seen": seen, "order": order}


def test_the_pool_after_delete_is_judged_on_the_wait_and_on_the_operation_after_it():
    probe = _probe("cuda_async_pool_after_delete")
    kept_then_returned = _pool(*([8 << 30] * 6), 0)
    assert [r.verdict for r in gpu_proof_facts.judge(probe, kept_then_returned)] == [gpu_proof_facts.HOLDS] * 2
    returned_at_sync = _pool(8 << 30, 8 << 30, 0, 0, 0, 0, 0)
    assert [r.verdict for r in gpu_proof_facts.judge(probe, returned_at_sync)] == [
        gpu_proof_facts.FAILS,
        gpu_proof_facts.HOLDS,
    ]
    unread = _pool(*([None] * 7))
    assert {r.verdict for r in gpu_proof_facts.judge(probe, unread)} == {gpu_proof_facts.NO_READING}


def test_a_stack_carried_on_the_tests_pythonpath_counts_as_there(monkeypatch, tmp_path):
    """The carried wheels are installed into a folder on the tests' PYTHONPATH, not into the
    interpreter: the question is asked under the tests' environment."""
    (tmp_path / "carried_stack_here.py").write_text("")
    files = [str(tmp_path / "tests" / "server" / "test_a.py")]
    monkeypatch.setattr(gpu_proof, "NEEDS_STACK", {"server": "carried_stack_here"})
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    assert gpu_proof.runnable_test_files(files, sys.executable, env) == (files, [])
    assert gpu_proof.runnable_test_files(files, sys.executable)[1] == ["tests/server (no carried_stack_here)"]


def test_the_prepared_calls_in_the_readme_name_only_steps_and_probes_the_proof_has():
    """bench/README.md, "On a GPU", gives the next session its device commands: a misspelt step
    in GPU_PROOF_ONLY would be skipped silently there, and a misspelt probe refused."""
    with open(os.path.join(BENCH, "gpu_proof.py"), encoding="utf-8") as f:
        source = f.read()
    steps = set(re.findall(r'proof\.step\(\s*"([^"]+)"', source))
    steps |= {f"record {r.name}" for r in gpu_proof.RECORDINGS}
    words = steps | {s.split()[-1] for s in steps}
    with open(os.path.join(BENCH, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    calls = re.findall(r"^\| \d \| `(GPU_PROOF_ONLY=[^`]+)` \| (\d+) \|", readme, re.MULTILINE)
    assert len(calls) == 2
    for command, timeout in calls:
        only = re.search(r"GPU_PROOF_ONLY=(\S+)", command).group(1).split(",")
        assert set(only) <= words, set(only) - words
        probes = re.search(r"GPU_PROOF_PROBES=(\S+)", command)
        if probes:
            gpu_proof_facts.select(probes.group(1).split(","))  # raises on an unknown probe
        budget = float(re.search(r"GPU_PROOF_BUDGET_S=(\d+)", command).group(1))
        assert budget + 60 <= int(timeout) <= 600  # the install and packing fit under the call's limit
