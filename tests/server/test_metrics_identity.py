"""Numbers that say who gives them: a server whose metrics port someone else holds says so, and
the gauges through the hub's proxy answer only a token the hub says holds the metrics scope."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpumem.server.hub_api import HubError, HubRefused
from jupyter_gpumem.server.hub_scrape import (
    ALLOWED_SECONDS,
    REFUSED_SECONDS,
    ScopeCheck,
    accepted_scopes,
    bearer_token,
    hub_scrape_route,
)

from awaiting import until
from ports import free_ports

SCOPE = "custom:jupyter-gpumem:read-metrics"
# What the stand-in hub's whoami says each token holds; any other token is a 403, as the hub's.
TOKENS = {
    "prometheus": [SCOPE, "read:users:name!service=gpumem-prometheus"],
    "for-alice": [f"{SCOPE}!user=alice"],
    "for-alices-gpu-server": [f"{SCOPE}!server=alice/gpu"],
    "for-bob": [f"{SCOPE}!user=bob"],
    "alices-own": ["access:servers!user=alice", "read:users:name!user=alice"],
}


class WhoamiHub:
    """``GET /hub/api/user`` as JupyterHub answers it: the token owner's model with its scopes."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                token = self.headers.get("Authorization", "").partition(" ")[2]
                scopes = TOKENS.get(token)
                code, body = (200, {"kind": "service", "scopes": scopes}) if scopes else (403, {"status": 403})
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hub/api"


@pytest.fixture
def whoami_hub():
    hub = WhoamiHub()
    hub.thread.start()
    yield hub
    hub.server.shutdown()
    hub.server.server_close()


@pytest.fixture
def squatter():
    """A listening socket on a free port of 127.0.0.1, as another user's process would hold it."""
    (port,) = free_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield port


@pytest.fixture
def gpumem_config():
    return {}


@pytest.fixture
def under_hub(whoami_hub, monkeypatch):
    """The environment a spawner gives alice's default server."""
    monkeypatch.setenv("JUPYTERHUB_API_URL", whoami_hub.api_url)
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "")


@pytest.fixture
def jp_server_config(request, gpumem_config):
    config = dict(gpumem_config)
    if config.get("metrics_port") == "squatted":
        config.update(metrics_port=request.getfixturevalue("squatter"), metrics_ip="127.0.0.1")
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}, "GpuMem": config}


# --- a metrics port someone else holds ---------------------------------------------------------


@pytest.mark.parametrize("gpumem_config", [{"metrics_port": "squatted"}])
async def test_a_taken_metrics_port_is_a_failed_listener_the_status_names(jp_fetch, jp_serverapp, squatter):
    service = jp_serverapp.web_app.settings["jupyter_gpumem"]
    assert service.metrics_listener is None
    status = json.loads((await jp_fetch("jupyter-gpumem", "api", "config")).body)["metrics_listener"]
    assert status["state"] == "failed" and status["address"] == f"127.0.0.1:{squatter}"
    assert "taken by another process" in status["reason"] and "is not this server" in status["reason"]


# --- the gauges through the hub's proxy --------------------------------------------------------


async def scrape(jp_fetch, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}" if token else ""}
    try:
        response = await jp_fetch("jupyter-gpumem", "metrics", headers=headers)
    except HTTPClientError as exc:
        return exc.code, exc.response.body.decode() if exc.response else ""
    return response.code, response.body.decode()


@pytest.mark.usefixtures("under_hub")
async def test_the_gauges_answer_a_token_the_hub_says_holds_the_metrics_scope(jp_fetch):
    async def gauges():  # the first scrape starts the reader; its reading is exported from then on
        code, text = await scrape(jp_fetch, "prometheus")
        assert code == 200
        return "jupyter_gpumem_nvml_up" in text and text

    text = await until(gauges, "the gauges of a reading")
    assert "kernel_id" not in text and "notebook_path" not in text


@pytest.mark.usefixtures("under_hub")
@pytest.mark.parametrize("token", ["for-alice"])
async def test_the_scope_filtered_to_this_servers_user_lets_in_too(jp_fetch, token):
    assert (await scrape(jp_fetch, token))[0] == 200


@pytest.mark.usefixtures("under_hub")
async def test_every_other_token_is_refused_and_none_is_a_401(jp_fetch):
    for token in ("for-bob", "for-alices-gpu-server", "alices-own", "made-up"):
        code, text = await scrape(jp_fetch, token)
        assert (code, text) == (403, f"the hub says this token holds none of {', '.join(sorted(accepted()))}\n")
    assert (await scrape(jp_fetch, None))[0] == 401


def accepted():
    return accepted_scopes(SCOPE, "alice", "")


async def test_outside_a_hub_there_is_no_such_route(jp_fetch):
    assert (await scrape(jp_fetch, "prometheus"))[0] == 404


def test_the_route_needs_a_hub_a_user_and_a_scope():
    hub = {"JUPYTERHUB_API_URL": "http://hub:8081/hub/api", "JUPYTERHUB_USER": "alice"}
    assert [r[0] for r in hub_scrape_route("/user/alice/", SCOPE, hub)] == ["/user/alice/jupyter-gpumem/metrics"]
    assert hub_scrape_route("/user/alice/", "", hub) == []
    assert hub_scrape_route("/", SCOPE, {"JUPYTERHUB_USER": "alice"}) == []


def test_a_bearer_or_token_header_gives_its_token_anything_else_none():
    assert bearer_token("Bearer abc") == bearer_token("token abc") == "abc"
    assert bearer_token("Basic abc") is bearer_token("Bearer") is bearer_token("Bearer a b") is None


# --- what the hub is asked, and how often --------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def check_with(answers: dict[str, object], clock: Clock) -> tuple[ScopeCheck, list[str]]:
    asked: list[str] = []

    def scopes_of(token: str) -> list[str]:
        asked.append(token)
        answer = answers[token]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return ScopeCheck("http://hub/hub/api", accepted(), scopes_of=scopes_of, clock=clock), asked


def test_the_hub_is_asked_about_a_token_once_a_minute_while_it_is_let_in():
    clock = Clock()
    check, asked = check_with({"prometheus": [SCOPE]}, clock)
    for clock.now in (0.0, 10.0, ALLOWED_SECONDS - 1):
        assert asyncio.run(check.allows("prometheus")) is True
    assert asked == ["prometheus"]
    clock.now = ALLOWED_SECONDS + 1
    assert asyncio.run(check.allows("prometheus")) is True and asked == ["prometheus"] * 2


def test_a_refusal_is_kept_for_less_time_and_a_silent_hub_is_not_kept():
    clock = Clock()
    check, asked = check_with({"bad": HubRefused("403"), "later": HubError("no answer")}, clock)
    assert asyncio.run(check.allows("bad")) is False and asyncio.run(check.allows("bad")) is False
    clock.now = REFUSED_SECONDS + 1
    assert asyncio.run(check.allows("bad")) is False and asked == ["bad", "bad"]
    assert asyncio.run(check.allows("later")) is None and asyncio.run(check.allows("later")) is None
    assert asked.count("later") == 2
