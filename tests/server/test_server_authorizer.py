"""Every route and the socket of the extension ask jupyter_server's Authorizer, as its own
kernel handlers do (``@authorized`` with ``auth_resource = "kernels"``,
jupyter_server/services/kernels/handlers.py; the kernel websocket asks in ``pre_get``,
services/kernels/websocket.py; 2.21.1). A custom Authorizer here refuses some resources and the
extension must refuse what names kernels with it; "keep running" changes a kernel's fate, so it
asks ``write`` on ``kernels``, as interrupting or restarting one does.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_gpumem.testing import fake_nvml

from doubles import extension_paths, fetch_route, route_method


class DeniesKernels(Authorizer):
    """Allows everything but reading or touching kernels (``GET /api/kernels`` is a 403)."""

    def is_authorized(self, handler, user, action, resource):
        return resource != "kernels"


class DeniesKernelWrites(Authorizer):
    """Lets a user read kernels but not act on them."""

    def is_authorized(self, handler, user, action, resource):
        return not (resource == "kernels" and action == "write")


class DeniesEverything(Authorizer):
    def is_authorized(self, handler, user, action, resource):
        return False


@pytest.fixture
def authorizer():
    return DeniesKernels


@pytest.fixture
def jp_server_config(authorizer):
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}, "authorizer_class": authorizer},
        "GpuMem": {"poll_interval": 0.1, "cull_idle_after": 3600},
    }


@pytest.fixture
def world():
    with fake_nvml("three_gpus") as w:
        yield w


def parts_of(path, base_url):
    return [urllib.parse.unquote(p) for p in path[len(base_url) :].split("/")]


async def test_routes_that_name_kernels_are_refused_when_the_authorizer_denies_kernels(
    jp_serverapp, jp_fetch, jp_base_url, world
):
    with pytest.raises(HTTPClientError) as own:
        await jp_fetch("api", "kernels")
    assert own.value.code == 403  # jupyter_server's own kernel list, for comparison
    served = {}
    for path in extension_paths(jp_serverapp.web_app):
        method = route_method(jp_serverapp.web_app, path)
        try:
            served[path.rsplit("/", 1)[-1]] = (await fetch_route(jp_fetch, parts_of(path, jp_base_url), method)).code
        except HTTPClientError as exc:
            served[path.rsplit("/", 1)[-1]] = exc.code
    assert served == {"devices": 403, "kernels": 403, "keep": 403, "config": 200}


@pytest.mark.parametrize("authorizer", [DeniesKernelWrites])
async def test_keep_running_is_refused_to_a_user_who_may_read_kernels_but_not_act_on_them(
    jp_serverapp, jp_fetch, world
):
    body = json.dumps({"path": "a.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    kernel_id = json.loads((await jp_fetch("api", "sessions", method="POST", body=body)).body)["kernel"]["id"]
    assert (await jp_fetch("jupyter-gpumem", "api", "devices")).code == 200
    with pytest.raises(HTTPClientError) as denied:
        await jp_fetch("jupyter-gpumem", "api", "keep", method="POST", body=b"", params={"kernel": kernel_id})
    assert denied.value.code == 403
    assert jp_serverapp.web_app.settings["jupyter_gpumem"].culler.kept == {}


async def test_the_socket_is_refused_before_the_upgrade_when_the_authorizer_denies_kernels(
    jp_serverapp, jp_ws_fetch, jp_base_url, world
):
    paths = extension_paths(jp_serverapp.web_app, websockets=True)
    assert paths
    for path in paths:
        with pytest.raises(HTTPClientError) as denied:
            await jp_ws_fetch(*parts_of(path, jp_base_url))
        assert denied.value.code == 403, path
    assert len(jp_serverapp.web_app.settings["jupyter_gpumem"].watchers) == 0


@pytest.mark.parametrize("authorizer", [DeniesEverything])
async def test_every_route_is_refused_when_the_authorizer_denies_everything(jp_serverapp, jp_fetch, jp_base_url, world):
    paths = extension_paths(jp_serverapp.web_app)
    assert len(paths) >= 3
    for path in paths:
        with pytest.raises(HTTPClientError) as denied:
            await fetch_route(jp_fetch, parts_of(path, jp_base_url), route_method(jp_serverapp.web_app, path))
        assert denied.value.code == 403, path
