"""A drop-in ``pynvml`` that reads a fake NVML world (synthetic data, no GPU needed).

Put this file's directory first on ``PYTHONPATH`` and name the world in
``JUPYTER_GPUMEM_FAKE_NVML``: a scenario name (``three_gpus``, ``lost_gpu``, ...) or the path of
a JSON world written by ``FakeWorld.save``. A JSON file is re-read whenever it changes, so a
test can change the world from outside this process. Unset, the world is ``three_gpus``.
"""

import importlib
import os
import sys

try:
    _fake = importlib.import_module("jupyter_gpumem.testing")
except ImportError:  # run from a checkout without the package installed
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    _fake = importlib.import_module("jupyter_gpumem.testing")

_world = _fake.WorldFromEnv(os.environ.get(_fake.ENV_VAR) or "three_gpus")
_fake.install_pynvml_api(globals(), _world.current)
nvml = sys.modules[__name__]  # the old pynvml package spelled errors pynvml.nvml.NVMLError_*
