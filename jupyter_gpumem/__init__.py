"""See and steer JAX's GPU memory from inside Jupyter.

``%load_ext jupyter_gpumem`` registers the ``%gpumem`` magic. Loading is cheap: it imports
neither jax, pynvml, plotly nor ipywidgets; each is imported where it is first needed.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "configure",
    "status",
    "gpu_or_replay",
    "peak",
    "oom_report",
    "Monitor",
    "track",
    "defragment",
    "__version__",
]


def load_ipython_extension(ipython: Any) -> None:
    from jupyter_gpumem.kernel.magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from jupyter_gpumem.kernel.magics import unload

    unload(ipython)


def configure(**settings: Any):
    """Set JAX's allocator before it starts: ``configure(preallocate=False, fraction=0.4)``.

    Same rules as ``%gpumem``: everything is validated before anything is applied.
    """
    from jupyter_gpumem.settings.configure import configure as _configure

    return _configure(**settings)


def status():
    """The settings in effect, where each came from, the backend state and warnings."""
    from jupyter_gpumem.settings.status import status as _status

    return _status()


def gpu_or_replay() -> bool:
    """True where JAX can use a GPU here (NVML sees one and JAX's CUDA plugin is installed).
    Prints which GPUs, or why not and that the lessons replay synthetic demo traces instead.
    Reads NVML only: it does not start JAX."""
    from jupyter_gpumem.settings.status import gpu_or_replay as _gpu_or_replay

    return _gpu_or_replay()


def peak(call: Any, *args: Any, **kwargs: Any):
    """What ``%gpumem peak call(*args, **kwargs)`` shows, as a value: ``call`` compiled for these
    arguments, never run; its peak (``.peak``), the values live there by source line
    (``.lines_by_source``) and the fixes that lower it (``.fixes``, each checked by compiling)."""
    from jupyter_gpumem.core.sites import cell_numbers
    from jupyter_gpumem.doctor.names import current_shell
    from jupyter_gpumem.doctor.peak_report import peak as _peak

    # Lines of cells are named "cell [n] line L", as the magic names them.
    return _peak(call, *args, _cells=cell_numbers(current_shell()), **kwargs)


def oom_report(error: BaseException | None = None):
    """The out-of-memory report for ``error``, by default the last error a cell raised
    (``sys.last_value``), read now: what the doctor shows under a failing cell, as a value
    (``.readings.program`` is the failing call's compiled budget). None when it is no OOM."""
    import sys

    from jupyter_gpumem.doctor.report import oom_report as _oom_report

    error = error if error is not None else getattr(sys, "last_value", None)
    return None if error is None else _oom_report(error)


def __getattr__(name: str) -> Any:
    # Faces that pull in heavy packages are imported on first use only.
    if name == "__version__":
        from jupyter_gpumem.core.package_version import package_version

        return package_version()
    if name == "Monitor":
        from jupyter_gpumem.monitor.widget import Monitor

        return Monitor
    if name == "track":
        from jupyter_gpumem.doctor.tracking import track

        return track
    if name == "defragment":
        from jupyter_gpumem.doctor.defragmenting import defragment

        return defragment
    raise AttributeError(f"module 'jupyter_gpumem' has no attribute {name!r}")


# --- Jupyter server and lab extension hooks ----------------------------------------------------


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-gpumem"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "jupyter_gpumem.server"}]
