"""What JAX's CUDA plugin would make of an environment: jaxlib's own option generator
(``generate_pjrt_gpu_plugin_options``), read from jaxlib's source and run on a mapping instead
of ``os.environ``, and what follows from it (the fraction variable, the accepted allocators).
jaxlib is not imported for it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import types
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from jupyter_gpumem.core.env_table import ALLOCATOR_CANDIDATES, ALLOCATOR_VAR, FRACTION_VAR, OLD_FRACTION_VAR

__all__ = [
    "generator_from_source",
    "option_generator",
    "jax_gpu_options",
    "jax_rejection",
    "fraction_var",
    "accepted_allocators",
]


class _EnvironmentView:
    """Stands in for the ``os`` module inside JAX's generator: getenv reads a given mapping."""

    def __init__(self, env: Mapping[str, str]):
        self.environ = dict(env)

    def getenv(self, key: str, default: Any = None) -> Any:
        return self.environ.get(key, default)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


_GENERATOR = "generate_pjrt_gpu_plugin_options"


def _xla_client_path() -> str | None:
    """Where the installed jaxlib's ``xla_client.py`` is, found without importing jaxlib."""
    try:
        spec = importlib.util.find_spec("jaxlib")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, "xla_client.py")
        if os.path.isfile(path):
            return path
    return None


def generator_from_source(path: str) -> types.FunctionType | None:
    """``generate_pjrt_gpu_plugin_options`` compiled from jaxlib's source, without its module.

    Importing ``jaxlib.xla_client`` loads jaxlib's C++ extension (``from jaxlib import _jax``).
    Loaded before ``import jax`` has set ``TF_CPP_MIN_LOG_LEVEL=1`` (jax/__init__.py, 0.10 and
    0.11), XLA logs at INFO for the whole process: the ``pjrt_client.cc ... PjRt-IFRT device
    count`` lines at JAX's first operation. So the function is compiled from the file, with the
    module's literal constants (a later jaxlib may keep its allocator names in one).
    """
    import ast

    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == _GENERATOR:
            node.returns = None  # its annotation names types of the module, not needed to run it
            body.append(node)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            try:
                ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            body.append(node)
    if not any(isinstance(node, ast.FunctionDef) for node in body):
        return None
    namespace: dict[str, Any] = {"os": os}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)  # jaxlib's own code
    gen = namespace[_GENERATOR]
    try:
        gen()  # the real environment: a ValueError is JAX rejecting it, which is fine here
    except ValueError:
        pass
    except (NameError, AttributeError, TypeError, KeyError):
        return None  # it needs more of its module than the constants: use the module instead
    return gen


@lru_cache(maxsize=1)
def option_generator() -> Callable[[Mapping[str, str]], dict] | None:
    """JAX's GPU option generator, rebound to read a mapping we pass instead of os.environ.

    The generator only reads ``os.getenv`` (jaxlib/xla_client.py, 0.4.30 to 0.12), so giving it
    its own ``os`` keeps candidate values out of the real environment, where another thread
    starting JAX could see them. It comes from jaxlib's source (``generator_from_source``);
    the imported module is used only when that fails and the module is already loaded.
    """
    path = _xla_client_path()
    gen = generator_from_source(path) if path else None
    if gen is None:
        module = sys.modules.get("jaxlib.xla_client")
        gen = getattr(module, _GENERATOR, None)
    if gen is None or not isinstance(gen, types.FunctionType):
        return None

    def run(env: Mapping[str, str]) -> dict:
        isolated = types.FunctionType(
            gen.__code__,
            {**gen.__globals__, "os": _EnvironmentView(env)},
            gen.__name__,
            gen.__defaults__,
            gen.__closure__,
        )
        return dict(isolated())

    return run


def jax_gpu_options(env: Mapping[str, str] | None = None) -> dict | None:
    """The options JAX's CUDA plugin would be created with under ``env`` (default: os.environ).

    None when the installed jaxlib has no generator (or none is installed). Raises ValueError
    with JAX's own message when JAX would reject the environment (the generator raises only
    ValueError, its own or float()'s and int()'s; the plugin catches it and falls back to CPU).
    """
    gen = option_generator()
    if gen is None:
        return None
    return gen(dict(os.environ) if env is None else env)


def jax_rejection(env: Mapping[str, str] | None = None) -> str | None:
    """JAX's message if it would reject ``env`` (so fall back to CPU), else None."""
    try:
        jax_gpu_options(env)
    except ValueError as err:
        return str(err)
    return None


@lru_cache(maxsize=1)
def fraction_var() -> str:
    """The fraction variable the installed JAX reads: XLA_CLIENT_MEM_FRACTION where it exists."""
    try:
        options = jax_gpu_options({FRACTION_VAR: "0.5"})
    except ValueError:
        options = None
    if options is not None and options.get("memory_fraction") == 0.5:
        return FRACTION_VAR
    return OLD_FRACTION_VAR


@lru_cache(maxsize=1)
def accepted_allocators() -> tuple[str, ...]:
    """The allocator names the installed JAX accepts, found by asking its generator.

    Names listed in its error message are probed too, so a newer JAX's names are found.
    Empty when JAX is not installed.
    """
    if option_generator() is None:
        return ()
    candidates = list(ALLOCATOR_CANDIDATES)
    message = jax_rejection({ALLOCATOR_VAR: "no_such_allocator"}) or ""
    for name in re.findall(r'"([a-z][a-z0-9_]*)"', message):
        if name not in candidates and name != "no_such_allocator":
            candidates.append(name)
    return tuple(name for name in candidates if jax_rejection({ALLOCATOR_VAR: name}) is None)
