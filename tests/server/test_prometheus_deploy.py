"""Whether deploy/'s Prometheus rules, scrape config and Grafana dashboard work with the real thing.

Debian's prometheus (2.42, with promtool) checks and unit-tests the rules, and a real Prometheus
scrapes a jupyter_server on the fake three-GPU world (the drop-in pynvml: synthetic readings)
the way the example scrape job says: at the server's route (``jupyter-gpumem/metrics`` under a
JupyterHub-style base URL) with a bearer token that a stand-in hub's whoami says holds the
metrics scope, with the hub user and server name taken from discovery's target labels, and a
kernel holding fake GPU memory. Beside it, a stand-in DCGM exporter gives the node's reading of
GPU 2, and a lying target (eve's server, made up) claims GPU 2 nearly full. Every dashboard
query must return data; the GPU totals must be the node's, and the lie must be named. No
/devices request is made: the scrapes alone must start the server's NVML reader. ``make test``
installs prometheus when missing (Makefile target ``prometheus``); without it these tests skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml  # PyYAML: a dependency of jupyter_events, which jupyter_server requires
from child_env import pythonpath

from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR, GiB, scenario

from awaiting import WITHIN
from ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "jupyter-gpumem.rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "jupyter-gpumem.rules.test.yml"
SCRAPE_EXAMPLE = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "jupyter-gpumem.json"
HUB_USER = "alice"
SERVER_ENV_USER = "mallory"  # what the server's own environment claims: never a label
BASE_URL = f"/user/{HUB_USER}/"
KERNEL_GPU, KERNEL_BYTES = 2, 29 * GiB  # GPU 2 is idle in three_gpus
SCOPE = "custom:jupyter-gpumem:read-metrics"
LIAR, LIE_BYTES = "eve", 42_900_000_000  # a made-up server claiming GPU 2 nearly full
MiB = 1 << 20

PROMTOOL, PROMETHEUS = shutil.which("promtool"), shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (make test installs Debian's prometheus)"
)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="prometheus not installed (make test installs Debian's prometheus)"
)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def dashboard_queries() -> list[str]:
    """Every query of the dashboard, with its template variable at its "All" value."""
    board = json.loads(DASHBOARD.read_text())
    alls = {v["name"]: v.get("allValue", ".*") for v in board["templating"]["list"] if v["type"] == "query"}
    queries = []
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in alls.items():
                expr = expr.replace(f"${name}", value)
            queries.append(expr)
    return queries


@needs_promtool
def test_rules_pass_promtool_check():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 11 rules found" in result.stdout


@needs_promtool
def test_rule_unit_tests_pass_and_cover_every_alert():
    result = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    firing = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if not t["exp_alerts"]}
    assert (
        alerts
        == firing
        == quiet
        == {
            "JupyterGpumemIdleKernelHoldsGpuMemory",
            "JupyterGpumemGpuOvercommitted",
            "JupyterGpumemNvmlUnreadable",
            "JupyterGpumemClaimDisagreesWithNode",
        }
    )


def jobs(config: dict) -> dict[str, dict]:
    return {job["job_name"]: job for job in config["scrape_configs"]}


def scrape_config(tmp: Path, server_port: int, stand_ins: int, interval: str = "1s") -> Path:
    """The example scrape config: the server's route (and the lying target's) in a targets file as
    the hub discovery service writes it with --via-proxy (tests/server/test_hub_end_to_end.py runs the
    service against a real hub and proxy), the token in a file, and the DCGM job at the stand-in."""
    config = yaml.safe_load(SCRAPE_EXAMPLE.read_text())
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [str(RULES)]
    by_name = jobs(config)
    for job in by_name.values():
        job.update(scrape_interval=interval, scrape_timeout=interval)
    job = by_name["jupyterhub-singleuser"]
    (tmp / "token").write_text(PROMETHEUS_TOKEN)
    job["authorization"]["credentials_file"] = str(tmp / "token")
    targets = [
        {
            "targets": [f"127.0.0.1:{port}"],
            "labels": {
                "hub_user": user,
                "server_name": "gpu",
                "__metrics_path__": f"/user/{user}/jupyter-gpumem/metrics",
                "__scheme__": "http",
            },
        }
        for user, port in ((HUB_USER, server_port), (LIAR, stand_ins))
    ]
    (tmp / "targets.json").write_text(json.dumps(targets))
    job["file_sd_configs"] = [{"files": [str(tmp / "targets.json")], "refresh_interval": interval}]
    by_name["dcgm-exporter"]["static_configs"] = [{"targets": [f"127.0.0.1:{stand_ins}"]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


PROMETHEUS_TOKEN = secrets.token_hex(16)


@needs_promtool
def test_the_example_scrape_config_is_valid(tmp_path):
    result = promtool("check", "config", str(scrape_config(tmp_path, *free_ports(2), interval="15s")))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_example_scrape_job_holds_only_a_token_file_and_follows_no_redirect():
    """The token (the custom scope alone, docs/server.md) is read from a file, never written in the
    config; a route of a server that is not running is the hub's redirect, never followed."""
    job = jobs(yaml.safe_load(SCRAPE_EXAMPLE.read_text()))["jupyterhub-singleuser"]
    assert not {"basic_auth", "oauth2", "bearer_token", "bearer_token_file"} & set(job)
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/jupyterhub-gpumem-token"}
    assert job["follow_redirects"] is False
    assert job["honor_labels"] is False  # the targets file's hub_user and server_name win over the server's


class StandIns:
    """On one port: the hub's whoami (``/hub/api/user``: the Prometheus token holds the scope), a
    DCGM exporter (``/metrics``: GPU 2 as the node reads it) and eve's made-up server
    (``/user/eve/jupyter-gpumem/metrics``: GPU 2 nearly full, two preallocated kernels)."""

    def __init__(self, uuid: str, node_used: int, total: int) -> None:
        dcgm = "".join(
            f'DCGM_FI_DEV_FB_{field}{{gpu="2",UUID="{uuid}",device="nvidia2",modelName="NVIDIA A100-SXM4-40GB"}} '
            f"{value // MiB}\n"
            for field, value in (("USED", node_used), ("FREE", total - node_used))
        )
        device = f'index="2",uuid="{uuid}",name="NVIDIA A100-SXM4-40GB"'
        lie = f"jupyter_gpumem_device_used_bytes{{{device}}} {LIE_BYTES}\n"
        lie += f"jupyter_gpumem_device_total_bytes{{{device}}} {total}\n"
        for kernel in ("m1", "m2"):
            lie += f'jupyter_gpumem_kernel_gpu_bytes{{kernel="{kernel}",index="2",uuid="{uuid}"}} {20 * GiB}\n'
            lie += f'jupyter_gpumem_kernel_preallocated{{kernel="{kernel}",index="2",uuid="{uuid}"}} 1\n'
        pages = {
            "/hub/api/user": ("application/json", json.dumps({"kind": "service", "scopes": [SCOPE]})),
            "/metrics": ("text/plain; version=0.0.4", dcgm),
            f"/user/{LIAR}/jupyter-gpumem/metrics": ("text/plain; version=0.0.4", lie),
        }

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                kind, body = pages.get(self.path, ("text/plain", "not here"))
                if self.path == "/hub/api/user" and self.headers.get("Authorization") != f"token {PROMETHEUS_TOKEN}":
                    kind, body = "application/json", "{}"
                data = body.encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server.server_port

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Http:
    def __init__(self, base: str, token: str | None = None):
        self.base, self.token = base, token

    def __call__(self, path: str, method: str = "GET", body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if self.token:
            request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return json.loads(text) if text else {}

    def wait(self, path: str, timeout: float, proc: subprocess.Popen, log: Path) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{path}: the process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                self(path)
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        raise AssertionError(f"{path} did not answer within {timeout:g} s:\n{log.read_text()[-3000:]}")


def start_server(tmp: Path, world_file: Path, token: str, port: int, hub_port: int) -> tuple[subprocess.Popen, Path]:
    (tmp / "config").mkdir()
    (tmp / "root").mkdir()
    config = {
        "ServerApp": {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,
            "open_browser": False,
            "allow_root": True,
            "root_dir": str(tmp / "root"),
            "base_url": BASE_URL,
            "jpserver_extensions": {
                "jupyter_gpumem": True,
                "jupyterlab": False,
                "notebook_shim": False,
                "jupyter_lsp": False,
                "jupyter_server_terminals": False,
            },
        },
        "IdentityProvider": {"token": token},
        "GpuMem": {"poll_interval": 0.5, "idle_after": 0},
    }
    (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        PYTHONPATH=pythonpath(DROPIN_DIR),
        JUPYTERHUB_USER=SERVER_ENV_USER,
        JUPYTERHUB_API_URL=f"http://127.0.0.1:{hub_port}/hub/api",
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
    )
    env[ENV_VAR] = str(world_file)
    log = tmp / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server"], env=env, cwd=tmp, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    return proc, log


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@needs_prometheus
def test_a_real_prometheus_scrapes_a_server_and_every_dashboard_query_has_data(tmp_path):
    token = secrets.token_hex(16)
    world, world_file = scenario("three_gpus"), tmp_path / "world.json"
    world.save(world_file)
    gpu = world.gpus[KERNEL_GPU]
    stand_ins = StandIns(gpu.uuid, node_used=KERNEL_BYTES + 512 * MiB, total=gpu.total_bytes)
    server_port, prometheus_port = free_ports(2)
    server, server_log = start_server(tmp_path, world_file, token, server_port, stand_ins.port)
    prom = None
    try:
        jupyter = Http(f"http://127.0.0.1:{server_port}{BASE_URL}", token)
        jupyter.wait("api/status", WITHIN, server, server_log)
        session = jupyter(
            "api/sessions",
            "POST",
            {"path": "idle.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}},
        )
        kernel_id = session["kernel"]["id"]
        (kernel,) = jupyter("jupyter-gpumem/api/kernels")["kernels"]
        world.add_process(KERNEL_GPU, kernel["pid"], KERNEL_BYTES)  # the drop-in re-reads the file
        world.save(world_file)

        (tmp_path / "tsdb").mkdir()
        prom_log = tmp_path / "prometheus.log"
        prom = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={scrape_config(tmp_path, server_port, stand_ins.port)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
            ],
            stdout=prom_log.open("w"),
            stderr=subprocess.STDOUT,
        )
        api = Http(f"http://127.0.0.1:{prometheus_port}/")
        api.wait("api/v1/status/buildinfo", WITHIN, prom, prom_log)

        def query(expr: str) -> list:
            return api("api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]

        lie_named = 'ALERTS{alertname="JupyterGpumemClaimDisagreesWithNode"}'
        wanted = [
            *dashboard_queries(),
            *(r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r),
            lie_named,
        ]
        empty = wanted
        deadline = time.monotonic() + WITHIN  # scrapes every second: data within seconds unless broken
        while empty and time.monotonic() < deadline:
            time.sleep(0.5)
            empty = [expr for expr in wanted if not query(expr)]
        assert not empty, f"no data for {empty}; targets: {api('api/v1/targets')['data']['activeTargets']}"

        ups = query('up{job="jupyterhub-singleuser"}')
        assert sorted((u["metric"]["hub_user"], u["value"][1]) for u in ups) == [(HUB_USER, "1"), (LIAR, "1")]
        (held,) = query(f'jupyter_gpumem_kernel_gpu_bytes{{hub_user="{HUB_USER}"}}')
        assert float(held["value"][1]) == KERNEL_BYTES
        assert (held["metric"]["hub_user"], held["metric"]["server_name"], held["metric"]["index"]) == (
            HUB_USER,
            "gpu",
            str(KERNEL_GPU),
        )
        assert held["metric"]["kernel"] and not {"kernel_id", "notebook_path"} & set(held["metric"])
        assert kernel_id not in json.dumps(query('{job="jupyterhub-singleuser"}'))
        assert not query(f'{{hub_user="{SERVER_ENV_USER}"}}') and not query('{user!=""}')
        (synthetic,) = query(f'max(jupyter_gpumem_readings_synthetic{{hub_user="{HUB_USER}"}})')
        assert synthetic["value"][1] == "1"  # the fake world says so

        # GPU 2's totals are the node's, not eve's 42.9 GB; her claim is named, alice's is not,
        # and her two "preallocated" kernels over-commit nothing.
        (used,) = query(f'jupyter_gpumem:gpu_used_bytes:max{{uuid="{gpu.uuid}"}}')
        assert (used["metric"]["source"], float(used["value"][1])) == ("node", KERNEL_BYTES + 512 * MiB)
        assert {a["metric"]["hub_user"] for a in query(lie_named)} == {LIAR}
        assert not query('ALERTS{alertname="JupyterGpumemGpuOvercommitted"}')
    finally:
        if prom is not None:
            stop(prom)
        stop(server)
        stand_ins.stop()
