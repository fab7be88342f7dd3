"""Nothing lost: a recording killed mid-run keeps every sample written before the kill.

A real ``python -m jupyter_gpumem.record`` subprocess reads the fake NVML world through the
pynvml drop-in (synthetic) and is killed with SIGKILL while it writes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jupyter_gpumem.core.readings import Sample
from jupyter_gpumem.core.tracefile import TraceWriter, read_trace
from jupyter_gpumem.testing import DROPIN_DIR

from awaiting import WITHIN

ROOT = Path(__file__).resolve().parent.parent


def _complete_sample_lines(data: bytes) -> int:
    lines = data.split(b"\n")[:-1]  # the part after the last newline is not a full line
    return sum(1 for line in lines[1:] if json.loads(line).get("kind") == "sample")


def _wait_for_lines(path: Path, proc: subprocess.Popen, lines: int, timeout: float = WITHIN) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the recorder exited early with {proc.returncode}"
        if path.exists() and path.read_bytes().count(b"\n") >= lines:
            return
        time.sleep(0.02)
    raise AssertionError(f"the recorder wrote fewer than {lines} lines in {timeout:g} s")


def test_recording_killed_mid_run_keeps_every_sample_written_before_the_kill(tmp_path):
    out = tmp_path / "killed.jsonl"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(DROPIN_DIR), str(ROOT)]),
        JUPYTER_GPUMEM_FAKE_NVML="three_gpus",
        JAX_PLATFORMS="cpu",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_gpumem.record", str(out), "--interval", "0.02"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_lines(out, proc, 12)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    data = out.read_bytes()
    trace = read_trace(out)
    assert trace.error is None
    assert trace.synthetic is True
    assert len(trace.samples) == _complete_sample_lines(data) >= 11
    assert [len(s.devices) for s in trace.samples] == [3] * len(trace.samples)


def test_trace_writer_flushes_each_line_so_a_reader_sees_it_before_close(tmp_path):
    path = tmp_path / "open.jsonl"
    writer = TraceWriter(path, {"synthetic": True})
    for i in range(3):
        writer.write_sample(Sample(t=float(i), pid=1, devices=(), jax=()))
    try:
        trace = read_trace(path)  # the writer is still open, as in a killed process
    finally:
        writer.close()
    assert trace.error is None and not trace.truncated
    assert [s.t for s in trace.samples] == [0.0, 1.0, 2.0]


def test_a_line_cut_by_the_kill_is_dropped_and_the_lines_before_it_kept(tmp_path):
    path = tmp_path / "cut.jsonl"
    with TraceWriter(path, {"synthetic": True}) as writer:
        for i in range(4):
            writer.write_sample(Sample(t=float(i), pid=1, devices=(), jax=()))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 7])  # the last line lost its end mid-write
    trace = read_trace(path)
    assert trace.truncated is True and trace.error is None
    assert [s.t for s in trace.samples] == [0.0, 1.0, 2.0]
