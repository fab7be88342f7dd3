"""The settings JAX started with, and the variables changed since.

JAX reads its allocator variables once, when its backend starts; a variable set later (``%env``
or ``os.environ`` in a cell) changes nothing in this process. So once JAX has started, the
settings in effect are what it read then:

- the CUDA plugin's options, where it registered (``jax_plugins.cuda_registration``: the dict
  its factory keeps);
- else the copy of the variables made as the first backend was created
  (``jax_start.read_at_start``), with jax.config's create options as they were then.

A change seen after the start is a ``LateChange``: the setting, the variable, what JAX read,
what it says now, and the cell after which it was first seen (``after_cell``, from the kernel's
post-cell hook; None where no cell hook saw it).
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass
from typing import Any

from jupyter_gpumem.core.env_table import CREATE_OPTIONS_OPTION, ENV_SETTINGS, JAX_DEFAULT, READ_AT_START_VARS
from jupyter_gpumem.settings import client_create_options
from jupyter_gpumem.settings.client_create_options import CreateOptions
from jupyter_gpumem.settings.effective import (
    command_buffer_mode_forcing_vmm,
    create_options,
    effective,
    env_var_for,
    same,
    show,
)
from jupyter_gpumem.settings.plugin_options import frozen_values
from jupyter_gpumem.sources import jax_backend, jax_plugins, jax_start
from jupyter_gpumem.sources.jax_backend import PLUGIN_READ_SETTINGS
from jupyter_gpumem.sources.jax_start import AT_START, StartRead

__all__ = [
    "StartRead",
    "LateChange",
    "start_read",
    "started_env",
    "values_at_start",
    "in_effect",
    "described",
    "late_changes",
    "after_cell",
]


_kept: list[StartRead] = []  # once JAX has started, what it read: it does not change


def start_read() -> StartRead | None:
    """What JAX read when its backend started; None before it starts. Never starts JAX; once
    it has started, asks ``jax_start`` nothing again."""
    if not jax_backend.backend_started():
        return None
    if _kept:
        return _kept[0]
    read = jax_start.read_at_start(True)
    if read is not None:
        _kept[:] = [read]
        jax_start.settle(True)  # once: the start is over, its wrapper can go
    return read


def started_env(read: StartRead) -> tuple[dict[str, str], CreateOptions]:
    """The environment and create options JAX started with, as ``effective`` takes them."""
    return read.present(), client_create_options.parse(read.create_options)


def values_at_start(read: StartRead) -> dict[str, Any]:
    """Each setting as JAX read it at its start (``effective``'s names and values): the CUDA
    plugin's own options for the three it reads, where it registered and they can be read, the
    copied variables for the rest; create options last, as JAX merges them."""
    env, options = started_env(read)
    values = effective(env, options)
    registration = jax_plugins.cuda_registration()
    if registration is not None and registration.options is not None:
        plugin = frozen_values(registration.options)
        overridden = options.overrides()
        for name in PLUGIN_READ_SETTINGS:
            if name not in overridden:
                values[name] = plugin[name]
    if command_buffer_mode_forcing_vmm(env):
        values["allocator"] = "vmm"  # XLA overrides the plugin's allocator too
    return values


def in_effect() -> tuple[dict[str, str], CreateOptions, dict[str, Any], StartRead | None]:
    """The environment, create options and values that are (or will be) in effect, and what JAX
    read at its start (None before it starts): after the start, what it read then, not what the
    environment says now."""
    read = start_read()
    if read is None:
        env = dict(os.environ)
        options = create_options(env)
        return env, options, effective(env, options), None
    env, options = started_env(read)
    return env, options, values_at_start(read), read


def described(names: list[str], env: dict[str, str], options: CreateOptions, values: dict[str, Any]) -> str:
    """The settings ``names`` as they are in effect, for a refusal: "fraction is 0.75 (JAX
    default, XLA_CLIENT_MEM_FRACTION unset; XLA_PYTHON_CLIENT_MEM_FRACTION says '.3' since cell
    [2], which is not in effect)"."""
    overridden = options.overrides()
    late = {c.name: c for c in late_changes()}

    def held_in(name: str) -> str:
        if name in overridden:
            return f"jax.config {CREATE_OPTIONS_OPTION}"
        var = env_var_for(name, env)
        return var if var in env else f"{JAX_DEFAULT}, {var} unset"

    def since(change: LateChange) -> str:
        when = f"cell [{change.cell}]" if change.cell is not None else "JAX started"
        return f"; {change.variable} says {change.now!r} since {when}, which is not in effect"

    return "; ".join(
        f"{k.replace('_', '-')} is {show(k, values[k])} ({held_in(k)}{since(late[k]) if k in late else ''})"
        for k in names
    )


@dataclass(frozen=True)
class LateChange:
    """A setting whose variable says something else now than when JAX started."""

    name: str  # "preallocate", "fraction", "allocator", "async_prealloc"
    variable: str
    now: str | None  # the variable's value now; None: unset
    then: str | None  # its value when JAX started; None: unset
    in_effect: str  # the setting as JAX read it, shown ("0.75")
    asked: str  # the setting the variable asks for now, shown ("0.3")
    cell: int | None  # the cell after which the change was first seen
    exact: bool  # False where the start was not seen (the copy was made later)

    def sentence(self) -> str:
        """For people: what changed, that it is not in effect, and what applies it."""
        now = "unset" if self.now is None else repr(self.now)
        then = "unset" if self.then is None else repr(self.then)
        when = f" in cell [{self.cell}]" if self.cell is not None else " after JAX started"
        read = (
            f"JAX read it {then} when its backend started"
            if self.exact
            else f"it was {then} when first seen here (JAX had started before the extension loaded)"
        )
        label = self.name.replace("_", "-")
        return (
            f"{self.variable} was changed{when} to {now} ({label} {self.asked}), but {read}: {label} is "
            f"{self.in_effect} in this process. Only a restart applies the new value: restart the kernel "
            "and set it before the first JAX operation."
        )

    def to_json(self) -> dict:
        return asdict(self)


_lock = threading.Lock()
_seen: dict[str, str | None] = {}  # each variable as the last cell hook saw it, after the start
_changed_in: dict[str, int | None] = {}  # variable -> the cell after which it last changed


def after_cell(cell: int | None) -> None:
    """Note which variables the cell that just ran changed, once JAX has started (a post-cell
    hook: reads a few variables, starts nothing, waits on nothing)."""
    read = start_read()
    if read is None:
        return
    with _lock:
        if not _seen:
            _seen.update(read.env)
        for var in READ_AT_START_VARS:
            value = os.environ.get(var)
            if value != _seen.get(var):
                _seen[var] = value
                _changed_in[var] = cell


def late_changes(read: StartRead | None = None) -> tuple[LateChange, ...]:
    """The settings whose variables now ask for something other than what JAX read at its
    start; empty before it starts."""
    read = start_read() if read is None else read
    if read is None:
        return ()
    then_env, options = started_env(read)
    now_env = {var: value for var in READ_AT_START_VARS if (value := os.environ.get(var)) is not None}
    in_effect = values_at_start(read)
    asked = effective(now_env, options)
    found = []
    with _lock:
        for name in ENV_SETTINGS:
            if name in options.overrides() or same(name, in_effect[name], asked[name]):
                continue
            var = env_var_for(name, now_env) if env_var_for(name, now_env) in now_env else env_var_for(name, then_env)
            if name == "allocator" and command_buffer_mode_forcing_vmm(now_env) != command_buffer_mode_forcing_vmm(
                then_env
            ):
                var = "XLA_FLAGS"
            found.append(
                LateChange(
                    name=name,
                    variable=var,
                    now=now_env.get(var),
                    then=read.env.get(var),
                    in_effect=show(name, in_effect[name]),
                    asked=show(name, asked[name]),
                    cell=_changed_in.get(var),
                    exact=read.taken == AT_START,
                )
            )
    return tuple(found)


def forget() -> None:
    """Drop what the cell hook saw (tests)."""
    with _lock:
        _seen.clear()
        _changed_in.clear()
        _kept.clear()
