"""A real JupyterHub, end to end: Prometheus finds each user's server through the hub, scrapes it
through the hub's proxy with a token of the metrics scope alone, names it by the hub's user,
alerts on the right user's idle GPU holder, and the culler shuts down that user's kernel alone.
A squatter holding alice's metrics port first is never scraped, and her server says so.

JupyterHub 6.1.1 from PyPI, configurable-http-proxy 5.3.0 from npm (tests/server/hub_proxy,
``make hub-proxy``), Debian's Prometheus (``make prometheus``). Two hub users, alice and bob, each
with a single-user server (SimpleLocalProcessSpawner: both run as this test's Unix user, so the
test needs no root and no accounts; JupyterHub's docs call it a spawner for tests) with the
extension on the fake three-GPU world (the drop-in pynvml; synthetic readings) and one kernel
whose pid the world gives GPU memory. The hub runs on the ``jupyterhub_config.py`` docs/server.md
gives operators (``operators_config``), so it starts the discovery service
(``jupyter_gpumem.server.hub_discovery``) with the docs' role (only ``list:users``,
``read:users:name`` and ``read:servers``, and ``--via-proxy`` the test's proxy), and defines the
metrics scope and Prometheus's service; Prometheus reads its targets file with the example scrape
job (deploy/prometheus/prometheus.yml: the token from a file) and the example rules
(deploy/prometheus/jupyter-gpumem.rules.yml), the idle-kernel alert's 30 min and 1 min cut to
seconds. Alice's server is also given a metrics listener (a ``pre_spawn_hook``) on a port that a
squatter (standing for bob's process on the shared host) holds before her server starts.

What JupyterHub does, read in its source (jupyterhub 6.1.1): ``Spawner.get_env`` sets
``JUPYTERHUB_USER`` after ``Spawner.environment`` (jupyterhub/spawner.py), so alice's claim to be
bob is made by her spawner's ``get_env`` here, standing for anything she runs in her own server;
``GET /hub/api/users?state=ready`` lists users with a ready server (jupyterhub/apihandlers/users.py);
``LocalProcessSpawner`` starts each server in a session of its own (``start_new_session``), and
the hub stops its servers, services and proxy when it gets SIGTERM (``cleanup_servers``).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
import yaml
from child_env import pythonpath

from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR, GiB, scenario

from awaiting import WITHIN
from ports import free_ports

pytestmark = pytest.mark.hub

ROOT = Path(__file__).resolve().parents[2]
CHP = ROOT / "tests" / "server" / "hub_proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
DEPLOY = ROOT / "deploy" / "prometheus"
USERS = ("alice", "bob")


@dataclass(frozen=True)
class HubPorts:
    """This test's ports, free when it starts (tests/ports.py)."""

    proxy: int
    proxy_api: int
    hub: int
    prometheus: int
    squatted: int  # alice's metrics port, which the squatter holds first


def hub_ports() -> HubPorts:
    return HubPorts(*free_ports(5))


HELD = {"alice": (2, 5 * GiB), "bob": (2, 3 * GiB)}  # GPU and bytes each user's kernel holds
CULL_IDLE_AFTER = 20  # seconds; the idle-kernel alert (cut to 2 s idle) fires well before
LIE = 42_900_000_000  # what the squatter says GPU 2 holds
ALERT = "JupyterGpumemIdleKernelHoldsGpuMemory"

try:
    import jupyterhub  # noqa: F401

    HUB_MISSING = None
except ImportError:
    HUB_MISSING = "jupyterhub not installed (pip install -e '.[test]')"
if not CHP.exists():
    HUB_MISSING = HUB_MISSING or "configurable-http-proxy not installed (make hub-proxy)"
PROMETHEUS = subprocess.run(["sh", "-c", "command -v prometheus"], capture_output=True, text=True).stdout.strip()
if not PROMETHEUS:
    HUB_MISSING = HUB_MISSING or "prometheus not installed (make prometheus)"


def operators_config() -> str:
    """The ``jupyterhub_config.py`` docs/server.md gives operators to copy (its Python block
    after "The JupyterHub config an operator copies")."""
    text = (ROOT / "docs" / "server.md").read_text()
    after = text[text.index("**The JupyterHub config an operator copies**") :]
    return after[after.index("```python\n") + len("```python\n") : after.index("\n```\n")]


def hub_config(tmp: Path, admin_token: str, targets: Path, world: Path, ports: HubPorts) -> str:
    """jupyterhub_config.py: the operator's config from docs/server.md as it is, then what this
    test changes: the targets file's path, the proxy's URL, alice's listener on the squatted port,
    culling after 20 s, the fake world, ports, and an admin service for the test's own requests.
    Prometheus's token comes in GPUMEM_PROMETHEUS_TOKEN, as the docs say."""
    server_config = tmp / "jupyter-config"
    server_config.mkdir()
    (server_config / "jupyter_server_config.json").write_text(
        json.dumps(
            {
                "ServerApp": {
                    "allow_root": True,
                    "jpserver_extensions": {
                        "jupyter_gpumem": True,
                        "jupyterlab": False,
                        "notebook_shim": False,
                        "notebook": False,
                        "jupyter_lsp": False,
                        "jupyter_server_terminals": False,
                    },
                }
            }
        )
    )
    environment = {
        "PYTHONPATH": os.pathsep.join([str(DROPIN_DIR), str(ROOT)]),
        ENV_VAR: str(world),
        "JUPYTER_CONFIG_DIR": str(server_config),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
    }
    return (
        operators_config()
        + f"""
# --- what the test changes ---
from jupyterhub.spawner import SimpleLocalProcessSpawner

service = next(s for s in c.JupyterHub.services if s["name"] == "gpumem-targets")
command = list(service["command"])
command[command.index("--output") + 1] = {str(targets)!r}
command[command.index("--via-proxy") + 1] = "http://127.0.0.1:{ports.proxy}"
service["command"] = command + ["--interval", "1"]
service["environment"] = {{"PYTHONPATH": {str(ROOT)!r}}}

class ClaimingSpawner(SimpleLocalProcessSpawner):
    def get_env(self):
        env = super().get_env()
        if self.user.name == "alice":  # alice says she is bob, on bob's server
            env.update(JUPYTERHUB_USER="bob", JUPYTERHUB_SERVER_NAME="bobs")
        return env

def metrics_port(spawner):  # alice's listener, on the port the squatter holds
    if spawner.user.name == "alice":
        spawner.args = [*spawner.args, "--GpuMem.metrics_port={ports.squatted}", "--GpuMem.metrics_ip=127.0.0.1"]

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {ports.proxy}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {ports.hub}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports.proxy_api}"
c.ConfigurableHTTPProxy.command = [{str(CHP)!r}]
c.JupyterHub.db_url = "sqlite:///{tmp / "jupyterhub.sqlite"}"
c.JupyterHub.cookie_secret_file = {str(tmp / "cookie_secret")!r}
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.spawner_class = ClaimingSpawner
c.SimpleLocalProcessSpawner.home_dir_template = {str(tmp / "home" / "{username}")!r}
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
changed = ("--GpuMem.cull_idle_after",)
assert all(any(a.startswith(name + "=") for a in c.Spawner.args) for name in changed)
c.Spawner.args = [a for a in c.Spawner.args if a.split("=")[0] not in changed] + [
    "--GpuMem.poll_interval=0.5",
    "--GpuMem.idle_after=0",
    "--GpuMem.cull_idle_after={CULL_IDLE_AFTER}",
    "--GpuMem.cull_min_bytes=1073741824",
]
c.Spawner.pre_spawn_hook = metrics_port
c.Spawner.environment = {environment!r}
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.JupyterHub.services.append({{"name": "test-admin", "api_token": {admin_token!r}}})
c.JupyterHub.load_roles.append(
    {{"name": "test-admin", "scopes": ["admin:users", "admin:servers", "access:servers"], "services": ["test-admin"]}}
)
"""
    )


def prometheus_config(tmp: Path, targets: Path, token: str) -> Path:
    """The example scrape job and rules, scraping every second, the token in a file of the test's,
    the idle-kernel alert's 30 min idle and 1 min ``for`` cut to 2 s and 0 s; no DCGM exporter."""
    rules = yaml.safe_load((DEPLOY / "jupyter-gpumem.rules.yml").read_text())
    (alert,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == ALERT]
    assert "jupyter_gpumem_kernel_idle_seconds > 1800" in alert["expr"]
    alert["expr"] = alert["expr"].replace(
        "jupyter_gpumem_kernel_idle_seconds > 1800", "jupyter_gpumem_kernel_idle_seconds > 2"
    )
    alert["for"] = "0s"
    (tmp / "rules.yml").write_text(yaml.safe_dump(rules))
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(tmp / "rules.yml")]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "jupyterhub-singleuser"]
    config["scrape_configs"] = [job]
    job.update(scrape_interval="1s", scrape_timeout="1s")
    (tmp / "prometheus-token").write_text(token)
    job["authorization"]["credentials_file"] = str(tmp / "prometheus-token")
    (sd,) = job["file_sd_configs"]
    sd.update(files=[str(targets)], refresh_interval="1s")
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def http(url: str, token: str | None = None, method: str = "GET", body: dict | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"token {token}")
    with urllib.request.urlopen(request, timeout=15) as response:
        text = response.read().decode()
    return json.loads(text) if text else None


def wait_for(what: str, check, timeout: float, logs: list[Path], every: float = 0.5):
    """``check()``'s first truthy answer within ``timeout`` seconds, or a failure with the logs' ends."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            answer = check()
            if answer:
                return answer
            last = answer
        except (urllib.error.URLError, ConnectionError, OSError, KeyError, ValueError) as exc:
            last = exc
        time.sleep(every)
    tails = "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs if log.exists())
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})\n{tails}")


def stop_all(hub: subprocess.Popen | None, prometheus: subprocess.Popen | None) -> None:
    """SIGTERM the hub (it stops its servers, service and proxy) and Prometheus; then kill whatever
    of theirs is left, kernels included, so a failed test leaves no process behind."""
    leftovers = []
    for proc in (hub, prometheus):
        if proc is not None and proc.poll() is None:
            try:
                leftovers += psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                pass
            proc.send_signal(signal.SIGTERM)
    for proc in (hub, prometheus):
        if proc is not None:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    _, alive = psutil.wait_procs(leftovers, timeout=10)
    for child in alive:
        child.kill()
    psutil.wait_procs(alive, timeout=10)


class Squatter:
    """Made-up gauges on a port of 127.0.0.1, answering any path, counting the requests it gets:
    another user's process on alice's metrics port, started while her server is stopped."""

    def __init__(self, port: int) -> None:
        lie = (
            f'jupyter_gpumem_device_used_bytes{{index="2",uuid="GPU-made-up",name="A100"}} {LIE}\n'
            f'jupyter_gpumem_kernel_gpu_bytes{{kernel="k",index="2",uuid="GPU-made-up"}} {LIE}\n'
        ).encode()
        self.requests = 0
        squatter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                squatter.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(lie)))
                self.end_headers()
                self.wfile.write(lie)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def run_forever_in(ws_url: str, token: str) -> None:
    """Send an execute_request for a cell that sleeps ten minutes (the kernel stays busy), on
    jupyter_server's kernel websocket (JSON messages, protocol 5.3), and wait for the busy status."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    session, msg_id = uuid.uuid4().hex, uuid.uuid4().hex
    connection = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))
    header = {"msg_id": msg_id, "msg_type": "execute_request", "username": "bob", "session": session}
    header.update(date="2026-01-01T00:00:00.000000Z", version="5.3")
    content = {"code": "import time; time.sleep(600)", "silent": False, "store_history": True}
    content.update(user_expressions={}, allow_stdin=False, stop_on_error=True)
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    await connection.write_message(json.dumps(message))
    while True:
        reply = json.loads(await asyncio.wait_for(connection.read_message(), WITHIN))
        if reply.get("msg_type") == "status" and reply["content"].get("execution_state") == "busy":
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                break
    connection.close()


@pytest.mark.skipif(HUB_MISSING is not None, reason=HUB_MISSING or "")
def test_prometheus_finds_both_users_servers_through_the_hub_and_the_idle_holder_is_culled(tmp_path):
    admin_token, prometheus_token = secrets.token_hex(32), secrets.token_hex(32)
    ports = hub_ports()
    squatter = Squatter(ports.squatted)  # before alice's server starts
    targets, world_file = tmp_path / "targets.json", tmp_path / "world.json"
    world = scenario("three_gpus")
    world.save(world_file)
    (tmp_path / "jupyterhub_config.py").write_text(hub_config(tmp_path, admin_token, targets, world_file, ports))
    (tmp_path / "tsdb").mkdir()
    hub_log, prometheus_log = tmp_path / "hub.log", tmp_path / "prometheus.log"
    logs = [hub_log, prometheus_log]
    hub = prometheus = None
    try:
        hub = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(tmp_path / "jupyterhub_config.py")],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=pythonpath(), GPUMEM_PROMETHEUS_TOKEN=prometheus_token),
            stdout=hub_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        prometheus = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={prometheus_config(tmp_path, targets, prometheus_token)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{ports.prometheus}",
            ],
            stdout=prometheus_log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        api = f"http://127.0.0.1:{ports.hub}/hub/api/"
        proxy = f"http://127.0.0.1:{ports.proxy}/user/"

        def hub_api(path: str, method: str = "GET", body: dict | None = None):
            return http(api + path, admin_token, method, body)

        def query(expr: str) -> list:
            url = f"http://127.0.0.1:{ports.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            return http(url)["data"]["result"]

        wait_for("the hub answers", lambda: hub_api("") is not None, WITHIN, logs)
        hub_api("users", "POST", {"usernames": list(USERS)})
        for user in USERS:
            hub_api(f"users/{user}/server", "POST", {})
        for user in USERS:
            wait_for(
                f"{user}'s server ready", lambda u=user: hub_api(f"users/{u}")["servers"][""]["ready"], WITHIN, logs
            )

        kernels = {}
        for user, (gpu, held) in HELD.items():
            session = http(
                f"{proxy}{user}/api/sessions",
                admin_token,
                "POST",
                {"path": f"{user}.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}},
            )
            kernel_id = session["kernel"]["id"]

            def pid_of(u=user, k=kernel_id):
                rows = http(f"{proxy}{u}/jupyter-gpumem/api/kernels", admin_token)["kernels"]
                return next((r["pid"] for r in rows if r["kernel_id"] == k and r["pid"]), None)

            kernels[user] = (kernel_id, wait_for(f"{user}'s kernel pid", pid_of, WITHIN, logs))
            world.add_process(gpu, kernels[user][1], held)  # the drop-in reads the file again
        world.save(world_file)
        ws = f"ws://127.0.0.1:{ports.proxy}/user/bob/api/kernels/{kernels['bob'][0]}/channels"
        asyncio.run(run_forever_in(ws, admin_token))  # bob's kernel is busy: never idle, never culled

        # The discovery service's file: one target per server, labelled by the hub.
        written = wait_for(
            "two targets written",
            lambda: len(json.loads(targets.read_text())) == 2 and json.loads(targets.read_text()),
            WITHIN,
            logs,
        )
        assert sorted((g["labels"]["hub_user"], g["targets"], g["labels"]["__metrics_path__"]) for g in written) == [
            ("alice", [f"127.0.0.1:{ports.proxy}"], "/user/alice/jupyter-gpumem/metrics"),
            ("bob", [f"127.0.0.1:{ports.proxy}"], "/user/bob/jupyter-gpumem/metrics"),
        ]

        # Both targets up in Prometheus, each kernel's bytes under the hub's user.
        def held_per_user():
            rows = query("jupyter_gpumem_kernel_gpu_bytes")
            return len(rows) == 2 and {r["metric"]["hub_user"]: r for r in rows}

        held = wait_for("both kernels' bytes in Prometheus", held_per_user, WITHIN, logs)
        ups = query('up{job="jupyterhub-singleuser"}')
        assert sorted((u["metric"]["hub_user"], u["metric"]["instance"], u["value"][1]) for u in ups) == [
            ("alice", f"127.0.0.1:{ports.proxy}", "1"),
            ("bob", f"127.0.0.1:{ports.proxy}", "1"),
        ]
        for user, (gpu, size) in HELD.items():
            metric = held[user]["metric"]
            assert float(held[user]["value"][1]) == size and metric["index"] == str(gpu)
        # alice's claim to be bob changed nothing: bob's kernel bytes are his kernel's only.
        bobs_bytes = {float(r["value"][1]) for r in query('jupyter_gpumem_kernel_gpu_bytes{hub_user="bob"}')}
        assert bobs_bytes == {HELD["bob"][1]}
        assert not query('{server_name="bobs"}') and not query('{user!=""}')

        # The squatter on alice's metrics port: her server says so, and nobody scraped it.
        status = http(f"{proxy}alice/jupyter-gpumem/api/config", admin_token)["metrics_listener"]
        assert status["state"] == "failed" and "taken by another process" in status["reason"]
        assert "the metrics listener (GpuMem.metrics_ip, metrics_port) did not start" in hub_log.read_text()
        assert squatter.requests == 0 and not query(f"jupyter_gpumem_device_used_bytes == {LIE}")

        # Prometheus's token reaches the gauges and nothing else: not a server's API, not the hub's.
        for url in (f"{proxy}alice/api/kernels", f"{proxy}bob/jupyter-gpumem/api/devices", api + "users"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                http(url, prometheus_token)
            assert refused.value.code == 403, url
        with pytest.raises(urllib.error.HTTPError) as refused:  # and the gauges want it
            http(f"{proxy}alice/jupyter-gpumem/metrics", admin_token)
        assert refused.value.code == 403

        # The idle-holder alert fires for alice alone (bob's kernel is busy). Asked over the last
        # 10 minutes: alice's kernel is culled CULL_IDLE_AFTER seconds after it went idle, and the
        # alert ends with it, which can come before this line on a loaded machine.
        firing = wait_for(
            "the idle-holder alert",
            lambda: query(f'max_over_time(ALERTS{{alertname="{ALERT}",alertstate="firing"}}[10m])'),
            WITHIN,
            logs,
        )
        assert [a["metric"]["hub_user"] for a in firing] == ["alice"]

        # Culling: alice's idle kernel holding 5 GiB is shut down; bob's busy one is untouched.
        wait_for("alice's kernel culled", lambda: http(f"{proxy}alice/api/kernels", admin_token) == [], WITHIN, logs)
        (bobs,) = http(f"{proxy}bob/api/kernels", admin_token)
        assert bobs["id"] == kernels["bob"][0] and bobs["execution_state"] == "busy"

        def culled_per_user():
            culled = {r["metric"]["hub_user"]: r["value"][1] for r in query("jupyter_gpumem_culled_kernels_total")}
            return culled.get("alice") == "1" and culled

        assert wait_for("the cull counted", culled_per_user, WITHIN, logs) == {"alice": "1", "bob": "0"}
    finally:
        stop_all(hub, prometheus)
        squatter.stop()
