"""What the JAX in this process is doing: has its backend started, on which platform, what would its
GPU plugin make of an environment, and what does each device's allocator report.

With ``jax_arrays``, the only place that reaches into jax or jaxlib, and only inside functions,
so that loading the extension stays cheap. Nothing here starts the backend.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core.env_table import CREATE_OPTIONS_ENV, CREATE_OPTIONS_OPTION
from jupyter_gpumem.core.readings import NotAvailable
from jupyter_gpumem.sources.device_identity import (
    CudaDeviceIdentity,
    GpuIdentity,
    NvmlMatch,
    match_nvml,
    visible_devices,
)
from jupyter_gpumem.sources.jax_options import jax_rejection, option_generator
from jupyter_gpumem.sources.libcuda import read_default_pool, read_device_identity
from jupyter_gpumem.sources.nvml import NvmlSource


@lru_cache(maxsize=1)
def jax_has_create_options() -> bool:
    """Whether the installed JAX merges ``jax_pjrt_client_create_options`` into its plugins'
    options: its xla_bridge.py names the option. Read from the file, so jax is not imported."""
    try:
        spec = importlib.util.find_spec("jax")
    except (ImportError, ValueError):
        return False
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "_src", "xla_bridge.py"), encoding="utf-8") as handle:
                return CREATE_OPTIONS_OPTION in handle.read()
        except OSError:
            continue
    return False


def pjrt_create_options(env: Mapping[str, str] | None = None) -> Any:
    """The value of ``jax.config.jax_pjrt_client_create_options`` (None, a string or a dict);
    None when the installed JAX has no such option.

    Once jax is imported, ``jax.config`` holds it. Before, it is what jax will read at import:
    ``JAX_PJRT_CLIENT_CREATE_OPTIONS`` in ``env`` (default: os.environ); jax is not imported to
    ask (``string_or_object_state`` in jax/_src/config.py reads the variable as its default).
    """
    config = getattr(sys.modules.get("jax"), "config", None)
    if config is not None and hasattr(config, CREATE_OPTIONS_OPTION):
        return getattr(config, CREATE_OPTIONS_OPTION)
    if not jax_has_create_options():
        return None
    return (os.environ if env is None else env).get(CREATE_OPTIONS_ENV)


@lru_cache(maxsize=1)
def _distribution_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax")
    except (PackageNotFoundError, ValueError):
        return None


def installed_jax_version() -> str | None:
    """This process's JAX version: ``jax.__version__`` once jax is imported, else the installed
    distribution's (read once, jax is not imported); None without JAX."""
    version = getattr(sys.modules.get("jax"), "__version__", None)
    return version if isinstance(version, str) else _distribution_version()


def backend_started() -> bool:
    """Whether JAX's backend has started, found without starting it and without waiting.

    Never imports jax: a process that has not imported it has not started it. Reads the private
    ``jax._src.xla_bridge._backends`` dict, which ``backends()`` fills one platform at a time while
    it holds ``_backend_lock`` for the whole creation (jax/_src/xla_bridge.py, 0.4.38 line 195,
    0.10.2 line 279, 0.11.2 line 280, 0.12.0.1 line 280). JAX's own probe,
    ``backends_are_initialized()``, takes that lock, so a caller waits behind a start that
    takes seconds (a GPU client preallocating); this takes the lock only if it is free at once,
    or within a few milliseconds (any JAX call passes through ``backends()`` under it briefly).
    A lock still held then is a start in progress: not started yet.
    """
    if "jax" not in sys.modules:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False  # jax is still importing; nothing has started
    backends = getattr(bridge, "_backends", None)
    lock = getattr(bridge, "_backend_lock", None)
    if isinstance(backends, dict) and lock is not None and hasattr(lock, "acquire"):
        if not backends:
            return False
        if lock.acquire(timeout=_LOCK_WAIT_S):
            try:
                return bool(bridge._backends)
            finally:
                lock.release()
        return False  # held for longer: backends() is still creating the others
    probe = getattr(bridge, "backends_are_initialized", None)
    if callable(probe):
        return bool(probe())
    return getattr(bridge, "_default_backend", None) is not None


_LOCK_WAIT_S = 0.005


# The settings the CUDA plugin reads from the environment, through the generator, when JAX
# registers it; TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC is read later, by XLA's allocator.
PLUGIN_READ_SETTINGS = ("preallocate", "fraction", "allocator")


def can_check_gpu_options() -> bool:
    """Whether the installed jaxlib has the GPU option generator that settings are checked with."""
    return option_generator() is not None


def backend_platform() -> str | None:
    """The started backend's platform ("cuda", "cpu", ...); None before it starts, or when the
    started backend cannot be asked."""
    if not backend_started():
        return None
    try:
        return getattr(_default_client(), "platform", None)
    except RuntimeError:  # jaxlib's XlaRuntimeError: the backend failed after it started
        return None


def _bridge() -> Any:
    return sys.modules.get("jax._src.xla_bridge")


def started_default_client() -> Any:
    """JAX's default backend (its client) once it has been made, else None. Reads the module's
    ``_default_backend`` (jax/_src/xla_bridge.py, 0.4.30 to 0.12), set at the end of the
    backends' creation: it never starts JAX and never waits on the lock a start holds."""
    return getattr(_bridge(), "_default_backend", None) if backend_started() else None


def _default_client() -> Any:
    bridge = _bridge()
    client = getattr(bridge, "_default_backend", None)
    if client is None and bridge is not None:
        client = bridge.get_backend()  # safe: only called once the backends exist
    return client


_GPU_PLATFORMS = ("cuda", "rocm", "gpu")


_CUDA_PLUGIN_MODULES = ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12")


def cuda_plugin_installed() -> bool:
    """Whether one of JAX's CUDA plugins (the plugin's module, or its jax_plugins entry) can be
    found here; nothing is imported."""
    for name in _CUDA_PLUGIN_MODULES:
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def _nvidia_device_node_visible() -> bool | None:
    """JAX's own test for a GPU before it tries the CUDA backend: one of ``/dev/nvidia0``,
    ``/dev/nvidiactl`` or ``/dev/dxg`` exists (``has_visible_nvidia_gpu`` in
    jax/_src/hardware_utils.py, 0.4.38 to 0.12.0.1). None when JAX's module is not loaded."""
    hardware = sys.modules.get("jax._src.hardware_utils")
    probe = getattr(hardware, "has_visible_nvidia_gpu", None)
    if not callable(probe):
        return None
    try:
        return bool(probe())  # os.path.exists on three paths
    except OSError:
        return None


_START_ERROR_PREFIX = "Unable to initialize backend 'cuda'"


def raised_start_error() -> str | None:
    """The "Unable to initialize backend 'cuda': ..." error a cell raised, if it is still the
    last error IPython (or the interpreter) kept in ``sys.last_value``/``sys.last_exc``."""
    for name in ("last_exc", "last_value"):
        err = getattr(sys, name, None)
        seen = 0
        while isinstance(err, BaseException) and seen < 8:
            if isinstance(err, RuntimeError) and str(err).startswith(_START_ERROR_PREFIX):
                return str(err)
            err = err.__cause__ or err.__context__
            seen += 1
    return None


def _failed_start_reason() -> str:
    """Why JAX runs on the CPU when the CUDA plugin registered, a GPU device node exists, and
    still no CUDA backend started.

    JAX's ``backends()`` (jax/_src/xla_bridge.py, 0.4.38, 0.7.2, 0.10.2, 0.11.2, 0.12.0.1) tries
    every registered platform. The CUDA plugin registers with ``fail_quietly=False``
    (``register_plugin``), so its failure is raised as "Unable to initialize backend 'cuda'" by
    the first operation, and is not kept in ``_backend_errors``; the CPU backend, created before
    it, stays in ``_backends``, and every later operation runs there.
    """
    raised = raised_start_error()
    if raised:
        said = f' The first operation raised: "{raised}".'
    else:
        from jupyter_gpumem.sources.jax_start import start_failure

        seen = start_failure("cuda")
        said = (
            f' Creating it raised: "{seen}" (JAX keeps no record of it; it was raised once, by the first operation).'
            if seen
            else " JAX kept no record of why: it was raised once, by the first operation."
        )
    return (
        "the CUDA backend failed to start (the CUDA plugin is installed and a GPU device is visible), "
        "so every operation after the first runs on the CPU."
        + said
        + " Common causes: another process holds the GPU, or bad client create options. "
        "Fix the cause, then restart the kernel"
    )


def _gpu_runtime_present(bridge: Any) -> bool:
    """Whether this JAX could run a GPU at all: a CUDA plugin is installed, or jaxlib itself was
    built with GPU support. Up to 0.5.x JAX registers built-in ``cuda`` and ``rocm`` factories
    that fail quietly on a CPU-only jaxlib (0.4.30: an empty error; 0.4.38: "module
    'jaxlib.xla_extension' has no attribute 'GpuAllocatorConfig'"); JAX itself counts a CUDA
    error only where ``xla_extension`` has ``GpuAllocatorConfig`` (jax/_src/xla_bridge.py,
    0.4.38: factories at lines 484-503, the check at 955; 0.10.2 asks ``_jax`` at line 877)."""
    if cuda_plugin_installed():
        return True
    extension = getattr(bridge, "xla_extension", None) or getattr(bridge, "_jax", None)
    return hasattr(extension, "GpuAllocatorConfig")


def _fallback_reason(platform: str | None) -> str | None:
    """Why JAX runs on the CPU although a GPU backend was expected, or None (no GPU backend
    was expected, or the user chose the CPU through ``jax_platforms``)."""
    if platform != "cpu":
        return None
    bridge = _bridge()
    errors = dict(getattr(bridge, "_backend_errors", {}) or {}) if _gpu_runtime_present(bridge) else {}
    for name in ("cuda", "rocm"):
        if name in errors:
            return f"the {name.upper()} backend failed to start: {errors[name]}"
    if not cuda_plugin_installed():
        return None
    factories = getattr(bridge, "_backend_factories", {}) or {}
    if "cuda" not in factories:
        rejection = jax_rejection()
        if rejection:
            return f"the CUDA plugin did not register because JAX rejected the environment: {rejection}"
        return "the CUDA plugin is installed but did not register (run with TF_CPP_MIN_LOG_LEVEL=0 to see why)"
    requested = platforms_requested()
    if requested is not None and not {"cuda", "gpu"} & set(requested.split(",")):
        return None  # the user chose the platforms, and CUDA is not among them
    if "cuda" in (getattr(bridge, "_backends", {}) or {}):
        return None
    visible = _nvidia_device_node_visible()
    if visible is False:
        return (
            "the CUDA plugin is installed but JAX did not try it: none of /dev/nvidia0, /dev/nvidiactl "
            "or /dev/dxg exists in this process (is the GPU passed into the container?)"
        )
    if visible is None:
        return "the CUDA plugin is installed but JAX runs on the CPU (no visible NVIDIA GPU?)"
    return _failed_start_reason()


@dataclass(frozen=True)
class BackendDevice:
    """One local device of the started backend, as JAX names it."""

    id: int
    kind: str  # device_kind, e.g. "NVIDIA H100 80GB HBM3" or "cpu"
    platform: str

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "platform": self.platform}


@dataclass(frozen=True)
class BackendInfo:
    """The state of JAX's backend in this process.

    ``platform``, ``devices`` and ``fallback_reason`` are read only once it has ``started``;
    ``error`` says why a started backend could not be read (a jaxlib error), else None.
    """

    started: bool
    jax_imported: bool
    jax_version: str | None
    platform: str | None = None
    devices: tuple[BackendDevice, ...] = ()
    fallback_reason: str | None = None
    error: str | None = None

    def to_json(self) -> dict:
        return {
            "started": self.started,
            "jax_imported": self.jax_imported,
            "jax_version": self.jax_version,
            "platform": self.platform,
            "devices": [d.to_json() for d in self.devices],
            "fallback_reason": self.fallback_reason,
            "error": self.error,
        }


def backend_info() -> BackendInfo:
    """The backend's state. Reads the backend only once it has started; never starts it."""
    jax = sys.modules.get("jax")
    version = getattr(jax, "__version__", None)
    if not backend_started():
        return BackendInfo(started=False, jax_imported=jax is not None, jax_version=version)
    try:
        client = _default_client()
        platform = getattr(client, "platform", None)
        devices = tuple(
            BackendDevice(id=d.id, kind=getattr(d, "device_kind", ""), platform=d.platform)
            for d in client.local_devices()
        )
    except RuntimeError as err:  # jaxlib's XlaRuntimeError
        return BackendInfo(started=True, jax_imported=True, jax_version=version, error=f"{type(err).__name__}: {err}")
    return BackendInfo(
        started=True,
        jax_imported=True,
        jax_version=version,
        platform=platform,
        devices=devices,
        fallback_reason=_fallback_reason(platform),
    )


_pool_seen_for: list[int] = []  # id() of the client whose GPU pool was seen taken


def gpu_pool_taken() -> bool | None:
    """Whether JAX's allocator has taken memory from a GPU yet, on any local GPU device; None
    before JAX starts, on a backend with no GPU device, or where no device reports stats.

    BFC takes nothing when it is created: its pool is empty until the first allocation calls
    ``Extend``, which takes ``memory_limit_`` whole when preallocating (``allow_growth`` false)
    (``BFCAllocator::BFCAllocator`` and ``BFCAllocator::Extend`` in openxla/xla
    xla/tsl/framework/bfc_allocator.cc at 80c095fc; ``opts.allow_growth = !preallocate`` in
    ``CreateBFCAllocator``, xla/pjrt/gpu/gpu_helpers.cc). So ``jax.devices()`` alone leaves
    ``pool_bytes`` at 0. Read from ``memory_stats()`` (no JAX work, no buffer touched); once seen
    taken it is not read again for the same client, as BFC keeps its regions (JAX's GPU client
    sets no ``garbage_collection``).
    """
    if not backend_started():
        return None
    try:
        client = _default_client()
        devices = [d for d in client.local_devices() if _platform_family(d.platform) == "gpu"]
    except RuntimeError:
        return None
    if id(client) in _pool_seen_for:
        return True
    answered = False
    for device in devices:
        try:
            raw = device.memory_stats()
        except RuntimeError:
            continue
        if not isinstance(raw, dict):
            continue
        answered = True
        if any(
            isinstance(raw.get(key), int) and raw[key] > 0 for key in ("pool_bytes", "peak_pool_bytes", "num_allocs")
        ):
            _pool_seen_for[:] = [id(client)]
            return True
    return False if answered else None


_NVML_RETRY_S = 30.0


class _Identities:
    """Which GPU each CUDA device is, read once per process: neither the CUDA driver's answer
    for an ordinal nor NVML's list changes while the process runs. NVML that cannot be read, or
    a GPU in it that cannot say its UUID, is asked again after ``_NVML_RETRY_S``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.nvml: tuple[GpuIdentity, ...] | None = None
        self.nvml_problem = ""
        self.nvml_next_try = float("-inf")
        self.cuda: dict[int, CudaDeviceIdentity] = {}

    def nvml_gpus(self) -> tuple[tuple[GpuIdentity, ...] | None, str]:
        with self.lock:
            now = time.monotonic()
            whole = self.nvml is not None and all(gpu.uuid for gpu in self.nvml)
            if not whole and now >= self.nvml_next_try:
                source = NvmlSource()
                try:
                    found = source.identities()
                finally:
                    source.shutdown()
                self.nvml_next_try = now + _NVML_RETRY_S
                if isinstance(found, NotAvailable):
                    self.nvml_problem = found.reason
                else:
                    self.nvml = found
            return self.nvml, self.nvml_problem

    def cuda_device(self, ordinal: int) -> CudaDeviceIdentity | None:
        with self.lock:
            if ordinal not in self.cuda:
                found = read_device_identity(ordinal)
                if isinstance(found, NotAvailable):
                    return None  # CUDA not loaded (or not ours to ask): the other joins are tried
                self.cuda[ordinal] = found
            return self.cuda[ordinal]


_identities = _Identities()


def forget_device_identities() -> None:
    """Read the GPUs' identities afresh at the next reading (tests switch fake worlds)."""
    global _identities
    _identities = _Identities()


def _jax_cuda_visible_devices() -> list[int] | None:
    """``jax_cuda_visible_devices`` as CUDA ordinals, or None for "all" (or no such option).

    JAX hands it to the CUDA plugin as ``visible_devices`` (``_options_from_jax_configs`` in
    jax/_src/xla_bridge.py, v0.10.2 and v0.11.0); XLA then builds devices only for those
    ordinals, so JAX's device ids no longer equal them (``local_hardware_id`` does).
    """
    value = config_value("jax_cuda_visible_devices")
    if not isinstance(value, str) or value.strip() in ("", "all"):
        return None
    try:
        return [int(part) for part in value.split(",")]
    except ValueError:
        return None  # JAX's own parse fails on this too, and the plugin does not start


def config_value(name: str) -> Any:
    """``jax.config``'s value of option ``name``; None when jax is not imported or has no such
    option.

    Read as an attribute first: ``Config.read`` raises AttributeError for every option that has
    a context manager, ``jax_platforms`` among them (jax/_src/config.py, 0.4.38 to 0.12.0.1),
    while each option is a property of ``Config``. ``read`` serves options defined otherwise
    (``jax_cuda_visible_devices``, a ``config.string_flag`` that jax/_src/xla_bridge.py itself
    defines: 0.10.2 line 79, 0.12.0.1 line 80).
    """
    config = getattr(sys.modules.get("jax"), "config", None)
    if config is None:
        return None
    try:
        return getattr(config, name)
    except AttributeError:
        pass
    try:
        return config.read(name)
    except (AttributeError, KeyError):
        return None


def platforms_requested() -> str | None:
    """``jax_platforms`` as the user set it, lower case, e.g. "cpu"; None when unset, which
    lets JAX pick the best backend it can start.

    Once jax is imported its config holds it (``JAX_PLATFORMS`` read at import, or a later
    ``jax.config.update("jax_platforms", ...)``); before, ``JAX_PLATFORMS`` is what it will read.
    """
    config = getattr(sys.modules.get("jax"), "config", None)
    if config is not None and hasattr(config, "jax_platforms"):
        value = config_value("jax_platforms")
    else:
        value = os.environ.get("JAX_PLATFORMS")
    return (value.strip().lower() or None) if isinstance(value, str) else None


def cpu_chosen() -> bool:
    """Whether the user asked JAX for the CPU alone (``jax_platforms`` is "cpu")."""
    requested = platforms_requested()
    return requested is not None and set(requested.split(",")) == {"cpu"}


def _nvml_match(platform: str, ordinal: int) -> NvmlMatch:
    """The NVML GPU behind CUDA device ``ordinal``: see ``device_identity.match_nvml``."""
    if platform not in ("cuda", "gpu"):
        return NvmlMatch(None, why_not=f"a {platform} device: NVML lists NVIDIA GPUs only")
    gpus, problem = _identities.nvml_gpus()
    return match_nvml(
        ordinal,
        _identities.cuda_device(ordinal),
        gpus,
        visible=visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")),
        device_order=os.environ.get("CUDA_DEVICE_ORDER"),
        nvml_problem=problem,
    )


def _platform_family(platform: str) -> str:
    return "gpu" if platform in _GPU_PLATFORMS else platform


def read_jax_devices(allocator: str) -> tuple[model.JaxDeviceReading, ...] | NotAvailable:
    """Each local JAX device's allocator statistics; never starts JAX and never raises.

    ``allocator`` is the allocator in effect (``allocator_shim.allocator_in_effect()``). What
    jaxlib raises (``XlaRuntimeError``, a ``RuntimeError``) becomes a ``NotAvailable``: for the
    whole reading when the devices cannot be listed, for one device's stats otherwise.
    """
    if not backend_started():
        if "jax" not in sys.modules and importlib.util.find_spec("jax") is None:
            return NotAvailable(model.NO_JAX, "JAX is not installed in this environment")
        return NotAvailable(model.NOT_STARTED, "JAX has not started yet; readings begin when it does")
    try:
        devices = _default_client().local_devices()
    except RuntimeError as err:
        return NotAvailable(model.ERROR, f"reading JAX's devices failed: {type(err).__name__}: {err}")
    chosen = _jax_cuda_visible_devices()
    return tuple(_read_device(device, allocator, position, chosen) for position, device in enumerate(devices))


def _cuda_ordinal(device: Any, position: int, chosen: list[int] | None) -> int:
    """The CUDA device number of a JAX GPU device: its ``local_hardware_id`` (XLA's
    ``local_device_ordinal``, se_gpu_pjrt_client.cc), else its place among the local devices,
    through ``jax_cuda_visible_devices`` where that picked them."""
    hw = getattr(device, "local_hardware_id", None)
    if isinstance(hw, int) and not isinstance(hw, bool):
        return hw
    return chosen[position] if chosen is not None and position < len(chosen) else position


def _read_device(device: Any, allocator: str, position: int, chosen: list[int] | None) -> model.JaxDeviceReading:
    family = _platform_family(device.platform)
    try:
        raw = device.memory_stats()
    except RuntimeError as err:
        stats: model.AllocatorStats | NotAvailable = NotAvailable(model.ERROR, f"memory_stats() failed: {err}")
    else:
        stats = model.normalise_stats(raw, allocator, family)
    ordinal = None
    match = NvmlMatch(None)
    pool = None
    if family == "gpu":
        ordinal = _cuda_ordinal(device, position, chosen)
        match = _nvml_match(device.platform, ordinal)
        if allocator == "cuda_async":
            pool = read_default_pool(ordinal)
    return model.JaxDeviceReading(
        jax_id=device.id,
        platform=family,
        kind=getattr(device, "device_kind", ""),
        nvml_index=match.nvml_index,
        stats=stats,
        cuda_pool=pool,
        cuda_ordinal=ordinal,
        nvml_unmatched=match.why_not,
    )
