"""The server extension's REST endpoints and /metrics, against a fake NVML world."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from jupyter_gpumem.server import readings as sources_module
from jupyter_gpumem.server import service as service_module
from jupyter_gpumem.server.metrics import kernel_key
from jupyter_gpumem.server.readings import ProcessFacts
from jupyter_gpumem.testing import fake_nvml
from jupyter_gpumem.testing.demo_trace import write_demo_trace

from awaiting import WITHIN, ready, until, waking
from doubles import extension_paths, fetch_route, route_method

GiB = 1024**3
EXT = {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}}


@pytest.fixture
def gpumem_config():
    return {}


def replay_file(kind, tmp_path):
    """Trace files for replay tests, named in the GpuMem config as demo / missing / broken."""
    path = tmp_path / f"{kind}.jsonl"
    if kind == "demo":
        write_demo_trace(str(path))
    elif kind == "broken":
        path.write_text('{"kind": "header", "format": 1, "synthetic": true}\n{"kind": "sample", "t": "soon"}\n')
    return str(path)


@pytest.fixture
def serverapp_config():
    return {}


@pytest.fixture
def jp_server_config(gpumem_config, serverapp_config, tmp_path):
    config = dict(gpumem_config)
    if "replay" in config:
        config["replay"] = replay_file(config["replay"], tmp_path)
    if config.get("metrics_port") == "free":
        config["metrics_port"] = free_port()
    return {"ServerApp": {**EXT["ServerApp"], **serverapp_config}, "GpuMem": config}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scenario():
    return "three_gpus"


@pytest.fixture
def world(scenario):
    with fake_nvml(scenario) as w:
        yield w


@pytest.fixture
def service(jp_serverapp):
    return jp_serverapp.web_app.settings["jupyter_gpumem"]


async def get_json(jp_fetch, *parts, **params):
    response = await jp_fetch("jupyter-gpumem", "api", *parts, params=params)
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def start_session(jp_fetch, path):
    response = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": path, "type": "notebook", "name": "", "kernel": {"name": "python3"}}),
    )
    return json.loads(response.body)["kernel"]["id"]


async def kernel_pid(jp_fetch, kernel_id):
    kernels = (await get_json(jp_fetch, "kernels"))["kernels"]
    return next(k["pid"] for k in kernels if k["kernel_id"] == kernel_id)


# --- /devices ----------------------------------------------------------------------------------


async def test_devices_reports_every_fake_gpu_with_its_memory(jp_fetch, world):
    body = await get_json(jp_fetch, "devices")
    assert (body["state"], body["source"], body["synthetic"], body["reason"]) == (
        "ok",
        "nvml",
        True,
        None,
    )  # the fake world
    assert [d["index"] for d in body["devices"]] == [0, 1, 2]
    gpu0 = body["devices"][0]
    assert gpu0["total"] == world.gpu(0).total_bytes
    assert gpu0["used"] == world.gpu(0).used_bytes
    assert sorted((p["pid"], p["used"], p["kind"]) for p in gpu0["processes"]) == [
        (4_200_101, 30 * GiB, "other"),
        (4_200_102, 2 * GiB, "other"),
    ]
    assert gpu0["other_bytes"] == 32 * GiB and gpu0["kernels_bytes"] == 0


@pytest.mark.parametrize("scenario", ["no_driver"])
async def test_devices_without_driver_is_a_calm_state(jp_fetch, world):
    body = await get_json(jp_fetch, "devices")
    assert body["state"] == "no_driver"
    assert body["reason"] and body["devices"] == []


@pytest.mark.parametrize("scenario", ["lost_gpu"])
async def test_lost_gpu_is_unreadable_with_a_reason(jp_fetch, world):
    body = await get_json(jp_fetch, "devices")
    lost = body["devices"][1]
    assert (lost["readable"], lost["used"]) == (False, None)
    assert lost["reason"]
    assert body["devices"][0]["readable"] is True


@pytest.mark.parametrize("scenario", ["mig"])
async def test_processes_nvml_cannot_match_to_memory_are_reported_not_visible(jp_fetch, world):
    body = await get_json(jp_fetch, "devices")
    gpu0 = body["devices"][0]
    assert gpu0["pids_visible"] is False
    assert "MIG mode" in gpu0["pids_reason"]


@pytest.mark.parametrize("scenario", ["containerized"])
async def test_host_pids_are_not_counted_as_other_processes_while_a_kernel_is_unmatched(jp_fetch, jp_root_dir, world):
    # NVML lists the host's pids inside a container (NVIDIA/nvidia-docker#1483); the kernel's own
    # pid is one of this namespace, and none of the listed pids is.
    await start_session(jp_fetch, "a.ipynb")
    body = await get_json(jp_fetch, "devices", notebook="a.ipynb")
    gpu0 = body["devices"][0]
    assert (gpu0["pids_visible"], gpu0["host_pid_bytes"], gpu0["other_bytes"], gpu0["kernels_bytes"]) == (
        False,
        30 * GiB,
        0,
        0,
    )
    assert [p["kind"] for p in gpu0["processes"]] == ["host_pid"]


async def test_kernel_pid_is_joined_to_its_kernel_and_notebook(jp_fetch, jp_root_dir, world):
    (jp_root_dir / "nb").mkdir()
    kernel_id = await start_session(jp_fetch, "nb/a.ipynb")
    pid = await kernel_pid(jp_fetch, kernel_id)
    world.add_process(2, pid, 29 * GiB)  # GPU 2 is idle in this world

    body = await get_json(jp_fetch, "devices", notebook="nb/a.ipynb")

    gpu2 = body["devices"][2]
    (proc,) = [p for p in gpu2["processes"] if p["pid"] == pid]
    assert proc["kind"] == "kernel"
    assert (proc["kernel_id"], proc["kernel_name"], proc["notebook_path"]) == (kernel_id, "python3", "nb/a.ipynb")
    assert proc["preallocated"] is True  # 29 of 40 GiB is above 70% of the card
    assert proc["name"] and proc["user"]  # the server's own user: details shown
    assert (gpu2["this_kernel_bytes"], gpu2["kernels_bytes"]) == (29 * GiB, 29 * GiB)


async def test_kernel_last_activity_is_jupyter_servers_own(jp_fetch, jp_serverapp, world):
    """The same instant jupyter_server's /api/kernels reports (kernel_model, jupyter_server 2.21.1)."""
    kernel_id = await start_session(jp_fetch, "c.ipynb")
    pid = await kernel_pid(jp_fetch, kernel_id)
    world.add_process(1, pid, 2 * GiB)
    theirs = json.loads((await jp_fetch("api", "kernels", kernel_id)).body)["last_activity"]
    (mine,) = [k for k in (await get_json(jp_fetch, "kernels"))["kernels"] if k["kernel_id"] == kernel_id]
    gpu1 = (await get_json(jp_fetch, "devices"))["devices"][1]
    (proc,) = [p for p in gpu1["processes"] if p["pid"] == pid]
    latest = jp_serverapp.kernel_manager.get_kernel(kernel_id).last_activity
    assert theirs.endswith("Z") and mine["last_activity"].endswith("Z") and proc["last_activity"].endswith("Z")
    seen = [
        datetime.fromisoformat(s.replace("Z", "+00:00")) for s in (theirs, mine["last_activity"], proc["last_activity"])
    ]
    # All read the kernel's one attribute; it may move on (iopub) between the requests.
    assert seen == sorted(seen) and seen[-1] <= latest <= datetime.now(timezone.utc)


@pytest.fixture
def wrapped_kernel(jp_kernel_dir):
    """A kernel spec that starts ipykernel through a bash wrapper, as site launchers do: the
    process the provisioner started is bash, and the kernel is its child. The ``; exit $?``
    keeps bash from replacing itself with the kernel (bash execs only a lone last command)."""
    spec = Path(jp_kernel_dir) / "wrapped"
    spec.mkdir(parents=True, exist_ok=True)
    script = f'"{sys.executable}" -m ipykernel_launcher -f "$0"; exit $?'
    argv = ["bash", "-c", script, "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "wrapped", "language": "python"}))
    return "wrapped"


@pytest.mark.parametrize("gpumem_config", [{"kernel_pid_timeout": 30}])  # a loaded machine starts kernels slowly
async def test_kernel_pid_comes_from_the_kernels_usage_reply(jp_fetch, jp_serverapp, service, world, wrapped_kernel):
    """ipykernel answers a control-channel ``usage_request`` with its own ``os.getpid()``
    (ipykernel/kernelbase.py, ``usage_request``, 6.10 onwards), not the wrapper's."""
    response = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": "w.ipynb", "type": "notebook", "name": "", "kernel": {"name": wrapped_kernel}}),
    )
    kernel_id = json.loads(response.body)["kernel"]["id"]
    km = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    wrapper = km.provisioner.process.pid
    # Nothing has asked the kernel yet; the server asks once it is up (a request sent to an
    # ipykernel 7 still starting may never be read), beside a client that wakes a request the
    # kernel has not noticed (awaiting.py).
    await ready(km, WITHIN)

    async def reported():
        await service.kernels()  # asks the kernel, or asks again ASK_AGAIN_AFTER after no answer
        await service.kernels_dir.wait_for_pids()
        pid = await kernel_pid(jp_fetch, kernel_id)
        return pid if pid != wrapper else None

    async with waking(km):
        pid = await until(reported, "the pid the kernel reports", every=1)
    kernel = psutil.Process(pid)
    assert pid != wrapper and kernel.ppid() == wrapper
    assert "ipykernel_launcher" in " ".join(kernel.cmdline())


async def test_other_users_command_lines_are_hidden_and_their_users_shown(jp_fetch, world, monkeypatch):
    other = ProcessFacts(exists=True, uid=os.getuid() + 1, user="bob", cmdline="python train.py")
    monkeypatch.setattr(sources_module, "process_facts", lambda pid: other)
    monkeypatch.setattr(service_module, "process_facts", lambda pid: other)
    body = await get_json(jp_fetch, "devices")
    procs = body["devices"][0]["processes"]
    assert procs and all((p["name"], p["user"], p["name_hidden"]) == (None, "bob", True) for p in procs)


@pytest.mark.parametrize("gpumem_config", [{"show_other_users": True}])
async def test_other_users_process_details_shown_when_configured(jp_fetch, world, monkeypatch):
    other = ProcessFacts(exists=True, uid=os.getuid() + 1, user="bob", cmdline="python train.py")
    monkeypatch.setattr(sources_module, "process_facts", lambda pid: other)
    monkeypatch.setattr(service_module, "process_facts", lambda pid: other)
    body = await get_json(jp_fetch, "devices")
    assert {(p["name"], p["user"]) for p in body["devices"][0]["processes"]} == {("python train.py", "bob")}


# --- bad input, errors, authentication ---------------------------------------------------------


@pytest.mark.parametrize(
    "params, needle",
    [
        ({"notebok": "a.ipynb"}, "valid parameters: notebook"),
        ({"notebook": ""}, "relative to the server root"),
        ({"notebook": "/etc/a.ipynb"}, "relative to the server root"),
        ({"notebook": "../a.ipynb"}, "no '..'"),
    ],
)
async def test_bad_devices_parameter_is_400_naming_valid_values(jp_fetch, world, params, needle):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "devices", params=params)
    assert err.value.code == 400
    assert needle in json.loads(err.value.response.body)["error"]


async def test_parameter_on_kernels_route_is_400(jp_fetch):
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "kernels", params={"x": "1"})
    assert err.value.code == 400
    assert "valid parameters: none" in json.loads(err.value.response.body)["error"]


async def test_jupyterlab_cache_buster_query_is_not_a_parameter(jp_fetch, world):
    # JupyterLab's ServerConnection.makeRequest appends "?<timestamp>" to GET URLs.
    response = await jp_fetch("jupyter-gpumem", "api", "devices", params={"1763812345123": ""})
    assert response.code == 200 and "devices" in json.loads(response.body)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "devices", params={"12": "3"})
    assert err.value.code == 400


async def test_failure_inside_an_endpoint_is_a_json_500_and_the_server_lives_on(jp_fetch, service, monkeypatch):
    async def broken(notebook=None):
        raise RuntimeError("boom")

    monkeypatch.setattr(service, "devices_answer", broken)
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("jupyter-gpumem", "api", "devices")
    assert err.value.code == 500
    assert "boom" in json.loads(err.value.response.body)["error"]
    assert (await get_json(jp_fetch, "config"))["poll_interval"] == 2.0


async def test_every_extension_route_is_403_without_a_token(jp_fetch, jp_serverapp, jp_base_url, world):
    paths = extension_paths(jp_serverapp.web_app) + extension_paths(jp_serverapp.web_app, websockets=True)
    assert len(paths) >= 3
    for path in paths:
        assert path.startswith(jp_base_url) and "(" not in path, path  # no path arguments
        method = "GET" if path.endswith("/ws") else route_method(jp_serverapp.web_app, path)
        with pytest.raises(HTTPClientError) as err:
            await fetch_route(jp_fetch, [path[len(jp_base_url) :]], method, headers={"Authorization": ""})
        assert err.value.code == 403, path


# --- config, kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.5, "show_other_users": True}])
async def test_config_reflects_the_traitlets(jp_fetch):
    body = await get_json(jp_fetch, "config")
    assert (body["poll_interval"], body["replay"], body["show_other_users"]) == (0.5, None, True)
    assert isinstance(body["version"], str) and body["source"] == "nvml"


async def test_kernels_is_empty_without_kernels(jp_fetch):
    assert await get_json(jp_fetch, "kernels") == {"kernels": []}


# --- the shared sampler under load -------------------------------------------------------------


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 60.0}])
async def test_concurrent_clients_share_one_nvml_read(jp_fetch, service, world):
    bodies = await asyncio.gather(*(get_json(jp_fetch, "devices") for _ in range(40)))
    assert {len(b["devices"]) for b in bodies} == {3}
    assert service.sampler.reads == 1
    assert world.total_calls() == service.sampler.nvml_calls


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.1, "idle_intervals": 2}])
async def test_sampler_stops_reading_when_nobody_asks(jp_fetch, service, world):
    await get_json(jp_fetch, "devices")
    await asyncio.wait_for(service.sampler._task, WITHIN)
    reads = service.sampler.reads
    assert not service.sampler.running
    assert reads <= 4  # one on request, then at most one per interval for two intervals


# --- /metrics ----------------------------------------------------------------------------------


async def test_metrics_exports_device_gauges_after_a_reading(jp_fetch, service, world):
    await get_json(jp_fetch, "devices")
    await asyncio.sleep(0)  # let the gauge update scheduled by the reading run
    await service.kernels()
    text = (await jp_fetch("metrics")).body.decode()
    uuid0 = world.gpu(0).uuid
    used = re.search(rf'jupyter_gpumem_device_used_bytes{{index="0",name="[^"]+",uuid="{uuid0}"}} (\S+)', text)
    total = re.search(rf'jupyter_gpumem_device_total_bytes{{index="0",name="[^"]+",uuid="{uuid0}"}} (\S+)', text)
    assert used and float(used.group(1)) == world.gpu(0).used_bytes
    assert total and float(total.group(1)) == world.gpu(0).total_bytes


# --- replay ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpumem_config", [{"replay": "demo"}])
async def test_replay_serves_the_trace_labelled_replay_and_synthetic(jp_fetch, world):
    body = await get_json(jp_fetch, "devices")
    assert (body["state"], body["source"], body["synthetic"]) == ("ok", "replay", True)
    assert [d["uuid"].split("-")[2] for d in body["devices"]] == ["demo", "demo"]
    assert world.total_calls() == 0  # a replay never touches NVML


@pytest.mark.parametrize("gpumem_config", [{"replay": "demo"}])
async def test_replay_placeholder_pid_is_joined_to_a_live_kernel(jp_fetch, world):
    kernel_id = await start_session(jp_fetch, "demo.ipynb")
    pid = await kernel_pid(jp_fetch, kernel_id)
    body = await get_json(jp_fetch, "devices", notebook="demo.ipynb")
    gpu0 = body["devices"][0]
    (proc,) = [p for p in gpu0["processes"] if p.get("replay_placeholder_pid") == 1]
    assert (proc["pid"], proc["kind"], proc["kernel_id"], proc["notebook_path"]) == (
        pid,
        "kernel",
        kernel_id,
        "demo.ipynb",
    )
    assert gpu0["this_kernel_bytes"] == proc["used"]
    # Only one kernel runs: the second placeholder stays an unmatched process.
    assert [p["kind"] for p in gpu0["processes"] if p.get("replay_placeholder_pid") is None] == ["other"]


@pytest.mark.parametrize("gpumem_config", [{"replay": "missing"}, {"replay": "broken"}])
async def test_unreadable_replay_is_an_error_state_not_a_failed_server(jp_fetch, gpumem_config):
    body = await get_json(jp_fetch, "devices")
    assert (body["state"], body["source"], body["devices"]) == ("error", "replay", [])
    assert "cannot replay" in body["reason"]
    assert (await get_json(jp_fetch, "config"))["source"] == "replay"


def _gpumem_threads() -> set:
    return {t for t in threading.enumerate() if t.name.startswith("jupyter-gpumem")}


async def test_unloading_the_extension_leaves_no_thread_behind(jp_fetch, jp_serverapp, world):
    from jupyter_gpumem import server as extension

    extension._unload_jupyter_server_extension(jp_serverapp)  # the one loaded at server start
    before = _gpumem_threads()
    extension._load_jupyter_server_extension(jp_serverapp)
    await get_json(jp_fetch, "devices")
    assert len(_gpumem_threads()) > len(before), "a request starts the NVML reader thread"
    extension._unload_jupyter_server_extension(jp_serverapp)
    assert _gpumem_threads() == before


# --- /metrics with no panel open, and answers that did not change ------------------------------


async def scrape(jp_fetch) -> str:
    return (await jp_fetch("metrics")).body.decode()


def sample(text: str, name: str, labels: dict) -> list[float]:
    """Values of ``name`` whose labels include ``labels``, read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    ]


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.2}])
async def test_a_scrape_alone_starts_the_reader_and_the_next_scrape_has_readings(jp_fetch, service, world):
    """jupyter_server 2.21.1's PrometheusMetricsHandler.get calls generate_latest on the IOLoop
    thread: the collector's touch there starts the reader although no /devices request came."""
    assert service.sampler.reads == 0
    await scrape(jp_fetch)

    async def with_readings():
        text = await scrape(jp_fetch)
        return text if "jupyter_gpumem_device_used_bytes{" in text else None

    text = await until(with_readings, "a scrape with GPU series", every=0.1)
    assert service.sampler.reads >= 1 and service.sampler.running
    assert f'uuid="{world.gpu(0).uuid}"' in text and 'jupyter_gpumem_nvml_up{state="ok"} 1.0' in text
    assert "jupyter_gpumem_readings_synthetic 1.0" in text  # the fake world


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.2, "idle_after": 0}])
async def test_a_kernel_on_a_gpu_is_exported_and_its_series_go_when_it_shuts_down(
    jp_fetch, service, world, monkeypatch
):
    monkeypatch.setenv("JUPYTERHUB_USER", "mallory")  # the server's own environment names nobody
    started = time.time()
    kernel_id = await start_session(jp_fetch, "m.ipynb")
    pid = await kernel_pid(jp_fetch, kernel_id)
    world.add_process(2, pid, 29 * GiB)

    async def scrape_until(found: bool) -> str:
        async def scraped():
            text = await scrape(jp_fetch)
            return text if (f'kernel_id="{kernel_id}"' in text) == found else None

        return await until(scraped, "the kernel's series " + ("there" if found else "gone"), every=0.1)

    text = await scrape_until(True)
    mine = dict(
        kernel=kernel_key(kernel_id), kernel_id=kernel_id, notebook_path="m.ipynb", index="2", uuid=world.gpu(2).uuid
    )
    assert "mallory" not in text and "user=" not in text
    assert sample(text, "jupyter_gpumem_kernel_gpu_bytes", mine) == [29 * GiB]
    (idle,) = sample(text, "jupyter_gpumem_kernel_idle_seconds", mine)
    assert 0 <= idle <= time.time() - started  # since an activity of this test's kernel
    assert sum(sample(text, "jupyter_gpumem_kernel_execution_state", mine)) == 1.0  # one state at a time
    assert sample(text, "jupyter_gpumem_kernel_preallocated", mine) == [1.0]  # 29 of 40 GiB
    await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    world.remove_process(2, pid)
    text = await scrape_until(False)
    assert "jupyter_gpumem_device_used_bytes{" in text


async def kernel_series(read, kernel_id: str) -> str:
    """The first exposition ``read()`` gives that has the kernel's series (by its ``kernel`` key)."""

    async def with_series():
        text = await read()
        return text if f'kernel="{kernel_key(kernel_id)}"' in text else None

    return await until(with_series, "the kernel's series", every=0.1)


@pytest.mark.parametrize("serverapp_config", [{"authenticate_prometheus": False}])
@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.2, "idle_after": 0}])
async def test_without_prometheus_authentication_metrics_carry_no_kernel_id_or_notebook_path(jp_fetch, service, world):
    kernel_id = await start_session(jp_fetch, "private/plan.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 29 * GiB)

    async def anonymous_scrape() -> str:
        return (await jp_fetch("metrics", headers={"Authorization": ""})).body.decode()

    text = await kernel_series(anonymous_scrape, kernel_id)
    assert sample(text, "jupyter_gpumem_kernel_gpu_bytes", {"kernel": kernel_key(kernel_id), "index": "2"}) == [
        29 * GiB
    ]
    assert kernel_id not in text and "plan.ipynb" not in text
    assert "kernel_id=" not in text and "notebook_path=" not in text


def test_the_metrics_listener_is_off_by_default(service):
    assert service.config.metrics_port == 0 and service.metrics_listener is None


async def listener_get(service, path: str, method: str = "GET"):
    from tornado.httpclient import AsyncHTTPClient

    url = f"http://127.0.0.1:{service.metrics_listener.port}{path}"
    return await AsyncHTTPClient().fetch(url, method=method, raise_error=False, body=b"" if method == "POST" else None)


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.2, "idle_after": 0, "metrics_port": "free"}])
async def test_the_metrics_listener_serves_the_gauges_without_a_token_and_without_kernel_names(
    jp_fetch, service, world
):
    kernel_id = await start_session(jp_fetch, "private/plan.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 29 * GiB)

    async def listener_scrape() -> str:
        return (await listener_get(service, "/metrics")).body.decode()

    text = await kernel_series(listener_scrape, kernel_id)
    assert sample(text, "jupyter_gpumem_kernel_gpu_bytes", {"kernel": kernel_key(kernel_id), "index": "2"}) == [
        29 * GiB
    ]
    assert kernel_id not in text and "plan.ipynb" not in text
    assert all(
        line.startswith(("# HELP jupyter_gpumem_", "# TYPE jupyter_gpumem_", "jupyter_gpumem_"))
        for line in text.splitlines()
        if line
    )  # only this extension's gauges


@pytest.mark.parametrize("gpumem_config", [{"metrics_port": "free"}])
async def test_the_metrics_listener_counts_culled_kernels_as_metrics_does(jp_fetch, service, world):
    """Prometheus scrapes the listener alone (deploy/prometheus/prometheus.yml): the culls must be there."""
    from jupyter_gpumem.server.metrics import count_culled_kernel

    def culled(text: str) -> float:
        (line,) = [l for l in text.splitlines() if l.startswith("jupyter_gpumem_culled_kernels_total ")]
        return float(line.split()[1])

    before = culled((await listener_get(service, "/metrics")).body.decode())
    count_culled_kernel()
    assert culled((await listener_get(service, "/metrics")).body.decode()) == before + 1


@pytest.mark.parametrize("gpumem_config", [{"metrics_port": "free"}])
async def test_the_metrics_listener_answers_nothing_but_get_metrics(jp_fetch, service, world):
    for path in ("/", "/api/kernels", "/api/status", "/jupyter-gpumem/api/devices", "/metrics/x", "/login"):
        assert (await listener_get(service, path)).code == 404, path
    assert (await listener_get(service, "/metrics", method="POST")).code == 405


@pytest.mark.parametrize(
    "gpumem_config", [{"poll_interval": 0.2, "idle_after": 0, "metrics_port": "free", "metrics_kernel_names": True}]
)
async def test_the_metrics_listener_names_kernels_where_the_operator_asks(jp_fetch, service, world):
    kernel_id = await start_session(jp_fetch, "shared.ipynb")
    world.add_process(2, await kernel_pid(jp_fetch, kernel_id), 29 * GiB)

    async def listener_scrape() -> str:
        return (await listener_get(service, "/metrics")).body.decode()

    text = await kernel_series(listener_scrape, kernel_id)
    assert sample(
        text, "jupyter_gpumem_kernel_gpu_bytes", {"kernel_id": kernel_id, "notebook_path": "shared.ipynb"}
    ) == [29 * GiB]


async def test_an_unchanged_answer_is_a_304_and_a_changed_one_a_200(jp_fetch, service, world):
    """tornado 6 ``check_etag_header`` compares If-None-Match weakly (W/ stripped)."""
    first = await jp_fetch("jupyter-gpumem", "api", "devices")
    etag = first.headers["Etag"]
    assert etag.startswith('W/"') and first.headers["Cache-Control"] == "no-cache, private"
    with pytest.raises(HTTPClientError) as not_modified:
        await jp_fetch("jupyter-gpumem", "api", "devices", headers={"If-None-Match": etag})
    assert not_modified.value.code == 304 and not not_modified.value.response.body
    assert (await get_json(jp_fetch, "config"))["devices_answers"] == {"full": 1, "not_modified": 1}
    world.set_used(0, world.gpu(0).used_bytes + GiB)
    service.sampler._latest_at = -1e9  # the cached reading is old: the next request reads again
    changed = await jp_fetch("jupyter-gpumem", "api", "devices", headers={"If-None-Match": etag})
    assert changed.code == 200 and changed.headers["Etag"] != etag
    assert json.loads(changed.body)["devices"][0]["used"] == world.gpu(0).used_bytes


# --- pushed answers: /devices/ws -----------------------------------------------------------------


@pytest.mark.parametrize("gpumem_config", [{"poll_interval": 0.1}])
async def test_a_socket_gets_the_answer_then_only_changed_values(jp_fetch, jp_ws_fetch, service, world):
    ws = await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws")
    first = json.loads(await asyncio.wait_for(ws.read_message(), WITHIN))
    assert first["devices"][0]["used"] == world.gpu(0).used_bytes and first["synthetic"] is True
    reads = service.sampler.reads
    following = asyncio.ensure_future(ws.read_message())
    # the open socket keeps the sampler reading; readings go on, the values stay: nothing is sent
    await until(lambda: service.sampler.reads >= reads + 3, "three more readings", every=0.02)
    assert service.sampler.running and not following.done()
    world.set_used(0, world.gpu(0).used_bytes + GiB)
    changed = json.loads(await asyncio.wait_for(following, WITHIN))
    assert changed["devices"][0]["used"] == world.gpu(0).used_bytes
    ws.close()
    await until(lambda: len(service.watchers) == 0, "the server letting the closed socket go")


async def test_a_socket_with_a_bad_notebook_is_closed_with_the_reason(jp_ws_fetch, world):
    ws = await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws", params={"notebook": "../x.ipynb"})
    assert await asyncio.wait_for(ws.read_message(), WITHIN) is None
    assert ws.close_code == 1008 and "normalised path" in ws.close_reason


async def test_a_close_reason_of_multibyte_characters_is_cut_to_123_bytes_and_still_1008(jp_ws_fetch, world):
    """100 emoji (400 bytes of UTF-8) in a parameter name: the reason is cut by bytes, not
    characters; tornado refuses a close frame over 125 bytes (tornado/websocket.py,
    WebSocketProtocol13._write_frame, "control frame payloads may not exceed 125 bytes", 6.5)."""
    ws = await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws", params={"\U0001f600" * 100: "1"})
    assert await asyncio.wait_for(ws.read_message(), WITHIN) is None
    assert ws.close_code == 1008
    assert ws.close_reason.startswith("unknown query parameter(s) \U0001f600")
    assert len(ws.close_reason.encode("utf-8")) <= 123


async def test_control_characters_in_a_parameter_name_are_escaped_in_the_reason_and_the_log(jp_ws_fetch, world, caplog):
    caplog.set_level("INFO", logger="jupyter_gpumem")
    name = "x\x1b[2J\r\nFix: run rm"
    ws = await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws", params={name: "1"})
    assert await asyncio.wait_for(ws.read_message(), WITHIN) is None
    assert ws.close_code == 1008
    assert "x\\x1b[2J\\r\\nFix: run rm" in ws.close_reason
    assert not any(c in ws.close_reason for c in "\x1b\r\n")
    logged = [r.getMessage() for r in caplog.records if "socket" in r.getMessage()]
    assert logged and not any(c in line for line in logged for c in "\x1b\r\n")


async def test_a_socket_without_a_token_is_refused(jp_ws_fetch, world):
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch("jupyter-gpumem", "api", "devices", "ws", headers={"Authorization": ""})
    assert err.value.code == 403
