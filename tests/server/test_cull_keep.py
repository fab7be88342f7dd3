"""The cull as a user meets it, on the server's side: "keep running" (``POST /keep?kernel=``)
starts a kernel's idle clock again, and the devices reply keeps a short record of the kernels
the culler shut down (``recent_culls``), so a page that missed the moment can still say why.

The culler's clock is held still and moved by the tests (``Culler.clock``), as in
test_server_culling.py: what is culled depends on what was asked, never on the machine's speed.
"""

from __future__ import annotations

import json
import time

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpumem.server.culling import (
    RECENT_CULLS_FOR,
    CullRecord,
    PendingCull,
    cull_record,
    recent_culls,
)
from jupyter_gpumem.testing import fake_nvml

from awaiting import server_sees_idle
from culling_steps import kernel_pid, running_kernels, shut_down, start_kernel
from doubles import Clock

GiB = 1024**3
NOW = 1_800_000_000.0  # POSIX seconds
UNKNOWN_ID = "00000000-1111-2222-3333-444444444444"

# --- the record, worked out by hand -------------------------------------------


def pending(kid="a", idle=3700.0):
    return PendingCull(
        kernel_id=kid,
        notebook_path="nb/a.ipynb",
        held_bytes=30 * GiB,
        per_device=((2, 20 * GiB), (0, 10 * GiB)),
        idle_seconds=idle,
        cull_at=NOW,
        message="",
    )


def test_a_cull_record_says_what_was_freed_when_and_why():
    record = cull_record(pending(), culled_at=NOW + 5, idle_after=3600, min_bytes=GiB)
    assert record.to_json() == {
        "kernel_id": "a",
        "notebook_path": "nb/a.ipynb",
        "freed_bytes": 30 * GiB,
        "per_device": [[2, 20 * GiB], [0, 10 * GiB]],
        "culled_at": NOW + 5,
        "idle_seconds": 3700.0,
        "idle_after": 3600,
        "reason": "it had been idle 62 min while holding 20.00 GiB of GPU 2 and 10.00 GiB of GPU 0; this server "
        "shuts down kernels idle 60 min that hold 1.00 GiB or more (GpuMem.cull_idle_after=3600)",
    }


def test_recent_culls_are_the_last_hours_newest_first():
    def at(kid, when):
        return CullRecord(kid, None, GiB, ((0, GiB),), when, 10.0, 8.0, "")

    records = [at("old", NOW - RECENT_CULLS_FOR - 1), at("a", NOW - 60), at("b", NOW - 5)]
    assert [r["kernel_id"] for r in recent_culls(records, NOW)] == ["b", "a"]


# --- a server with real kernels on the fake world ----------------------------------------------

LIMIT = 8


@pytest.fixture
def jp_server_config():
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}},
        "GpuMem": {"cull_idle_after": LIMIT, "cull_min_bytes": GiB},
    }


@pytest.fixture
def world():
    with fake_nvml("three_gpus") as w:  # GPU 2 is idle in this world
        yield w


@pytest.fixture
def culler(jp_serverapp):
    culler = jp_serverapp.web_app.settings["jupyter_gpumem"].culler
    culler.clock = Clock(0.0)  # no kernel idle at all until a test moves it
    return culler


async def keep(jp_fetch, **params):
    response = await jp_fetch("jupyter-gpumem", "api", "keep", method="POST", body=b"", params=params)
    return json.loads(response.body)


async def refused(jp_fetch, **params):
    """The status and error of a keep request the server refuses."""
    with pytest.raises(HTTPClientError) as err:
        await keep(jp_fetch, **params)
    return err.value.code, json.loads(err.value.response.body)["error"]


async def test_keep_running_starts_the_idle_clock_again_for_a_full_limit(jp_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "kept.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 5 * GiB)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await server_sees_idle(km)
    quiet_since = km.last_activity.timestamp()
    culler.clock.now = quiet_since + LIMIT - 1  # one second before its cull
    answer = await keep(jp_fetch, kernel=kernel_id)
    kept_at = quiet_since + LIMIT - 1
    assert answer == {
        "kernel_id": kernel_id,
        "cull_at": kept_at + LIMIT,
        "message": "kept running: it is shut down only once idle 8 s again",
    }
    assert km.last_activity.timestamp() == quiet_since  # jupyter_server's own record is not touched
    culler.clock.now = quiet_since + LIMIT + 1  # past the limit since its last activity
    assert await culler.check_once() == []
    culler.clock.now = kept_at + LIMIT - 0.5  # not yet a full limit since the keep
    assert await culler.check_once() == [] and kernel_id in await running_kernels(jp_fetch)
    culler.clock.now = kept_at + LIMIT + 0.5
    await shut_down(jp_fetch, kernel_id)  # by the server's own periodic check
    assert [c.kernel_id for c in culler.culled] == [kernel_id]
    assert culler.kept == {}  # forgotten with the kernel


async def test_the_devices_reply_records_the_cull_with_what_it_freed_and_why(jp_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "culled.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 5 * GiB)
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    await server_sees_idle(km)
    assert json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)["recent_culls"] == []
    culler.clock.now = time.time() + LIMIT
    await shut_down(jp_fetch, kernel_id)
    (record,) = json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)["recent_culls"]
    assert record["kernel_id"] == kernel_id and record["notebook_path"] == "culled.ipynb"
    assert (record["freed_bytes"], record["per_device"], record["idle_after"]) == (5 * GiB, [[2, 5 * GiB]], LIMIT)
    assert record["culled_at"] == culler.clock.now and record["idle_seconds"] >= LIMIT
    assert record["reason"].startswith("it had been idle ") and "holding 5.00 GiB of GPU 2" in record["reason"]


@pytest.mark.parametrize(
    "params, status, error",
    [
        ({}, 400, "give the kernel to keep running: ?kernel=<kernel id>"),
        ({"kernel": "../../api/kernels"}, 400, "kernel must be a kernel id such as "),
        ({"kernel": "x" * 500}, 400, "kernel must be a kernel id such as "),
        ({"kernel": UNKNOWN_ID, "until": "1"}, 400, "unknown query parameter(s) until; valid parameters: kernel"),
        ({"kernel": UNKNOWN_ID}, 404, f"no kernel {UNKNOWN_ID} on this server"),
    ],
)
async def test_a_bad_or_unknown_kernel_is_a_clear_error_and_changes_nothing(
    jp_fetch, culler, world, params, status, error
):
    code, message = await refused(jp_fetch, **params)
    assert (code, message[: len(error)]) == (status, error)
    assert culler.kept == {}


async def test_keep_with_culling_off_is_a_conflict_and_changes_nothing(jp_fetch, jp_serverapp, culler, world):
    kernel_id = await start_kernel(jp_fetch, "uncullable.ipynb")
    config = jp_serverapp.web_app.settings["jupyter_gpumem"].config
    config.cull_idle_after = 0  # as a server started without --GpuMem.cull_idle_after
    assert await refused(jp_fetch, kernel=kernel_id) == (
        409,
        "culling is off on this server (GpuMem.cull_idle_after=0): no kernel is shut down for idling",
    )
    assert culler.kept == {}


async def test_keep_is_a_post(jp_fetch, culler, world):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "keep", params={"kernel": UNKNOWN_ID})
    assert err.value.code == 405
