"""The ``%gpumem`` magic: which command a line is (``parse_line``, pure) and a thin IPython
shell around it.

Settings words are read by the one option parser (``magic_args``) and validated, all of them,
before any is applied. Subcommands owned by other modules (monitor, record, doctor, ...) read
their own words with that parser, and are imported only when used, so loading stays cheap.
"""

from __future__ import annotations

import importlib
import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_gpumem.core.errors import GpumemError, did_you_mean
from jupyter_gpumem.core.magic_args import Grammar, MagicUsageError, Option
from jupyter_gpumem.core.readings import AllocatorSettings

__all__ = [
    "Command",
    "HELP",
    "MagicUsageError",
    "SETTINGS",
    "parse_line",
    "run_command",
    "GpumemMagics",
    "load",
    "unload",
]

HELP = """\
%gpumem: see and steer JAX's GPU memory.

Settings (before JAX's first operation; several may go on one line,
e.g. `%gpumem preallocate off fraction .4`):
  %gpumem preallocate on|off      XLA_PYTHON_CLIENT_PREALLOCATE
  %gpumem fraction F              0 < F <= 1: .5, 0.5 or 50%  (XLA_CLIENT_MEM_FRACTION)
  %gpumem allocator NAME          a name the installed JAX accepts: default, bfc, platform,
                                  cuda_async (vmm, address where supported);
                                  cuda_malloc_async is taken as cuda_async
  %gpumem async-prealloc SIZE     bytes, 512MiB, 2GiB or all  (TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC)
  %gpumem remat on|off            jax_compiler_enable_remat_pass; once JAX has started, also
                                  clears its compiled programs so they compile again with it
  %gpumem tensorflow [growth|cpu|default]
                                  TensorFlow in the same process, before it starts: growth
                                  (TF_FORCE_GPU_ALLOW_GROWTH=true), cpu (its GPUs hidden from it,
                                  not from JAX), default

  JAX reads these once, when its backend starts. After that, asking for a different value is an
  error: restart the kernel and run the settings cell first. remat is the exception.

  %gpumem                         same as %gpumem status
  %gpumem status                  each setting, where it came from, the backend, warnings
  %gpumem reset                   take back what %gpumem set

Watching and diagnosing:
  %gpumem monitor [--interval S] [--window MINUTES] [--device N|all] [--replay PATH|NAME]
                                  NAME: a demo trace the package ships (jupyter_gpumem.demo_traces)
  %gpumem record PATH.jsonl|stop [--interval S]
                                  record samples to a trace file (JSON Lines)
  %gpumem doctor [on|off]         explain out-of-memory errors when a cell fails (on by default)
  %gpumem arrays [--top N] [--by shape|dtype|cell|name|line|device] [--map]
  %gpumem free [--history] [--caches] [--gc]
  %gpumem cells [on|off]          memory per cell
  %gpumem estimate EXPR           memory a jitted call would need, before running it
  %gpumem peak CALL               what is live at a call's peak, by source line, with fixes (compiled, not run)
  %gpumem snapshot PATH           JAX's device memory profile (pprof, gzip), with allocating stacks

  %gpumem --help, %gpumem?        this text

From Python: jupyter_gpumem.configure(preallocate=False, fraction=0.4), jupyter_gpumem.status().
"""

# Subcommand -> (module, function), each called as function(argv, shell).
DELEGATES = {
    "monitor": ("jupyter_gpumem.monitor.widget", "magic_monitor"),
    "record": ("jupyter_gpumem.record", "magic_record"),
    "doctor": ("jupyter_gpumem.doctor.hooks", "magic_doctor"),
    "arrays": ("jupyter_gpumem.doctor.arrays", "magic_arrays"),
    "free": ("jupyter_gpumem.doctor.freeing", "magic_free"),
    "cells": ("jupyter_gpumem.doctor.hooks", "magic_cells"),
    "estimate": ("jupyter_gpumem.doctor.estimating", "magic_estimate"),
    "peak": ("jupyter_gpumem.doctor.peak_report", "magic_peak"),
    "snapshot": ("jupyter_gpumem.doctor.snapshot", "magic_snapshot"),
    "tensorflow": ("jupyter_gpumem.settings.tensorflow", "magic_tensorflow"),
}

_HELP_WORDS = ("--help", "-h", "help")


def _setting(name: str):
    """Reads a settings word as ``(value, note)``; a bad value raises SettingsError."""

    def read(text: str) -> tuple[Any, str | None]:
        from jupyter_gpumem.settings.apply import coerce_setting

        return coerce_setting(name, text)

    return read


# The settings words, each an AllocatorSettings field; several may share one line.
SETTINGS = Grammar(
    "%gpumem",
    options=(
        Option("preallocate", "on|off", read=_setting("preallocate"), help="on or off"),
        Option("fraction", "F", read=_setting("fraction"), help="0 < F <= 1, e.g. .5, 0.5 or 50%"),
        Option(
            "allocator",
            "NAME",
            read=_setting("allocator"),
            help="default, bfc, platform, cuda_async (vmm, address where the installed JAX has them)",
        ),
        Option(
            "async-prealloc",
            "SIZE",
            read=_setting("async_prealloc"),
            aliases=("async_prealloc",),
            help="bytes, e.g. 512MiB or 2GiB, or all",
        ),
        Option("remat", "on|off", read=_setting("remat"), help="on or off"),
    ),
)
_WORDS = (*(o.name for o in SETTINGS.options), "status", "reset", *DELEGATES, "--help")
_ALL_WORDS = ", ".join(_WORDS)


@dataclass(frozen=True)
class Command:
    """One parsed ``%gpumem`` line.

    ``action`` is "status", "reset", "help", "settings", or a delegated subcommand ("monitor",
    "record", ...). ``settings`` and ``notes`` are filled for "settings"; ``argv`` holds a
    delegated subcommand's arguments (for ``estimate`` and ``peak``, the expression as one string).
    """

    action: str
    settings: AllocatorSettings = field(default_factory=AllocatorSettings)
    notes: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()


def parse_line(line: str) -> Command:
    """Parse a ``%gpumem`` line without side effects. Raises MagicUsageError or SettingsError,
    each naming the valid words or values."""
    text = (line or "").strip()
    if not text:
        return Command("status")
    head, _, rest = text.partition(" ")
    head_l = head.lower()
    if head_l in _HELP_WORDS:
        return Command("help")
    if head_l in DELEGATES:
        if head_l in ("estimate", "peak"):  # the expression is Python: kept whole, never split
            expr = rest.strip()
            return Command(head_l, argv=(expr,) if expr else ())
        try:
            argv = tuple(shlex.split(rest))
        except ValueError as err:
            raise MagicUsageError(f"{head_l}: {err}") from None
        return Command(head_l, argv=argv)
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise MagicUsageError(f"cannot read {text!r}: {err}") from None
    if head_l in ("status", "reset"):
        if len(words) > 1:
            raise MagicUsageError(f"{head_l} takes no arguments, got {' '.join(words[1:])!r}")
        return Command(head_l)
    if any(word.lower() in _HELP_WORDS[:2] for word in words):
        return Command("help")
    if SETTINGS.find(words[0]) is None:
        raise MagicUsageError(f"unknown word {words[0]!r}{did_you_mean(words[0], _WORDS)}; valid: {_ALL_WORDS}")
    values: dict[str, Any] = {}
    notes: list[str] = []
    for name, given in SETTINGS.parse(words).items():
        if given is not None:
            values[name], note = given
            if note:
                notes.append(f"note: {note}")  # shown like the notes applying adds
    return Command("settings", AllocatorSettings(**values), tuple(notes))


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


def _reset_all() -> str:
    """``%gpumem reset``: the allocator settings and ``%gpumem tensorflow``, taken back."""
    from jupyter_gpumem.settings import tensorflow as tensorflow_settings
    from jupyter_gpumem.settings.apply import reset

    applied = reset()  # raises, changing nothing, where a value in effect cannot be taken back
    tensorflow = tensorflow_settings.reset()
    if tensorflow is None:
        return str(applied)
    if not applied.env_written and not applied.config_written:
        return "gpumem: reset: " + tensorflow
    return f"{applied}; {tensorflow}"


def run_command(command: Command, shell: Any = None) -> None:
    """Carry out a parsed command: print, display, or hand over to the owning module."""
    if command.action == "help":
        print(HELP)
        return
    if command.action == "status":
        from jupyter_gpumem.settings.status import status

        _display(status())
        return
    if command.action == "reset":
        print(_reset_all())
        return
    if command.action == "settings":
        from jupyter_gpumem.settings.apply import apply_settings

        text = str(apply_settings(command.settings, command.notes))
        if text:
            print(text)
        return
    module_name, function_name = DELEGATES[command.action]
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        result = function(list(command.argv), shell)
    except GpumemError:
        raise
    except ValueError as err:  # the subcommands' own "bad argument" errors
        raise MagicUsageError(_prefixed(command.action, str(err))) from None
    if type(result) is str:  # a plain sentence: printed, not shown as a quoted Python string
        print(result)
    elif result is not None:
        _display(result)


def _prefixed(action: str, message: str) -> str:
    """``message`` under ``%gpumem ACTION``, its own mention of the command not said twice."""
    for said in (f"%gpumem {action}: ", f"{action}: "):
        if message.startswith(said):
            message = message[len(said) :]
            break
    else:
        if message.startswith(f"%gpumem {action} "):
            return message
        if message.startswith(f"{action} "):
            return f"%gpumem {message}"
    return f"%gpumem {action}: {message}"


@magics_class
class GpumemMagics(Magics):
    @line_magic
    def gpumem(self, line: str = "") -> None:
        try:
            run_command(parse_line(line), self.shell)
        except GpumemError as err:
            # UsageError: IPython shows the message without a traceback, and the cell fails.
            raise UsageError(str(err)) from None
        except KeyboardInterrupt:
            # Our own work was interrupted: one line, no traceback from inside the package; the
            # cell still fails, so Run All stops as it would for any interrupt.
            word = (line or "").split(maxsplit=1)[0] if (line or "").strip() else "status"
            raise UsageError(f"%gpumem {word}: interrupted") from None


GpumemMagics.gpumem.__doc__ = HELP


def _watch_backend_start(shell: Any) -> None:
    from jupyter_gpumem.sources.jax_start import watch

    def cells() -> Any:
        from jupyter_gpumem.core.sites import cell_numbers

        return cell_numbers(shell)

    watch(cells)


def load(shell: Any) -> None:
    """Register %gpumem on ``shell``, the cell events the sampler listens to, and the comm
    target the JupyterLab panel talks to."""
    shell.register_magics(GpumemMagics)
    from jupyter_gpumem.doctor.hooks import install as install_doctor
    from jupyter_gpumem.kernel.comm import register as register_comm
    from jupyter_gpumem.sampling.sampler import register_cell_events

    for hook, what in (
        (_watch_backend_start, "who started JAX (for refused settings and status)"),
        (register_cell_events, "cell events"),
        (register_comm, "the panel's comm"),
        (install_doctor, "the OOM report and per-cell memory (%gpumem doctor, cells)"),
    ):
        try:
            hook(shell)
        except Exception as err:  # each is a nicety; %gpumem must load without them
            warnings.warn(f"jupyter_gpumem: {what} are off ({type(err).__name__}: {err})", stacklevel=2)


def unload(shell: Any) -> None:
    """Remove %gpumem from ``shell`` (and the sampler's cell events, where it has them)."""
    manager = getattr(shell, "magics_manager", None)
    if manager is not None:
        manager.magics.get("line", {}).pop("gpumem", None)
        manager.registry.pop("GpumemMagics", None)
    from jupyter_gpumem.doctor.hooks import uninstall as uninstall_doctor
    from jupyter_gpumem.kernel.comm import unregister as unregister_comm
    from jupyter_gpumem.record import stop_active
    from jupyter_gpumem.sampling.sampler import unregister_cell_events
    from jupyter_gpumem.sources.jax_start import unwatch

    for hook in (stop_active, unregister_cell_events, unregister_comm, uninstall_doctor, lambda _shell: unwatch()):
        try:
            hook(shell)
        except Exception:
            pass
