"""Which version of jupyter-gpumem is this? Read on first use, without importing the package's faces."""

from __future__ import annotations


def package_version() -> str:
    """The built version, else the installed distribution's, else "0+unknown" (a bare checkout)."""
    # Read on first use: importlib.metadata alone would add ~40 ms to every %load_ext.
    try:
        from jupyter_gpumem._version import __version__ as version  # written by the build

        return version
    except ImportError:
        pass
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("jupyter-gpumem")
    except PackageNotFoundError:
        return "0+unknown"
