"""Test doubles shared by the test modules, each standing in for one thing a test cannot use for real.

- ``StubSampler``: the process sampler (``jupyter_gpumem.sampling.sampler.Sampler``) without its thread
- ``FakeShell``: an IPython shell (magics, cell events, its kernel's comm manager)
- ``FakeCommManager``, ``FakeComm``: ipykernel's comm manager and one comm
- ``Clock``: a clock that moves only when the test moves it
- ``FakeCudaDriver``: libcuda, for one device's default memory pool, and (over a fake world)
  which GPU each CUDA ordinal is
- ``extension_paths``: the URL paths of this package's handlers, read from a server's routes;
  ``route_method``, the one HTTP method each answers, and ``fetch_route``, a request by it
- sample builders: ``bfc_sample``, ``cuda_async_sample``, and ``PID``, the process they read as

Tests import them from here (``from doubles import StubSampler``). Test modules do not import
each other. The fake NVML world is not here: it ships in ``jupyter_gpumem.testing``, and
conftest.py serves it as fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from jupyter_gpumem.core.readings import (
    NO_DRIVER,
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
    Timeline,
    normalise_stats,
)

GiB = 1 << 30

# --- samples -----------------------------------------------------------------------------------

PID = 4242  # the process the sample builders read as ("this process")


def bfc_sample(t: float = 100.0) -> Sample:
    """GPU 0, 80 GiB: 50 used (20 by this process, 30 by another), 30 free.

    JAX (BFC): 6 GiB in use, a 16 GiB pool, limit 60 GiB, peak 9 GiB, largest free block 4 GiB.
    """
    dev = DeviceReading(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0",
        total_bytes=80 * GiB,
        used_bytes=50 * GiB,
        free_bytes=30 * GiB,
        processes=(ProcessReading(PID, 20 * GiB), ProcessReading(999, 30 * GiB)),
    )
    raw = {
        "bytes_in_use": 6 * GiB,
        "pool_bytes": 16 * GiB,
        "peak_pool_bytes": 16 * GiB,
        "bytes_limit": 60 * GiB,
        "peak_bytes_in_use": 9 * GiB,
        "largest_free_block_bytes": 4 * GiB,
        "num_allocs": 12,
    }
    jax = JaxDeviceReading(0, "gpu", "NVIDIA H100 80GB HBM3", 0, normalise_stats(raw, "bfc"))
    return Sample(t=t, pid=PID, devices=(dev,), jax=(jax,))


def cuda_async_sample() -> Sample:
    """GPU 0: this process holds 9 GiB; cuda_async has 3 GiB in use of an 8 GiB driver pool."""
    dev = DeviceReading(0, "GPU", "GPU-0", 80 * GiB, 9 * GiB, 71 * GiB, processes=(ProcessReading(PID, 9 * GiB),))
    stats = normalise_stats({"bytes_in_use": 3 * GiB, "peak_bytes_in_use": 5 * GiB, "bytes_limit": 0}, "cuda_async")
    pool = CudaPoolReading(
        reserved_bytes=8 * GiB, reserved_high_bytes=8 * GiB, used_bytes=3 * GiB, used_high_bytes=5 * GiB
    )
    return Sample(t=1.0, pid=PID, devices=(dev,), jax=(JaxDeviceReading(0, "gpu", "GPU", 0, stats, pool),))


def cpu_sample(t: float = 1.0, arrays: Any = CpuArraysReading(bytes=3 << 20, arrays=2), devices: Any = None) -> Sample:
    """JAX on its one CPU device (no allocator statistics) holding ``arrays``: by default 2 live
    arrays of 3 MiB in all. ``devices``: NVML's reading, by default no driver."""
    cpu = JaxDeviceReading(0, "cpu", "cpu", None, normalise_stats(None, "bfc", platform="cpu"))
    if devices is None:
        devices = NotAvailable(NO_DRIVER, "the NVIDIA driver is not loaded")
    return Sample(t=t, pid=PID, devices=devices, jax=(cpu,), cpu_arrays=arrays)


# --- the sampler -------------------------------------------------------------------------------


class StubSubscription:
    """What ``StubSampler.subscribe`` returns: ``close()`` it to stop getting samples."""

    def __init__(self, sampler: StubSampler, callback: Callable[[Sample], Any]):
        self.sampler = sampler
        self.callback = callback
        self.closed = False
        self.cpu_arrays = False

    def close(self) -> None:
        self.closed = True
        if self in self.sampler.subscriptions:
            self.sampler.subscriptions.remove(self)


class StubSampler:
    """Stands in for ``jupyter_gpumem.sampling.sampler.Sampler``: no thread and no sources. The test
    hands each sample to the subscribers itself, with ``push``."""

    synthetic = False

    def __init__(self) -> None:
        self.timeline = Timeline()
        self.subscriptions: list[StubSubscription] = []

    @property
    def callbacks(self) -> list[Callable[[Sample], Any]]:
        """The callbacks of the open subscriptions."""
        return [sub.callback for sub in self.subscriptions]

    def subscribe(
        self, callback: Callable[[Sample], Any], interval: float | None = None, *, cpu_arrays: bool = False
    ) -> StubSubscription:
        sub = StubSubscription(self, callback)
        sub.cpu_arrays = cpu_arrays  # whether it asked for JAX's live CPU arrays
        self.subscriptions.append(sub)
        return sub

    def push(self, sample: Sample) -> None:
        """Add ``sample`` to the timeline and hand it to every subscriber, in this thread."""
        self.timeline.append(sample)
        for sub in list(self.subscriptions):
            sub.callback(sample)

    def push_jax(self, *jax: JaxDeviceReading) -> None:
        """Push a sample holding only these allocator readings (NVML not available)."""
        self.push(Sample(t=0.0, pid=1, devices=NotAvailable(NO_DRIVER, "synthetic"), jax=tuple(jax)))


# --- IPython and the kernel ----------------------------------------------------------------------


class FakeCommManager:
    """Stands in for ipykernel's comm manager: it records the comm targets registered on it."""

    def __init__(self) -> None:
        self.targets: dict[str, Callable] = {}

    def register_target(self, name: str, callback: Callable) -> None:
        self.targets[name] = callback


class FakeComm:
    """Stands in for one open comm: it records what is sent, and the handlers of incoming
    messages and of the front end's close (comm's BaseComm.on_msg / on_close, comm 0.2)."""

    def __init__(self, **open_kwargs: Any) -> None:
        self.open_kwargs = open_kwargs
        self.sent: list = []
        self.handler: Callable | None = None
        self.close_handler: Callable | None = None

    def on_msg(self, handler: Callable) -> None:
        self.handler = handler

    def on_close(self, handler: Callable) -> None:
        self.close_handler = handler

    def send(self, data: Any) -> None:
        self.sent.append(data)

    def closed_by_front_end(self) -> None:
        if self.close_handler is not None:
            self.close_handler({"content": {"data": {}}})


class FakeShell:
    """Just enough of an IPython shell: registering magics, cell events (``shell.events``) and
    running a cell through them. With a ``comm_manager`` it runs in a kernel
    (``shell.kernel.comm_manager``); without one it is a terminal IPython, with no ``kernel``."""

    def __init__(self, comm_manager: FakeCommManager | None = None) -> None:
        self.registered: list[type] = []
        self.hooks: dict[str, list] = {"pre_run_cell": [], "post_run_cell": []}
        self.events = self
        if comm_manager is not None:
            self.kernel = SimpleNamespace(comm_manager=comm_manager)

    def register_magics(self, cls: type) -> None:
        self.registered.append(cls)

    def register(self, name: str, fn: Callable) -> None:
        self.hooks[name].append(fn)

    def unregister(self, name: str, fn: Callable) -> None:
        self.hooks[name].remove(fn)

    def run_cell(self, count: int, body: Callable[[], Any]) -> None:
        """Run ``body`` as cell ``count`` that succeeds, with the pre- and post-run events around it."""
        result = SimpleNamespace(execution_count=count, error_in_exec=None, success=True)
        for fn in self.hooks["pre_run_cell"]:
            fn(None)
        body()
        for fn in self.hooks["post_run_cell"]:
            fn(result)


# --- time -------------------------------------------------------------------------------------


class Clock:
    """Stands in for ``time.monotonic`` or ``time.time``: it reads ``now``, which only the test changes."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the CUDA driver ------------------------------------------------------------------------------

POOL_HANDLE = 0xC0DA  # the default pool FakeCudaDriver hands out


class FakeCudaDriver:
    """Stands in for libcuda: devices ``0 .. devices-1``, each with a default memory pool whose
    attributes are ``attributes``. Takes ctypes pointers and returns CUresult ints, as the C
    functions do, and records every call in ``log``. ``fail`` maps a function name to the
    CUresult it returns instead.

    Over a fake NVML ``world`` the devices are that world's GPUs as CUDA numbers them under
    ``env`` (``FakeWorld.cuda_devices``: fastest first, CUDA_VISIBLE_DEVICES), and each answers
    ``cuDeviceGetUuid_v2`` and ``cuDeviceGetPCIBusId`` for its GPU; ``mig`` maps an ordinal to
    the UUID of the MIG instance it is instead.
    """

    def __init__(
        self,
        attributes: dict[int, int] | None = None,
        fail: dict[str, int] | None = None,
        devices: int = 1,
        *,
        world: Any = None,
        env: dict[str, str] | None = None,
        mig: dict[int, str] | None = None,
    ):
        self.attributes = attributes or {}
        self.fail = fail or {}
        self.world = world
        self.order = world.cuda_devices(env or {}) if world is not None else None
        self.devices = len(self.order) if self.order is not None else devices
        self.mig = mig or {}
        self.log: list[tuple] = []

    def cuDeviceGet(self, device_ptr, ordinal):
        self.log.append(("cuDeviceGet", ordinal))
        if "cuDeviceGet" in self.fail:
            return self.fail["cuDeviceGet"]
        if ordinal >= self.devices:
            return 101  # CUDA_ERROR_INVALID_DEVICE
        device_ptr.contents.value = 100 + ordinal
        return 0

    def cuDeviceGetDefaultMemPool(self, pool_ptr, device):
        self.log.append(("cuDeviceGetDefaultMemPool", device))
        if "cuDeviceGetDefaultMemPool" in self.fail:
            return self.fail["cuDeviceGetDefaultMemPool"]
        pool_ptr.contents.value = POOL_HANDLE
        return 0

    def cuMemPoolGetAttribute(self, pool, attribute, value_ptr):
        self.log.append(("cuMemPoolGetAttribute", pool.value, attribute))
        if "cuMemPoolGetAttribute" in self.fail:
            return self.fail["cuMemPoolGetAttribute"]
        value_ptr.contents.value = self.attributes[attribute]
        return 0

    def cuDeviceGetUuid_v2(self, uuid_ptr, device):
        """Writes the 16 bytes of ``CUuuid`` (cuda.h: ``char bytes[16]``)."""
        self.log.append(("cuDeviceGetUuid_v2", device))
        if "cuDeviceGetUuid_v2" in self.fail:
            return self.fail["cuDeviceGetUuid_v2"]
        ordinal = device - 100
        text = self.mig.get(ordinal) or self.world.gpu(self.order[ordinal]).uuid
        raw = bytes.fromhex(text.split("-", 1)[1].replace("-", ""))
        for i, byte in enumerate(raw):
            uuid_ptr.contents.bytes[i] = byte
        return 0

    def cuDeviceGetPCIBusId(self, buffer, length, device):
        """Writes "[domain]:[bus]:[device].[function]" as CUDA does: a 4-digit domain, lowercase."""
        self.log.append(("cuDeviceGetPCIBusId", device))
        if "cuDeviceGetPCIBusId" in self.fail:
            return self.fail["cuDeviceGetPCIBusId"]
        nvml = self.world.pci_bus_id(self.order[device - 100])
        buffer.value = nvml[4:].lower().encode()[: length - 1]
        return 0


def extension_paths(web_app: Any, websockets: bool = False) -> list[str]:
    """URL paths of every handler this package added to the server, read from tornado's rules:
    the plain HTTP ones, or with ``websockets`` the websocket ones."""
    return sorted(_extension_handlers(web_app, websockets))


def route_method(web_app: Any, path: str) -> str:
    """The HTTP method the handler at ``path`` answers: GET for a reading, POST for an action."""
    from tornado.web import RequestHandler

    handler = _extension_handlers(web_app, False)[path]
    (method,) = [m for m in ("get", "post") if getattr(handler, m) is not getattr(RequestHandler, m)]
    return method.upper()


# What a route answers a request with the right token and no query parameters: a reading is
# served, an action (POST /keep) says which parameter it needs.
STATUS_WITHOUT_PARAMS = {"GET": 200, "POST": 400}


async def fetch_route(jp_fetch: Any, parts: list[str], method: str, **kwargs: Any) -> Any:
    """``jp_fetch`` by ``method``; a POST carries an empty body."""
    if method == "POST":
        kwargs.setdefault("body", b"")
    return await jp_fetch(*parts, method=method, **kwargs)


def _extension_handlers(web_app: Any, websockets: bool) -> dict[str, type]:
    from tornado.websocket import WebSocketHandler

    handlers: dict[str, type] = {}

    def walk(router: Any) -> None:
        for rule in router.rules:
            target = rule.target
            if hasattr(target, "rules"):
                walk(target)
            elif (
                isinstance(target, type)
                and target.__module__.startswith("jupyter_gpumem")
                and issubclass(target, WebSocketHandler) == websockets
            ):
                handlers[re.sub(r"/\?\$$|\$$", "", rule.matcher.regex.pattern)] = target

    walk(web_app.default_router)
    return handlers
