"""JAX's allocator settings before the backend starts: validate, apply, refuse, reset.

Settings become environment variables that JAX's CUDA plugin reads once, when the backend
starts (``jaxlib.xla_client.generate_pjrt_gpu_plugin_options``), plus ``jax.config`` for the
remat pass. Every value is checked with that same generator before anything is written: a value
it rejects makes JAX's plugin set-up fail and JAX fall back to the CPU. Whether the backend has
started is probed without starting it (``backend_started``, from ``sources.jax_backend``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.core.env_table import (
    ALLOCATOR_ALIASES,
    ALLOCATOR_VAR,
    ASYNC_PREALLOC_VAR,
    CREATE_OPTIONS_OPTION,
    ENV_SETTINGS,
    FRACTION_VAR,
    FROM_CONFIG,
    FROM_ENVIRONMENT,
    FROM_MAGIC,
    JAX_DEFAULT,
    OLD_FRACTION_VAR,
    PREALLOCATE_VAR,
    REMAT_ENV,
    REMAT_OPTION,
    SETTING_NAMES,
)
from jupyter_gpumem.core.errors import GpumemError, did_you_mean
from jupyter_gpumem.core.readings import AllocatorSettings, JaxDeviceReading, NotAvailable
from jupyter_gpumem.core.units import parse_bytes, parse_fraction
from jupyter_gpumem.settings import cuda_async_limits, plugin_options, started_with
from jupyter_gpumem.settings.effective import (
    NOTE_TRIGGERS,
    SettingState,
    canonical_allocator,
    command_buffer_mode_forcing_vmm,
    create_options,
    cuda_async_notes,
    effective,
    env_var_for,
    environment_problems,
    fraction_is_set,
    is_cuda_async,
    remat_flags_problem,
    remat_from_env,
    same,
    show,
)
from jupyter_gpumem.settings.published import allocator_kind
from jupyter_gpumem.sources import jax_arrays, jax_backend, jax_plugins, jax_remat
from jupyter_gpumem.sources.jax_backend import (
    PLUGIN_READ_SETTINGS,
    backend_platform,
    backend_started,
    can_check_gpu_options,
)
from jupyter_gpumem.sources.jax_options import accepted_allocators, fraction_var, jax_gpu_options, jax_rejection

__all__ = [
    "GpumemError",
    "SettingsError",
    "BackendStartedError",
    "SettingState",
    "Applied",
    "SETTING_NAMES",
    "coerce_setting",
    "settings_from_kwargs",
    "validate",
    "apply_settings",
    "reset",
    "settings_in_effect",
    "environment_problems",
    "jax_gpu_options",
    "jax_rejection",
    "fraction_var",
    "accepted_allocators",
    "backend_started",
    "allocator_in_effect",
    "read_jax_devices",
    "setting_variables",
]


_RESTART = (
    "JAX reads these settings once, when its backend starts. To apply {what}, restart the "
    "kernel and run `%gpumem {words}` (or jupyter_gpumem.configure(...)) first, before any "
    "JAX operation."
)


class SettingsError(GpumemError, ValueError):
    """A setting that is not valid: the message names the valid values. Nothing was changed."""


class BackendStartedError(SettingsError):
    """A setting that can no longer take effect because JAX's backend has started."""


_lock = threading.RLock()


_original_env: dict[str, str | None] = {}  # env var -> its value before our first write


_ours: dict[str, Any] = {}  # setting name -> the value we set


_source_of: dict[str, str] = {}  # setting name -> who set it through us (%gpumem, notebook settings)


_UNSET = object()


_original_remat: Any = _UNSET


_ON = ("on", "true", "yes", "1")


_OFF = ("off", "false", "no", "0")


def _switch(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _ON + _OFF:
        return value.strip().lower() in _ON
    raise SettingsError(
        f"{name} takes on or off, got {value!r}"
        + (did_you_mean(value.strip(), ("on", "off")) if isinstance(value, str) else "")
    )


def coerce_setting(name: str, value: Any) -> tuple[Any, str | None]:
    """``value`` (a word from the magic or a Python value) as the setting's type, and a note.

    Pure: it does not consult JAX. Raises SettingsError naming the valid values.
    """
    if name == "preallocate" or name == "remat":
        return _switch(name, value), None
    if name == "fraction":
        try:
            return parse_fraction(value), None
        except ValueError as err:
            raise SettingsError(f"fraction: {err}") from None
    if name == "allocator":
        if not isinstance(value, str) or not value.strip():
            raise SettingsError(f"allocator takes a name such as bfc or cuda_async, got {value!r}")
        word = value.strip().lower()
        if word in ALLOCATOR_ALIASES:
            return ALLOCATOR_ALIASES[word]
        return word, None
    if name == "async_prealloc":
        if isinstance(value, str) and value.strip().lower() in ("all", "-1"):
            return -1, None
        if isinstance(value, int) and not isinstance(value, bool) and value == -1:
            return -1, None
        try:
            return parse_bytes(value), None
        except ValueError as err:
            raise SettingsError(f"async-prealloc takes bytes (512MiB, 2GiB, ...) or all: {err}") from None
    raise SettingsError(f"unknown setting {name!r}; the settings are {', '.join(SETTING_NAMES)}")


def settings_from_kwargs(**kwargs: Any) -> tuple[AllocatorSettings, tuple[str, ...]]:
    """``configure(...)``'s keywords as AllocatorSettings, and notes to show the user."""
    unknown = [key for key in kwargs if key not in SETTING_NAMES]
    if unknown:
        raise SettingsError(
            f"unknown setting {unknown[0]!r}; the settings are {', '.join(SETTING_NAMES)} "
            "(e.g. configure(preallocate=False, fraction=0.4))"
        )
    values: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        values[key], note = coerce_setting(key, value)
        if note:
            notes.append(note)
    return AllocatorSettings(**values), tuple(notes)


def setting_variables() -> tuple[tuple[str, str], ...]:
    """Each setting's name and the variable it is written to here: the environment variable the
    installed JAX reads, or the ``jax.config`` option for remat. For the panel and the docs."""
    env = dict(os.environ)
    rows = [(name, env_var_for(name, env)) for name in ENV_SETTINGS]
    return (*rows, ("remat", f"jax.config.{REMAT_OPTION}"))


def _remat_in_effect() -> tuple[bool | str, str]:
    """The remat switch and its source, without importing jax when it is not imported."""
    if "remat" in _ours:
        source = _source_of.get("remat", FROM_MAGIC)
    elif REMAT_ENV in os.environ:
        source = FROM_ENVIRONMENT
    else:
        source = JAX_DEFAULT
    value = jax_remat.remat_value()
    if value is not None:
        if source == JAX_DEFAULT and value is not True:
            source = FROM_CONFIG
        return value, source
    raw = os.environ.get(REMAT_ENV)
    if raw is not None:
        value = remat_from_env(raw)
        return (raw if value is None else value), source  # None: import jax will refuse it (warned)
    return True, source


def settings_in_effect() -> tuple[SettingState, ...]:
    """Every setting: its value, shown for people, and where it came from.

    Before the backend starts this is what will take effect; after, what did: what JAX read at
    its start (``started_with``), with any variable changed since named in
    ``changed_after_start``. A setting that jax.config's ``jax_pjrt_client_create_options``
    names comes from there: JAX applies it last.
    """
    with _lock:
        env, options, values, read = started_with.in_effect()
        overridden = options.overrides()
        late = {c.name: c.to_json() for c in started_with.late_changes(read)} if read is not None else {}
        states = []
        for name in ENV_SETTINGS:
            var = env_var_for(name, env)
            if name in overridden:
                states.append(
                    SettingState(name, values[name], show(name, values[name]), FROM_CONFIG, None, CREATE_OPTIONS_OPTION)
                )
                continue
            if name == "allocator" and command_buffer_mode_forcing_vmm(env):
                var, source = "XLA_FLAGS", "XLA_FLAGS (command buffer update mode)"
            elif name in _ours:
                source = _source_of.get(name, FROM_MAGIC)
            elif var in env:
                source = FROM_ENVIRONMENT
            else:
                source = JAX_DEFAULT
            states.append(SettingState(name, values[name], show(name, values[name]), source, var, None, late.get(name)))
        remat, remat_source = _remat_in_effect()
        states.append(SettingState("remat", remat, show("remat", remat), remat_source, None, REMAT_OPTION))
        return tuple(states)


@dataclass(frozen=True)
class Applied:
    """What a configure or reset did. ``message`` is one line ("" for a quiet no-op)."""

    message: str
    notes: tuple[str, ...] = ()
    env_written: Mapping[str, str | None] = field(default_factory=dict)  # None: unset
    config_written: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return "\n".join(line for line in (self.message, *self.notes) if line)


@dataclass(frozen=True)
class _Plan:
    env: dict[str, str | None]  # var -> value, None to unset
    remat: bool | None
    notes: tuple[str, ...]
    noop: tuple[str, ...]  # settings asked for that are already in effect (after start)
    settings: AllocatorSettings  # the checked settings, each value in its type


def _settings_words(settings: AllocatorSettings) -> str:
    words = []
    for name, value in settings.given().items():
        word = "async-prealloc" if name == "async_prealloc" else name
        if isinstance(value, bool):
            shown = "on" if value else "off"
        elif name == "async_prealloc":
            shown = "all" if value == -1 else str(value)
        else:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
        words.append(f"{word} {shown}")
    return " ".join(words)


def _env_writes(settings: AllocatorSettings, env: Mapping[str, str]) -> dict[str, str | None]:
    writes: dict[str, str | None] = {}
    if settings.preallocate is not None:
        writes[PREALLOCATE_VAR] = "true" if settings.preallocate else "false"
    if settings.fraction is not None:
        var = fraction_var()
        other = OLD_FRACTION_VAR if var == FRACTION_VAR else FRACTION_VAR
        writes[var] = repr(float(settings.fraction))
        if other in env:
            writes[other] = None  # never leave both names set
    if settings.allocator is not None:
        writes[ALLOCATOR_VAR] = settings.allocator
    if settings.async_prealloc is not None:
        writes[ASYNC_PREALLOC_VAR] = str(int(settings.async_prealloc))
    return writes


def _normalised(settings: AllocatorSettings) -> AllocatorSettings:
    """``settings`` with each value checked and in its type (bool, float, str, int)."""
    values = {}
    for name, value in settings.given().items():
        if name == "async_prealloc" and isinstance(value, int) and not isinstance(value, bool) and value < -1:
            raise SettingsError("async-prealloc takes bytes (512MiB, 2GiB, ...) or all (-1)")
        values[name], _ = coerce_setting(name, value)
    return AllocatorSettings(**values)


def _check_remat_exists() -> None:
    problem = jax_remat.remat_option_problem()
    if problem:
        raise SettingsError(problem)


def _refuse_after_plugin_registration(env_given: Mapping[str, Any]) -> None:
    """Raise BackendStartedError for a setting the CUDA plugin already read: JAX registered its
    plugins (its first ``jax.devices()`` or operation ran) but its backend did not start (with
    ``JAX_PLATFORMS`` naming a backend that failed, for one). A value equal to the one in effect
    changes nothing and passes."""
    frozen = jax_plugins.frozen_plugin_options()
    if frozen is None:
        return
    asked = plugin_options.changed_since_registration(env_given, frozen)
    if not asked:
        return
    words = _settings_words(AllocatorSettings(**asked))
    state = plugin_options.frozen_in_effect(frozen)
    raise BackendStartedError(
        "JAX has already registered its plugins (its backend has not started), and that is when the CUDA "
        f"plugin reads {', '.join(PLUGIN_READ_SETTINGS)} from the environment, once; so {words} cannot take "
        f"effect. {state[:1].upper()}{state[1:]}. To apply it, restart the kernel and run `%gpumem {words}` "
        "(or jupyter_gpumem.configure(...)) first, before any JAX operation."
    )


def validate(settings: AllocatorSettings) -> _Plan:
    """Check every given setting, with JAX's own checks where it has them; change nothing.

    Raises SettingsError (a bad value, naming the valid ones) or BackendStartedError (a value
    that can no longer take effect). Returns the plan ``apply_settings`` carries out.
    """
    settings = _normalised(settings)
    env_given = {k: v for k, v in settings.given().items() if k in ENV_SETTINGS}
    env = dict(os.environ)
    _check_installed_jax_takes(settings, env_given)
    create = create_options(env)
    if backend_started():
        _refuse_changes_after_start(env_given)
        return _Plan(env={}, remat=settings.remat, notes=(), noop=tuple(env_given), settings=settings)
    _refuse_after_plugin_registration(env_given)
    _refuse_hidden_by_create_options(env_given, create.overrides())
    writes = _env_writes(settings, env)
    candidate = _with_writes(env, writes)
    if writes:
        try:
            options = jax_gpu_options(candidate)
        except ValueError as err:
            raise SettingsError(
                f"JAX would reject the environment these settings leave ({err}), and fall back to "
                "the CPU; nothing was changed. Fix the variable it names (`%gpumem status` shows them)."
            ) from None
        _check_read_back(settings, options or {})
    effect = effective(candidate, create)
    _check_async_prealloc(candidate, effect)
    notes = _plan_notes(env_given, candidate, create, effect)
    return _Plan(env=writes, remat=settings.remat, notes=notes, noop=(), settings=settings)


def _check_installed_jax_takes(settings: AllocatorSettings, env_given: Mapping[str, Any]) -> None:
    """Raise SettingsError where the installed JAX cannot check the settings, or names no such allocator."""
    if env_given and not can_check_gpu_options():
        raise SettingsError(
            "JAX is not installed in this environment (no jaxlib with JAX's GPU option generator), so these "
            "settings cannot be checked; install jax (jax[cuda12] or jax[cuda13] for a GPU)"
        )
    if settings.allocator is not None:
        names = accepted_allocators()
        if settings.allocator not in names:
            raise SettingsError(
                f"allocator {settings.allocator!r} is not accepted by the installed JAX"
                f"{did_you_mean(settings.allocator, names)}; valid: {', '.join(names)}"
            )
    if settings.remat is not None:
        _check_remat_exists()


def _refuse_changes_after_start(env_given: Mapping[str, Any]) -> None:
    """Raise BackendStartedError for any given value that differs from the one JAX started with
    (what it read then, whatever the environment says now)."""
    env, create, in_effect, _ = started_with.in_effect()
    conflicts = [(k, v) for k, v in env_given.items() if not same(k, v, in_effect[k])]
    if not conflicts:
        return
    now = started_with.described([k for k, _ in conflicts], env, create, in_effect)
    words = _settings_words(AllocatorSettings(**dict(conflicts)))
    from jupyter_gpumem.settings import started_by

    raise BackendStartedError(
        f"JAX's backend has already started, so {words} cannot take effect. In effect now: "
        f"{now}. " + _RESTART.format(what="it", words=words) + started_by.suffix()
    )


def _refuse_hidden_by_create_options(env_given: Mapping[str, Any], overridden: Mapping[str, Any]) -> None:
    """Pure: raise SettingsError for a variable jax.config's create options would override."""
    hidden = [name for name in env_given if name in overridden]
    if hidden:
        words = _settings_words(AllocatorSettings(**{k: env_given[k] for k in hidden}))
        raise SettingsError(
            f"jax.config's {CREATE_OPTIONS_OPTION} sets {', '.join(f'{k}={overridden[k]!r}' for k in hidden)}, "
            f"and JAX applies it after the environment, so `{words}` would not take effect; nothing was "
            f"changed. Change it there instead: jax.config.update({CREATE_OPTIONS_OPTION!r}, {{...}})."
        )


def _with_writes(env: Mapping[str, str], writes: Mapping[str, str | None]) -> dict[str, str]:
    """Pure: ``env`` as it will be once ``writes`` are made (None unsets)."""
    candidate = dict(env)
    for var, value in writes.items():
        if value is None:
            candidate.pop(var, None)
        else:
            candidate[var] = value
    return candidate


def _plan_notes(
    env_given: Mapping[str, Any], candidate: Mapping[str, str], create: Any, effect: Any
) -> tuple[str, ...]:
    """Pure: what the given settings do under cuda_async, said where they touch it."""
    notes = []
    for topic, note in cuda_async_notes(effect, fraction_is_set(candidate, create)).items():
        if NOTE_TRIGGERS[topic] & set(env_given):
            notes.append("note: " + note)
    if "async_prealloc" in env_given and not is_cuda_async(effect):
        notes.append(
            f"note: {ASYNC_PREALLOC_VAR} is read only by the cuda_async allocator (`%gpumem allocator cuda_async`)"
        )
    return tuple(notes)


def _check_async_prealloc(candidate: Mapping[str, str], effect: Mapping[str, Any]) -> None:
    """cuda_async with an async-prealloc value XLA cannot read aborts the process at start."""
    raw = candidate.get(ASYNC_PREALLOC_VAR)
    if raw is not None and is_cuda_async(effect) and cuda_async_limits.read_async_prealloc(raw) is None:
        raise SettingsError(f"{cuda_async_limits.async_prealloc_problem(raw)} Nothing was changed.")


def _check_read_back(settings: AllocatorSettings, options: Mapping[str, Any]) -> None:
    """JAX must read back what we write; otherwise the setting would silently do nothing."""
    checks = []
    if settings.preallocate is not None:
        checks.append(("preallocate", PREALLOCATE_VAR, options.get("preallocate"), settings.preallocate))
    if settings.fraction is not None:
        checks.append(("fraction", fraction_var(), options.get("memory_fraction"), settings.fraction))
    if settings.allocator is not None:
        checks.append(("allocator", ALLOCATOR_VAR, options.get("allocator"), settings.allocator))
    for name, var, got, want in checks:
        if not same(name, got, want):
            raise SettingsError(
                f"the installed JAX does not read {name} from {var} (it read {got!r}); nothing was changed"
            )


def _write_env(writes: Mapping[str, str | None]) -> None:
    for var, value in writes.items():
        if var not in _original_env:
            _original_env[var] = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def _set_remat(value: bool) -> str:
    """Set the remat switch and, once JAX has started, drop its compiled programs; the words
    that say so.

    JAX reads the switch only when it builds XLA's compile options (``get_compile_options``,
    jax/_src/compiler.py, jax-v0.4.38 to jax-v0.11.0) and it is not in the jit cache key
    (``enable_remat_opt_pass`` is a ``bool_state`` without ``include_in_jit_key``,
    jax/_src/config.py, the same versions): without clearing, a jitted function called again runs
    the program it compiled before. ``jax.clear_caches()`` drops those programs, so each compiles
    again, with the new value, at its next call.
    """
    jax_remat.set_remat(value)
    if not backend_started():
        return f"{REMAT_OPTION}={value}: every compilation uses it (JAX has compiled nothing yet)"
    jax_arrays.clear_caches()
    return (
        f"{REMAT_OPTION}={value}; JAX's compiled programs were cleared (jax.clear_caches()), so each "
        "jitted function compiles again with it at its next call"
    )


def apply_settings(settings: AllocatorSettings, notes: tuple[str, ...] = (), source: str = FROM_MAGIC) -> Applied:
    """Validate every setting, then apply them all (or, on any error, none). ``source`` is what
    ``%gpumem status`` names as where they came from."""
    with _lock:
        plan = validate(settings)
        _write_env(plan.env)
        config: dict[str, Any] = {}
        if plan.remat is not None:
            global _original_remat
            if _original_remat is _UNSET:
                _original_remat = jax_remat.remat_value(import_jax=True)
            remat_words = _set_remat(plan.remat)
            config[REMAT_OPTION] = plan.remat
        for name, value in plan.settings.given().items():
            if name not in plan.noop:
                _ours[name] = value
                _source_of[name] = source
        parts = []
        if plan.env:
            shown = ", ".join(f"{var}={value}" for var, value in plan.env.items() if value is not None)
            unset = [var for var, value in plan.env.items() if value is None]
            if unset:
                shown += f" (unset {', '.join(unset)})"
            parts.append(f"{shown}: takes effect when JAX's backend starts (its first operation)")
        if plan.remat is not None:
            parts.append(remat_words)
            flags = remat_flags_problem(plan.remat, os.environ, jax_remat.remat_off_replaces_disabled_passes())
            if flags:
                notes = (*notes, flags)
        message = ("gpumem: " + "; ".join(parts)) if parts else ""
        return Applied(message, tuple(notes) + plan.notes, dict(plan.env), config)


def _refuse_reset(restored: Mapping[str, str]) -> None:
    """Raise where restoring ``restored`` (the environment reset would leave) cannot take effect:
    JAX's backend started, or its CUDA plugin already read the settings, or JAX rejects it."""
    if backend_started():
        now, then = started_with.in_effect()[2], effective(restored)
        changed = [k for k in ENV_SETTINGS if not same(k, now[k], then[k])]
        if changed:
            shown = "; ".join(f"{k.replace('_', '-')} is {show(k, now[k])}" for k in changed)
            raise BackendStartedError(
                f"JAX's backend has already started, so the settings %gpumem made are in effect "
                f"and cannot be taken back ({shown}). JAX reads these settings once, when its "
                "backend starts: restart the kernel to start from the environment's values."
            )
    elif _original_env:
        frozen = jax_plugins.frozen_plugin_options()
        now, then = effective(dict(os.environ)), effective(restored)
        changed = [k for k in PLUGIN_READ_SETTINGS if not same(k, now[k], then[k])]
        if frozen is not None and changed:
            shown = "; ".join(f"{k.replace('_', '-')} is {show(k, now[k])}" for k in changed)
            raise BackendStartedError(
                f"JAX has already registered its plugins (its backend has not started), and the CUDA "
                f"plugin read the settings %gpumem made then ({shown}); reset cannot take them back, "
                "and nothing was changed. Restart the kernel to start from the environment's values."
            )
        rejection = jax_rejection(restored)
        if rejection:
            raise SettingsError(
                f"reset would restore an environment JAX rejects ({rejection}); nothing was "
                "changed. Set a valid value with %gpumem instead."
            )


def reset() -> Applied:
    """Take back exactly what configure and %gpumem set: earlier values return, ours go.

    After the backend has started, only what still can change (remat) is taken back; restoring
    an environment value that is in effect raises BackendStartedError, changing nothing.
    """
    global _original_remat
    with _lock:
        if not _ours and not _original_env and _original_remat is _UNSET:
            return Applied("gpumem: nothing to reset; %gpumem has not set anything")
        restored = dict(os.environ)
        for var, value in _original_env.items():
            if value is None:
                restored.pop(var, None)
            else:
                restored[var] = value
        _refuse_reset(restored)
        writes = dict(_original_env)
        for var, value in writes.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        config = {}
        remat_words = ""
        if _original_remat is not _UNSET:
            remat_words = _set_remat(_original_remat)
            config[REMAT_OPTION] = _original_remat
        _original_env.clear()
        _ours.clear()
        _source_of.clear()
        _original_remat = _UNSET
        parts = []
        if writes:
            parts.append(
                ", ".join(f"{var}={value}" if value is not None else f"unset {var}" for var, value in writes.items())
            )
        if config:
            parts.append(remat_words)
        return Applied("gpumem: reset: " + "; ".join(parts), (), writes, config)


def allocator_in_effect() -> str:
    """The allocator JAX uses (or will use): "bfc" for default and bfc (and for platform where
    the installed JAX makes it BFC: ``settings.published.allocator_kind``), "cuda_async",
    "platform", "vmm", ...; "cpu" or "tpu" when the backend started on those. jax.config's
    ``jax_pjrt_client_create_options`` wins over the environment, as in JAX."""
    platform = backend_platform()
    if platform in ("cpu", "tpu"):
        return platform
    value = canonical_allocator(str(started_with.in_effect()[2]["allocator"]).lower())
    if value == "platform" and allocator_kind(value, jax_backend.installed_jax_version()) == "bfc":
        return "bfc"  # JAX 0.10.1 and 0.10.2 (jax#39145): its statistics and OOM texts are BFC's
    return value


def read_jax_devices() -> tuple[JaxDeviceReading, ...] | NotAvailable:
    """Each local JAX device's allocator statistics, read with the allocator in effect."""
    return jax_backend.read_jax_devices(allocator_in_effect())
