"""A kernel in the middle of a cell is never culled, whatever jupyter_server says of it.

jupyter_server sets ``execution_state`` from every iopub status message, and a control-channel
request (a debugger's, ``list_subshell_request``, ``kernel_info_request`` on control) makes the
kernel publish busy then idle while its cell still runs (services/kernels/kernelmanager.py,
jupyter_server 2.21.1; ipykernel 7.4.0 kernelbase.py ``dispatch_control``), so the server read
"idle" and culled a 100 s cell at 45 s. The culler now asks the kernel's shell first: ipykernel
handles the main shell's requests one at a time, so a cell that runs keeps it from answering.

Real ipykernel kernels, started with jupyter_client; the culler's service (readings and the
kernels' listing) is a stand-in that says what the server would: an idle kernel holding 5 GiB
for an hour.
"""

from __future__ import annotations

import asyncio
import os
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from child_env import pythonpath
from jupyter_client.manager import AsyncKernelManager

from jupyter_gpumem.server.culling import Culler, cull_plan
from jupyter_gpumem.server.idle_proof import shell_answers
from jupyter_gpumem.server.kernels import KernelInfo

GiB = 1024**3
LONG_CELL = "import time\nfor _ in range(600):\n    time.sleep(0.5)"


def with_kernel(scenario):
    """Run ``scenario(km, client)`` against a real kernel of its own, started and shut down here."""

    async def run():
        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel(env={**os.environ, "PYTHONPATH": pythonpath()})
        client = km.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=120)
            await scenario(km, client)
        finally:
            client.stop_channels()
            await km.shutdown_kernel(now=True)

    asyncio.run(run())


async def _reply_on(channel, msg_id: str, within: float = 120.0) -> dict:
    async def wait():
        while True:
            reply = await channel.get_msg(timeout=within)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    return await asyncio.wait_for(wait(), within)


async def _start_long_cell_and_ask_on_control(client) -> None:
    """A cell that runs for minutes, seen running (its busy status), then a control request the
    kernel answers in the middle of it."""
    msg_id = client.execute(LONG_CELL)
    while True:
        msg = await client.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "execute_input":
            break
    for request in ("kernel_info_request", "list_subshell_request"):
        msg = client.session.msg(request)
        client.control_channel.send(msg)
        reply = await _reply_on(client.control_channel, msg["header"]["msg_id"])
        assert reply["msg_type"] == request.replace("_request", "_reply")


class _Service:
    """What the culler asks the server for: one kernel, idle for an hour, holding 5 GiB of GPU 0."""

    def __init__(self, kernel_id: str) -> None:
        self.kernel_id = kernel_id
        self.config = SimpleNamespace(cull_idle_after=60.0, cull_min_bytes=GiB, cull_warn_before=30.0)
        self.sampler = SimpleNamespace(latest=self._latest)
        self.since = datetime.now(timezone.utc) - timedelta(hours=1)

    async def _latest(self):
        return None

    async def kernels(self):
        return [KernelInfo(self.kernel_id, "python3", 1, "a.ipynb", "idle", self.since)]

    def report(self, reading, kernels):
        row = {"pid": 1, "used": 5 * GiB, "kind": "kernel", "kernel_id": self.kernel_id}
        return {"source": "nvml", "state": "ok", "devices": [{"index": 0, "processes": [row]}]}


class _Kernels:
    """jupyter_server's kernel manager as the culler uses it: the kernel reads idle since an hour."""

    def __init__(self, km, service: _Service) -> None:
        km.execution_state, km.last_activity = "idle", service.since
        self.km, self.shut_down, self.kernel_id = km, [], service.kernel_id

    def list_kernel_ids(self):
        return [self.kernel_id]

    def get_kernel(self, kernel_id):
        return self.km

    async def shutdown_kernel(self, kernel_id):
        self.shut_down.append(kernel_id)


def test_a_kernel_in_a_long_cell_that_answered_control_requests_is_not_culled():
    async def scenario(km, client):
        await _start_long_cell_and_ask_on_control(client)
        service = _Service("k1")
        kernels = _Kernels(km, service)
        culled = await Culler(service, kernels).check_once()
        assert (culled, kernels.shut_down) == ([], [])
        assert await km.is_alive()
        await km.interrupt_kernel()

    with_kernel(scenario)


def test_the_shell_answers_once_the_cell_ends():
    async def scenario(km, client):
        await _start_long_cell_and_ask_on_control(client)
        assert await shell_answers(km, within=3.0) is False
        await km.interrupt_kernel()
        assert await shell_answers(km, within=120.0) is True

    with_kernel(scenario)


def test_an_idle_kernel_is_still_culled():
    async def scenario(km, client):
        service = _Service("k1")
        kernels = _Kernels(km, service)
        culled = await Culler(service, kernels).check_once()
        assert [p.kernel_id for p in culled] == kernels.shut_down == ["k1"]

    with_kernel(scenario)


def test_a_kernel_still_starting_long_after_its_start_is_a_candidate_to_be_asked():
    """A kernel whose first status the server missed reads "starting" for ever; it used to be
    skipped however long it held a GPU."""
    since = datetime.fromtimestamp(1_800_000_000 - 7200, tz=timezone.utc)
    kernel = KernelInfo("s", "python3", 1, None, "starting", since)
    report = {
        "source": "nvml",
        "state": "ok",
        "devices": [{"index": 0, "processes": [{"pid": 1, "used": 5 * GiB, "kind": "kernel", "kernel_id": "s"}]}],
    }
    plan = cull_plan(report, [kernel], 1_800_000_000, idle_after=3600, min_bytes=GiB, warn_before=300)
    assert [p.kernel_id for p in plan.cull] == ["s"]


def test_a_kernel_shut_down_during_the_check_is_skipped_not_raised():
    """jupyter_server's MappingKernelManager answers 404 (tornado's HTTPError) for a kernel that
    is gone, not KeyError (``_check_kernel_id``, services/kernels/kernelmanager.py, 2.21.1)."""
    from tornado.web import HTTPError

    from jupyter_gpumem.server.culling import still_idle_since

    class Gone:
        def list_kernel_ids(self):
            return []

        def get_kernel(self, kernel_id):
            raise HTTPError(404, f"Kernel does not exist: {kernel_id}")

    service = _Service("k1")
    listed = KernelInfo("k1", "python3", 1, "a.ipynb", "idle", service.since)
    assert still_idle_since(Gone(), listed) is False
    assert asyncio.run(Culler(service, Gone()).check_once()) == []


def test_a_kernel_still_starting_long_after_its_last_activity_is_asked_for_a_status():
    """jupyter_server turns "starting" into "idle" on any later status message, an untracked
    request's included, without moving ``last_activity`` (``record_activity``,
    services/kernels/kernelmanager.py, 2.21.1); the listing asks such a kernel for one."""
    from jupyter_gpumem.server.kernels import KernelDirectory

    async def scenario(km, client):
        km.execution_state = "starting"
        km.last_activity = datetime.now(timezone.utc) - timedelta(seconds=60)

        class Manager:
            def list_kernel_ids(self):
                return ["k1"]

            def get_kernel(self, kernel_id):
                return km

        directory = KernelDirectory(Manager(), None)
        await directory.kernels()
        await directory.wait_for_pids()

        async def status_of_a_kernel_info():
            while True:
                msg = await client.get_iopub_msg(timeout=120)
                parent = msg["parent_header"]
                asked_by_us = parent.get("session") == client.session.session  # wait_for_ready's own
                if msg["msg_type"] == "status" and parent.get("msg_type") == "kernel_info_request" and not asked_by_us:
                    return msg

        await asyncio.wait_for(status_of_a_kernel_info(), 120)

    with_kernel(scenario)


def test_a_kernel_listed_before_its_start_set_last_activity_is_listed_without_it():
    """jupyter_server's ServerKernelManager declares ``last_activity = Instance(datetime)`` with
    no default (services/kernels/kernelmanager.py, 2.21.1), and a kernel is in the manager's list
    before its start sets it: reading it there raised TraitError and the whole kernels listing
    failed (a browser run's server log, 2026-12-07: "updating after a reading failed"). A real
    ServerKernelManager, never started."""
    from jupyter_server.services.kernels.kernelmanager import ServerKernelManager

    from jupyter_gpumem.server.kernels import KernelDirectory

    km = ServerKernelManager()

    class Manager:
        def list_kernel_ids(self):
            return ["k1"]

        def get_kernel(self, kernel_id):
            return km

    async def listing():
        directory = KernelDirectory(Manager(), None, pid_timeout=0.1)
        try:
            return await directory.kernels()
        finally:
            await directory.wait_for_pids()

    (info,) = asyncio.run(listing())
    assert info.kernel_id == "k1" and info.last_activity is None
