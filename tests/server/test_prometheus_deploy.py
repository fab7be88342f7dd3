"""Whether deploy/'s Prometheus rules, scrape config and Grafana dashboard work with the real thing.

Debian's prometheus (2.42, with promtool) checks and unit-tests the rules, and a real Prometheus
scrapes a jupyter_server on the fake three-GPU world (the drop-in pynvml: synthetic readings)
the way the example scrape job says: on the server's metrics listener (``GpuMem.metrics_port``,
no Jupyter token anywhere in Prometheus's config), with the hub user and server name taken from
discovery's target labels, at a JupyterHub-style base URL, with a kernel holding fake GPU memory. Every dashboard query must then return data from it. No
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
import time
import urllib.error
import urllib.parse
import urllib.request
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
    assert "SUCCESS: 8 rules found" in result.stdout


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
        == {"JupyterGpumemIdleKernelHoldsGpuMemory", "JupyterGpumemGpuOvercommitted", "JupyterGpumemNvmlUnreadable"}
    )


def scrape_config(tmp: Path, metrics_port: int, interval: str = "1s") -> Path:
    """The example scrape config, pointed at a targets file in ``tmp`` naming the test server's
    metrics listener, as the hub discovery service writes it (tests/server/test_hub_end_to_end.py runs the service)."""
    config = yaml.safe_load(SCRAPE_EXAMPLE.read_text())
    config["global"] = {"scrape_interval": interval, "evaluation_interval": interval}
    config["rule_files"] = [str(RULES)]
    (job,) = config["scrape_configs"]
    job.update(scrape_interval=interval, scrape_timeout=interval)
    targets = [
        {
            "targets": [f"127.0.0.1:{metrics_port}"],
            "labels": {"hub_user": HUB_USER, "server_name": "gpu"},
        }
    ]
    (tmp / "targets.json").write_text(json.dumps(targets))
    job["file_sd_configs"] = [{"files": [str(tmp / "targets.json")], "refresh_interval": interval}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@needs_promtool
def test_the_example_scrape_config_is_valid(tmp_path):
    result = promtool("check", "config", str(scrape_config(tmp_path, free_ports(1)[0], interval="15s")))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_example_scrape_config_holds_no_credential():
    """Nothing in the job can authenticate to a Jupyter server (docs/server.md, "Many servers")."""
    (job,) = yaml.safe_load(SCRAPE_EXAMPLE.read_text())["scrape_configs"]
    assert not {"authorization", "basic_auth", "oauth2", "bearer_token", "bearer_token_file"} & set(job)
    assert job["honor_labels"] is False  # the targets file's hub_user and server_name win over the server's


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


def start_server(
    tmp: Path, world_file: Path, token: str, port: int, metrics_port: int
) -> tuple[subprocess.Popen, Path]:
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
        "GpuMem": {"poll_interval": 0.5, "idle_after": 0, "metrics_port": metrics_port, "metrics_ip": "127.0.0.1"},
    }
    (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        PYTHONPATH=pythonpath(DROPIN_DIR),
        JUPYTERHUB_USER=SERVER_ENV_USER,
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
    server_port, prometheus_port, metrics_port = free_ports(3)
    server, server_log = start_server(tmp_path, world_file, token, server_port, metrics_port)
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
                f"--config.file={scrape_config(tmp_path, metrics_port)}",
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

        wanted = dashboard_queries() + [
            f"{r['record']}" for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r
        ]
        empty = wanted
        deadline = time.monotonic() + WITHIN  # scrapes every second: data within seconds unless broken
        while empty and time.monotonic() < deadline:
            time.sleep(0.5)
            empty = [expr for expr in wanted if not query(expr)]
        assert not empty, f"no data for {empty}; targets: {api('api/v1/targets')['data']['activeTargets']}"

        (up,) = query('up{job="jupyterhub-singleuser"}')
        assert up["value"][1] == "1" and up["metric"]["instance"] == f"127.0.0.1:{metrics_port}"
        (held,) = query("jupyter_gpumem_kernel_gpu_bytes")
        assert float(held["value"][1]) == KERNEL_BYTES
        assert (held["metric"]["hub_user"], held["metric"]["server_name"], held["metric"]["index"]) == (
            HUB_USER,
            "gpu",
            str(KERNEL_GPU),
        )
        assert held["metric"]["kernel"] and not {"kernel_id", "notebook_path"} & set(held["metric"])
        assert kernel_id not in json.dumps(query('{job="jupyterhub-singleuser"}'))
        assert not query(f'{{hub_user="{SERVER_ENV_USER}"}}') and not query('{user!=""}')
        (synthetic,) = query("max(jupyter_gpumem_readings_synthetic)")
        assert synthetic["value"][1] == "1"  # the fake world says so
    finally:
        if prom is not None:
            stop(prom)
        stop(server)
