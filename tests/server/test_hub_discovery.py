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
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from child_env import pythonpath

from jupyter_gpumem.server import hub_api
from jupyter_gpumem.server import hub_discovery as hd

ROOT = Path(__file__).resolve().parents[2]
SERVICE_SCOPES = ["list:users", "read:servers", "read:users:name"]
GIVE_UP_AFTER = 1500  # requests to /users a stand-in hub answers (over hub_api.MAX_PAGES)


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

    def __init__(
        self,
        users: list[dict],
        scopes: object,
        token: str = "service-token",
        page: int = 2,
        users_answer: Callable[[int], object] | None = None,
        redirect_users_to: str | None = None,
    ):
        """``users_answer(offset)``, where given, is the body of each ``GET /users``, in place of the
        hub's pages: a hub answering what JupyterHub never does. After ``GIVE_UP_AFTER`` of those it
        answers 500, so a client that never stops asking ends and its requests can be counted."""
        self.users, self.scopes, self.token, self.page = users, scopes, token, page
        self.users_answer, self.redirect_users_to = users_answer, redirect_users_to
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
                    whoami = {"kind": "service", "name": "gpumem-targets", "scopes": hub.scopes}
                    return self.answer(200, {k: v for k, v in whoami.items() if v is not None})
                if url.path == "/hub/api/users":
                    if len(hub.requests) > GIVE_UP_AFTER:
                        return self.answer(500, {"status": 500})
                    if hub.redirect_users_to is not None:
                        self.send_response(302)
                        self.send_header("Location", hub.redirect_users_to)
                        self.send_header("Content-Length", "0")
                        return self.end_headers()
                    query = parse_qs(url.query)
                    if hub.users_answer is not None:
                        return self.answer(200, hub.users_answer(int(query.get("offset", ["0"])[0])))
                    return self.answer(200, hub.users_page(query, self.headers.get("Accept", "")))
                self.answer(404, {"status": 404})

            def answer(self, code: int, body: object) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
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
        if hub_api.PAGINATION_MEDIA_TYPE not in accept:
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


def bounded_child():
    """In a child process: at most 1 GiB of address space, so reading without a bound fails fast
    with MemoryError instead of taking the machine's memory."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


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
        timeout=60,  # a guard against a service that blocks: it answers at once
        preexec_fn=bounded_child,
    )


def write_in_child(path: Path, text: str) -> str:
    """``write_atomically(path, text)`` run in a bounded child: what it returned or raised."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom jupyter_gpumem.server import hub_discovery as hd\n"
        "try:\n    print('returned', hd.write_atomically(Path(sys.argv[1]), sys.argv[2]))\n"
        "except hd.DiscoveryError as exc:\n    print('refused:', exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), text],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,  # a guard against a write that blocks: it returns at once
        preexec_fn=bounded_child,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def page(items: list, offset: int = 0, following: object = None) -> dict:
    """A page of ``GET /users`` as ``paginated_model`` makes it, with ``next`` as given."""
    return {"items": items, "_pagination": {"offset": offset, "limit": 200, "total": 1000, "next": following}}


# --- the pure parts -------------------------------------------------------------------------------


def test_only_ready_servers_become_targets_default_and_named_alike():
    users = [user("bob", **{"": True}), user("alice", **{"": False, "gpu": True}), {"name": "carol", "servers": {}}]
    assert hub_api.ready_servers(users) == [hub_api.Server("alice", "gpu"), hub_api.Server("bob", "")]


def test_a_user_model_without_servers_is_an_error_not_an_empty_target_list():
    """Without read:servers the hub answers user models with no ``servers`` key at all."""
    with pytest.raises(hub_api.HubError, match="give the service the scope read:servers"):
        hub_api.ready_servers([{"kind": "user", "name": "alice", "admin": False}])


@pytest.mark.parametrize(
    ("item", "says"),
    [
        (42, "the hub's user list holds 42, where JupyterHub gives a user model with a name"),
        ({"servers": {}}, "the hub's user list holds {'servers': {}}, where JupyterHub gives a user model with a name"),
        ({"name": "", "servers": {}}, "holds {'name': '', 'servers': {}}, where JupyterHub gives a user model"),
        ({"name": 7, "servers": {}}, "holds {'name': 7, 'servers': {}}, where JupyterHub gives a user model"),
        ({"name": "a", "servers": []}, "the hub's model of user 'a' has servers [], where JupyterHub gives"),
        ({"name": "a", "servers": {"": 42}}, "server '' of user 'a' is 42, where JupyterHub gives a server model"),
        ({"name": "a", "servers": {"": {"name": "", "ready": "yes"}}}, "server '' of user 'a' is {'name': '', 'r"),
        ({"name": "a", "servers": {"": {"ready": True}}}, "server '' of user 'a' is {'ready': True}, where"),
        ({"name": "a", "servers": {"x": {"name": "y", "ready": True}}}, "server 'x' of user 'a' is {'name': 'y',"),
    ],
)
def test_a_user_list_item_that_is_not_what_jupyterhub_gives_is_refused(item, says):
    with pytest.raises(hub_api.HubError) as raised:
        hub_api.ready_servers([user("alice", **{"": True}), item])
    assert says in str(raised.value)


def test_a_name_from_the_hub_is_shown_escaped_and_cut_in_a_refusal():
    with pytest.raises(hub_api.HubError) as raised:
        hub_api.ready_servers([{"name": "eve\n\x1b[31m" + "x" * 500, "servers": 1}])
    message = str(raised.value)
    assert "\n" not in message and "\x1b" not in message and len(message) < 300
    assert "'eve\\n\\x1b[31m" in message


def test_a_target_is_labelled_with_the_hubs_user_and_server_name():
    groups, left_out = hd.target_groups(
        [hub_api.Server("alice", ""), hub_api.Server("bob", "big")],
        hd.Addresses("jupyter-{username}{server_suffix}:9500"),
    )
    assert left_out == []
    assert groups == [
        {"targets": ["jupyter-alice:9500"], "labels": {"hub_user": "alice", "server_name": ""}},
        {"targets": ["jupyter-bob-big:9500"], "labels": {"hub_user": "bob", "server_name": "big"}},
    ]


def test_an_address_given_for_one_server_wins_over_the_template():
    addresses = hd.Addresses("jupyter-{username}:9500", {("alice", ""): "10.0.0.5:9601"})
    assert addresses.address_of(hub_api.Server("alice", "")) == "10.0.0.5:9601"
    assert addresses.address_of(hub_api.Server("alice", "other")) == "jupyter-alice:9500"


def test_a_server_without_an_address_is_left_out_and_said_so():
    groups, left_out = hd.target_groups(
        [hub_api.Server("alice"), hub_api.Server("bob")], hd.Addresses(None, {("bob", ""): "h:1"})
    )
    assert [g["labels"]["hub_user"] for g in groups] == ["bob"]
    assert left_out == ["'alice': no --target template and no --target-for for it"]


def test_a_user_name_that_makes_no_host_is_left_out_not_written():
    groups, left_out = hd.target_groups([hub_api.Server("-eve")], hd.Addresses("{username}:9500"))
    assert groups == [] and "is not HOST:PORT" in left_out[0]


TEMPLATE = "jupyter-{username}{server_suffix}:9500"


def test_a_named_server_and_a_user_of_that_name_are_refused_together_and_both_named():
    """alice's server "gpu" and alice-gpu's default server both make jupyter-alice-gpu:9500: whichever
    container answers there, one of the two labels would be wrong, so neither is written."""
    servers = [hub_api.Server("alice", ""), hub_api.Server("alice", "gpu"), hub_api.Server("alice-gpu", "")]
    groups, left_out = hd.target_groups(servers, hd.Addresses(TEMPLATE))
    assert groups == [{"targets": ["jupyter-alice:9500"], "labels": {"hub_user": "alice", "server_name": ""}}]
    assert left_out == [
        "'alice-gpu' and 'alice/gpu' would both be scraped at jupyter-alice-gpu:9500, so neither is written: "
        "give each its own --target-for, or a --target that keeps them apart"
    ]


def test_user_names_that_differ_only_in_case_are_one_host_and_are_refused():
    """Host names are compared without case (RFC 4343), so jupyter-Frank and jupyter-frank are one host."""
    groups, left_out = hd.target_groups([hub_api.Server("Frank"), hub_api.Server("frank")], hd.Addresses(TEMPLATE))
    assert groups == []
    assert left_out[0].startswith("'Frank' and 'frank' would both be scraped at jupyter-Frank:9500")


def test_three_servers_at_one_address_are_all_named():
    servers = [hub_api.Server("a", "b-c"), hub_api.Server("a-b", "c"), hub_api.Server("a-b-c")]
    groups, left_out = hd.target_groups(servers, hd.Addresses(TEMPLATE))
    assert groups == []
    assert left_out == [
        "'a-b-c', 'a-b/c' and 'a/b-c' would all be scraped at jupyter-a-b-c:9500, so none is written: "
        "give each its own --target-for, or a --target that keeps them apart"
    ]


@pytest.mark.parametrize(
    ("one", "other"),
    [("10.0.0.5:9500", "10.0.0.5:9500"), ("[::1]:9500", "[0:0::1]:9500"), ("h:9500", "H:09500")],
)
def test_two_servers_given_one_listener_by_target_for_are_refused(one, other):
    addresses = hd.Addresses(None, {("alice", ""): one, ("bob", ""): other})
    groups, left_out = hd.target_groups([hub_api.Server("alice"), hub_api.Server("bob")], addresses)
    assert groups == [] and left_out[0].startswith("'alice' and 'bob' would both be scraped at ")


def test_the_same_server_listed_twice_is_one_target():
    """Pages read while users come and go can list a user twice: the same server is not a clash."""
    groups, left_out = hd.target_groups([hub_api.Server("alice"), hub_api.Server("alice")], hd.Addresses(TEMPLATE))
    assert left_out == [] and [g["targets"] for g in groups] == [["jupyter-alice:9500"]]


@pytest.mark.parametrize(
    "name", ["alice.default", "alice.default.svc.cluster.local", "bob@example.org", "e v e", "alice\n", "alice\r"]
)
def test_a_name_that_is_not_one_host_label_is_not_put_into_a_host_name(name):
    """alice.default in jupyter-{username} makes jupyter-alice.default, which a Kubernetes search
    domain resolves to the service jupyter-alice in namespace default: another user's server."""
    groups, left_out = hd.target_groups([hub_api.Server(name)], hd.Addresses("jupyter-{username}:9500"))
    assert groups == []
    assert left_out == [
        f"{name!r}: its name has characters other than letters, digits, '-' and '_', which --target does not put "
        "into a host name; give it a --target-for"
    ]


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


@pytest.mark.parametrize("address", ["h\n:9500", "h:9500\n", "[::1]\n:9500"])
def test_an_address_with_a_final_newline_is_not_host_port(address):
    with pytest.raises(hd.DiscoveryError, match="is not HOST:PORT"):
        hd.checked_address(address, "--target-for")


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


def test_a_fifo_at_the_output_is_refused_without_blocking(tmp_path):
    """A FIFO with no writer blocks whoever opens it to read; one put where the file is must
    neither block the service nor be replaced by it."""
    path = tmp_path / "targets.json"
    os.mkfifo(path)
    said = write_in_child(path, "[]\n")
    assert said.startswith(f"refused: the targets file: {str(path)!r} is a FIFO (named pipe); refusing to read it")
    assert path.is_fifo()


def test_a_link_to_dev_zero_at_the_output_is_refused_and_not_read(tmp_path):
    path = tmp_path / "targets.json"
    path.symlink_to("/dev/zero")
    said = write_in_child(path, "[]\n")
    assert said.startswith(f"refused: the targets file: {str(path)!r} is a symbolic link (to '/dev/zero')")
    assert os.readlink(path) == "/dev/zero"


def test_a_link_to_a_regular_file_at_the_output_is_refused_and_left(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("kept\n")
    path = tmp_path / "targets.json"
    path.symlink_to(elsewhere)
    assert write_in_child(path, "[]\n").startswith(f"refused: the targets file: {str(path)!r} is a symbolic link")
    assert path.is_symlink() and elsewhere.read_text() == "kept\n"


def test_a_huge_file_at_the_output_is_read_no_further_than_the_new_text(tmp_path):
    """A 4 GiB file (sparse: no disk taken), read whole, would need 4 GiB; the child has 1 GiB."""
    path = tmp_path / "targets.json"
    with open(path, "wb") as big:
        big.truncate(4 << 30)
    assert write_in_child(path, "[]\n") == "returned True"
    assert path.read_text() == "[]\n"


def test_the_file_is_readable_by_prometheus_whatever_the_umask(tmp_path):
    path = tmp_path / "targets.json"
    before = os.umask(0o077)
    try:
        hd.write_atomically(path, "[]\n")
    finally:
        os.umask(before)
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_file_that_cannot_be_written_is_an_error_not_a_crash(tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    path = folder / "targets.json"
    folder.rmdir()
    with pytest.raises(hd.DiscoveryError, match="could not write the targets file"):
        hd.write_atomically(path, "[]\n")


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_fifo_or_link_at_the_output_is_refused_at_start(tmp_path, kind):
    path = tmp_path / "targets.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with StandInHub([user("alice", **{"": True})], SERVICE_SCOPES) as hub:
        result = run_cli("--once", "--output", str(path), "--target", TEMPLATE, hub=hub)
    assert result.returncode == 2 and "refusing to replace it" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and hub.requests == []


# --- against a hub --------------------------------------------------------------------------------


def test_every_page_of_the_hubs_users_is_read():
    users = [user(f"user{i}", **{"": True}) for i in range(5)] + [user("idle", **{"": False})]
    with StandInHub(users, SERVICE_SCOPES, page=2) as hub:
        listed = hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert [u["name"] for u in listed] == [f"user{i}" for i in range(5)]
    assert [p for p in hub.requests if p.startswith("/hub/api/users")] == [
        "/hub/api/users?state=ready&offset=0&limit=200",
        "/hub/api/users?state=ready&offset=2&limit=200",
        "/hub/api/users?state=ready&offset=4&limit=200",
    ]


def test_pages_without_ready_users_are_read_through_to_the_last():
    """The hub filters ``state=ready`` after it cuts the page (``post_filter`` in
    ``UserListAPIHandler.get``), so a page can be empty while ``next`` goes on."""
    answers = {0: page([], 0, {"offset": 200, "limit": 200}), 200: page([user("bob", **{"": True})], 200)}
    with StandInHub([], SERVICE_SCOPES, users_answer=answers.__getitem__) as hub:
        listed = hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert [u["name"] for u in listed] == ["bob"]


@pytest.mark.parametrize(
    ("following", "says"),
    [
        ("soon", "_pagination.next is 'soon'"),
        ({"offset": 0, "limit": 200}, "_pagination.next is {'limit': 200, 'offset': 0}"),
        ({"offset": "200"}, "_pagination.next is {'offset': '200'}"),
        ({"offset": True}, "_pagination.next is {'offset': True}"),
        ({"limit": 200}, "_pagination.next is {'limit': 200}"),
        (5, "_pagination.next is 5"),
    ],
)
def test_a_next_page_that_is_not_null_or_further_on_is_refused_at_once(following, says):
    with StandInHub([], SERVICE_SCOPES, users_answer=lambda offset: page([], offset, following)) as hub:
        with pytest.raises(hub_api.HubError) as raised:
            hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert says in str(raised.value)
    assert "where JupyterHub gives null or an offset past 0" in str(raised.value)
    assert len(hub.requests) == 1


def test_paging_that_goes_on_and_on_stops_at_the_bound_on_requests():
    """Each page one further on: it advances, but the list never ends."""
    with StandInHub([], SERVICE_SCOPES, users_answer=lambda offset: page([], offset, {"offset": offset + 1})) as hub:
        with pytest.raises(hub_api.HubError, match=f"did not end within {hub_api.MAX_PAGES:,} requests"):
            hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert len(hub.requests) == hub_api.MAX_PAGES


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([user("alice", **{"": True})], "is not a page of JupyterHub 2.0 or later"),
        ({"items": [user("alice", **{"": True})]}, "is not a page of JupyterHub 2.0 or later"),
        ({"items": "alice", "_pagination": {"next": None}}, "is not a page of JupyterHub 2.0 or later"),
        (b"[" * 100_000, "is not JSON"),
        (b'{"items": [], "pad": "' + b"x" * hub_api.MAX_ANSWER_BYTES + b'"}', "is over 16,777,216 bytes"),
    ],
    ids=["a list", "no _pagination", "items not a list", "nested deeper than Python parses", "over the bound"],
)
def test_a_user_list_answer_that_is_not_a_page_is_refused(body, says):
    with StandInHub([], SERVICE_SCOPES, users_answer=lambda offset: body) as hub:
        with pytest.raises(hub_api.HubError) as raised:
            hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert says in str(raised.value)


def test_a_redirect_is_not_followed_with_the_token():
    """urllib follows a 302 with every header of the request, Authorization included."""
    with StandInHub([user("alice", **{"": True})], SERVICE_SCOPES) as elsewhere:
        with StandInHub([], SERVICE_SCOPES, redirect_users_to=f"{elsewhere.api_url}/users?state=ready") as hub:
            with pytest.raises(hub_api.HubError, match="the hub answered 302 to users"):
                hub_api.Hub(hub.api_url, "service-token").users_with_ready_servers()
    assert elsewhere.requests == []


class DrippingHub:
    """A hub that answers ``GET /users`` one byte at a time, and never finishes."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(1 << 30))
                self.end_headers()
                try:
                    while not stopping.is_set():
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        stopping.wait(0.01)
                except OSError:
                    pass  # the client hung up: the point

        stopping = self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hub/api"

    def __exit__(self, *exc):
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def test_an_answer_that_never_ends_is_given_up_at_the_deadline():
    """Each byte comes within the socket's timeout, so only a deadline on the whole answer ends it."""
    with DrippingHub() as api_url:
        with pytest.raises(hub_api.HubError, match="did not finish its answer to users.* within 0.5 s"):
            hub_api.Hub(api_url, "service-token", answer_seconds=0.5).users_with_ready_servers()


def test_an_answer_the_service_cannot_use_keeps_the_last_file_and_ends_in_one_line(tmp_path):
    out = tmp_path / "targets.json"
    out.write_text('[{"targets": ["h:1"], "labels": {"hub_user": "alice", "server_name": ""}}]\n')
    before = out.read_text()
    with StandInHub([], SERVICE_SCOPES, users_answer=lambda offset: page([42], offset)) as hub:
        result = run_cli("--once", "--output", str(out), "--target", TEMPLATE, hub=hub)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == (
        "jupyter-gpumem hub discovery: the hub's user list holds 42, where JupyterHub gives a user model with a "
        "name (a string) and its servers\n"
    )
    assert out.read_text() == before


@pytest.mark.parametrize("scopes", ["access:servers", None, ["list:users", 7]], ids=["a string", "none", "not text"])
def test_a_whoami_answer_without_a_list_of_scopes_is_refused(tmp_path, scopes):
    """A string of scopes read as a list would be its letters, none of them a scope that reaches a server."""
    with StandInHub([user("alice", **{"": True})], scopes) as hub:
        result = run_cli("--once", "--output", str(tmp_path / "t.json"), "--target", TEMPLATE, hub=hub)
    assert result.returncode == 2
    assert "the hub's whoami answer (GET /hub/api/user) has no list of scopes" in result.stderr, result.stderr
    assert not any(p.startswith("/hub/api/users") for p in hub.requests)


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


def test_two_servers_at_one_address_are_named_and_the_others_written(tmp_path):
    out = tmp_path / "targets.json"
    users = [user("alice", **{"": True, "gpu": True}), user("alice-gpu", **{"": True}), user("bob", **{"": True})]
    with StandInHub(users, SERVICE_SCOPES) as hub:
        result = run_cli("--once", "--output", str(out), "--target", TEMPLATE, hub=hub)
    assert result.returncode == 0, result.stderr
    assert [g["targets"] for g in json.loads(out.read_text())] == [["jupyter-alice:9500"], ["jupyter-bob:9500"]]
    assert "'alice-gpu' and 'alice/gpu' would both be scraped at jupyter-alice-gpu:9500" in result.stderr


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
    hub = hub_api.Hub("http://127.0.0.1:9/hub/api", "t", timeout=2)  # the discard port: nothing listens
    with pytest.raises(hub_api.HubError, match="did not answer"):
        hd.discover_once(hub, hd.Addresses("{username}:9500"), out)
    assert out.read_text() == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--output", "OUT"],
            "give --via-proxy URL, or --target TEMPLATE, or --target-for USER=HOST:PORT for each server",
        ),
        (["--output", "OUT", "--target", "{name}:1"], "unknown field(s) name"),
        (["--output", "OUT", "--target-for", "alice=nohost"], "is not HOST:PORT"),
        (["--output", "MISSING/t.json", "--target", "h:1"], "the folder"),
        (["--output", "OUT", "--target", "h:1"], "JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN must be set"),
        (["--output", "OUT", "--target", "h:1", "--interval", "0"], "seconds from 1 to 3600"),
        (
            ["--output", "OUT", "--target-for", "alice=h:1", "--target-for", "bob=H:01"],
            "--target-for 'bob=H:01' and 'alice=h:1': two servers cannot share one address",
        ),
        (
            ["--output", "OUT", "--target-for", "alice=h:1", "--target-for", "alice=h:2"],
            "'alice' has an address already",
        ),
    ],
)
def test_bad_input_is_refused_with_what_is_valid_and_writes_nothing(tmp_path, args, says):
    args = [a.replace("OUT", str(tmp_path / "t.json")).replace("MISSING", str(tmp_path / "missing")) for a in args]
    result = run_cli("--once", *args)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


# --- what the log says ----------------------------------------------------------------------------

UNPRINTABLE = ("\n", "\r", "\x1b", "\x00", "\u202e")
NAMES_THAT_FORGE_LINES = [
    "eve\n[E 2026-11-28 11:00:00.000 jupyter_gpumem.hub_discovery] bob's kernel",
    "\x1b[2J\x1b[Hmallory",
]


def discovery_log(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "jupyter_gpumem.hub_discovery"]


@pytest.mark.parametrize("name", NAMES_THAT_FORGE_LINES, ids=["newline", "escape"])
def test_a_name_from_the_hub_reaches_the_log_escaped(tmp_path, caplog, name):
    with StandInHub([user(name, **{"": True})], SERVICE_SCOPES) as hub:
        with caplog.at_level("INFO"):
            hd.discover_once(hub_api.Hub(hub.api_url, "service-token"), hd.Addresses(TEMPLATE), tmp_path / "t.json")
    (line,) = [m for m in discovery_log(caplog) if "no target for" in m]
    assert not any(c in line for c in UNPRINTABLE), line
    assert hub_api.shown(name) in line


@pytest.mark.parametrize("name", NAMES_THAT_FORGE_LINES, ids=["newline", "escape"])
def test_a_name_in_two_servers_at_one_address_reaches_the_log_escaped(caplog, name):
    """--target-for names reach the log as the operator wrote them; the hub's names are escaped."""
    addresses = hd.Addresses(None, {(name, ""): "h:1", ("bob", ""): "h:1"})
    groups, left_out = hd.target_groups([hub_api.Server(name), hub_api.Server("bob")], addresses)
    assert groups == [] and not any(c in left_out[0] for c in UNPRINTABLE)


def test_a_long_address_is_cut_in_the_log():
    groups, left_out = hd.target_groups([hub_api.Server("e" * 10_000)], hd.Addresses("{username}:9500"))
    assert groups == [] and len(left_out[0]) < 400


def test_a_server_left_out_is_logged_when_it_is_first_left_out_not_at_each_refresh(tmp_path, caplog):
    said: set[str] = set()
    with StandInHub([user("alice.b", **{"": True})], SERVICE_SCOPES) as hub:
        client = hub_api.Hub(hub.api_url, "service-token")
        with caplog.at_level("INFO"):
            for _ in range(3):
                hd.discover_once(client, hd.Addresses(TEMPLATE), tmp_path / "t.json", said)
    assert [m for m in discovery_log(caplog) if "no target for" in m] == [
        "jupyter-gpumem hub discovery: no target for 'alice.b': its name has characters other than letters, "
        "digits, '-' and '_', which --target does not put into a host name; give it a --target-for"
    ]


def test_an_error_that_repeats_is_logged_once_and_the_recovery_once(caplog):
    """A hub that answers nonsense every 30 s fills no log: the error is said when it starts or
    changes, and the first good refresh after it says so."""
    outcomes = [hub_api.HubError("bad page"), hub_api.HubError("bad page"), hub_api.HubError("bad page"), 3, 3]
    outcomes += [hub_api.HubError("bad page"), hub_api.HubError("other"), hub_api.HubError("other")]
    stop = threading.Event()

    def discover() -> int:
        outcome = outcomes.pop(0)
        if not outcomes:
            stop.set()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with caplog.at_level("INFO"):
        hd.run_forever(discover, 0, stop)
    assert discovery_log(caplog) == [
        "jupyter-gpumem hub discovery: bad page",
        "jupyter-gpumem hub discovery: 3 target(s) from the hub again",
        "jupyter-gpumem hub discovery: bad page",
        "jupyter-gpumem hub discovery: other",
    ]
    assert all(r.exc_info is None for r in caplog.records)


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
    # The discovery service's role, and Prometheus's: the metrics scope alone, and nothing else.
    assert granted == {"docs/server.md": [*hd.SCOPES_NEEDED, "custom:jupyter-gpumem:read-metrics"]}
    assert hd.scopes_reaching_servers(scope for scopes in granted.values() for scope in scopes) == []


# --- through the hub's proxy (--via-proxy) -------------------------------------------------------


def test_through_the_proxy_each_server_is_its_own_route_labelled_by_the_hub():
    servers = [
        hub_api.Server("alice", "", "/user/alice/"),
        hub_api.Server("bob", "big", "/hub-prefix/user/bob/big/"),
        hub_api.Server("é v", "", "/user/%C3%A9%20v/"),
        hub_api.Server("carol", ""),  # the hub gave no URL path
    ]
    groups, left_out = hd.target_groups(servers, hd.proxy_from("https://hub.example.org"))
    route = {"__scheme__": "https"}
    assert groups == [
        {
            "targets": ["hub.example.org:443"],
            "labels": {"hub_user": "alice", "server_name": "", "__metrics_path__": "/user/alice/jupyter-gpumem/metrics"}
            | route,
        },
        {
            "targets": ["hub.example.org:443"],
            "labels": {
                "hub_user": "bob",
                "server_name": "big",
                "__metrics_path__": "/hub-prefix/user/bob/big/jupyter-gpumem/metrics",
            }
            | route,
        },
        {
            "targets": ["hub.example.org:443"],
            "labels": {"hub_user": "é v", "server_name": "", "__metrics_path__": "/user/é v/jupyter-gpumem/metrics"}
            | route,
        },
    ]
    assert left_out == ["'carol': the hub's model of it has no URL path to scrape through the proxy"]


def test_the_hubs_url_path_of_a_server_is_kept_and_one_that_is_not_a_path_is_dropped():
    models = [user("alice", **{"": True}), {"name": "bob", "servers": {"": {"name": "", "ready": True, "url": 7}}}]
    alice, bob = hub_api.ready_servers(models)
    assert (alice.url, bob.url) == ("/user/alice/", "")


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:8000", ("http", "127.0.0.1:8000")),
        ("https://hub.example.org/", ("https", "hub.example.org:443")),
        ("http://proxy-public", ("http", "proxy-public:80")),
        ("http://[::1]:8000", ("http", "[::1]:8000")),
    ],
)
def test_via_proxy_takes_the_hubs_public_scheme_and_host(url, address):
    proxy = hd.proxy_from(url)
    assert (proxy.scheme, proxy.address) == address


@pytest.mark.parametrize(
    "url", ["ftp://hub", "http://hub/hub/", "http://hub?x=1", "http://u:p@hub", "hub:8000", "http://hub:99999"]
)
def test_via_proxy_with_a_path_or_another_scheme_is_refused(url):
    with pytest.raises(hd.DiscoveryError, match="--via-proxy"):
        hd.proxy_from(url)


def test_via_proxy_and_target_together_are_refused_at_start(tmp_path):
    result = run_cli("--once", "--output", str(tmp_path / "t.json"), "--via-proxy", "http://hub", "--target", "h:1")
    assert result.returncode == 2 and "give --via-proxy, or --target and --target-for, not both" in result.stderr


def test_the_service_writes_routes_through_the_proxy(tmp_path):
    out = tmp_path / "targets.json"
    with StandInHub([user("alice", **{"": True, "gpu": False})], SERVICE_SCOPES) as hub:
        result = run_cli("--once", "--output", str(out), "--via-proxy", "http://127.0.0.1:8000", hub=hub)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == [
        {
            "targets": ["127.0.0.1:8000"],
            "labels": {
                "hub_user": "alice",
                "server_name": "",
                "__metrics_path__": "/user/alice/jupyter-gpumem/metrics",
                "__scheme__": "http",
            },
        }
    ]
