"""What JAX will make of the allocator settings: each value read the way JAX reads it, from the
environment and from ``jax.config``'s ``jax_pjrt_client_create_options`` (which JAX applies
last), shown for people, and the warnings ``%gpumem status`` gives about them.

Values come from JAX's own option generator (``sources.jax_options.jax_gpu_options``), run on
one variable at a time so that one bad variable does not hide the others.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from jupyter_gpumem.core.env_table import (
    ALLOCATOR_VAR,
    ASYNC_PREALLOC_VAR,
    CREATE_OPTIONS_OPTION,
    DEFAULT_FRACTION,
    ENV_SETTINGS,
    FRACTION_VAR,
    FROM_RECORDING,
    JAX_DEFAULT,
    OLD_FRACTION_VAR,
    PREALLOCATE_VAR,
    REMAT_ENV,
    REMAT_OPTION,
    STALE_ALLOCATOR_VAR,
    UNIFIED_MEMORY_VAR,
)
from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.settings import client_create_options, cuda_async_limits
from jupyter_gpumem.settings.client_create_options import CreateOptions
from jupyter_gpumem.sources import jax_backend, jax_remat
from jupyter_gpumem.sources.jax_options import accepted_allocators, fraction_var, jax_gpu_options, jax_rejection

# Which settings on a %gpumem line bring up each cuda_async note.
NOTE_TRIGGERS = {
    "preallocating": {"allocator", "preallocate"},
    "fraction": {"fraction", "allocator", "preallocate"},
    "async_prealloc": {"async_prealloc", "allocator", "preallocate"},
}


def canonical_allocator(name: str) -> str:
    """``name`` with JAX's ``default`` spelt ``bfc`` (the same allocator)."""
    return "bfc" if name in ("default", "bfc") else name


def create_options(env: Mapping[str, str] | None = None) -> CreateOptions:
    """``jax_pjrt_client_create_options`` now (before jax is imported: from ``env``'s variable)."""
    return client_create_options.parse(jax_backend.pjrt_create_options(env))


def effective(env: Mapping[str, str], options: CreateOptions | None = None) -> dict[str, Any]:
    """What JAX makes of ``env`` and the create options (default: read now), by setting name.

    Where JAX rejects a variable's value, the raw string is kept. A create option replaces the
    variable's value, as JAX merges it last.
    """

    def read(var: str, key: str, default: Any) -> Any:
        if var not in env:
            return default
        try:
            options = jax_gpu_options({var: env[var]})
        except ValueError:
            return env[var]
        if options is None:
            return env[var]
        return options.get(key, default)

    fraction_value: Any = DEFAULT_FRACTION
    for var in (OLD_FRACTION_VAR, FRACTION_VAR):
        if env.get(var):
            fraction_value = read(var, "memory_fraction", DEFAULT_FRACTION)
    async_raw = env.get(ASYNC_PREALLOC_VAR)
    async_value = None if async_raw is None else cuda_async_limits.read_async_prealloc(async_raw)
    values = {
        "preallocate": read(PREALLOCATE_VAR, "preallocate", True),
        "fraction": fraction_value,
        "allocator": read(ALLOCATOR_VAR, "allocator", "default"),
        "async_prealloc": async_raw if async_value is None else async_value,
    }
    values.update((create_options(env) if options is None else options).overrides())
    if command_buffer_mode_forcing_vmm(env):
        values["allocator"] = "vmm"
    return values


def command_buffer_mode_forcing_vmm(env: Mapping[str, str]) -> str | None:
    """The ``--xla_gpu_command_buffer_update_mode`` that ``XLA_FLAGS`` in ``env`` sets, where it
    is not ALWAYS_UPDATE; None otherwise. XLA then builds the vmm allocator whatever the allocator
    setting asks ("xla_gpu_command_buffer_update_mode requires the VMM allocator. Overriding
    allocator kind to kVmm": ``GetStreamExecutorGpuDeviceAllocator``,
    xla/pjrt/gpu/se_gpu_pjrt_client.cc, openxla/xla of 2026-08; the flag defaults to
    ALWAYS_UPDATE, xla/debug_options_flags.cc). The last occurrence wins, as in XLA's flag parser."""
    mode = None
    for flag in env.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_gpu_command_buffer_update_mode="):
            mode = flag.split("=", 1)[1].strip()
    return mode if mode and mode.upper() != "ALWAYS_UPDATE" else None


def unified_memory(env: Mapping[str, str]) -> bool:
    """``TF_FORCE_UNIFIED_MEMORY`` as XLA reads it when it creates the BFC allocator
    (``tsl::ReadBoolFromEnvVar``: "true" or "1", any case; anything else is off, an unreadable
    value with an error in the log): xla/pjrt/gpu/gpu_helpers.cc, ``CreateBFCAllocator``."""
    return env.get(UNIFIED_MEMORY_VAR, "").lower() in ("true", "1")


def same(name: str, a: Any, b: Any) -> bool:
    """Whether two values of setting ``name`` are the same setting (.4 and 40%, default and bfc)."""
    if name == "fraction" and isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-9
    if name == "allocator" and isinstance(a, str) and isinstance(b, str):
        return canonical_allocator(a) == canonical_allocator(b)
    return a == b


def show(name: str, value: Any) -> str:
    """A setting's value for people: "on", "0.75", "default (bfc)", "2.00 GiB", "not set"."""
    if value is None:
        return "not set"
    if name in ("preallocate", "remat") and isinstance(value, bool):
        return "on" if value else "off"
    if name == "remat" and isinstance(value, str):
        return f"{value!r} (JAX refuses it)"
    if name == "fraction" and isinstance(value, float):
        return f"{value:g}"
    if name == "allocator" and value == "default":
        return "default (bfc)"
    if name == "async_prealloc" and isinstance(value, int):
        return "all (-1)" if value == -1 else format_bytes(value)
    return str(value)


def fraction_env_var(env: Mapping[str, str]) -> str:
    """The fraction variable that is set in ``env``, else the one the installed JAX reads."""
    for var in (FRACTION_VAR, OLD_FRACTION_VAR):
        if env.get(var):
            return var
    return fraction_var()


def env_var_for(name: str, env: Mapping[str, str]) -> str:
    """The environment variable that holds setting ``name`` (not remat)."""
    return {
        "preallocate": PREALLOCATE_VAR,
        "allocator": ALLOCATOR_VAR,
        "async_prealloc": ASYNC_PREALLOC_VAR,
    }.get(name) or fraction_env_var(env)


def is_cuda_async(values: Mapping[str, Any]) -> bool:
    return canonical_allocator(str(values["allocator"])) == "cuda_async"


def cuda_async_notes(values: Mapping[str, Any], fraction_set: bool) -> dict[str, str]:
    """What cuda_async will really do with these values, by topic (``NOTE_TRIGGERS``' keys):
    nothing when the allocator is not cuda_async."""
    if not is_cuda_async(values) or not isinstance(values["preallocate"], bool):
        return {}  # not cuda_async, or a create option the CUDA plugin refuses (warned apart)
    notes = {}
    preallocate = values["preallocate"]
    if preallocate:
        notes["preallocating"] = (
            "cuda_async still preallocates its whole pool while preallocate is on; "
            "add `%gpumem preallocate off` for the pool to grow on demand."
        )
    if fraction_set:
        notes["fraction"] = cuda_async_limits.fraction_note(show("fraction", values["fraction"]), preallocate)
    prealloc = values["async_prealloc"]
    if isinstance(prealloc, int):
        note = cuda_async_limits.async_prealloc_note(prealloc, preallocate)
        if note:
            notes["async_prealloc"] = note
    return notes


def fraction_is_set(env: Mapping[str, str], options: CreateOptions) -> bool:
    """Whether a fraction was given at all (a variable or a create option), not JAX's default."""
    return bool(env.get(FRACTION_VAR) or env.get(OLD_FRACTION_VAR)) or "fraction" in options.overrides()


def disabled_passes(env: Mapping[str, str]) -> list[str]:
    """The HLO passes that ``XLA_FLAGS`` in ``env`` disables (``--xla_disable_hlo_passes=a,b``)."""
    found: list[str] = []
    for flag in env.get("XLA_FLAGS", "").split():
        if flag.startswith("--xla_disable_hlo_passes="):
            found.extend(p.strip() for p in flag.split("=", 1)[1].split(",") if p.strip())
    return found


def remat_flags_problem(remat: bool | None, env: Mapping[str, str], replaces: bool | None) -> str | None:
    """The warning for remat turned off in a JAX that then replaces the passes ``XLA_FLAGS``
    disabled (``replaces``: ``jax_remat.remat_off_replaces_disabled_passes()``), or None.

    jax/_src/compiler.py up to jax-v0.11.0 assigns ``xla_disable_hlo_passes = "rematerialization"``;
    the fix for jax#37391 came after 0.11.0.
    """
    if remat is not False or not replaces:
        return None
    others = [p for p in disabled_passes(env) if p != "rematerialization"]
    if not others:
        return None
    return (
        f"{REMAT_OPTION}=False makes the installed JAX replace XLA_FLAGS' --xla_disable_hlo_passes, "
        f"so {', '.join(others)} run again (jax#37391, fixed after JAX 0.11.0). Instead, leave remat "
        "on and add rematerialization to that XLA_FLAGS list, before JAX's backend starts."
    )


def environment_problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Warnings about the allocator variables in ``env`` (default: os.environ) and jax.config's
    create options, for people."""
    env = dict(os.environ) if env is None else dict(env)
    options = create_options(env)
    problems = []
    if env.get(FRACTION_VAR) and env.get(OLD_FRACTION_VAR):
        problems.append(
            f"both {FRACTION_VAR} and {OLD_FRACTION_VAR} are set; JAX refuses that and falls back "
            f"to the CPU. Keep one: `%gpumem fraction F` writes {fraction_var()} and removes the other."
        )
    if STALE_ALLOCATOR_VAR in env:
        problems.append(
            f"{STALE_ALLOCATOR_VAR}={env[STALE_ALLOCATOR_VAR]} is set, but JAX does not read it "
            f"(it is TensorFlow's). Use `%gpumem allocator cuda_async` ({ALLOCATOR_VAR})."
        )
    rejection = jax_rejection(env)
    if rejection and not (env.get(FRACTION_VAR) and env.get(OLD_FRACTION_VAR) and "together" in rejection):
        problems.append(f"JAX will reject this environment and fall back to the CPU: {rejection}")
    problems.extend(options.problems(accepted_allocators()))
    for name in options.overrides():
        var = env_var_for(name, env)
        if var in env:
            problems.append(
                f"{var} is set, but jax.config's {CREATE_OPTIONS_OPTION} sets {name} too, and JAX applies "
                "that last: the variable has no effect."
            )
    mode = command_buffer_mode_forcing_vmm(env)
    if mode:
        problems.append(
            f"XLA_FLAGS sets --xla_gpu_command_buffer_update_mode={mode}, which makes XLA use the vmm "
            f"allocator whatever {ALLOCATOR_VAR} says (it needs vmm for command buffers' stable addresses)."
        )
    bad_remat = remat_env_problem(env)
    if bad_remat and "jax" not in sys.modules:
        problems.append(bad_remat)
    remat = remat_flags_problem(jax_remat.remat_value(), env, jax_remat.remat_off_replaces_disabled_passes())
    if remat:
        problems.append(remat)
    values = effective(env, options)
    problems.extend(cuda_async_notes(values, fraction_is_set(env, options)).values())
    if ASYNC_PREALLOC_VAR in env:
        problem = cuda_async_limits.async_prealloc_problem(env[ASYNC_PREALLOC_VAR])
        if problem:
            problems.append(problem)
        elif not is_cuda_async(values):
            problems.append(f"{ASYNC_PREALLOC_VAR} is set but is read only by the cuda_async allocator.")
    return problems


_TRUE = ("y", "yes", "t", "true", "on", "1")
_FALSE = ("n", "no", "f", "false", "off", "0")


def remat_from_env(raw: str) -> bool | None:
    """``JAX_COMPILER_ENABLE_REMAT_PASS`` as JAX's ``bool_env`` reads it at import: lower-cased
    and nothing else, True or False for its spellings, None for any other value, which makes
    ``import jax`` raise ValueError ("invalid truth value ' true' for environment ...":
    jax/_src/config.py, ``bool_env``, 0.4.38 to 0.12.0.1; seen on CPU JAX 0.10.2)."""
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def remat_env_problem(env: Mapping[str, str]) -> str | None:
    """The warning for a ``JAX_COMPILER_ENABLE_REMAT_PASS`` that JAX cannot read, or None."""
    raw = env.get(REMAT_ENV)
    if raw is None or remat_from_env(raw) is not None:
        return None
    return (
        f"{REMAT_ENV}={raw!r} is not a value JAX reads ({', '.join(_TRUE)} or {', '.join(_FALSE)}, any case, "
        "no spaces): `import jax` raises ValueError. Fix or unset it, or use `%gpumem remat on|off`."
    )


@dataclass(frozen=True)
class SettingState:
    """One setting as it stands: its value, shown for people, and where it came from."""

    name: str  # "preallocate", "fraction", "allocator", "async_prealloc", "remat"
    value: Any  # bool, float, str, int (-1: all) or None (not set and no default)
    shown: str  # "off", "0.75", "cuda_async", "2.00 GiB", "not set"
    source: str  # "JAX default", "environment", "%gpumem", "jax.config"
    env_var: str | None  # the variable that holds it (None for remat)
    config_option: str | None = None  # the jax.config option (remat only)
    # Once JAX has started: its variable changed since, and what that asks for (not in effect);
    # ``started_with.LateChange.to_json()``, else None.
    changed_after_start: dict | None = None

    def source_words(self) -> str:
        """Where it came from, and that its variable changed since JAX read it:
        "JAX default; XLA_CLIENT_MEM_FRACTION changed in cell [3], not in effect"."""
        late = self.changed_after_start
        if not late:
            return self.source
        where = f" in cell [{late['cell']}]" if late.get("cell") is not None else " later"
        return f"{self.source}; {late['variable']} changed{where}, not in effect"

    def to_json(self) -> dict:
        return asdict(self)


def recorded_settings(env: Mapping[str, Any]) -> tuple[SettingState, ...]:
    """The settings a recorded process ran with, from the environment its trace kept (the
    header's ``settings.env``, as ``python -m jupyter_gpumem.record`` writes it): each is the
    recorded variable's value as the installed JAX reads it, or JAX's default. Nothing of this
    process (its environment, jax.config, %gpumem) goes in."""
    env = {k: v for k, v in env.items() if isinstance(k, str) and isinstance(v, str)}
    values = effective(env, client_create_options.parse(None))
    states = []
    for name in ENV_SETTINGS:
        var = env_var_for(name, env)
        source = FROM_RECORDING if var in env else JAX_DEFAULT
        states.append(SettingState(name, values[name], show(name, values[name]), source, var))
    raw = env.get(REMAT_ENV)
    remat: Any = True if raw is None else remat_from_env(raw)
    remat = raw if remat is None else remat  # a value JAX refused is shown as written
    states.append(
        SettingState(
            "remat", remat, show("remat", remat), JAX_DEFAULT if raw is None else FROM_RECORDING, None, REMAT_OPTION
        )
    )
    return tuple(states)
