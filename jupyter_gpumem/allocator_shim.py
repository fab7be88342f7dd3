"""JAX's allocator: its settings before the backend starts, and its readings after.

The only module that imports ``jax`` or ``jaxlib``, and only inside functions, so that loading
the extension stays cheap.

Settings become environment variables that JAX's CUDA plugin reads once, when the backend
starts (``jaxlib.xla_client.generate_pjrt_gpu_plugin_options``), plus ``jax.config`` for the
remat pass. Every value is checked with that same generator before anything is written: a value
it rejects would make JAX fall back to the CPU silently, with only a log line to say so.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

from . import model
from .errors import GpumemError
from .model import AllocatorSettings, NotAvailable
from .units import format_bytes, parse_bytes, parse_fraction

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
    "configure",
    "reset",
    "settings_in_effect",
    "environment_problems",
    "jax_gpu_options",
    "jax_rejection",
    "fraction_var",
    "accepted_allocators",
    "backend_started",
    "backend_info",
    "allocator_in_effect",
    "read_jax_devices",
]

# --- names -----------------------------------------------------------------------------------

PREALLOCATE_VAR = "XLA_PYTHON_CLIENT_PREALLOCATE"
FRACTION_VAR = "XLA_CLIENT_MEM_FRACTION"  # read by jaxlib since 0.4.3x; the one we write if read
OLD_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"
ALLOCATOR_VAR = "XLA_PYTHON_CLIENT_ALLOCATOR"
ASYNC_PREALLOC_VAR = "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"
STALE_ALLOCATOR_VAR = "TF_GPU_ALLOCATOR"  # TensorFlow's; JAX does not read it
REMAT_OPTION = "jax_compiler_enable_remat_pass"
REMAT_ENV = "JAX_COMPILER_ENABLE_REMAT_PASS"  # read by jax at import only

SETTING_NAMES = ("preallocate", "fraction", "allocator", "async_prealloc", "remat")
ENV_SETTINGS = ("preallocate", "fraction", "allocator", "async_prealloc")

JAX_DEFAULT = "JAX default"
FROM_ENVIRONMENT = "environment"
FROM_MAGIC = "%gpumem"
FROM_CONFIG = "jax.config"

# JAX's documented default when XLA_CLIENT_MEM_FRACTION is unset (of total memory).
DEFAULT_FRACTION = 0.75

# Allocator names to probe the installed JAX with; the accepted set is whatever it takes.
_ALLOCATOR_CANDIDATES = ("default", "bfc", "platform", "cuda_async", "vmm", "address")
_ALLOCATOR_ALIASES = {
    "cuda_malloc_async": (
        "cuda_async",
        "cuda_malloc_async is TensorFlow's name: JAX calls it cuda_async and no longer reads "
        "TF_GPU_ALLOCATOR, so XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async is what gets written",
    ),
}

_RESTART = (
    "JAX reads these settings once, when its backend starts. To apply {what}, restart the "
    "kernel and run `%gpumem {words}` (or jupyter_gpumem.configure(...)) first, before any "
    "JAX operation."
)


class SettingsError(GpumemError, ValueError):
    """A setting that is not valid: the message names the valid values. Nothing was changed."""


class BackendStartedError(SettingsError):
    """A setting that can no longer take effect because JAX's backend has started."""


# --- what this module has set, so that reset() can take exactly that back ------------------

_lock = threading.RLock()
_original_env: dict[str, str | None] = {}  # env var -> its value before our first write
_ours: dict[str, Any] = {}  # setting name -> the value we set
_UNSET = object()
_original_remat: Any = _UNSET


# --- JAX's own option generator, called without touching os.environ -------------------------


class _EnvironmentView:
    """Stands in for the ``os`` module inside JAX's generator: getenv reads a given mapping."""

    def __init__(self, env: Mapping[str, str]):
        self.environ = dict(env)

    def getenv(self, key: str, default: Any = None) -> Any:
        return self.environ.get(key, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


@lru_cache(maxsize=1)
def _option_generator() -> Callable[[Mapping[str, str]], dict] | None:
    """JAX's GPU option generator, rebound to read a mapping we pass instead of os.environ.

    The generator only reads ``os.getenv`` (jaxlib/xla_client.py, 0.4.30 to 0.12), so giving it
    its own ``os`` keeps candidate values out of the real environment, where another thread
    starting JAX could see them.
    """
    try:
        from jaxlib import xla_client
    except Exception:
        return None
    gen = getattr(xla_client, "generate_pjrt_gpu_plugin_options", None)
    if gen is None or not isinstance(gen, types.FunctionType):
        return None

    def run(env: Mapping[str, str]) -> dict:
        isolated = types.FunctionType(
            gen.__code__, {**gen.__globals__, "os": _EnvironmentView(env)}, gen.__name__, gen.__defaults__, gen.__closure__
        )
        return dict(isolated())

    return run


def jax_gpu_options(env: Mapping[str, str] | None = None) -> dict | None:
    """The options JAX's CUDA plugin would be created with under ``env`` (default: os.environ).

    None when the installed jaxlib has no generator (or none is installed). Raises ValueError
    with JAX's own message when JAX would reject the environment.
    """
    gen = _option_generator()
    if gen is None:
        return None
    try:
        return gen(dict(os.environ) if env is None else env)
    except Exception as err:  # the plugin would catch this and fall back to CPU
        raise ValueError(str(err) or type(err).__name__) from None


def jax_rejection(env: Mapping[str, str] | None = None) -> str | None:
    """JAX's message if it would reject ``env`` (so fall back to CPU), else None."""
    try:
        jax_gpu_options(env)
    except ValueError as err:
        return str(err)
    return None


@lru_cache(maxsize=1)
def fraction_var() -> str:
    """The fraction variable the installed JAX reads: XLA_CLIENT_MEM_FRACTION where it exists."""
    try:
        options = jax_gpu_options({FRACTION_VAR: "0.5"})
    except ValueError:
        options = None
    if options is not None and options.get("memory_fraction") == 0.5:
        return FRACTION_VAR
    return OLD_FRACTION_VAR


@lru_cache(maxsize=1)
def accepted_allocators() -> tuple[str, ...]:
    """The allocator names the installed JAX accepts, found by asking its generator.

    Names listed in its error message are probed too, so a newer JAX's names are found.
    Empty when JAX is not installed.
    """
    if _option_generator() is None:
        return ()
    candidates = list(_ALLOCATOR_CANDIDATES)
    message = jax_rejection({ALLOCATOR_VAR: "no_such_allocator"}) or ""
    for name in re.findall(r'"([a-z][a-z0-9_]*)"', message):
        if name not in candidates and name != "no_such_allocator":
            candidates.append(name)
    return tuple(name for name in candidates if jax_rejection({ALLOCATOR_VAR: name}) is None)


# --- turning words and Python values into settings ------------------------------------------

_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")


def _switch(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _ON + _OFF:
        return value.strip().lower() in _ON
    raise SettingsError(f"{name} takes on or off, got {value!r}")


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
        if word in _ALLOCATOR_ALIASES:
            return _ALLOCATOR_ALIASES[word]
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


# --- what is in effect -----------------------------------------------------------------------


@dataclass(frozen=True)
class SettingState:
    """One setting as it stands: its value, shown for people, and where it came from."""

    name: str  # "preallocate", "fraction", "allocator", "async_prealloc", "remat"
    value: Any  # bool, float, str, int (-1: all) or None (not set and no default)
    shown: str  # "off", "0.75", "cuda_async", "2.00 GiB", "not set"
    source: str  # "JAX default", "environment", "%gpumem", "jax.config"
    env_var: str | None  # the variable that holds it (None for remat)
    config_option: str | None = None  # the jax.config option (remat only)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "value": self.value,
            "shown": self.shown,
            "source": self.source,
            "env_var": self.env_var,
            "config_option": self.config_option,
        }


def _canonical_allocator(name: str) -> str:
    return "bfc" if name in ("default", "bfc") else name


def _effective(env: Mapping[str, str]) -> dict[str, Any]:
    """What JAX makes of each variable in ``env``, read one variable at a time.

    One at a time so that one bad variable does not hide the others; where JAX rejects a value,
    the raw string is kept.
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
    allocator = read(ALLOCATOR_VAR, "allocator", "default")
    async_raw = env.get(ASYNC_PREALLOC_VAR)
    try:
        async_value: Any = None if async_raw is None else int(async_raw)
    except ValueError:
        async_value = async_raw
    return {
        "preallocate": read(PREALLOCATE_VAR, "preallocate", True),
        "fraction": fraction_value,
        "allocator": allocator,
        "async_prealloc": async_value,
    }


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "fraction" and isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-9
    if name == "allocator" and isinstance(a, str) and isinstance(b, str):
        return _canonical_allocator(a) == _canonical_allocator(b)
    return a == b


def _show(name: str, value: Any) -> str:
    if value is None:
        return "not set"
    if name in ("preallocate", "remat") and isinstance(value, bool):
        return "on" if value else "off"
    if name == "fraction" and isinstance(value, float):
        return f"{value:g}"
    if name == "allocator" and value == "default":
        return "default (bfc)"
    if name == "async_prealloc" and isinstance(value, int):
        return "all (-1)" if value == -1 else format_bytes(value)
    return str(value)


def _fraction_env_var(env: Mapping[str, str]) -> str:
    for var in (FRACTION_VAR, OLD_FRACTION_VAR):
        if env.get(var):
            return var
    return fraction_var()


def _env_var_for(name: str, env: Mapping[str, str]) -> str:
    return {
        "preallocate": PREALLOCATE_VAR,
        "allocator": ALLOCATOR_VAR,
        "async_prealloc": ASYNC_PREALLOC_VAR,
    }.get(name) or _fraction_env_var(env)


def _remat_in_effect() -> tuple[bool, str]:
    """The remat switch and its source, without importing jax when it is not imported."""
    jax = sys.modules.get("jax")
    if "remat" in _ours:
        source = FROM_MAGIC
    elif REMAT_ENV in os.environ:
        source = FROM_ENVIRONMENT
    else:
        source = JAX_DEFAULT
    if jax is not None:
        try:
            value = bool(getattr(jax.config, REMAT_OPTION))
            if source == JAX_DEFAULT and value is not True:
                source = FROM_CONFIG
            return value, source
        except Exception:
            pass
    raw = os.environ.get(REMAT_ENV)
    if raw is not None:
        return raw.strip().lower() in ("1", "true", "t", "yes", "y", "on"), source
    return True, source


def settings_in_effect() -> tuple[SettingState, ...]:
    """Every setting: its value now, shown for people, and where it came from.

    Before the backend starts this is what will take effect; after, what did (JAX read the
    environment at start, and this module refuses to change it since).
    """
    with _lock:
        env = dict(os.environ)
        values = _effective(env)
        states = []
        for name in ENV_SETTINGS:
            var = _env_var_for(name, env)
            if name in _ours:
                source = FROM_MAGIC
            elif var in env:
                source = FROM_ENVIRONMENT
            else:
                source = JAX_DEFAULT
            states.append(SettingState(name, values[name], _show(name, values[name]), source, var))
        remat, remat_source = _remat_in_effect()
        states.append(SettingState("remat", remat, _show("remat", remat), remat_source, None, REMAT_OPTION))
        return tuple(states)


def environment_problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Warnings about the allocator variables in ``env`` (default: os.environ), for people."""
    env = dict(os.environ) if env is None else dict(env)
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
    values = _effective(env)
    if _canonical_allocator(str(values["allocator"])) == "cuda_async" and values["preallocate"] is True:
        problems.append(
            "cuda_async still preallocates its whole pool while preallocate is on; "
            "add `%gpumem preallocate off` for the pool to grow on demand."
        )
    if ASYNC_PREALLOC_VAR in env and _canonical_allocator(str(values["allocator"])) != "cuda_async":
        problems.append(f"{ASYNC_PREALLOC_VAR} is set but is read only by the cuda_async allocator.")
    return problems


# --- validate, then apply --------------------------------------------------------------------


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
    try:
        import jax
    except Exception:
        raise SettingsError("remat needs JAX, which is not installed in this environment") from None
    try:
        getattr(jax.config, REMAT_OPTION)
    except AttributeError:
        raise SettingsError(
            f"the installed JAX ({getattr(jax, '__version__', '?')}) has no {REMAT_OPTION} option "
            "(it was added in JAX 0.4.34)"
        ) from None


def validate(settings: AllocatorSettings) -> _Plan:
    """Check every given setting, with JAX's own checks where it has them; change nothing.

    Raises SettingsError (a bad value, naming the valid ones) or BackendStartedError (a value
    that can no longer take effect). Returns the plan ``apply_settings`` carries out.
    """
    settings = _normalised(settings)
    given = settings.given()
    env_given = {k: v for k, v in given.items() if k in ENV_SETTINGS}
    notes: list[str] = []
    env = dict(os.environ)
    if env_given and _option_generator() is None:
        raise SettingsError(
            "JAX is not installed in this environment (jaxlib cannot be imported), so these "
            "settings cannot be checked; install jax (jax[cuda12] or jax[cuda13] for a GPU)"
        )
    if settings.allocator is not None:
        names = accepted_allocators()
        if settings.allocator not in names:
            raise SettingsError(
                f"allocator {settings.allocator!r} is not accepted by the installed JAX; "
                f"valid: {', '.join(names)}"
            )
    if settings.remat is not None:
        _check_remat_exists()

    if backend_started():
        in_effect = _effective(env)
        conflicts = [(k, v) for k, v in env_given.items() if not _same(k, v, in_effect[k])]
        if conflicts:
            now = "; ".join(
                f"{k.replace('_', '-')} is {_show(k, in_effect[k])} ({_env_var_for(k, env)})" for k, _ in conflicts
            )
            asked = AllocatorSettings(**dict(conflicts))
            words = _settings_words(asked)
            raise BackendStartedError(
                f"JAX's backend has already started, so {words} cannot take effect. In effect now: "
                f"{now}. " + _RESTART.format(what="it", words=words)
            )
        return _Plan(env={}, remat=settings.remat, notes=tuple(notes), noop=tuple(env_given), settings=settings)

    writes = _env_writes(settings, env)
    candidate = dict(env)
    for var, value in writes.items():
        if value is None:
            candidate.pop(var, None)
        else:
            candidate[var] = value
    if writes:
        try:
            options = jax_gpu_options(candidate)
        except ValueError as err:
            raise SettingsError(
                f"JAX would reject the environment these settings leave ({err}), and fall back to "
                "the CPU; nothing was changed. Fix the variable it names (`%gpumem status` shows them)."
            ) from None
        _check_read_back(settings, options or {})
    effect = _effective(candidate)
    if "allocator" in env_given or "preallocate" in env_given:
        if _canonical_allocator(str(effect["allocator"])) == "cuda_async" and effect["preallocate"] is True:
            notes.append("note: cuda_async still preallocates its pool while preallocate is on; add `preallocate off` for it to grow on demand")
    if "async_prealloc" in env_given and _canonical_allocator(str(effect["allocator"])) != "cuda_async":
        notes.append(f"note: {ASYNC_PREALLOC_VAR} is read only by the cuda_async allocator (`%gpumem allocator cuda_async`)")
    return _Plan(env=writes, remat=settings.remat, notes=tuple(notes), noop=(), settings=settings)


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
        if not _same(name, got, want):
            raise SettingsError(f"the installed JAX does not read {name} from {var} (it read {got!r}); nothing was changed")


def _write_env(writes: Mapping[str, str | None]) -> None:
    for var, value in writes.items():
        if var not in _original_env:
            _original_env[var] = os.environ.get(var)
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def _update_remat(value: bool) -> None:
    import jax

    jax.config.update(REMAT_OPTION, bool(value))


def _remat_message(value: bool) -> str:
    return (
        f"{REMAT_OPTION}={value} applies to compilations from now on; functions already "
        "compiled keep the setting they were compiled with"
    )


def apply_settings(settings: AllocatorSettings, notes: tuple[str, ...] = ()) -> Applied:
    """Validate every setting, then apply them all (or, on any error, none)."""
    with _lock:
        plan = validate(settings)
        _write_env(plan.env)
        config: dict[str, Any] = {}
        if plan.remat is not None:
            global _original_remat
            import jax

            if _original_remat is _UNSET:
                _original_remat = bool(getattr(jax.config, REMAT_OPTION))
            _update_remat(plan.remat)
            config[REMAT_OPTION] = plan.remat
        for name, value in plan.settings.given().items():
            if name not in plan.noop:
                _ours[name] = value
        parts = []
        if plan.env:
            shown = ", ".join(f"{var}={value}" for var, value in plan.env.items() if value is not None)
            unset = [var for var, value in plan.env.items() if value is None]
            if unset:
                shown += f" (unset {', '.join(unset)})"
            parts.append(f"{shown}: takes effect when JAX's backend starts (its first operation)")
        if plan.remat is not None:
            parts.append(_remat_message(plan.remat))
        message = ("gpumem: " + "; ".join(parts)) if parts else ""
        return Applied(message, tuple(notes) + plan.notes, dict(plan.env), config)


def configure(**settings: Any) -> None:
    """Set JAX's allocator before it starts: ``configure(preallocate=False, fraction=0.4)``.

    Keywords: preallocate (bool), fraction (0 < F <= 1, or ".5" / "50%"), allocator (a name the
    installed JAX accepts), async_prealloc (bytes, "2GiB", or "all"), remat (bool). Prints one
    line saying what takes effect. Raises SettingsError / BackendStartedError, changing nothing.
    """
    parsed, notes = settings_from_kwargs(**settings)
    applied = apply_settings(parsed, notes)
    text = str(applied)
    if text:
        print(text)


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
        if backend_started():
            now, then = _effective(dict(os.environ)), _effective(restored)
            changed = [k for k in ENV_SETTINGS if not _same(k, now[k], then[k])]
            if changed:
                shown = "; ".join(f"{k.replace('_', '-')} is {_show(k, now[k])}" for k in changed)
                raise BackendStartedError(
                    f"JAX's backend has already started, so the settings %gpumem made are in effect "
                    f"and cannot be taken back ({shown}). JAX reads these settings once, when its "
                    "backend starts: restart the kernel to start from the environment's values."
                )
        elif _original_env:
            rejection = jax_rejection(restored)
            if rejection:
                raise SettingsError(
                    f"reset would restore an environment JAX rejects ({rejection}); nothing was "
                    "changed. Set a valid value with %gpumem instead."
                )
        writes = dict(_original_env)
        for var, value in writes.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        config = {}
        if _original_remat is not _UNSET:
            _update_remat(_original_remat)
            config[REMAT_OPTION] = _original_remat
        _original_env.clear()
        _ours.clear()
        _original_remat = _UNSET
        parts = []
        if writes:
            parts.append(
                ", ".join(f"{var}={value}" if value is not None else f"unset {var}" for var, value in writes.items())
            )
        if config:
            parts.append(f"{REMAT_OPTION}={config[REMAT_OPTION]} for later compilations")
        return Applied("gpumem: reset: " + "; ".join(parts), (), writes, config)


# --- has JAX started? ------------------------------------------------------------------------


def backend_started() -> bool:
    """Whether JAX's backend has started, found without starting it.

    Never imports jax: a process that has not imported it has not started it. Uses the private
    ``jax._src.xla_bridge.backends_are_initialized()`` (0.4.21 to 0.12), falling back to the
    module's ``_backends`` dict it reads.
    """
    if "jax" not in sys.modules:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False  # jax is still importing; nothing has started
    probe = getattr(bridge, "backends_are_initialized", None)
    try:
        if callable(probe):
            return bool(probe())
        backends = getattr(bridge, "_backends", None)
        if isinstance(backends, dict):
            return bool(backends)
        return getattr(bridge, "_default_backend", None) is not None
    except Exception:
        return False


def _bridge() -> Any:
    return sys.modules.get("jax._src.xla_bridge")


def _default_client() -> Any:
    bridge = _bridge()
    client = getattr(bridge, "_default_backend", None)
    if client is None and bridge is not None:
        client = bridge.get_backend()  # safe: only called once the backends exist
    return client


_GPU_PLATFORMS = ("cuda", "rocm", "gpu")
_CUDA_PLUGIN_MODULES = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")


def _cuda_plugin_installed() -> bool:
    for name in _CUDA_PLUGIN_MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _fallback_reason(platform: str | None) -> str | None:
    """Why JAX runs on the CPU although a GPU backend was expected, or None."""
    if platform != "cpu":
        return None
    bridge = _bridge()
    errors = dict(getattr(bridge, "_backend_errors", {}) or {})
    for name in ("cuda", "rocm"):
        if name in errors:
            return f"the {name.upper()} backend failed to start: {errors[name]}"
    if not _cuda_plugin_installed():
        return None
    factories = getattr(bridge, "_backend_factories", {}) or {}
    if "cuda" not in factories:
        rejection = jax_rejection()
        if rejection:
            return f"the CUDA plugin did not register because JAX rejected the environment: {rejection}"
        return "the CUDA plugin is installed but did not register (run with TF_CPP_MIN_LOG_LEVEL=0 to see why)"
    if os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu":
        return None
    return "the CUDA plugin is installed but JAX chose the CPU (no visible NVIDIA GPU?)"


def backend_info() -> dict:
    """The backend's state: {started, platform, devices: [{id, kind, platform}], fallback_reason,
    jax_version}. Reads the backend only once it has started; never raises."""
    info: dict[str, Any] = {
        "started": False,
        "jax_imported": "jax" in sys.modules,
        "jax_version": getattr(sys.modules.get("jax"), "__version__", None),
        "platform": None,
        "devices": [],
        "fallback_reason": None,
    }
    try:
        if not backend_started():
            return info
        info["started"] = True
        client = _default_client()
        info["platform"] = getattr(client, "platform", None)
        info["devices"] = [
            {"id": d.id, "kind": getattr(d, "device_kind", ""), "platform": d.platform} for d in client.local_devices()
        ]
        info["fallback_reason"] = _fallback_reason(info["platform"])
    except Exception as err:  # a reading, never an exception into the kernel
        info["error"] = f"{type(err).__name__}: {err}"
    return info


def allocator_in_effect() -> str:
    """The allocator JAX uses (or will use): "bfc" for default and bfc, "cuda_async", "platform",
    "vmm", ...; "cpu" or "tpu" when the backend started on those."""
    if backend_started():
        try:
            platform = getattr(_default_client(), "platform", None)
            if platform in ("cpu", "tpu"):
                return platform
        except Exception:
            pass
    value = _effective(dict(os.environ))["allocator"]
    return _canonical_allocator(str(value).lower())


# --- readings --------------------------------------------------------------------------------


def _visible_devices() -> list[int] | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        return None
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        return None  # UUIDs or MIG names: no index mapping from here


def _platform_family(platform: str) -> str:
    return "gpu" if platform in _GPU_PLATFORMS else platform


def _cuda_pool(ordinal: int) -> model.CudaPoolReading | NotAvailable:
    try:
        from .cuda_pool import read_default_pool
    except ImportError:
        return NotAvailable(model.NOT_SUPPORTED, "the CUDA pool reader is not available in this installation")
    try:
        return read_default_pool(ordinal)
    except Exception as err:
        return NotAvailable(model.ERROR, f"reading the CUDA pool failed: {err}")


def read_jax_devices() -> tuple[model.JaxDeviceReading, ...] | NotAvailable:
    """Each local JAX device's allocator statistics; never starts JAX and never raises."""
    try:
        if not backend_started():
            if "jax" not in sys.modules and importlib.util.find_spec("jax") is None:
                return NotAvailable(model.NO_JAX, "JAX is not installed in this environment")
            return NotAvailable(model.NOT_STARTED, "JAX has not started yet; readings begin when it does")
        allocator = allocator_in_effect()
        visible = _visible_devices()
        readings = []
        for device in _default_client().local_devices():
            family = _platform_family(device.platform)
            try:
                stats = model.normalise_stats(device.memory_stats(), allocator, family)
            except Exception as err:
                stats = NotAvailable(model.ERROR, f"memory_stats() failed: {err}")
            nvml_index = None
            pool = None
            if family == "gpu":
                hw = getattr(device, "local_hardware_id", None)
                ordinal = hw if isinstance(hw, int) else device.id
                nvml_index = visible[ordinal] if visible is not None and 0 <= ordinal < len(visible) else ordinal
                if allocator == "cuda_async":
                    pool = _cuda_pool(ordinal)
            readings.append(
                model.JaxDeviceReading(
                    jax_id=device.id,
                    platform=family,
                    kind=getattr(device, "device_kind", ""),
                    nvml_index=nvml_index,
                    stats=stats,
                    cuda_pool=pool,
                )
            )
        return tuple(readings)
    except Exception as err:
        return NotAvailable(model.ERROR, f"reading JAX's devices failed: {type(err).__name__}: {err}")


# === live arrays, caches, compilation and moving buffers (used by doctor.py) ==================
# Everything below touches jax only once the backend has started (or when asked to compile),
# and imports it inside functions.


# Nothing here reads a buffer: no unsafe_buffer_pointer(), no addressable_shards, no waiting.
# On an array whose allocation failed, the pointer call is a fatal check in XLA
# (xla/python/pjrt_ifrt raw_buffer.h "Check failed: buffer_.IsConcrete()", SIGABRT), and on a
# pending one it waits with the GIL held, which deadlocks a jax.debug.print callback.
# Building Shard objects makes JAX keep per-shard arrays alive, which jax.live_arrays() then
# lists. Sizes come from the sharding and the abstract value, which JAX sets at dispatch.


@dataclass(frozen=True)
class Footprint:
    """Where one array's bytes are, from its sharding alone.

    ``device_bytes`` maps a JAX device id to the bytes it holds in device memory; ``host_bytes``
    counts arrays placed in a host memory kind (``pinned_host``, ``unpinned_host``), which take
    no device memory; ``memory_kind`` is the sharding's, None where this JAX has none.
    """

    device_bytes: Mapping[int, int]
    host_bytes: int
    memory_kind: str | None
    shape: tuple = ()
    dtype: str = ""

    @property
    def on_device(self) -> int:
        return sum(self.device_bytes.values())


_DEVICE_KINDS = (None, "device")
_footprints: dict[tuple, Footprint] = {}


def _shard_sizes(sharding: Any, shape: tuple, devices: Any) -> dict[int, int]:
    """Elements per addressable device: a shard's shape, or the device's slice where shards differ."""
    try:
        per_shard = math.prod(sharding.shard_shape(shape))
        return {d.id: per_shard for d in devices}
    except Exception:  # uneven shardings: shard_shape raises; the index map is metadata too
        sizes = {}
        for device, index in sharding.addressable_devices_indices_map(shape).items():
            sizes[device.id] = math.prod(len(range(*s.indices(n))) for s, n in zip(index, shape))
        return sizes


def footprint(array: Any) -> Footprint:
    """The array's bytes per device and in host memory, without touching its buffers."""
    sharding = array.sharding
    aval = array.aval
    key = (sharding, aval.shape, aval.dtype)
    known = _footprints.get(key)
    if known is not None:
        return known
    nbytes = int(array.nbytes)  # the global array's bytes
    devices = sharding.addressable_devices
    kind = getattr(sharding, "memory_kind", None)
    if len(sharding.device_set) == 1:
        (device,) = devices
        per_device = {device.id: nbytes}
    else:
        total = math.prod(aval.shape)
        per_device = {d: (nbytes * n // total if total else 0) for d, n in _shard_sizes(sharding, aval.shape, devices).items()}
    shape, dtype = tuple(aval.shape), str(aval.dtype)
    if kind in _DEVICE_KINDS:
        found = Footprint(per_device, 0, kind, shape, dtype)
    else:
        found = Footprint({}, sum(per_device.values()), kind, shape, dtype)
    if len(_footprints) > 4096:  # shapes come and go; a few thousand distinct ones is plenty
        _footprints.clear()
    _footprints[key] = found
    return found


def live_arrays_newest_first() -> list:
    """``jax.live_arrays()``, newest first; [] before the backend starts (listing would start it).

    JAX lists from the head of the client's array list, where each new array is linked
    (jaxlib py_array.cc, PyArray_Storage); tests/test_do_no_harm.py checks this order.
    """
    if not backend_started():
        return []
    import jax

    return jax.live_arrays()


def shard_view_ids(array: Any) -> tuple[int, ...]:
    """ids of the per-shard arrays that ``array.addressable_shards`` made and JAX caches on the
    array (jax/_src/array.py): views of the same buffers, which are not arrays of their own."""
    try:
        shards = vars(array).get("addressable_shards")
    except TypeError:
        return ()
    if not isinstance(shards, list):
        return ()
    return tuple(id(s.data) for s in shards if getattr(s, "data", None) is not None)


_concrete_array_types: set[type] = set()  # types seen to be jax.Array and not a tracer


def is_jax_array(obj: Any) -> bool:
    """Whether ``obj`` is a jax.Array (False, cheaply, when jax is not imported)."""
    if type(obj) in _concrete_array_types:
        return True
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    array_type = getattr(jax, "Array", None)
    try:
        found = array_type is not None and isinstance(obj, array_type) and not _is_tracer(obj)
    except Exception:
        return False
    if found and type(obj).__name__ == "ArrayImpl":
        _concrete_array_types.add(type(obj))
    return found


def _is_tracer(obj: Any) -> bool:
    core = sys.modules.get("jax._src.core")
    tracer = getattr(core, "Tracer", None)
    return tracer is not None and isinstance(obj, tracer)


def clear_caches() -> bool:
    """``jax.clear_caches()`` where jax is imported: drops compiled programs. True if it ran."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    jax.clear_caches()
    return True


@dataclass(frozen=True)
class CompiledMemory:
    """What a compiled call needs, from ``Compiled.memory_analysis()`` (bytes, per device)."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    code_bytes: int
    peak_bytes: int | None  # XLA's own peak where this JAX reports it
    jitted: bool  # False: the callee was not jitted and was compiled as jax.jit(callee)


def compile_memory(callee: Any, args: tuple, kwargs: Mapping[str, Any]) -> CompiledMemory:
    """Lower and compile ``callee(*args, **kwargs)`` without running it, and read its memory.

    A callee without ``.lower`` is wrapped in ``jax.jit``. Raises ValueError, with JAX's
    message, when it cannot be lowered or compiled.
    """
    import jax

    jitted = hasattr(callee, "lower")
    fn = callee if jitted else jax.jit(callee)
    try:
        analysis = fn.lower(*args, **kwargs).compile().memory_analysis()
    except Exception as err:
        raise ValueError(f"could not compile it for these arguments: {type(err).__name__}: {err}") from None
    if analysis is None:
        raise ValueError("this backend gives no memory analysis for compiled programs")
    if isinstance(analysis, (list, tuple)):  # older JAX: one per device
        analysis = analysis[0]

    def get(name: str) -> int:
        value = getattr(analysis, name, 0)
        return int(value) if isinstance(value, int) and value >= 0 else 0

    peak = getattr(analysis, "peak_memory_in_bytes", None)
    return CompiledMemory(
        argument_bytes=get("argument_size_in_bytes"),
        output_bytes=get("output_size_in_bytes"),
        temp_bytes=get("temp_size_in_bytes"),
        alias_bytes=get("alias_size_in_bytes"),
        code_bytes=get("generated_code_size_in_bytes"),
        peak_bytes=int(peak) if isinstance(peak, int) and peak > 0 else None,
        jitted=jitted,
    )


def host_round_trip(tree: Any) -> tuple[Any, int, int]:
    """Copy every jax.Array leaf of ``tree`` to the host, delete its device buffers, and put it
    back with the same sharding; returns ``(new_tree, arrays_moved, bytes_moved)``.

    All leaves are on the host before any is put back, so the allocator places them into a pool
    with the old buffers gone. Deleting is what frees: any other reference to these arrays sees
    a deleted array afterwards.
    """
    import jax
    import numpy as np

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    moved = []
    for i, leaf in enumerate(leaves):
        if is_jax_array(leaf) and not leaf.is_deleted():
            moved.append((i, leaf.sharding, np.asarray(jax.device_get(leaf))))
    total = sum(int(host.nbytes) for _, _, host in moved)
    for i, _, _ in moved:
        leaves[i].delete()
    for i, sharding, host in moved:
        leaves[i] = jax.device_put(host, sharding)
    for i, _, _ in moved:
        leaves[i].block_until_ready()
    return jax.tree_util.tree_unflatten(treedef, leaves), len(moved), total

