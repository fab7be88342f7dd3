"""JAX's remat switch (``jax_compiler_enable_remat_pass``): whether it can be set, its value,
setting it, and whether turning it off replaces passes disabled through ``XLA_FLAGS`` (jax#37391).
jax is imported only to set the switch, or where the caller asks.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from functools import lru_cache

from jupyter_gpumem.core.env_table import REMAT_OPTION

__all__ = [
    "remat_option_problem",
    "remat_value",
    "REMAT_OVERWRITE_LAST_AFFECTED",
    "release_tuple",
    "remat_off_replaces_disabled_passes",
    "set_remat",
]


def remat_option_problem() -> str | None:
    """Why the remat switch cannot be set here (no JAX, or a JAX without the option), or None."""
    try:
        import jax
    except ImportError:
        return "remat needs JAX, which is not installed in this environment"
    if not hasattr(jax.config, REMAT_OPTION):
        return (
            f"the installed JAX ({getattr(jax, '__version__', '?')}) has no {REMAT_OPTION} option "
            "(it was added in JAX 0.4.34)"
        )
    return None


def remat_value(import_jax: bool = False) -> bool | None:
    """``jax.config``'s remat switch; None when jax is not imported (and ``import_jax`` is false)
    or has no such option."""
    if import_jax:
        import jax
    else:
        jax = sys.modules.get("jax")
    config = getattr(jax, "config", None)
    if config is None or not hasattr(config, REMAT_OPTION):
        return None
    return bool(getattr(config, REMAT_OPTION))


# The last release whose jax/_src/compiler.py assigns "rematerialization" to
# xla_disable_hlo_passes, replacing passes disabled through XLA_FLAGS (jax#37391). The fix
# (commit ce0a773, "Append it instead") came after jax-v0.11.0; JAX's CHANGELOG lists it under
# the release after 0.11.0.
REMAT_OVERWRITE_LAST_AFFECTED = (0, 11, 0)


def release_tuple(version: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(part) for part in match.groups()) if match else None


@lru_cache(maxsize=1)
def remat_off_replaces_disabled_passes() -> bool | None:
    """Whether the installed JAX, with the remat pass turned off, replaces the passes that
    ``XLA_FLAGS=--xla_disable_hlo_passes=...`` disabled (jax#37391); None when not known.

    Decided from the installed ``jax/_src/compiler.py`` (read as text, not imported): the
    affected code assigns ``xla_disable_hlo_passes = "rematerialization"``, the fixed code
    calls ``_add_disabled_hlo_pass``. Only when the file cannot be read is the version compared
    with ``REMAT_OVERWRITE_LAST_AFFECTED``.
    """
    try:
        spec = importlib.util.find_spec("jax")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or []:
        try:
            with open(os.path.join(folder, "_src", "compiler.py"), encoding="utf-8") as handle:
                source = handle.read()
        except OSError:
            continue
        if "_add_disabled_hlo_pass" in source:
            return False
        if re.search(r"xla_disable_hlo_passes\s*=\s*[\"']rematerialization[\"']", source):
            return True
    try:
        from importlib.metadata import PackageNotFoundError, version

        release = release_tuple(version("jax"))
    except (ImportError, PackageNotFoundError, ValueError):
        return None
    return None if release is None else release <= REMAT_OVERWRITE_LAST_AFFECTED


def set_remat(value: bool) -> None:
    """Set ``jax.config``'s remat switch for later compilations (imports jax)."""
    import jax

    jax.config.update(REMAT_OPTION, bool(value))
