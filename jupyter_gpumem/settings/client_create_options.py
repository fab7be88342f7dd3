"""JAX's ``jax_pjrt_client_create_options``, read the way JAX reads it: which allocator settings
it overrides, and which of its values would stop the CUDA backend from starting.

- jax/_src/xla_bridge.py (``_options_from_jax_configs`` and ``make_pjrt_c_api_client``, JAX
  0.10.2 and 0.11.0): the plugin's own options (for CUDA, built from the environment by
  ``generate_pjrt_gpu_plugin_options``) are updated with this option's entries, so an entry
  wins over the environment variable. A string is ``"k1:v1;k2:v2"`` and its values stay
  strings; a part without exactly one ``:`` raises when the backend starts. A dict is used as
  it is.
- xla/pjrt/c/pjrt_c_api_gpu_internal.cc (openxla/xla, ``PJRT_Client_Create``): the CUDA plugin
  checks each option's type (``allocator`` a string, ``memory_fraction`` a float,
  ``preallocate`` a bool) and takes only the allocator names it knows, spelt exactly. So a
  string can set the allocator but never preallocate or the fraction.

Pure: the value is read by ``sources.jax_backend.pjrt_create_options``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.core.env_table import CREATE_OPTION_KEYS, CREATE_OPTIONS_OPTION

_TYPES = {"allocator": (str, "a string"), "memory_fraction": (float, "a float"), "preallocate": (bool, "a bool")}


@dataclass(frozen=True)
class CreateOptions:
    """The option's value (None when unset or not in the installed JAX), its entries as JAX
    parses them, and JAX's error when it cannot parse them (raised at the backend's start)."""

    raw: Any = None
    options: dict = field(default_factory=dict)
    error: str | None = None

    def overrides(self) -> dict[str, Any]:
        """Our settings that these options set, by setting name, each value as given."""
        return {name: self.options[key] for name, key in CREATE_OPTION_KEYS.items() if key in self.options}

    def problems(self, allocators: Sequence[str]) -> list[str]:
        """Why the CUDA backend would fail to start with these options, for people.

        ``allocators``: the names the installed JAX accepts (its option generator's list).
        """
        where = f"jax.config's {CREATE_OPTIONS_OPTION}"
        if self.error:
            return [
                f"JAX's CUDA backend will fail to start, at JAX's first operation: {self.error} ({where} = {self.raw!r})."
            ]
        out = []
        for key, (kind, words) in _TYPES.items():
            if key not in self.options:
                continue
            value = self.options[key]
            wrong_type = not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))
            if wrong_type:
                out.append(
                    f"{where} gives {key} as {type(value).__name__} {value!r}, but JAX's CUDA plugin takes only "
                    f"{words} there, so the CUDA backend will fail to start at JAX's first operation. "
                    + ("A string option can only name the allocator; set" if isinstance(self.raw, str) else "Set")
                    + f" it from Python: jax.config.update({CREATE_OPTIONS_OPTION!r}, {{{key!r}: ...}})."
                )
            elif key == "allocator" and allocators and value not in allocators:
                out.append(
                    f"{where} names allocator {value!r}, which JAX's CUDA plugin does not take (it compares "
                    f"exactly: {', '.join(allocators)}), so the CUDA backend will fail to start."
                )
        return out


def parse(raw: Any) -> CreateOptions:
    """``raw`` (None, a ``"k1:v1;k2:v2"`` string or a dict) as JAX's xla_bridge parses it."""
    if isinstance(raw, dict):
        return CreateOptions(raw, dict(raw))
    if not isinstance(raw, str):
        return CreateOptions(raw)
    options: dict[str, str] = {}
    for option in raw.split(";") if raw else []:
        parts = option.split(":")
        if len(parts) != 2:
            error = (
                f"Multiple ':' separators for option in {CREATE_OPTIONS_OPTION}: '{option}'. "
                "Should be in format 'key:value'"
            )
            return CreateOptions(raw, {}, error)
        options[parts[0]] = parts[1]
    return CreateOptions(raw, options)
