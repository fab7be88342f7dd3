"""What the machine running the tests has, where a test's premise depends on it.

CI and the development machine have a CPU-only jaxlib. The GPU machine has JAX's CUDA plugin
(jax-cuda13-plugin and jax-cuda13-pjrt 0.11.2), which JAX discovers and starts on its own
(``_discover_and_register_pjrt_plugins``, jax/_src/xla_bridge.py): a test that models a JAX
without that plugin cannot hold there, and says so by this mark rather than failing or passing.
Whether the plugin is there is asked as the package asks it (``sources.jax_backend.cuda_plugin_installed``).
"""

from __future__ import annotations

import pytest

from jupyter_gpumem.sources.jax_backend import cuda_plugin_installed

without_cuda_plugin = pytest.mark.skipif(
    cuda_plugin_installed(),
    reason="models a CPU-only jaxlib; this machine has JAX's CUDA plugin, which JAX would start instead",
)
