"""Recording traces: the Recorder, the command line and %gpumem record."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from jupyter_gpumem import record
from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.magic_args import MagicUsageError
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.record import Recorder, RecordError, magic_record, main
from jupyter_gpumem.sampling.sampler import Sampler

DEVICES = (model.DeviceReading(0, "NVIDIA H100 80GB HBM3", "GPU-1", 1000, 400, 600),)


def _sampler() -> Sampler:
    return Sampler(lambda: DEVICES, lambda: model.NotAvailable(model.NOT_STARTED, "not started"), interval=0.01)


@pytest.fixture
def fake_process_sampler(monkeypatch):
    sampler = _sampler()
    monkeypatch.setattr(record, "get_sampler", lambda: sampler)
    yield sampler
    if record._active is not None:
        record._active.stop()
        record._active = None


def _wait_for_samples(recorder: Recorder, n: int) -> None:
    done = threading.Event()
    sub = recorder.sampler.subscribe(lambda s: recorder.samples_written >= n and done.set())
    assert done.wait(10)
    sub.close()


# --- Recorder ------------------------------------------------------------------------------------


def test_recorder_header_is_real_and_lists_the_devices(tmp_path):
    recorder = Recorder(tmp_path / "r.jsonl", _sampler())
    recorder.stop()
    header = read_trace(tmp_path / "r.jsonl").header
    assert header["synthetic"] is False
    assert header["devices"] == [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "total_bytes": 1000}]


def test_recorder_writes_samples_and_events_until_stopped(tmp_path):
    recorder = Recorder(tmp_path / "r.jsonl", _sampler())
    recorder.sampler.add_event("marker", name="step")
    _wait_for_samples(recorder, 3)
    recorder.stop()
    trace = read_trace(tmp_path / "r.jsonl", strict=True)
    assert len(trace.samples) == recorder.samples_written >= 3
    assert [e.data["name"] for e in trace.events] == ["step"]


def test_recorder_stop_leaves_no_thread_and_is_idempotent(tmp_path):
    recorder = Recorder(tmp_path / "r.jsonl", _sampler())
    recorder.stop()
    recorder.stop()
    assert not recorder.sampler.running and not recorder.recording


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--seconds", "1"], "required"),
        (["out.txt"], "must end in .jsonl"),
        (["OUT", "--interval", "0"], "from 0.01 to 3600"),
        (["OUT", "--interval", "fast"], "from 0.01 to 3600"),
        (["OUT", "--seconds", "-3"], "--seconds must be"),
        (["OUT", "--run", "missing.py"], "no such script"),
        (["OUT", "--", "x"], "no --run"),
        (["OUT", "--colour"], "unknown argument '--colour'; valid: --seconds, --interval, --run, --force"),
        (["OUT", "--force", "--force"], "--force is given twice"),
    ],
)
def test_bad_arguments_exit_2_with_a_message_and_write_nothing(tmp_path, capsys, argv, says):
    out = str(tmp_path / "out.jsonl")
    argv = [out if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_help_lists_every_option_and_writes_nothing(tmp_path, capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m jupyter_gpumem.record OUT.jsonl [--seconds N] [--interval S]")
    for option in ("--seconds N", "--interval S", "--run SCRIPT.py", "--force"):
        assert f"  {option}" in out


def test_existing_file_is_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text("precious")
    assert main([str(out), "--seconds", "0"]) == 2
    assert out.read_text() == "precious" and "--force" in capsys.readouterr().err


def test_seconds_records_for_that_long(tmp_path, fake_process_sampler):
    out = tmp_path / "out.jsonl"
    started = time.monotonic()
    assert main([str(out), "--seconds", "0.2", "--interval", "0.02"]) == 0
    took = time.monotonic() - started
    trace = read_trace(out, strict=True)
    span = trace.samples[-1].t - trace.samples[0].t
    # At least 0.2 s of samples; at most one sample per 20 ms tick (11 in 0.2 s, one more at the
    # stop), and it returns soon after: the slack is for a loaded machine, not a second run.
    assert 3 <= len(trace.samples) <= 12
    assert 0.2 <= span < 0.5
    assert took < 1.5


def test_run_executes_the_script_in_process_with_markers(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            from jupyter_gpumem.record import mark
            mark("phase one", pid=os.getpid(), argv=sys.argv[1:])
            """
        )
    )
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_gpumem.record",
            str(out),
            "--interval",
            "0.05",
            "--run",
            str(script),
            "--",
            "a1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    trace = read_trace(out, strict=True)
    names = [e.data.get("name") for e in trace.events if e.name == "marker"]
    assert names == ["script_start", "phase one", "script_end"]
    (phase,) = [e for e in trace.events if e.data.get("name") == "phase one"]
    assert phase.data["pid"] == trace.header["pid"] and phase.data["argv"] == ["a1"]


def test_run_script_that_runs_out_of_memory_records_an_oom_event(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text("import jax.numpy as jnp\njnp.zeros((2**46,), jnp.float32)\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_gpumem.record", str(out), "--run", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.returncode == 1
    (oom,) = [e for e in read_trace(out, strict=True).events if e.name == "oom"]
    assert "RESOURCE_EXHAUSTED" in oom.data["message"]


# --- %gpumem record -----------------------------------------------------------------------------


def test_magic_record_starts_and_stops(tmp_path, fake_process_sampler):
    path = str(tmp_path / "m.jsonl")
    assert "recording to" in magic_record([path])
    assert "recording stopped" in magic_record(["stop"])
    assert read_trace(path, strict=True).samples


def test_magic_record_prints_its_sentence_not_a_quoted_string(tmp_path, fake_process_sampler, capsys):
    from jupyter_gpumem.kernel.magics import parse_line, run_command

    path = tmp_path / "p.jsonl"
    run_command(parse_line(f"record {path} --interval 0.5"))
    run_command(parse_line("record stop"))
    started, stopped = capsys.readouterr().out.splitlines()
    assert started == f"recording to {path} every 0.5 s; %gpumem record stop to finish"
    assert stopped.startswith("recording stopped: ") and stopped.endswith(f" in {path}")


def test_magic_second_start_says_already_recording(tmp_path, fake_process_sampler):
    magic_record([str(tmp_path / "a.jsonl")])
    with pytest.raises(RecordError, match="already recording to .*a.jsonl"):
        magic_record([str(tmp_path / "b.jsonl")])
    assert not (tmp_path / "b.jsonl").exists()


def test_magic_stop_without_recording_is_explained(fake_process_sampler):
    with pytest.raises(RecordError, match="no recording is running"):
        magic_record(["stop"])


@pytest.mark.parametrize(
    "argv, says",
    [
        ([], "PATH.jsonl|stop is required"),
        (["--interval", "1"], "PATH.jsonl|stop is required"),
        (["x.jsonl", "--interval"], "--interval needs a value"),
        (["x.jsonl", "--interval", "0"], "from 0.01 to 3600"),
        (["x.csv"], "must end in .jsonl"),
        (["x.jsonl", "y.jsonl"], "unexpected 'y.jsonl'"),
        (["stop", "--interval", "1"], "stop takes no --interval"),
    ],
)
def test_magic_bad_arguments_are_refused_and_start_nothing(tmp_path, fake_process_sampler, argv, says):
    with pytest.raises(MagicUsageError, match=re.escape(says)):
        magic_record(argv)
    assert record._active is None and not fake_process_sampler.running


def test_magic_record_adds_cell_events_from_the_shell(tmp_path, fake_process_sampler):
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_gpumem.sampling.sampler import unregister_cell_events

    shell = InteractiveShell.instance()
    path = str(tmp_path / "m.jsonl")
    try:
        magic_record([path], shell)
        shell.run_cell("x = 1")
        magic_record(["stop"])
    finally:
        unregister_cell_events(shell)
    assert [e.name for e in read_trace(path).events] == ["cell_start", "cell_end"]


def test_recording_the_fake_nvml_world_is_marked_synthetic_in_nvml_s_readings_only(tmp_path):
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import fake_nvml

    with fake_nvml("three_gpus"):
        recorder = Recorder(tmp_path / "r.jsonl", Sampler(NvmlSource().read, lambda: (), interval=0.1))
        recorder.stop()
    trace = read_trace(tmp_path / "r.jsonl", strict=True)
    assert trace.synthetic is True and len(trace.header["devices"]) == 3
    assert trace.header["synthetic_fields"] == ["devices", "pids_not_here"]


def test_magic_record_onto_a_planted_fifo_is_refused_at_once_and_starts_nothing(tmp_path, fake_process_sampler):
    os.mkfifo(tmp_path / "r.jsonl")  # open(path, "w") would wait here for a reader forever
    with pytest.raises(RecordError, match="is a FIFO"):
        magic_record([str(tmp_path / "r.jsonl")])
    assert record._active is None and stat.S_ISFIFO(os.lstat(tmp_path / "r.jsonl").st_mode)


def test_magic_record_onto_a_planted_link_writes_nothing_through_it(tmp_path, fake_process_sampler):
    (tmp_path / "private").write_text("secret")
    os.symlink(tmp_path / "private", tmp_path / "r.jsonl")
    with pytest.raises(RecordError, match="is a symbolic link"):
        magic_record([str(tmp_path / "r.jsonl")])
    assert record._active is None and (tmp_path / "private").read_text() == "secret"


def test_the_command_line_refuses_a_planted_link_with_exit_2(tmp_path, fake_process_sampler, capsys):
    (tmp_path / "private").write_text("secret")
    os.symlink(tmp_path / "private", tmp_path / "r.jsonl")
    assert main([str(tmp_path / "r.jsonl"), "--force", "--seconds", "0"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err and (tmp_path / "private").read_text() == "secret"


# --- JAX's live CPU arrays, while a monitor's CPU view reads them --------------------------------

HELD = model.CpuArraysReading(bytes=4 << 20, arrays=1)


def _cpu_sampler(reads: list) -> Sampler:
    """A sampler whose JAX runs on the CPU holding ``HELD``; ``reads`` counts the arrays' reads."""
    return Sampler(
        lambda: DEVICES,
        lambda: model.NotAvailable(model.NOT_STARTED, "not started"),
        interval=0.01,
        read_cpu_arrays=lambda: reads.append(1) or HELD,
    )


def test_a_recording_beside_a_live_cpu_view_keeps_every_sample_s_cpu_arrays_and_replays_the_view(tmp_path):
    from jupyter_gpumem.monitor.series import CPU_KEY
    from jupyter_gpumem.monitor.widget import Monitor

    reads: list = []
    sampler = _cpu_sampler(reads)
    cpu_view = sampler.subscribe(lambda s: None, interval=0.01, cpu_arrays=True)  # as a live monitor does
    recorder = Recorder(tmp_path / "r.jsonl", sampler)
    _wait_for_samples(recorder, 4)
    recorder.stop()
    cpu_view.close()
    trace = read_trace(tmp_path / "r.jsonl", strict=True)
    # The first sample (taken at start) and the last (at stop) included, not only the ticks'.
    assert len(trace.samples) >= 4 and [s.cpu_arrays for s in trace.samples] == [HELD] * len(trace.samples)
    replay = Monitor(replay=str(tmp_path / "r.jsonl"))
    assert replay.drawn_devices == [0, CPU_KEY]
    assert "CPU: JAX arrays:</span> <b>4.00 MiB</b> in 1 live array, in host memory" in replay.header.value
    replay.close()


def test_a_recording_with_no_cpu_view_never_reads_the_live_arrays(tmp_path):
    reads: list = []
    sampler = _cpu_sampler(reads)
    recorder = Recorder(tmp_path / "r.jsonl", sampler)
    _wait_for_samples(recorder, 4)
    recorder.stop()
    trace = read_trace(tmp_path / "r.jsonl", strict=True)
    assert reads == [] and {s.cpu_arrays for s in trace.samples} == {None}


def test_magic_record_beside_a_live_monitor_on_real_cpu_jax_keeps_its_arrays(tmp_path):
    """In a fresh process: JAX on the CPU holding one 4 MiB array, a live monitor, then
    ``%gpumem record``; the trace read back carries the array in every sample and replays the
    CPU view."""
    out = tmp_path / "cpu.jsonl"
    script = textwrap.dedent(
        f"""
        import time
        import jax.numpy as jnp
        from jupyter_gpumem.monitor.widget import Monitor
        from jupyter_gpumem.record import magic_record

        x = jnp.ones((1024, 1024), dtype=jnp.float32)
        monitor = Monitor(interval=0.2)
        assert monitor.wait_for_update(0, timeout=60)
        magic_record([{str(out)!r}, "--interval", "0.1"])
        time.sleep(0.8)
        magic_record(["stop"])
        monitor.close()
        """
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    trace = read_trace(out, strict=True)
    assert len(trace.samples) >= 3
    assert {s.cpu_arrays for s in trace.samples} == {model.CpuArraysReading(bytes=4 << 20, arrays=1)}

    from jupyter_gpumem.monitor.series import CPU_KEY
    from jupyter_gpumem.monitor.widget import Monitor

    replay = Monitor(replay=str(out))
    assert CPU_KEY in replay.drawn_devices
    assert "<b>4.00 MiB</b> in 1 live array" in replay.header.value
    replay.close()
