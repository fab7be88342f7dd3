"""GpuMem.cull_idle_after: which kernels are warned about and which are shut down (``cull_plan``,
worked out by hand), then real kernels on a fake NVML world culled, or left alone, by the server.

jupyter_server's MappingKernelManager sets ``last_activity`` at start and on every iopub message
and ``execution_state`` from iopub status messages (services/kernels/kernelmanager.py, 2.21.1);
the kernel infos below stand for what it says.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone

import pytest
from child_env import pythonpath

from jupyter_gpumem.server.culling import annotate, check_every, cull_plan, human_duration, start_line
from jupyter_gpumem.server.kernels import KernelInfo, usage_pid
from jupyter_gpumem.testing import fake_nvml

from awaiting import WITHIN, own_client, server_sees_idle, until, waking
from culling_steps import kernel_pid, running_kernels, shut_down, start_kernel
from doubles import Clock

GiB = 1024**3
NOW = 1_800_000_000.0  # POSIX seconds
HOUR = 3600.0
RULES = {"idle_after": HOUR, "min_bytes": GiB, "warn_before": 300.0}


def kernel(kid, idle_for, state="idle", notebook=None):
    since = datetime.fromtimestamp(NOW - idle_for, tz=timezone.utc) if idle_for is not None else None
    return KernelInfo(
        kernel_id=kid,
        kernel_name="python3",
        pid=100,
        notebook_path=notebook,
        execution_state=state,
        last_activity=since,
    )


def row(kid, used, kind="kernel"):
    return {"pid": 100, "used": used, "kind": kind, "kernel_id": kid if kind == "kernel" else None}


def report(*devices, source="nvml", state="ok"):
    """A /devices report: each device is a list of process rows, indexed 0, 1, ..."""
    return {
        "source": source,
        "state": state,
        "devices": [{"index": i, "processes": list(rows)} for i, rows in enumerate(devices)],
    }


def plan_ids(plan):
    return ([p.kernel_id for p in plan.warn], [p.kernel_id for p in plan.cull])


# --- the decision ------------------------------------------------------------------------------


def test_an_idle_kernel_holding_enough_past_the_limit_is_culled():
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", HOUR + 1)], NOW, **RULES)
    assert plan_ids(plan) == ([], ["a"])
    (due,) = plan.cull
    assert (due.held_bytes, due.per_device, due.cull_at) == (30 * GiB, ((0, 30 * GiB),), NOW - 1)


def test_a_busy_kernel_is_never_culled_however_long_since_its_last_activity():
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 10 * HOUR, state="busy")], NOW, **RULES)
    assert plan_ids(plan) == ([], [])


def test_a_kernel_holding_less_than_the_minimum_is_never_culled():
    plan = cull_plan(report([row("a", GiB - 1)]), [kernel("a", 10 * HOUR)], NOW, **RULES)
    assert plan_ids(plan) == ([], [])


def test_bytes_on_several_gpus_add_up_to_the_minimum():
    plan = cull_plan(report([row("a", GiB // 2)], [row("a", GiB // 2)]), [kernel("a", 2 * HOUR)], NOW, **RULES)
    assert plan_ids(plan) == ([], ["a"])
    assert plan.cull[0].per_device == ((0, GiB // 2), (1, GiB // 2))


def test_a_kernel_whose_pid_matches_no_gpu_process_is_never_culled():
    # No row of kind "kernel" names it: its pid is not listed, or NVML lists host pids (containers).
    plan = cull_plan(
        report([row(None, 30 * GiB, kind="other"), row(None, 30 * GiB, kind="host_pid")]),
        [kernel("a", 10 * HOUR)],
        NOW,
        **RULES,
    )
    assert plan_ids(plan) == ([], [])


def test_a_reading_older_than_the_last_activity_counts_as_no_idle_time():
    plan = cull_plan(
        report([row("a", 5 * GiB)]), [kernel("a", -0.5)], NOW, idle_after=8, min_bytes=GiB, warn_before=300
    )
    assert [(p.kernel_id, p.idle_seconds) for p in plan.warn] == [("a", 0.0)]


def test_a_kernel_with_no_last_activity_is_never_culled():
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", None)], NOW, **RULES)
    assert plan_ids(plan) == ([], [])


def test_culling_is_off_at_zero():
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 10 * HOUR)], NOW, **{**RULES, "idle_after": 0})
    assert plan_ids(plan) == ([], [])


@pytest.mark.parametrize("source, state", [("replay", "ok"), ("nvml", "no_driver")])
def test_a_replay_or_an_unreadable_nvml_culls_nothing(source, state):
    plan = cull_plan(report([row("a", 30 * GiB)], source=source, state=state), [kernel("a", 10 * HOUR)], NOW, **RULES)
    assert plan_ids(plan) == ([], [])


def test_the_warning_starts_warn_before_seconds_before_the_cull():
    kernels = [kernel("early", HOUR - 301), kernel("warned", HOUR - 300), kernel("due", HOUR)]
    plan = cull_plan(
        report([row("early", 2 * GiB), row("warned", 2 * GiB), row("due", 2 * GiB)]), kernels, NOW, **RULES
    )
    assert plan_ids(plan) == (["warned"], ["due"])


def test_a_warning_longer_than_the_limit_stands_from_the_first_idle_second():
    plan = cull_plan(report([row("a", 5 * GiB)]), [kernel("a", 0)], NOW, idle_after=8, min_bytes=GiB, warn_before=300)
    assert plan_ids(plan) == (["a"], [])


def test_the_warning_says_what_is_held_where_how_long_idle_and_when_it_ends():
    plan = cull_plan(report([], [], [row("a", 30 * GiB)]), [kernel("a", 55 * 60)], NOW, **RULES)
    assert plan.warn[0].message == (
        "this kernel holds 30.00 GiB of GPU 2 and has been idle 55 min; it will be shut down in 5 min"
    )


def test_annotate_puts_the_pending_cull_on_the_kernels_rows_only():
    r = report([row("a", 30 * GiB), row("b", 30 * GiB), row(None, GiB, kind="other")])
    plan = cull_plan(r, [kernel("a", 55 * 60), kernel("b", 0)], NOW, **RULES)
    rows = annotate(r, plan)["devices"][0]["processes"]
    assert rows[0]["pending_cull"] == {
        "cull_at": NOW + 5 * 60,
        "idle_seconds": 3300.0,
        "held_bytes": 30 * GiB,
        "per_device": [[0, 30 * GiB]],
        "message": plan.warn[0].message,
    }
    assert rows[1]["pending_cull"] is None and rows[2]["pending_cull"] is None


def test_a_kept_kernel_counts_its_idle_time_from_the_keep():
    # Idle two hours, kept ten minutes ago: 50 minutes before its cull, so not even warned.
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 2 * HOUR)], NOW, **RULES, kept={"a": NOW - 600})
    assert plan_ids(plan) == ([], [])


def test_a_keep_older_than_the_last_activity_changes_nothing():
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 3601)], NOW, **RULES, kept={"a": NOW - 7200})
    assert plan_ids(plan) == ([], ["a"])


def test_a_kept_kernel_is_warned_about_and_culled_a_full_limit_after_the_keep():
    kept = {"a": NOW - HOUR + 300}
    plan = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 5 * HOUR)], NOW, **RULES, kept=kept)
    assert plan_ids(plan) == (["a"], [])
    assert plan.warn[0].cull_at == NOW + 300
    later = cull_plan(report([row("a", 30 * GiB)]), [kernel("a", 5 * HOUR)], NOW + 300, **RULES, kept=kept)
    assert plan_ids(later) == ([], ["a"])


@pytest.mark.parametrize(
    "seconds, words", [(45, "45 s"), (89, "89 s"), (90, "2 min"), (3300, "55 min"), (3 * HOUR, "3.0 h")]
)
def test_durations_read_as_seconds_minutes_or_hours(seconds, words):
    assert human_duration(seconds) == words


@pytest.mark.parametrize(
    "idle_after, warn_before, words",
    [
        (
            3600,
            300,
            "kernels idle 60 min or more that hold 1.00 GiB of GPU memory or more are shut down, with a warning 5 min before; checked every 60 s",
        ),
        (
            60,
            300,
            "kernels idle 60 s or more that hold 1.00 GiB of GPU memory or more are shut down, with a warning as soon as they are idle; checked every 8 s",
        ),
    ],
    ids=["warned-before-the-cull", "warning-longer-than-the-idle-time"],
)
def test_the_server_log_says_when_it_culls_and_warns_as_the_notices_do(idle_after, warn_before, words):
    # It read "idle 60s ... (warning 300s before)": a warning before the kernel was even idle.
    every = check_every(idle_after, 2.0)
    assert start_line(idle_after, 2**30, warn_before, every) == f"jupyter-gpumem: {words}"


def test_checks_come_an_eighth_of_the_limit_apart_within_the_poll_interval_and_a_minute():
    assert (check_every(8, 2), check_every(240, 2), check_every(10 * HOUR, 2)) == (2, 30, 60)


# --- a server with real kernels on the fake world ----------------------------------------------
# The server's culler decides at the time its clock says (``Culler.clock``; ``time.time`` in a
# server). These tests hold that clock still and move it past a kernel's last activity
# themselves, so what is culled depends on what the kernels did, never on how fast the machine
# ran the test. Kernels are waited for by their own status (``server_sees_idle``): a kernel the
# server still records as ``starting`` is never culled, and a test of it would prove nothing.

CULL_CONFIG = {"cull_idle_after": 8, "cull_min_bytes": 1073741824}  # --GpuMem.cull_idle_after=8 ...
LIMIT = CULL_CONFIG["cull_idle_after"]


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}, "GpuMem": CULL_CONFIG}


@pytest.fixture
def world():
    with fake_nvml("three_gpus") as w:  # GPU 2 is idle in this world
        yield w


@pytest.fixture
def culler(jp_serverapp):
    """The server's culler, its clock held at 0: no kernel has been idle at all until the test
    moves it (its periodic check runs on, every 2 s, at that time)."""
    culler = jp_serverapp.web_app.settings["jupyter_gpumem"].culler
    culler.clock = Clock(0.0)
    return culler


async def unlisted(service, kernel_id):
    """Whether the service's shared kernel list (kept half a second) has let the kernel go."""
    return all(k.kernel_id != kernel_id for k in await service.kernels())


async def culled_total(jp_fetch):
    """jupyter_gpumem_culled_kernels_total as the server's /metrics says it (one per process)."""
    text = (await jp_fetch("metrics")).body.decode()
    (line,) = [l for l in text.splitlines() if l.startswith("jupyter_gpumem_culled_kernels_total ")]
    return float(line.split()[1])


async def test_an_idle_kernel_holding_5_gib_is_warned_about_then_shut_down_past_the_limit_and_counted(
    jp_fetch, jp_serverapp, culler, world
):
    kernel_id = await start_kernel(jp_fetch, "holder.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 5 * GiB)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await server_sees_idle(km)
    before = await culled_total(jp_fetch)

    async def pending_cull():
        devices = json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)["devices"]
        rows = [p for p in devices[2]["processes"] if p["kernel_id"] == kernel_id]
        return rows and rows[0]["pending_cull"]

    warned = await until(pending_cull, "a pending cull on the holder's row in /devices", every=0.2)
    assert warned["message"].startswith("this kernel holds 5.00 GiB of GPU 2 and has been idle ")
    culler.clock.now = km.last_activity.timestamp() + LIMIT - 0.5
    assert await culler.check_once() == [] and kernel_id in await running_kernels(jp_fetch)  # not yet
    culler.clock.now = time.time() + LIMIT  # every activity so far is LIMIT seconds old
    await shut_down(jp_fetch, kernel_id)  # by the server's own periodic check
    assert [c.kernel_id for c in culler.culled] == [kernel_id]
    assert await culled_total(jp_fetch) == before + 1


async def test_the_socket_push_carries_the_pending_cull(jp_fetch, jp_ws_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "pushed.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 5 * GiB)
    await server_sees_idle(jp_serverapp.kernel_manager.get_kernel(kernel_id))
    ws = await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws")
    try:
        while True:  # the answer on connecting, then each change, until the kernel is idle on GPU 2
            devices = json.loads(await asyncio.wait_for(ws.read_message(), WITHIN))["devices"]
            rows = [p for p in devices[2]["processes"] if p["kernel_id"] == kernel_id]
            if rows and rows[0]["execution_state"] == "idle":
                break
    finally:
        ws.close()
    pending = rows[0]["pending_cull"]
    assert pending["held_bytes"] == 5 * GiB
    assert pending["message"].startswith("this kernel holds 5.00 GiB of GPU 2 and has been idle ")


async def test_an_idle_kernel_holding_no_gpu_memory_is_left_alone(jp_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "light.ipynb")
    await kernel_pid(jp_fetch, kernel_id)  # its pid is known, and matches no GPU process
    holder_id = await start_kernel(jp_fetch, "holder.ipynb")  # shows the culler is at work
    world.add_process(2, await kernel_pid(jp_fetch, holder_id), 5 * GiB)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await server_sees_idle(km)
    await server_sees_idle(jp_serverapp.kernel_manager.get_kernel(holder_id))
    culler.clock.now = time.time() + LIMIT  # both idle past the limit
    await shut_down(jp_fetch, holder_id)  # the check that shut the holder down passed over the other
    service = jp_serverapp.web_app.settings["jupyter_gpumem"]
    await until(lambda: unlisted(service, holder_id), "the holder gone from the server's shared kernel list")
    assert await culler.check_once() == []  # and so does the next
    assert kernel_id in await running_kernels(jp_fetch)
    assert km.execution_state == "idle"


async def test_activity_resets_the_clock_of_an_idle_holder(jp_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "kept.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 5 * GiB)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await server_sees_idle(km)
    quiet_since = km.last_activity
    client = own_client(km)
    client.start_channels()
    try:
        async with waking(km):
            await client.wait_for_ready(timeout=WITHIN)
            reply = await client.execute_interactive("x = 1", timeout=WITHIN)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
    await until(
        lambda: km.last_activity > quiet_since and km.execution_state == "idle", "the server's record of the cell"
    )
    culler.clock.now = quiet_since.timestamp() + LIMIT  # past the limit since the quiet start, not since the cell
    assert await culler.check_once() == [] and kernel_id in await running_kernels(jp_fetch)
    culler.clock.now = time.time() + LIMIT  # quiet again past the limit: culled as before
    await shut_down(jp_fetch, kernel_id)


async def the_servers_question_answered(jp_serverapp, kernel_id):
    """Returns once the server's own pid question to the kernel has been answered: it asks no
    more, and the test's ``usage_pid`` client, under the same identity as the server's
    (awaiting.py), has the kernel's control socket to itself. Asked again here at once where
    the answer did not come (the server would wait ``ASK_AGAIN_AFTER``)."""
    directory = jp_serverapp.web_app.settings["jupyter_gpumem"].kernels_dir
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)

    async def answered():
        entry = directory._pids.get(kernel_id)
        if entry is not None and not entry.answered and kernel_id not in directory._asking:
            entry.ask_again_at = 0.0
        directory.kernel_pid(kernel_id, km)  # asks while the answer is missing
        await directory.wait_for_pids()
        return directory._pids[kernel_id].answered

    async with waking(km):
        await until(answered, "the server's pid question answered", every=0.2)


LATE_STATUS = """A kernel publishes a request's statuses on iopub and its reply on shell or control:
the reply can come first (ZeroMQ orders no two sockets), so an earlier request's last status
(the server's own pid question, a kernel_info asked by ``server_sees_idle``) can be recorded after
a test starts counting. Seen in a fresh-clone run beside a busy loop: ``['idle', 'idle', 'idle']``
for the question's two. A request the server does not track is recorded as the kernel's state
then, so every status counted must read that state; a tracked one would read ``busy``."""


def status_states(caplog, kernel_id):
    """The execution state jupyter_server recorded after each status message of the kernel, in
    order: its debug line "activity on <kernel>: status (<state>)" (``record_activity`` in
    ``MappingKernelManager.start_watching_activity``, jupyter_server 2.21.1; pytest-jupyter's
    server logs at DEBUG)."""
    return [
        r.args[2]
        for r in caplog.records
        if r.msg == "activity on %s: %s (%s)" and r.args[0] == kernel_id and r.args[1] == "status"
    ]


async def test_a_busy_kernel_stays_busy_when_the_server_asks_its_pid(jp_fetch, jp_serverapp, world, caplog):
    """ipykernel publishes a busy and an idle status for a control-channel request too, parented
    to it (``Kernel.dispatch_control``, ipykernel/kernelbase.py, 7.4.0), and jupyter_server takes
    ``execution_state`` from a status whose parent's type it tracks
    (``MappingKernelManager.record_activity``, ``untracked_message_types``, jupyter_server
    2.21.1), which lists no ``usage_request``. Untracked, the server's pid question would make a
    kernel running a long cell read ``idle`` (and cullable), and an idle one look active."""
    kernel_id = await start_kernel(jp_fetch, "long.ipynb")
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await the_servers_question_answered(jp_serverapp, kernel_id)
    client = own_client(km)
    client.start_channels()
    try:
        async with waking(km):
            await client.wait_for_ready(timeout=WITHIN)
            client.execute("import time; time.sleep(600)")  # busy until the server shuts it down
            await until(lambda: km.execution_state == "busy", "the server's record of the running cell")
            seen = len(status_states(caplog, kernel_id))
            assert await usage_pid(km, timeout=WITHIN) is not None  # the kernel answered while busy
        # the question's own busy and idle statuses, as the server recorded them; a late status of
        # an earlier request may come first (LATE_STATUS), recorded as the kernel's state too
        states = await until(lambda: len(s := status_states(caplog, kernel_id)[seen:]) >= 2 and s, "both")
        assert set(states) == {"busy"} and km.execution_state == "busy", states
    finally:
        client.stop_channels()


async def test_an_idle_kernel_looks_no_more_active_when_the_server_asks_its_pid(jp_fetch, jp_serverapp, world, caplog):
    """The other half of the test above: the question moves no idle kernel's ``last_activity``
    (jupyter_server moves it on any message while the kernel is busy, which is its own rule)."""
    kernel_id = await start_kernel(jp_fetch, "quiet.ipynb")
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await the_servers_question_answered(jp_serverapp, kernel_id)
    await server_sees_idle(km)
    activity = km.last_activity
    seen = len(status_states(caplog, kernel_id))
    async with waking(km):
        assert await usage_pid(km, timeout=WITHIN) is not None
    states = await until(
        lambda: len(s := status_states(caplog, kernel_id)[seen:]) >= 2 and s, "the question's statuses"
    )
    assert set(states) == {"idle"}, states  # a late status of an earlier request may come first (LATE_STATUS)
    assert km.last_activity == activity and km.execution_state == "idle"


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_server_started_with_the_cull_flags_culls_the_holder_and_keeps_the_other(tmp_path):
    """``jupyter server --GpuMem.cull_idle_after=8 --GpuMem.cull_min_bytes=1073741824`` in a
    subprocess on the fake world (the drop-in pynvml reading a world file, docs/fake-gpu.md),
    on the real clock. The light kernel goes idle before the holder starts, so the check that
    shuts the holder down finds the light kernel idle longer: it passed over it."""
    import os
    import re
    import subprocess
    import sys
    import urllib.request

    from jupyter_client import BlockingKernelClient

    from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR, scenario

    world_file = tmp_path / "world.json"
    world = scenario("three_gpus")
    world.save(str(world_file))
    port, token = free_port(), "cull-" + os.urandom(8).hex()
    runtime = tmp_path / "runtime"
    env = dict(
        os.environ,
        PYTHONPATH=pythonpath(DROPIN_DIR),
        **{ENV_VAR: str(world_file)},
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(runtime),
    )
    log = tmp_path / "server.log"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_server",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--port-retries=0",
            "--allow-root",
            "--no-browser",
            f"--ServerApp.root_dir={tmp_path}",
            f"--IdentityProvider.token={token}",
            "--ServerApp.jpserver_extensions=jupyter_gpumem=True",
            "--GpuMem.cull_idle_after=8",
            "--GpuMem.cull_min_bytes=1073741824",
        ],
        env=env,
        cwd=tmp_path,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )

    def api(path, body=None):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/{path}",
            method="POST" if body else "GET",
            data=json.dumps(body).encode() if body else None,
            headers={"Authorization": f"token {token}"},
        )
        with urllib.request.urlopen(request, timeout=WITHIN) as response:
            return json.loads(response.read())

    def wait(check, what):
        started = time.monotonic()
        while not (answer := check()):
            assert server.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - started < WITHIN, f"{what}: not within {WITHIN:g} s\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        return answer

    def answers():
        try:
            return api("api/status")
        except OSError:
            return None

    def start(notebook):
        return api("api/sessions", {"path": notebook, "type": "notebook", "kernel": {"name": "python3"}})["kernel"][
            "id"
        ]

    def state(kernel_id):
        return api(f"api/kernels/{kernel_id}")["execution_state"]

    def server_sees_idle(kernel_id):
        """As ``awaiting.server_sees_idle``, through the server's REST API and the kernel's
        connection file: asked for its kernel_info until the server records it idle."""
        started = time.monotonic()
        while state(kernel_id) != "idle":
            assert time.monotonic() - started < WITHIN, f"kernel {kernel_id} is {state(kernel_id)!r}"
            client = BlockingKernelClient(connection_file=str(runtime / f"kernel-{kernel_id}.json"))
            client.load_connection_file()
            # No heartbeat: a client without its kernel's manager takes a heart not yet beating
            # for a dead kernel (KernelClient._async_is_alive, jupyter_client 8.10).
            client.start_channels(hb=False)
            try:
                # A request the kernel has not noticed is read at the next connection
                # (awaiting.py): a client that had no answer gives way to a new one.
                client.wait_for_ready(timeout=10)
            except RuntimeError:  # "Kernel didn't respond in 10 seconds"
                pass
            finally:
                client.stop_channels()
            asked = time.monotonic()
            while state(kernel_id) != "idle" and time.monotonic() - asked < 5:
                time.sleep(0.1)

    def running():
        return {k["id"] for k in api("api/kernels")}

    try:
        wait(answers, "the server's first answer")
        light = start("light.ipynb")
        server_sees_idle(light)
        heavy = start("heavy.ipynb")
        pid = wait(
            lambda: next(
                (k["pid"] for k in api("jupyter-gpumem/api/kernels")["kernels"] if k["kernel_id"] == heavy), None
            ),
            "the holder's pid",
        )
        world.add_process(2, pid, 5 * GiB)
        world.save(str(world_file))
        server_sees_idle(heavy)
        wait(lambda: heavy not in running(), "the holder shut down")
        assert light in running()
        (idle,) = re.findall(
            rf"shut down kernel {heavy} \(notebook heavy\.ipynb\): it held 5368709120 bytes \(5\.00 GiB\) of GPU "
            r"memory and had been idle (\d+) s \(GpuMem\.cull_idle_after=8\)",
            log.read_text(),
        )
        assert int(idle) >= 8  # not before its time; how long after depends on the machine's load
    finally:
        server.terminate()
        server.wait(WITHIN)
