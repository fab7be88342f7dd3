"""Test and demo support that ships with the package: a fake NVML world (see docs/fake-gpu.md).

- ``world``: ``FakeWorld``, ``FakeGpu``, ``FakeProcess``, mutable while they are read
- ``scenarios``: named worlds, and the world named by ``JUPYTER_GPUMEM_FAKE_NVML``
- ``pynvml_api``: the ``pynvml`` API over a world (``fake_nvml(world)``, the drop-in)
- ``nvml_errors``: NVML's error codes and exception classes
- ``demo_trace``: a synthetic trace for demos and the server's replay mode
"""

from __future__ import annotations

from jupyter_gpumem.testing.nvml_errors import ERROR_CODES, NVMLError
from jupyter_gpumem.testing.pynvml_api import (
    NVIDIA_ML_PY_VERSIONS,
    fake_nvml,
    install_pynvml_api,
    make_pynvml_module,
)
from jupyter_gpumem.testing.scenarios import DROPIN_DIR, ENV_VAR, SCENARIOS, WorldFromEnv, scenario, world_from_spec
from jupyter_gpumem.testing.world import FakeGpu, FakeProcess, FakeWorld, GiB, MiB

__all__ = [
    "DROPIN_DIR",
    "ENV_VAR",
    "ERROR_CODES",
    "NVIDIA_ML_PY_VERSIONS",
    "SCENARIOS",
    "FakeGpu",
    "FakeProcess",
    "FakeWorld",
    "GiB",
    "MiB",
    "NVMLError",
    "WorldFromEnv",
    "fake_nvml",
    "install_pynvml_api",
    "make_pynvml_module",
    "scenario",
    "world_from_spec",
]
