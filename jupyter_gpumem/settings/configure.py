"""``configure()`` and the panel's ``configure_from_notebook()``: validate and apply the settings
(``settings.apply``), then publish them for the server (``settings.publish``), and say what changed.
"""

from __future__ import annotations

from typing import Any

from jupyter_gpumem.core.env_table import FROM_MAGIC, FROM_NOTEBOOK
from jupyter_gpumem.settings.apply import apply_settings, settings_from_kwargs
from jupyter_gpumem.settings.publish import publish_quietly

__all__ = ["configure", "configure_from_notebook"]


def configure(**settings: Any) -> None:
    """Set JAX's allocator before it starts: ``configure(preallocate=False, fraction=0.4)``.

    Keywords: preallocate (bool), fraction (0 < F <= 1, or ".5" / "50%"), allocator (a name the
    installed JAX accepts), async_prealloc (bytes, "2GiB", or "all"), remat (bool). Prints one
    line saying what takes effect. Raises SettingsError / BackendStartedError, changing nothing.
    """
    _configure(settings, FROM_MAGIC)


def configure_from_notebook(**settings: Any) -> None:
    """``configure`` as the JupyterLab panel calls it at kernel start, with the notebook's
    settings (metadata.jupyter_gpumem): ``%gpumem status`` names their source "notebook settings"."""
    _configure(settings, FROM_NOTEBOOK)


def _configure(settings: dict[str, Any], source: str) -> None:
    parsed, notes = settings_from_kwargs(**settings)
    text = str(apply_settings(parsed, notes, source=source))
    # The panel applies a notebook's settings in a silent execution, which runs no cell hooks.
    publish_quietly()
    if text:
        print(text)
