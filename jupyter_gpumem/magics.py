"""The ``%gpumem`` magic: a pure grammar (``parse_line``) and a thin IPython shell around it.

Settings words are validated, all of them, before any is applied. Subcommands owned by other
modules (monitor, record, doctor, ...) are imported only when used, so loading stays cheap.
"""

from __future__ import annotations

import importlib
import shlex
import warnings
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from jupyter_gpumem.errors import GpumemError
from jupyter_gpumem.model import AllocatorSettings

__all__ = ["Command", "HELP", "parse_line", "run_command", "GpumemMagics", "load", "unload"]

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
  %gpumem remat on|off            jax_compiler_enable_remat_pass; applies to later compilations

  JAX reads these once, when its backend starts. After that, asking for a different value is an
  error: restart the kernel and run the settings cell first. remat is the exception.

  %gpumem                         same as %gpumem status
  %gpumem status                  each setting, where it came from, the backend, warnings
  %gpumem reset                   take back what %gpumem set

Watching and diagnosing:
  %gpumem monitor [--interval S] [--window MINUTES] [--device N|all] [--replay PATH]
  %gpumem record PATH|stop        record samples to a trace file (JSON Lines)
  %gpumem doctor on|off           explain out-of-memory errors when a cell fails (on by default)
  %gpumem arrays [--top N] [--by shape|dtype|cell|name]
  %gpumem free [--history] [--caches] [--gc]
  %gpumem cells on|off            memory per cell
  %gpumem estimate EXPR           memory a jitted call would need, before running it

  %gpumem --help, %gpumem?        this text

From Python: jupyter_gpumem.configure(preallocate=False, fraction=0.4), jupyter_gpumem.status().
"""

# Magic word -> AllocatorSettings field.
SETTING_WORDS = {
    "preallocate": "preallocate",
    "fraction": "fraction",
    "allocator": "allocator",
    "async-prealloc": "async_prealloc",
    "async_prealloc": "async_prealloc",
    "remat": "remat",
}

# Subcommand -> (module, function), each called as function(argv, shell).
DELEGATES = {
    "monitor": ("jupyter_gpumem.widget", "magic_monitor"),
    "record": ("jupyter_gpumem.record", "magic_record"),
    "doctor": ("jupyter_gpumem.doctor.after_cell", "magic_doctor"),
    "arrays": ("jupyter_gpumem.doctor.arrays", "magic_arrays"),
    "free": ("jupyter_gpumem.doctor.release", "magic_free"),
    "cells": ("jupyter_gpumem.doctor.after_cell", "magic_cells"),
    "estimate": ("jupyter_gpumem.doctor.estimates", "magic_estimate"),
}

_HELP_WORDS = ("--help", "-h", "help")
_SETTING_LIST = "preallocate, fraction, allocator, async-prealloc, remat"
_ALL_WORDS = f"{_SETTING_LIST}, status, reset, {', '.join(DELEGATES)}, --help"


class MagicUsageError(GpumemError, ValueError):
    """A %gpumem line that does not parse; the message names the valid words."""


@dataclass(frozen=True)
class Command:
    """One parsed ``%gpumem`` line.

    ``action`` is "status", "reset", "help", "settings", or a delegated subcommand ("monitor",
    "record", ...). ``settings`` and ``notes`` are filled for "settings"; ``argv`` holds a
    delegated subcommand's arguments (for ``estimate``, the expression as one string).
    """

    action: str
    settings: AllocatorSettings = field(default_factory=AllocatorSettings)
    notes: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()


def parse_line(line: str) -> Command:
    """Parse a ``%gpumem`` line without side effects. Raises MagicUsageError or SettingsError,
    each naming the valid words or values."""
    from jupyter_gpumem.allocator_shim import coerce_setting

    text = (line or "").strip()
    if not text:
        return Command("status")
    head, _, rest = text.partition(" ")
    head_l = head.lower()
    if head_l in _HELP_WORDS:
        return Command("help")
    if head_l in DELEGATES:
        if head_l == "estimate":
            expr = rest.strip()
            if not expr:
                raise MagicUsageError("estimate takes an expression: %gpumem estimate f(x)")
            return Command("estimate", argv=(expr,))
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

    values: dict[str, Any] = {}
    notes: list[str] = []
    i = 0
    while i < len(words):
        word = words[i].lower()
        if word in _HELP_WORDS[:2]:
            return Command("help")
        name = SETTING_WORDS.get(word)
        if name is None:
            where = "" if i == 0 else " here"
            raise MagicUsageError(f"unknown word {words[i]!r}{where}; valid: {_ALL_WORDS if i == 0 else _SETTING_LIST}")
        if name in values:
            raise MagicUsageError(f"{words[i]} is given twice")
        if i + 1 >= len(words):
            raise MagicUsageError(f"{words[i]} needs a value: {_VALUE_HINTS[name]}")
        values[name], note = coerce_setting(name, words[i + 1])
        if note:
            notes.append(note)
        i += 2
    return Command("settings", AllocatorSettings(**values), tuple(notes))


_VALUE_HINTS = {
    "preallocate": "on or off",
    "fraction": "0 < F <= 1, e.g. .5, 0.5 or 50%",
    "allocator": "default, bfc, platform, cuda_async (vmm, address where the installed JAX has them)",
    "async_prealloc": "bytes, e.g. 512MiB or 2GiB, or all",
    "remat": "on or off",
}


def _display(obj: Any) -> None:
    from IPython.display import display

    display(obj)


def run_command(command: Command, shell: Any = None) -> None:
    """Carry out a parsed command: print, display, or hand over to the owning module."""
    if command.action == "help":
        print(HELP)
        return
    if command.action == "status":
        from jupyter_gpumem.status_report import status

        _display(status())
        return
    if command.action == "reset":
        from jupyter_gpumem.allocator_shim import reset

        print(reset())
        return
    if command.action == "settings":
        from jupyter_gpumem.allocator_shim import apply_settings

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
        raise MagicUsageError(f"%gpumem {command.action}: {err}") from None
    if result is not None:
        _display(result)


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


def load(shell: Any) -> None:
    """Register %gpumem on ``shell``, the cell events the sampler listens to, and the comm
    target the JupyterLab panel talks to."""
    shell.register_magics(GpumemMagics)
    from jupyter_gpumem.doctor.hooks import install as install_doctor
    from jupyter_gpumem.kernel_comm import register as register_comm
    from jupyter_gpumem.sampler import register_cell_events

    for hook, what in (
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
    from jupyter_gpumem.kernel_comm import unregister as unregister_comm
    from jupyter_gpumem.sampler import unregister_cell_events

    from jupyter_gpumem.record import stop_active

    for hook in (stop_active, unregister_cell_events, unregister_comm, uninstall_doctor):
        try:
            hook(shell)
        except Exception:
            pass
