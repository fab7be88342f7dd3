"""The settings the CUDA plugin read when JAX registered its plugins, before its backend started
(``jax_plugins.frozen_plugin_options``): what is in effect then, and which asked values differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jupyter_gpumem.core.env_table import DEFAULT_FRACTION
from jupyter_gpumem.settings.effective import canonical_allocator, same, show
from jupyter_gpumem.sources import jax_backend, jax_plugins
from jupyter_gpumem.sources.jax_backend import PLUGIN_READ_SETTINGS

__all__ = ["frozen_values", "frozen_in_effect", "frozen_settings_sentence", "changed_since_registration"]


def frozen_values(options: Mapping[str, Any]) -> dict[str, Any]:
    """The three settings in the CUDA plugin's registered options, JAX's defaults where absent
    (``generate_pjrt_gpu_plugin_options``: no key means preallocation on, the default fraction)."""
    return {
        "preallocate": options.get("preallocate", True),
        "fraction": options.get("memory_fraction", DEFAULT_FRACTION),
        "allocator": canonical_allocator(str(options.get("allocator", "default"))),
    }


def frozen_settings_sentence() -> str | None:
    """What ``%gpumem status`` says while the plugins' options are fixed but JAX has not
    started (``jax_plugins.frozen_plugin_options``); None otherwise."""
    frozen = jax_plugins.frozen_plugin_options()
    if frozen is None:
        return None
    raised = jax_backend.raised_start_error()
    return (
        "JAX's backend has not started, but JAX has registered its plugins, which read "
        + ", ".join(PLUGIN_READ_SETTINGS)
        + " then: "
        + frozen_in_effect(frozen)
        + ". They can no longer change in this kernel (restart it to change them)."
        + (f' Starting it failed: "{raised}".' if raised else "")
    )


def frozen_in_effect(frozen: Any) -> str:
    """Pure: the registered CUDA plugin's settings as a clause, or why there are none."""
    if not frozen.cuda_registered:
        return "no CUDA plugin registered, so JAX will start on the CPU and reads none of them"
    if frozen.cuda_options is None:
        return "the CUDA plugin's options cannot be read here"
    values = frozen_values(frozen.cuda_options)
    return "in effect: " + "; ".join(f"{k.replace('_', '-')} is {show(k, values[k])}" for k in PLUGIN_READ_SETTINGS)


def changed_since_registration(env_given: Mapping[str, Any], frozen: Any) -> dict[str, Any]:
    """Pure: the given settings the plugin read that differ from what it read (all of them
    where its options cannot be read)."""
    asked = {k: v for k, v in env_given.items() if k in PLUGIN_READ_SETTINGS}
    if frozen.cuda_options is None:
        return asked
    values = frozen_values(frozen.cuda_options)
    return {k: v for k, v in asked.items() if not same(k, v, values[k])}
