"""Record a trace: ``python -m jupyter_gpumem.record OUT.jsonl``, or ``%gpumem record PATH``.

    python -m jupyter_gpumem.record OUT.jsonl [--seconds N] [--interval S] [--run SCRIPT.py [-- ARGS]]

With ``--run`` the script runs in this process while it is sampled, so the trace holds this
process's JAX allocator statistics; the script may call ``jupyter_gpumem.record.mark(name)`` to
add "marker" events. Traces recorded here are real readings, ``"synthetic": false``, except NVML's
in the fake world (``"synthetic_fields": ["devices", "pids_not_here"]``).
"""

from __future__ import annotations

import atexit
import math
import os
import runpy
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from jupyter_gpumem.core.env_table import READ_AT_START_VARS
from jupyter_gpumem.core.magic_args import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    Grammar,
    MagicUsageError,
    Option,
    check_interval,
)
from jupyter_gpumem.core.readings import NOT_STARTED, NotAvailable
from jupyter_gpumem.core.synthetic import header_fields as synthetic_header
from jupyter_gpumem.core.tracefile import TraceWriter, header_devices
from jupyter_gpumem.sampling.sampler import Sampler, get_sampler
from jupyter_gpumem.sources.nvml import made_up_fields as nvml_made_up_fields

# The settings that decide how JAX's allocator behaves, as the environment gave them.
_SETTINGS_ENV = (*READ_AT_START_VARS, "JAX_PLATFORMS")

_active: Recorder | None = None
_active_lock = threading.Lock()


class RecordError(ValueError):
    """A recording that cannot start or stop as asked; the message says what to do instead."""


def _jax_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("jax")  # reads package metadata; does not import jax
    except Exception:
        return None


class Recorder:
    """Writes every sample and event of ``sampler`` to a trace at ``path`` until ``stop()``.

    Samples carry JAX's live CPU arrays (``cpu_arrays``) while a live monitor's CPU view has the
    sampler read them; a recording alone adds no such read."""

    def __init__(
        self,
        path: str | os.PathLike,
        sampler: Sampler,
        interval: float | None = None,
        header_fields: dict | None = None,
    ):
        # The header's device list comes from a real reading. It and the last one carry JAX's
        # live CPU arrays only where a monitor has the sampler read them already, as its ticks do.
        first = sampler.sample_once(cpu_arrays=sampler.wants_cpu_arrays)
        fields = {
            **synthetic_header(nvml_made_up_fields()),  # the fake world's NVML readings; JAX's are real
            "jax_version": _jax_version(),
            "settings": {"env": {k: os.environ[k] for k in _SETTINGS_ENV if k in os.environ}},
            "devices": header_devices(first.devices),
        }
        fields.update(header_fields or {})
        self.path = os.fspath(path)
        self.sampler = sampler
        self.writer = TraceWriter(path, fields)
        self._jax_seen = not _jax_not_started(first)
        self.writer.write_sample(first)
        self.samples_written = 1
        self._events = sampler.subscribe_events(self._write_event)
        self._samples = sampler.subscribe(self._write_sample, interval=interval)

    def _write_sample(self, sample: Any) -> None:
        if self.writer.closed:
            return
        not_started = _jax_not_started(sample)
        if not_started and self._jax_seen:
            # JAX's backend never stops while the process runs: this is interpreter exit,
            # after jax's own atexit cleared its backends. The recording ends with the last
            # real sample.
            self.writer.close()
            return
        self._jax_seen = self._jax_seen or not not_started
        self.writer.write_sample(sample)
        self.samples_written += 1

    def _write_event(self, event: Any) -> None:
        if not self.writer.closed:
            self.writer.write_event(event)

    @property
    def recording(self) -> bool:
        return not self.writer.closed

    def stop(self, last_sample: bool = True) -> None:
        """Take one last sample (unless ``last_sample`` is False), stop sampling and close the
        file (idempotent)."""
        self._samples.close()
        self._events.close()
        if last_sample and not self.writer.closed:
            end = self.sampler.sample_once(cpu_arrays=self.sampler.wants_cpu_arrays)  # the state at the end
            self._write_sample(end)
        self.writer.close()


def _jax_not_started(sample: Any) -> bool:
    return isinstance(sample.jax, NotAvailable) and sample.jax.code == NOT_STARTED


def stop_active(shell: Any = None, last_sample: bool = True) -> str | None:
    """Stop the recording in progress, if any (``%unload_ext``, interpreter exit); returns the
    line to show, or None when nothing was recording."""
    global _active
    with _active_lock:
        recorder, _active = _active, None
    if recorder is None:
        return None
    recorder.stop(last_sample=last_sample)
    return f"recording stopped: {recorder.samples_written} samples in {recorder.path}"


def _stop_at_exit() -> None:
    # No last sample at exit: JAX may already have cleared its backends (its atexit ran first
    # when jax was imported after this was registered), and a reading then says "not started".
    stop_active(last_sample=False)


def mark(name: str, **data: Any) -> None:
    """Add a "marker" event to the recording in progress (or to the process's timeline)."""
    recorder = _active
    sampler = recorder.sampler if recorder is not None else get_sampler()
    sampler.add_event("marker", name=str(name), **data)


# --- what %gpumem record and the command line take ----------------------------------------------


def _trace_path(text: str) -> str:
    """A trace file to write: a .jsonl name in a folder that exists."""
    if not text.endswith(".jsonl"):
        raise ValueError(f"the trace file must end in .jsonl, got {text!r}")
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        raise ValueError(f"the folder {parent!r} does not exist")
    return text


def _path_or_stop(text: str) -> str:
    return text if text == "stop" else _trace_path(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise ValueError(f"--seconds must be a number of seconds, 0 or more, got {text!r}")
    return value


def _script(text: str) -> str:
    if not os.path.isfile(text):
        raise ValueError(f"--run: no such script {text!r}")
    return text


_INTERVAL = Option(
    "--interval", "S", read=check_interval, help=f"seconds between samples, {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}"
)

RECORD_ARGS = Grammar(
    "%gpumem record",
    options=(_INTERVAL,),
    positionals=(Option("path", "PATH.jsonl|stop", read=_path_or_stop, required=True),),
)

CLI_ARGS = Grammar(
    "python -m jupyter_gpumem.record",
    options=(
        Option(
            "--seconds",
            "N",
            read=_seconds,
            help="how long to record; with --run, how long to go on after the script ends (default: until Ctrl-C, or 0 with --run)",
        ),
        replace(_INTERVAL, default=0.5, help=_INTERVAL.help + " (default 0.5)"),
        Option(
            "--run",
            "SCRIPT.py",
            read=_script,
            help="run this script in-process while recording; arguments after -- go to it",
        ),
        Option("--force", help="overwrite OUT.jsonl if it exists"),
    ),
    positionals=(Option("out", "OUT.jsonl", read=_trace_path, required=True, help="the trace file to write"),),
)


# --- %gpumem record ----------------------------------------------------------------------------


def magic_record(argv: Sequence[str], shell: Any = None) -> str:
    """``%gpumem record PATH [--interval S]`` starts a recording; ``%gpumem record stop`` ends it.

    Returns the line to show. Raises MagicUsageError for bad arguments and RecordError for a
    second start while recording; either way nothing changed.
    """
    global _active
    args = RECORD_ARGS.parse(argv)
    path, interval = args["path"], args["interval"]
    if path == "stop":
        if interval is not None:
            raise MagicUsageError("%gpumem record stop takes no --interval")
        stopped = stop_active()
        if stopped is None:
            raise RecordError("no recording is running; start one with %gpumem record PATH.jsonl")
        return stopped
    with _active_lock:
        if _active is not None:
            raise RecordError(f"already recording to {_active.path}; stop it first with %gpumem record stop")
        sampler = get_sampler()
        if shell is not None:
            from jupyter_gpumem.sampling.sampler import register_cell_events

            register_cell_events(shell, sampler)
        try:
            _active = Recorder(path, sampler, interval=interval)
        except OSError as err:  # a link, FIFO or device at PATH (files.UnsafePathError), no permission
            raise RecordError(f"cannot record to {path!r}: {err.strerror or err}") from None
        atexit.unregister(_stop_at_exit)
        atexit.register(_stop_at_exit)
    every = interval if interval is not None else sampler.interval
    return f"recording to {path} every {every:g} s; %gpumem record stop to finish"


# --- the command line --------------------------------------------------------------------------


def _cli_help() -> str:
    return "\n".join(
        [
            f"usage: {CLI_ARGS.usage()} [-- ARGS]",
            "",
            "Record GPU memory readings to a JSON Lines trace (docs/trace-format.md).",
            "",
            *CLI_ARGS.describe(),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for bad arguments, with nothing written)."""
    global _active
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    if "-h" in argv or "--help" in argv:
        print(_cli_help())
        return 0
    try:
        opts = CLI_ARGS.parse(argv)
        if os.path.exists(opts["out"]) and not opts["force"]:
            raise MagicUsageError(f"{CLI_ARGS.prog}: {opts['out']} exists; pass --force to overwrite it")
        if script_args and opts["run"] is None:
            raise MagicUsageError(
                f"{CLI_ARGS.prog}: arguments after -- are for the script, but no --run SCRIPT.py was given"
            )
    except MagicUsageError as exc:
        print(exc, file=sys.stderr)
        return 2

    out, interval = opts["out"], opts["interval"]
    sampler = Sampler(
        get_sampler().read_devices, get_sampler().read_jax, interval=interval, timeline=get_sampler().timeline
    )
    try:
        recorder = Recorder(out, sampler, interval=interval)
    except OSError as err:
        print(f"{CLI_ARGS.prog}: cannot record to {out!r}: {err.strerror or err}", file=sys.stderr)
        return 2
    with _active_lock:
        _active = recorder
    code = 0
    done = threading.Event()
    try:
        if opts["run"] is not None:
            code = _run_script(opts["run"], script_args, sampler)
            seconds = opts["seconds"] or 0.0
        else:
            seconds = opts["seconds"] if opts["seconds"] is not None else math.inf
        if seconds > 0:
            done.wait(None if math.isinf(seconds) else seconds)
    except KeyboardInterrupt:
        pass
    finally:
        with _active_lock:
            _active = None
        recorder.stop()
    print(f"wrote {recorder.samples_written} samples to {out}", file=sys.stderr)
    return code


def _run_script(path: str, args: list[str], sampler: Sampler) -> int:
    """Run a script as __main__ in this process; an OOM becomes an "oom" event."""
    saved = sys.argv
    sys.argv = [path, *args]
    sampler.add_event("marker", name="script_start", script=path)
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        if "RESOURCE_EXHAUSTED" in str(exc):
            sampler.add_event("oom", message=str(exc)[:2000])
        sampler.add_event("marker", name="script_error", error=message[:2000])
        import traceback

        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved
    sampler.add_event("marker", name="script_end", script=path)
    return 0


if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy, so that a script's
    # ``from jupyter_gpumem.record import mark`` reaches the recording in progress.
    from jupyter_gpumem.record import main as _main

    sys.exit(_main())
