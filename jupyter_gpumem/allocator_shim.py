"""The public names of ``jupyter_gpumem.settings.apply``, as ``jupyter_gpumem.allocator_shim`` where users and docs name them.

JAX's allocator settings before the backend starts: validate, apply, refuse, reset.
"""

from jupyter_gpumem.core.env_table import SETTING_NAMES
from jupyter_gpumem.core.errors import GpumemError
from jupyter_gpumem.settings.apply import (
    Applied,
    BackendStartedError,
    SettingsError,
    SettingState,
    allocator_in_effect,
    apply_settings,
    coerce_setting,
    read_jax_devices,
    reset,
    setting_variables,
    settings_from_kwargs,
    settings_in_effect,
    validate,
)
from jupyter_gpumem.settings.configure import configure, configure_from_notebook
from jupyter_gpumem.settings.effective import environment_problems
from jupyter_gpumem.sources.jax_backend import backend_started
from jupyter_gpumem.sources.jax_options import accepted_allocators, fraction_var, jax_gpu_options, jax_rejection

__all__ = [
    "GpumemError",
    "SETTING_NAMES",
    "environment_problems",
    "jax_gpu_options",
    "jax_rejection",
    "fraction_var",
    "accepted_allocators",
    "backend_started",
    "SettingsError",
    "BackendStartedError",
    "coerce_setting",
    "settings_from_kwargs",
    "SettingState",
    "setting_variables",
    "settings_in_effect",
    "Applied",
    "validate",
    "apply_settings",
    "configure",
    "configure_from_notebook",
    "reset",
    "allocator_in_effect",
    "read_jax_devices",
]
