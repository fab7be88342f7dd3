"""What JAX's plugin registry holds: whether the CUDA plugin registered, and the options it read
from the environment when it did, before and after the backend starts.

Reads ``jax._src.xla_bridge``'s registry (``_plugins_registered``, ``_backend_factories``)
without importing jax or starting anything.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.sources.jax_backend import backend_started


def _bridge() -> Any:
    return sys.modules.get("jax._src.xla_bridge")


@dataclass(frozen=True)
class FrozenPluginOptions:
    """JAX registered its plugins but its backend has not started.

    The CUDA plugin's ``initialize()`` calls ``generate_pjrt_gpu_plugin_options()`` once and
    registers the plugin with that dict (jax_plugins/cuda/__init__.py at jax-v0.4.38, v0.7.2,
    v0.10.2 and v0.11.0; jax_plugins/xla_cuda13/__init__.py in the jax-cuda13-pjrt 0.12.0.1
    wheel); ``_discover_and_register_pjrt_plugins`` (jax/_src/xla_bridge.py, the same versions)
    runs it once per process and sets ``_plugins_registered``. The environment is not read
    again, so a setting made now cannot take effect.

    ``cuda_options``: the options the CUDA plugin was registered with, or None when no CUDA
    plugin registered (JAX will start on the CPU) or they cannot be read.
    """

    cuda_registered: bool
    cuda_options: Mapping[str, Any] | None


_NOT_BOUND = object()


def _bound_options(factory: Any) -> Any:
    """The ``options`` a plugin's factory was registered with, or ``_NOT_BOUND``.

    ``register_plugin`` binds them in one of two ways (jax/_src/xla_bridge.py): as
    ``partial(make_pjrt_c_api_client, plugin_name, options=options)`` from 0.7 on (0.7.2 line
    615, 0.10.2 line 644, 0.11.2 line 632, 0.12.0.1 line 656), or in a nested ``def factory()``
    that reads ``options`` from its closure up to 0.6 (0.4.38 line 687, 0.5.3, 0.6.2).
    """
    keywords = getattr(factory, "keywords", None)  # functools.partial
    if isinstance(keywords, dict):
        return keywords["options"] if "options" in keywords else _NOT_BOUND
    code, cells = getattr(factory, "__code__", None), getattr(factory, "__closure__", None)
    if code is None or not cells or "options" not in code.co_freevars:
        return _NOT_BOUND
    try:
        return cells[code.co_freevars.index("options")].cell_contents
    except (ValueError, IndexError):  # an empty cell
        return _NOT_BOUND


@dataclass(frozen=True)
class CudaRegistration:
    """What JAX's registry says of the CUDA plugin: whether one registered, and the options it
    read from the environment then (None where they cannot be read, or the plugin reads them
    only when the backend starts)."""

    registered: bool
    options: Mapping[str, Any] | None


def cuda_registration() -> CudaRegistration | None:
    """The CUDA plugin's registration, whether or not the backend has started; None while JAX
    has not registered its plugins, or where ``cuda`` is jaxlib's own GPU client, which reads
    the environment when the backend starts (``make_gpu_client``, registered at import up to
    0.4.38 at least) and keeps nothing of what it read.

    The plugin's ``initialize()`` calls ``generate_pjrt_gpu_plugin_options()`` once and
    registers with that dict (jax_plugins/cuda/__init__.py at jax-v0.4.38, v0.7.2, v0.10.2;
    jax_plugins/xla_cuda13/__init__.py line 371 in the jax-cuda13-pjrt 0.11.2 wheel, and in
    0.12.0.1); the factory keeps it for the life of the process (``_bound_options``).
    """
    bridge = _bridge()
    if bridge is None or not getattr(bridge, "_plugins_registered", False):
        return None
    registration = (getattr(bridge, "_backend_factories", {}) or {}).get("cuda")
    if registration is None:
        return CudaRegistration(registered=False, options=None)
    options = _bound_options(getattr(registration, "factory", None))
    if options is _NOT_BOUND or callable(options):
        return None  # jaxlib's own client, or a plugin that reads its options at start
    return CudaRegistration(registered=True, options=dict(options) if isinstance(options, Mapping) else None)


def frozen_plugin_options() -> FrozenPluginOptions | None:
    """The plugins' options, fixed before JAX's backend started; None when they are not fixed
    yet (discovery has not run) or the backend has started (``backend_started`` says that)."""
    if backend_started():
        return None
    registration = cuda_registration()
    if registration is None:
        return None
    return FrozenPluginOptions(cuda_registered=registration.registered, cuda_options=registration.options)
