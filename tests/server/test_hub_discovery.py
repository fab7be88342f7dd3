"""The hub discovery service: Prometheus targets from the hub's answer, and nothing else.

The hub here is a stand-in HTTP server that answers as JupyterHub 6.1.1 does, read from its
source: ``GET /hub/api/users?state=ready`` with the pagination media type answers
``{"items": [...], "_pagination": {"offset", "limit", "total", "next": {"offset", "limit", "url"}}}``
(``paginated_model`` in jupyterhub/apihandlers/base.py), each user model has ``servers``: name ->
server model with ``ready`` (``user_model``, ``server_model``, same file; only with
``read:servers``), whoami ``GET /hub/api/user`` lists the token's expanded ``scopes``
(jupyterhub/apihandlers/users.py, ``SelfAPIHandler``), and a token without a scope is answered
403. The real hub answers the same in tests/server/test_hub_end_to_end.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from child_env import pythonpath

from jupyter_gpumem.server import hub_discovery as hd

ROOT = Path(__file__).resolve().parents[2]
SERVICE_SCOPES = ["list:users", "read:servers", "read:users:name"]


def user(name: str, **servers: bool) -> dict:
    """A user model as the hub gives it to a token with read:servers: each server with ``ready``."""
    return {
        "kind": "user",
        "name": name,
        "admin": False,
        "servers": {
            server: {"name": server, "ready": ready, "url": f"/user/{name}/{server}"}
            for server, ready in servers.items()
        },
    }


class StandInHub:
    """``/hub/api/user`` and ``/hub/api/users`` as JupyterHub 6.1.1 answers them, in pages of ``page``."""

    def __init__(self, users: list[dict], scopes: list[str], token: str = "service-token", page: int = 2):
        self.users, self.scopes, self.token, self.page = users, scopes, token, page
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                hub.requests.append(self.path)
                if self.headers.get("Authorization") != f"token {hub.token}":
                    return self.answer(403, {"status": 403, "message": "Missing or invalid credentials."})
                url = urlsplit(self.path)
                if url.path == "/hub/api/user":
                    return self.answer(200, {"kind": "service", "name": "gpumem-targets", "scopes": hub.scopes})
                if url.path == "/hub/api/users":
                    return self.answer(200, hub.users_page(parse_qs(url.query), self.headers.get("Accept", "")))
                self.answer(404, {"status": 404})

            def answer(self, code: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def users_page(self, query: dict, accept: str) -> object:
        assert query["state"] == ["ready"]
        listed = [u for u in self.users if any(s["ready"] for s in u["servers"].values())]
        if hd.PAGINATION_MEDIA_TYPE not in accept:
            return listed
        offset = int(query.get("offset", ["0"])[0])
        items = listed[offset : offset + self.page]
        following = offset + self.page
        pagination = {"offset": offset, "limit": self.page, "total": len(listed), "next": None}
        if following < len(listed):
            pagination["next"] = {"offset": following, "limit": self.page, "url": f"/hub/api/users?offset={following}"}
        return {"items": items, "_pagination": pagination}

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hub/api"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def run_cli(*args: str, hub: StandInHub | None = None, token: str = "service-token") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath())
    env.pop("JUPYTERHUB_API_URL", None)
    env.pop("JUPYTERHUB_API_TOKEN", None)
    if hub is not None:
        env.update(JUPYTERHUB_API_URL=hub.api_url, JUPYTERHUB_API_TOKEN=token)
    return subprocess.run(
        [sys.executable, "-m", "jupyter_gpumem.server.hub_discovery", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- the pure parts -------------------------------------------------------------------------------


def test_only_ready_servers_become_targets_default_and_named_alike():
    users = [user("bob", **{"": True}), user("alice", **{"": False, "gpu": True}), {"name": "carol", "servers": {}}]
    assert hd.ready_servers(users) == [hd.Server("alice", "gpu"), hd.Server("bob", "")]


def test_a_user_model_without_servers_is_an_error_not_an_empty_target_list():
    """Without read:servers the hub answers user models with no ``servers`` key at all."""
    with pytest.raises(hd.DiscoveryError, match="give the service the scope read:servers"):
        hd.ready_servers([{"kind": "user", "name": "alice", "admin": False}])


def test_a_target_is_labelled_with_the_hubs_user_and_server_name():
    groups, left_out = hd.target_groups(
        [hd.Server("alice", ""), hd.Server("bob", "big")], hd.Addresses("jupyter-{username}{server_suffix}:9500")
    )
    assert left_out == []
    assert groups == [
        {"targets": ["jupyter-alice:9500"], "labels": {"hub_user": "alice", "server_name": ""}},
        {"targets": ["jupyter-bob-big:9500"], "labels": {"hub_user": "bob", "server_name": "big"}},
    ]


def test_an_address_given_for_one_server_wins_over_the_template():
    addresses = hd.Addresses("jupyter-{username}:9500", {("alice", ""): "10.0.0.5:9601"})
    assert addresses.address_of(hd.Server("alice", "")) == "10.0.0.5:9601"
    assert addresses.address_of(hd.Server("alice", "other")) == "jupyter-alice:9500"


def test_a_server_without_an_address_is_left_out_and_said_so():
    groups, left_out = hd.target_groups(
        [hd.Server("alice"), hd.Server("bob")], hd.Addresses(None, {("bob", ""): "h:1"})
    )
    assert [g["labels"]["hub_user"] for g in groups] == ["bob"]
    assert left_out == ["alice: no --target template and no --target-for for it"]


def test_a_user_name_that_makes_no_host_is_left_out_not_written():
    groups, left_out = hd.target_groups([hd.Server("eve:1/x y")], hd.Addresses("{username}:9500"))
    assert groups == [] and "is not HOST:PORT" in left_out[0]


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("jupyter-{user}:9500", "unknown field(s) user; valid fields: {username}, {servername}, {server_suffix}"),
        ("jupyter-{username}", "is not HOST:PORT"),
        ("jupyter-{username}:99999", "a port from 1 to 65535"),
        ("jupyter-{username:9500", "--target 'jupyter-{username:9500'"),
    ],
)
def test_a_bad_template_is_refused_naming_what_is_valid(template, says):
    with pytest.raises(hd.DiscoveryError) as raised:
        hd.checked_template(template)
    assert says in str(raised.value)


def test_target_for_takes_a_user_and_an_optional_server_name():
    assert hd.parse_target_for("alice=127.0.0.1:9601") == (("alice", ""), "127.0.0.1:9601")
    assert hd.parse_target_for("alice/gpu=[::1]:9601") == (("alice", "gpu"), "[::1]:9601")
    with pytest.raises(hd.DiscoveryError, match="expected USER=HOST:PORT"):
        hd.parse_target_for("127.0.0.1:9601")


def test_scopes_that_reach_a_server_are_found_with_their_filters():
    held = ["list:users", "read:servers", "access:servers!user=alice", "tokens", "read:users:name"]
    assert hd.scopes_reaching_servers(held) == ["access:servers!user=alice", "tokens"]
    assert hd.scopes_reaching_servers(SERVICE_SCOPES) == []


def test_the_file_is_replaced_whole_and_left_alone_when_unchanged(tmp_path):
    path = tmp_path / "targets.json"
    assert hd.write_atomically(path, "[]\n") is True
    mtime = path.stat().st_mtime_ns
    assert hd.write_atomically(path, "[]\n") is False and path.stat().st_mtime_ns == mtime
    assert hd.write_atomically(path, "[1]\n") is True and path.read_text() == "[1]\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["targets.json"]  # no temporary left


# --- against a hub --------------------------------------------------------------------------------


def test_every_page_of_the_hubs_users_is_read():
    users = [user(f"user{i}", **{"": True}) for i in range(5)] + [user("idle", **{"": False})]
    with StandInHub(users, SERVICE_SCOPES, page=2) as hub:
        listed = hd.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert [u["name"] for u in listed] == [f"user{i}" for i in range(5)]
    assert [p for p in hub.requests if p.startswith("/hub/api/users")] == [
        "/hub/api/users?state=ready&offset=0",
        "/hub/api/users?state=ready&offset=2",
        "/hub/api/users?state=ready&offset=4",
    ]


def test_once_writes_one_target_per_ready_server(tmp_path):
    out = tmp_path / "targets.json"
    users = [user("alice", **{"": True}), user("bob", **{"": True, "big": True}), user("carol", **{"": False})]
    with StandInHub(users, SERVICE_SCOPES) as hub:
        result = run_cli("--once", "--output", str(out), "--target", "jupyter-{username}{server_suffix}:9500", hub=hub)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == [
        {"labels": {"hub_user": "alice", "server_name": ""}, "targets": ["jupyter-alice:9500"]},
        {"labels": {"hub_user": "bob", "server_name": ""}, "targets": ["jupyter-bob:9500"]},
        {"labels": {"hub_user": "bob", "server_name": "big"}, "targets": ["jupyter-bob-big:9500"]},
    ]


def test_a_token_that_can_reach_servers_is_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "targets.json"
    with StandInHub([user("alice", **{"": True})], [*SERVICE_SCOPES, "access:servers"]) as hub:
        result = run_cli("--once", "--output", str(out), "--target", "{username}:9500", hub=hub)
    assert result.returncode == 2
    assert "this token can reach users' servers (access:servers)" in result.stderr
    assert "list:users, read:users:name, read:servers" in result.stderr
    assert not out.exists() and not any(p.startswith("/hub/api/users") for p in hub.requests)


def test_a_token_the_hub_refuses_gets_the_scopes_it_needs_named(tmp_path):
    with StandInHub([], SERVICE_SCOPES) as hub:
        result = run_cli("--once", "--output", str(tmp_path / "t.json"), "--target", "h:1", hub=hub, token="wrong")
    assert result.returncode == 2
    assert (
        "the hub refused user (403)" in result.stderr and "list:users, read:users:name, read:servers" in result.stderr
    )


def test_a_hub_that_does_not_answer_leaves_the_last_targets_in_place(tmp_path):
    out = tmp_path / "targets.json"
    out.write_text('[{"targets": ["h:1"], "labels": {"hub_user": "alice"}}]\n')
    before = out.read_text()
    hub = hd.Hub("http://127.0.0.1:9/hub/api", "t", timeout=2)  # the discard port: nothing listens
    with pytest.raises(hd.DiscoveryError, match="did not answer"):
        hd.discover_once(hub, hd.Addresses("{username}:9500"), out)
    assert out.read_text() == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--output", "OUT"], "give --target TEMPLATE, or --target-for USER=HOST:PORT for each server"),
        (["--output", "OUT", "--target", "{name}:1"], "unknown field(s) name"),
        (["--output", "OUT", "--target-for", "alice=nohost"], "is not HOST:PORT"),
        (["--output", "MISSING/t.json", "--target", "h:1"], "the folder"),
        (["--output", "OUT", "--target", "h:1"], "JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN must be set"),
        (["--output", "OUT", "--target", "h:1", "--interval", "0"], "seconds from 1 to 3600"),
    ],
)
def test_bad_input_is_refused_with_what_is_valid_and_writes_nothing(tmp_path, args, says):
    args = [a.replace("OUT", str(tmp_path / "t.json")).replace("MISSING", str(tmp_path / "missing")) for a in args]
    result = run_cli("--once", *args)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


# --- what deploy/ and docs/ tell an operator to grant ------------------------------------------------

# A list of scopes as a JupyterHub config or a YAML file writes it: "scopes": [...] or scopes: [...].
SCOPE_LIST = re.compile(r"""["']?\bscopes["']?\s*[:=]\s*\[([^\]]*)\]""")


def granted_scopes(text: str) -> list[str]:
    return [scope for listed in SCOPE_LIST.findall(text) for scope in re.findall(r"""["']([^"']+)["']""", listed)]


def test_the_scope_reader_sees_a_role_in_python_and_in_yaml():
    text = 'c.JupyterHub.load_roles = [{"scopes": ["access:servers!user=a", "list:users"]}]\nscopes: [\'tokens\']\n'
    assert granted_scopes(text) == ["access:servers!user=a", "list:users", "tokens"]


def test_no_file_in_deploy_or_docs_grants_a_scope_that_reaches_a_server():
    files = [p for p in (ROOT / "deploy").rglob("*") if p.is_file()] + sorted((ROOT / "docs").rglob("*.md"))
    granted = {str(p.relative_to(ROOT)): granted_scopes(p.read_text()) for p in files}
    granted = {path: scopes for path, scopes in granted.items() if scopes}
    assert granted == {"docs/server.md": list(hd.SCOPES_NEEDED)}  # the discovery service's role, and nothing else
    assert hd.scopes_reaching_servers(scope for scopes in granted.values() for scope in scopes) == []
