"""Waiting for what a server or a kernel does, not for a length of time.

A test on a loaded machine (the gate runs beside other jobs on two cores) cannot know how long a
kernel takes to start or a reading to come; it can know what it waits for. These helpers wait
for that, with one bound, ``WITHIN``, minutes past anything load has caused: only a hang
reaches it, and the failure then says what never came.

- ``until(check, what)``: ``check()``'s first truthy answer (``check`` may be a coroutine function)
- ``server_sees_idle(km)``: jupyter_server's record of a kernel says ``idle``
- ``waking(km)``: around a wait for a kernel's reply, so that a request it has not noticed is read
  (``waking_blocking(km)`` for a blocking client)
- ``own_client(km)``: a client of the kernel whose replies no other client of ``km`` can take
- ``started_kernel(...)``: jupyter_client's ``start_new_async_kernel``, waiting as these do

Every ``km.client()`` of one kernel manager connects to the kernel's shell, control and stdin
sockets under one identity, its session id (``KernelClient.start_channels``, jupyter_client 8.10;
``KernelManager.client`` clones the manager's session, id included), and ipykernel's ROUTER
sockets hand an identity over to its newest connection (``router_handover``,
ipykernel/kernelapp.py, 7.4.0): the replies to the older client then go to the newer one, and
requests in flight on the older connection can be lost. The server's pid question is such a
client (``usage_pid``), so a test's client of a server's kernel is an ``own_client``: a test's
``usage_request`` to a busy kernel went unanswered for 30 s while the kernel answered the
server's own, asked meanwhile.

A request can also sit unread in ipykernel 7: a reply written to its shell or control ROUTER
socket from another thread can take the wake-up of a request arriving meanwhile, and the request
is read only when something else happens on that socket, such as a new connection
(ipython/ipykernel#1554, reported for 7.2.0). A cell sent right after ``wait_for_ready`` that
the kernel (7.4.0) never began in 60 s, no busy status published, fits it; ``waking`` makes
that new connection.

Tests import them from here (``from awaiting import until``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import zmq

WITHIN = 300.0  # seconds; see above

# How long a kernel's status message gets to reach the server before the kernel is asked again.
# Asking again costs nothing (the answer's status is untracked), so this bounds no outcome.
ASK_AGAIN_AFTER = 5.0
# How often ``waking`` connects to a kernel; a connection sends nothing, so this bounds no outcome.
WAKE_EVERY = 3.0


async def until(check: Callable[[], Any], what: str, within: float = WITHIN, every: float = 0.05) -> Any:
    """``check()``'s first truthy answer, asked every ``every`` seconds; fails after ``within``
    seconds naming ``what`` and the last answer."""
    started = time.monotonic()
    while True:
        answer = check()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return answer
        assert time.monotonic() - started < within, f"{what}: not within {within:g} s (last: {answer!r})"
        await asyncio.sleep(every)


def _connect_and_leave(km: Any) -> None:
    """Connect to the kernel's shell and control sockets and close again, sending nothing. No
    identity is given, so ZeroMQ makes one of its own: no client's replies are taken over."""
    context = zmq.Context()  # of its own: the manager's may be an asyncio one
    try:
        sockets = []
        for channel in ("shell", "control"):
            sock = context.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(km._make_url(channel))  # as the manager's own clients connect
            sockets.append(sock)
        time.sleep(0.1)  # the connections are made by ZeroMQ's own thread
        for sock in sockets:
            sock.close()
    finally:
        context.term()


def own_client(km: Any) -> Any:
    """A client of the kernel ``km`` manages, under a session id of its own (module docstring)."""
    session = km.session.clone()
    session.session = str(uuid.uuid4())  # the identity its sockets connect under
    return km.client(session=session)


async def ready(km: Any, within: float) -> None:
    """Wait until the kernel ``km`` manages answers on its shell, asked by a client of its own
    while ``waking`` keeps a request from going unnoticed."""
    client = own_client(km)
    client.start_channels()
    try:
        async with waking(km):
            await client.wait_for_ready(timeout=within)
    finally:
        client.stop_channels()


@contextlib.asynccontextmanager
async def waking(km: Any, every: float = WAKE_EVERY) -> AsyncIterator[None]:
    """While the block runs, connect to the kernel's shell and control sockets every ``every``
    seconds and leave again, sending nothing: a request the kernel has not noticed is then
    read (ipython/ipykernel#1554, in the module docstring). The kernel publishes nothing for a
    connection, so neither its state nor its ``last_activity`` moves."""

    async def wake() -> None:
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(_connect_and_leave, km)

    task = asyncio.ensure_future(wake())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.contextmanager
def waking_blocking(km: Any, every: float = WAKE_EVERY) -> Iterator[None]:
    """``waking`` for a test that waits on a blocking client: the connections come from a thread."""
    stop = threading.Event()

    def wake() -> None:
        while not stop.wait(every):
            _connect_and_leave(km)

    waker = threading.Thread(target=wake, name="test-kernel-waker", daemon=True)
    waker.start()
    try:
        yield
    finally:
        stop.set()
        waker.join()


async def started_kernel(kernel_name: str = "python3", **kwargs: Any) -> tuple[Any, Any]:
    """A new kernel (``start_kernel(**kwargs)``) and its started client, once the kernel answers
    its ``kernel_info``: jupyter_client's ``start_new_async_kernel``, with ``WITHIN`` for its 60 s
    and ``waking`` beside the wait."""
    from jupyter_client.manager import AsyncKernelManager  # not on a machine without the server's packages

    km = AsyncKernelManager(kernel_name=kernel_name)
    await km.start_kernel(**kwargs)
    kc = km.client()
    kc.start_channels()
    try:
        async with waking(km):
            await kc.wait_for_ready(timeout=WITHIN)
    except BaseException:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        raise
    return km, kc


async def server_sees_idle(km: Any, within: float = WITHIN) -> None:
    """Returns once jupyter_server's record of the kernel ``km`` says ``idle``.

    The server takes a kernel's state from its iopub status messages
    (``MappingKernelManager.start_watching_activity``, jupyter_server 2.21.1). A status the kernel
    publishes before the server's subscription reaches it is lost (ZeroMQ's PUB drops it), and a
    kernel that is asked nothing publishes no other: on a loaded machine a kernel's server record
    read ``starting`` for a minute. So while the record is not ``idle`` the kernel is asked for its
    ``kernel_info``, for which it publishes a busy and an idle status again. Neither moves its
    ``last_activity``: ``kernel_info_request`` and ``status`` are in the server's
    ``untracked_message_types``, and a status of an untracked request makes a ``starting``
    kernel ``idle``. Only for kernels that run nothing: a busy kernel never reads idle.
    """
    started = time.monotonic()
    while km.execution_state != "idle":
        left = within - (time.monotonic() - started)
        assert left > 0, f"the server still records the kernel as {km.execution_state!r} after {within:g} s"
        await ready(km, left)
        asked = time.monotonic()
        while km.execution_state != "idle" and time.monotonic() - asked < ASK_AGAIN_AFTER:
            await asyncio.sleep(0.05)
