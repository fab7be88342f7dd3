"""Which version of jupyter-gpumem is this? Read on first use, without importing the package's faces."""

from __future__ import annotations

from importlib import import_module

# Named as text, not imported: in a checkout that was never built there is no _version.py, and a
# static import of it would resolve to the package root, whose lazy imports reach every face.
_BUILT_VERSION_MODULE = "jupyter_gpumem._version"


def package_version() -> str:
    """The built version, else the installed distribution's, else "0+unknown" (a bare checkout)."""
    # Read on first use: importlib.metadata alone would add ~40 ms to every %load_ext.
    try:
        return import_module(_BUILT_VERSION_MODULE).__version__  # written by the build
    except ImportError:
        pass
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("jupyter-gpumem")
    except PackageNotFoundError:
        return "0+unknown"
