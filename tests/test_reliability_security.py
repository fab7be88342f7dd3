"""Security: every route of the extension needs auth (found by enumerating the routes, not from
a list), no endpoint shows another user's command line unless configured, and path parameters
cannot leave the server root.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpumem.testing import fake_nvml

from doubles import STATUS_WITHOUT_PARAMS, extension_paths, fetch_route, route_method

EXT = {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}}
GiB = 1024**3


@pytest.fixture
def jp_server_config():
    return {**EXT, "GpuMem": {"poll_interval": 0.1}}


@pytest.fixture
def world():
    with fake_nvml("three_gpus") as w:
        yield w


async def test_every_extension_websocket_refuses_a_wrong_token_and_opens_with_the_right_one(
    jp_serverapp, jp_ws_fetch, jp_base_url, world
):
    paths = extension_paths(jp_serverapp.web_app, websockets=True)
    assert paths, "the /devices push socket at least"
    for path in paths:
        parts = [urllib.parse.unquote(p) for p in path[len(jp_base_url) :].split("/")]
        for header in ("", "token not-the-token", "Bearer not-the-token"):
            with pytest.raises(HTTPClientError) as denied:
                await jp_ws_fetch(*parts, headers={"Authorization": header})
            assert denied.value.code == 403, (path, header)
        ws = await jp_ws_fetch(*parts)
        assert await asyncio.wait_for(ws.read_message(), 5), path
        ws.close()


async def test_every_extension_route_refuses_a_wrong_token_and_serves_the_right_one(
    jp_serverapp, jp_fetch, jp_base_url, world
):
    paths = extension_paths(jp_serverapp.web_app)
    assert len(paths) >= 3, paths  # devices, kernels, config at least
    for path in paths:
        assert path.startswith(jp_base_url) and "(" not in path, path  # no path arguments
        parts = [urllib.parse.unquote(p) for p in path[len(jp_base_url) :].split("/")]
        method = route_method(jp_serverapp.web_app, path)
        for header in ("", "token not-the-token", "Bearer not-the-token"):
            with pytest.raises(HTTPClientError) as denied:
                await fetch_route(jp_fetch, parts, method, headers={"Authorization": header})
            assert denied.value.code == 403, (path, header)
        assert await answered(fetch_route(jp_fetch, parts, method)) == STATUS_WITHOUT_PARAMS[method], path


async def test_every_extension_route_takes_the_token_as_a_query_parameter(jp_serverapp, jp_fetch, jp_base_url, world):
    """``?token=`` authenticates a script or a link, as on /metrics: jupyter_server's
    IdentityProvider.get_token reads handler.get_argument("token") before the Authorization
    header (jupyter_server/auth/identity.py, 2.21.1). It is not an unknown parameter; one that
    really is unknown is still a 400, and a wrong token still a 403."""
    token = jp_serverapp.identity_provider.token
    no_header = {"Authorization": ""}
    assert (await jp_fetch("metrics", params={"token": token}, headers=no_header)).code == 200
    for path in extension_paths(jp_serverapp.web_app):
        parts = [urllib.parse.unquote(p) for p in path[len(jp_base_url) :].split("/")]
        method = route_method(jp_serverapp.web_app, path)
        fine = fetch_route(jp_fetch, parts, method, params={"token": token}, headers=no_header)
        assert await answered(fine) == STATUS_WITHOUT_PARAMS[method], path
        with pytest.raises(HTTPClientError) as denied:
            await fetch_route(jp_fetch, parts, method, params={"token": "not-the-token"}, headers=no_header)
        assert denied.value.code == 403, path
        with pytest.raises(HTTPClientError) as unknown:
            await fetch_route(jp_fetch, parts, method, params={"token": token, "bogus": "1"}, headers=no_header)
        assert unknown.value.code == 400, path
        assert "unknown query parameter(s) bogus" in json.loads(unknown.value.response.body)["error"]


async def answered(request):
    """The status a request was answered with, an error's included."""
    try:
        return (await request).code
    except HTTPClientError as exc:
        return exc.code


async def test_metrics_with_our_gauges_needs_a_token(jp_fetch, world):
    await jp_fetch("jupyter-gpumem", "api", "devices")
    with pytest.raises(HTTPClientError) as denied:
        await jp_fetch("metrics", headers={"Authorization": ""})
    assert denied.value.code == 403
    assert "jupyter_gpumem_device_used_bytes" in (await jp_fetch("metrics")).body.decode()


@pytest.mark.parametrize(
    "notebook",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "a/../../etc/passwd",
        "..",
        "a/..",
        "./a.ipynb",
        "a//b.ipynb",
        "..\\..\\etc\\passwd",
        "a\x00.ipynb",
        "notebooks/../../../etc/passwd",
    ],
)
async def test_notebook_parameter_cannot_leave_the_server_root(jp_fetch, world, notebook):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "devices", params={"notebook": notebook})
    assert err.value.code == 400
    body = json.loads(err.value.response.body)
    assert "relative" in body["error"] or "inside the server root" in body["error"]


@pytest.fixture
def secret_program():
    """A copy of ``sleep`` under a name no answer can hold by chance, 15 characters, as the kernel
    keeps a process name (``comm``): the name is the process's name and the first word of its
    command line. In a folder of its own that uid 65534 may enter."""
    folder = tempfile.mkdtemp(prefix="gpumem-other-user-")
    os.chmod(folder, 0o755)
    name = "g" + secrets.token_hex(7)
    shutil.copy(shutil.which("sleep"), os.path.join(folder, name))
    yield os.path.join(folder, name), name
    shutil.rmtree(folder, ignore_errors=True)


def _other_users_process(program):
    """A real process owned by uid 65534 (nobody) running ``program``: needs root to start."""

    def drop():
        os.setgid(65534)
        os.setuid(65534)

    return subprocess.Popen([program, "600"], preexec_fn=drop)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
async def test_real_process_of_another_user_shows_its_user_but_no_command_line(
    jp_fetch, jp_serverapp, world, secret_program
):
    program, secret = secret_program
    proc = _other_users_process(program)
    try:
        world.add_process(1, proc.pid, 3 * GiB)
        service = jp_serverapp.web_app.settings["jupyter_gpumem"]
        reads = service.sampler.reads
        while service.sampler.reads < reads + 2:  # a reading taken after the process was added
            body = json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)
            await asyncio.sleep(0.05)
        metrics = (await jp_fetch("metrics")).body.decode()
        kernels = (await jp_fetch("jupyter-gpumem", "api", "kernels")).body.decode()
    finally:
        proc.kill()
        proc.wait()
    entry = next(p for p in body["devices"][1]["processes"] if p["pid"] == proc.pid)
    assert entry["kind"] == "other" and entry["used"] == 3 * GiB
    # Who holds a GPU is shown (as nvidia-smi and nvitop show it); what they run is not, unless
    # GpuMem.show_other_users is on.
    assert entry["name"] is None and entry["name_hidden"] is True and entry["user"] == "nobody"
    for text in (json.dumps(body), metrics, kernels):
        assert secret not in text


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
async def test_own_process_command_line_is_shown(jp_fetch, jp_serverapp, world):
    world.add_process(1, os.getpid(), GiB)
    service = jp_serverapp.web_app.settings["jupyter_gpumem"]
    reads = service.sampler.reads
    while service.sampler.reads < reads + 2:
        body = json.loads((await jp_fetch("jupyter-gpumem", "api", "devices")).body)
        await asyncio.sleep(0.05)
    entry = next(p for p in body["devices"][1]["processes"] if p["pid"] == os.getpid())
    # the command line as the system shows it (pytest-xdist's workers retitle themselves)
    with open("/proc/self/cmdline", "rb") as f:
        shown = " ".join(a.decode() for a in f.read().split(b"\0") if a)
    assert shown and entry["name"] == shown[:300]
