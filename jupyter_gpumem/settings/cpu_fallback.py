"""JAX on the CPU while NVML sees GPUs: the warning each face shows, and the one line that fixes it.

The commonest form of JAX's silent fallback: ``pip install jax`` installs no CUDA plugin, so the
first operation starts the CPU backend, on a machine whose GPUs sit right there. Where the
plugin is installed but failed, JAX keeps why (``xla_bridge._backend_errors``), and that is the
fix to show instead; where it failed without a record (the CUDA plugin's start error is raised,
not kept), the reason says so. A user who asked for the CPU (``JAX_PLATFORMS=cpu`` or
``jax.config.update("jax_platforms", "cpu")``) is not warned.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_gpumem.core.readings import NotAvailable
from jupyter_gpumem.sources import jax_backend
from jupyter_gpumem.sources.jax_backend import BackendInfo
from jupyter_gpumem.sources.nvml import NvmlSource

__all__ = ["CpuFallback", "cpu_fallback", "plugin_command", "read_cpu_fallback"]

_CUDA12 = 'pip install -U "jax[cuda12]"'
_CUDA13 = 'pip install -U "jax[cuda13]"'


def plugin_command(cuda_driver_version: int | None) -> str:
    """The pip line that installs JAX's CUDA plugin for this driver.

    ``cuda_driver_version`` is NVML's ``nvmlSystemGetCudaDriverVersion`` (12040 is CUDA 12.4):
    the newest CUDA the driver runs. The ``cuda13`` wheels need a CUDA 13 driver, the ``cuda12``
    ones a CUDA 12 driver; JAX ships none for CUDA 11. Unknown: both lines.
    """
    if cuda_driver_version is None or cuda_driver_version <= 0:
        return f"{_CUDA12}   (or {_CUDA13} where the driver supports CUDA 13)"
    major, minor = divmod(cuda_driver_version, 1000)
    if major >= 13:
        return _CUDA13
    if major == 12:
        return _CUDA12
    return (
        f"upgrade the NVIDIA driver (it runs CUDA {major}.{minor // 10}; JAX's CUDA plugins need CUDA 12 "
        f"or later), then {_CUDA12}"
    )


@dataclass(frozen=True)
class CpuFallback:
    """JAX runs on the CPU while NVML lists ``gpus`` GPUs.

    ``fix``: the pip line that installs the CUDA plugin (``is_command``), or, where the plugin is
    installed, why JAX says it did not start.
    """

    gpus: int
    fix: str
    is_command: bool

    def headline(self) -> str:
        return f"NVML sees {self.gpus} GPU{'s' if self.gpus != 1 else ''}, but JAX runs on the CPU"

    def sentence(self) -> str:
        """The warning, loud and whole: what is wrong and the line that fixes it."""
        if self.is_command:
            return f"{self.headline()}: JAX's CUDA plugin is not installed. Fix: {self.fix}, then restart the kernel."
        return f"{self.headline()}: {self.fix}."


def cpu_fallback(
    platform: str | None,
    gpus: int,
    *,
    fallback_reason: str | None = None,
    cuda_driver_version: int | None = None,
    cpu_requested: bool = False,
) -> CpuFallback | None:
    """The warning for a backend on ``platform`` beside ``gpus`` NVML GPUs, or None when JAX is
    not on the CPU, NVML lists no GPU, or the user asked for the CPU."""
    if platform != "cpu" or gpus <= 0 or cpu_requested:
        return None
    if fallback_reason:
        return CpuFallback(gpus, fallback_reason, is_command=False)
    return CpuFallback(gpus, plugin_command(cuda_driver_version), is_command=True)


def read_cpu_fallback(backend: BackendInfo | None = None, gpu_count: int | None = None) -> CpuFallback | None:
    """The warning for this process now, or None. Reads NVML (a GPU count, unless ``gpu_count``
    is given, and the driver's CUDA version) only when JAX's backend has started on the CPU, and
    releases it again. Never starts JAX; never raises."""
    backend = jax_backend.backend_info() if backend is None else backend
    if not backend.started or backend.platform != "cpu":
        return None
    if jax_backend.cpu_chosen():
        return None
    source = NvmlSource()
    try:
        count = source.gpu_count() if gpu_count is None else gpu_count
        if isinstance(count, NotAvailable) or count <= 0:
            return None
        version = source.cuda_driver_version() if backend.fallback_reason is None else None
    finally:
        source.shutdown()
    return cpu_fallback(
        backend.platform,
        count,
        fallback_reason=backend.fallback_reason,
        cuda_driver_version=version if isinstance(version, int) else None,
    )
