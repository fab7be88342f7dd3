"""What the machine running the tests has, where a test's premise depends on it.

CI and the development machine have a CPU-only jaxlib. The GPU machine has JAX's CUDA plugin
(jax-cuda13-plugin and jax-cuda13-pjrt 0.11.2), which JAX discovers and starts on its own
(``_discover_and_register_pjrt_plugins``, jax/_src/xla_bridge.py): a test that models a JAX
without that plugin cannot hold there, and says so by this mark rather than failing or passing.
"""

from __future__ import annotations

from importlib import metadata

import pytest


def cuda_plugin_installed() -> bool:
    """Whether a JAX CUDA plugin distribution (jax-cuda12-plugin, jax-cuda13-pjrt, ...) is installed."""
    names = (d.metadata["Name"] or "" for d in metadata.distributions())
    return any(n.lower().replace("_", "-").startswith("jax-cuda") for n in names)


without_cuda_plugin = pytest.mark.skipif(
    cuda_plugin_installed(),
    reason="models a CPU-only jaxlib; this machine has JAX's CUDA plugin, which JAX would start instead",
)
