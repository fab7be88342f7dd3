"""What the words after ``%gpumem`` mean: each command declares what it takes, one parser reads
them, and one check says what a sampling interval may be.

A command's ``Grammar`` lists its options (``--interval S``, ``--gc``), its bare-word options
(the settings: ``fraction F``) and its positional words (``on|off``), each with how its text
becomes a value, its choices and its default. ``Grammar.parse(argv)`` answers a dict with every
declared name. A bad argument raises ``MagicUsageError`` naming the valid words or values, and
parsing changes nothing. Pure and cheap to import: the magics, the monitor, the recorder (magic
and command line), the doctor's commands and the sampler all use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.errors import GpumemError, did_you_mean

__all__ = ["MagicUsageError", "Option", "Grammar", "as_number", "check_interval", "MIN_INTERVAL_S", "MAX_INTERVAL_S"]

# A sampling interval in seconds, wherever one is given: the sampler, the monitor, a recording.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0


class MagicUsageError(GpumemError, ValueError):
    """A %gpumem argument, or the same value given from Python, that cannot be taken; the
    message names the valid words or values."""


def as_number(value: Any) -> float | None:
    """A number, or its text, as a float; None for anything else (True and False included)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):  # not a number; an int too big for a float
        return None


def check_interval(value: Any) -> float:
    """``value`` (a number of seconds, or its text) as a sampling interval; out of range or not a
    number raises MagicUsageError naming the range."""
    number = as_number(value)
    if number is None or not MIN_INTERVAL_S <= number <= MAX_INTERVAL_S:
        raise MagicUsageError(
            f"interval must be a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} (e.g. 0.5), got {value!r}"
        )
    return number


def _either(choices: Sequence[str]) -> str:
    if len(choices) == 2:
        return f"{choices[0]} or {choices[1]}"
    return "one of " + ", ".join(choices)


@dataclass(frozen=True)
class Option:
    """One thing a command takes.

    ``name`` as typed: ``--interval``, or ``fraction`` for a bare-word option; for a positional
    word, the name its errors use. ``metavar`` is how its value shows in the usage line (empty
    for a flag, which takes no value). ``read`` turns the text into the value and raises
    ValueError saying what it takes; ``choices`` are the only words taken (in any case).
    ``help`` says what a value is, for "needs a value" and for a program's ``--help``.
    """

    name: str
    metavar: str = ""
    read: Callable[[str], Any] | None = None
    choices: tuple[str, ...] = ()
    default: Any = None
    required: bool = False
    aliases: tuple[str, ...] = ()
    help: str = ""

    @property
    def key(self) -> str:
        """Its name in the parsed dict: ``--async-prealloc`` -> ``async_prealloc``."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def flag(self) -> bool:
        return not self.metavar and not self.choices

    @property
    def shown(self) -> str:
        return self.metavar or "|".join(self.choices)


@dataclass(frozen=True)
class Grammar:
    """What one command takes. ``prog`` starts its usage line and its errors: ``%gpumem monitor``."""

    prog: str
    options: tuple[Option, ...] = ()
    positionals: tuple[Option, ...] = ()

    def usage(self) -> str:
        words = [self.prog]
        words += [p.shown if p.required else f"[{p.shown}]" for p in self.positionals]
        words += [f"[{o.name}]" if o.flag else f"[{o.name} {o.shown}]" for o in self.options]
        return " ".join(words)

    def describe(self) -> list[str]:
        """One line per positional and option: its usage word and its help."""
        rows = [(p.shown, p.help) for p in self.positionals]
        rows += [(o.name if o.flag else f"{o.name} {o.shown}", o.help) for o in self.options]
        width = max((len(w) for w, _ in rows), default=0)
        return [f"  {w.ljust(width)}  {h}".rstrip() for w, h in rows]

    def parse(self, argv: Sequence[str]) -> dict[str, Any]:
        """Every declared name -> its value: the given one, else its default (False for a flag).

        Takes ``--name value``, ``--name=value`` and bare-word ``name value``. Raises
        MagicUsageError naming the valid words or values.
        """
        values = {o.key: (False if o.flag else o.default) for o in self.options}
        values.update({p.key: p.default for p in self.positionals})
        waiting = list(self.positionals)
        seen: set[str] = set()
        words = list(argv)
        i = 0
        while i < len(words):
            word = words[i]
            i += 1
            dashed = word.startswith("-")
            name, eq, inline = word.partition("=") if dashed else (word, "", "")
            option = self.find(name)
            if option is None:
                if dashed or not waiting:
                    raise self._error(self._unknown(word))
                positional = waiting.pop(0)
                values[positional.key] = self._value(positional, word)
                continue
            if option.key in seen:
                raise self._error(f"{option.name} is given twice")
            seen.add(option.key)
            if option.flag:
                if eq:
                    raise self._error(f"{option.name} takes no value")
                values[option.key] = True
                continue
            if eq:
                text = inline
            elif i < len(words):
                text = words[i]
                i += 1
            else:
                raise self._error(f"{option.name} needs a value: {option.help or option.shown}. Usage: {self.usage()}")
            values[option.key] = self._value(option, text)
        for positional in waiting:
            if positional.required:
                raise self._error(f"{positional.shown} is required. Usage: {self.usage()}")
        return values

    def find(self, name: str) -> Option | None:
        """The option spelt ``name`` (any case, or an alias), or None."""
        lowered = name.lower()
        for option in self.options:
            if lowered == option.name.lower() or lowered in option.aliases:
                return option
        return None

    def _unknown(self, word: str) -> str:
        names = [o.name for o in self.options]
        if not word.startswith("-") and (self.positionals or not self.options):
            return f"unexpected {word!r}{did_you_mean(word, names)}. Usage: {self.usage()}"
        valid = f"; valid: {', '.join(names)}" if self.options else ""
        return f"unknown argument {word!r}{valid}{did_you_mean(word.partition('=')[0], names)}. Usage: {self.usage()}"

    def _value(self, option: Option, text: str) -> Any:
        """The value of ``text`` for ``option``; a bad one raises an error naming what it takes.
        A SettingsError from a setting's reader passes as it is."""
        if option.choices:
            for choice in option.choices:
                if text.lower() == choice.lower():
                    return choice
            raise self._error(
                f"{option.name} takes {_either(option.choices)}, got {text!r}{did_you_mean(text, option.choices)}"
            )
        if option.read is None:
            return text
        try:
            return option.read(text)
        except MagicUsageError as err:
            raise self._error(str(err)) from None
        except GpumemError:
            raise
        except ValueError as err:
            raise self._error(str(err)) from None

    def _error(self, detail: str) -> MagicUsageError:
        # "%gpumem doctor takes on or off", not "%gpumem doctor: doctor takes on or off"
        command = self.prog.split()[-1]
        if detail.startswith(command + " "):
            return MagicUsageError(f"{self.prog[: -len(command)]}{detail}")
        return MagicUsageError(f"{self.prog}: {detail}")
