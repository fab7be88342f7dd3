"""Load on the server extension: N clients polling /jupyter-gpumem/api/devices.

A jupyter_server runs in a subprocess on 127.0.0.1 only, reading the fake NVML world
``three_gpus`` (synthetic) through the pynvml drop-in. For each level of concurrency (1, 10, 50,
100 clients) every client polls /devices once per ``client_period`` seconds for ``duration``
seconds. Reported per level: p50 and p99 latency, requests per second, the server's CPU and
RSS, and NVML calls per second (read from the sampler's counter on /config), which must stay
flat as clients are added.

    python bench/bench_server_load.py            # 10 s per level
    python bench/bench_server_load.py --long     # 60 s per level
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

ROOT = Path(__file__).resolve().parent.parent
DROPIN = ROOT / "jupyter_gpumem" / "testing" / "pynvml_dropin"
LEVELS = (1, 10, 50, 100)
POLL_INTERVAL = 2.0
CLIENT_PERIOD = 1.0  # each client asks twice per server poll interval: more than a panel does
STARTUP_TIMEOUT = 60.0
MAX_DURATION = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_config(path: Path, port: int, token: str, root: Path) -> None:
    config = {
        "ServerApp": {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,
            "open_browser": False,
            "allow_root": True,  # containers and CI often run as root
            "root_dir": str(root),
            "jpserver_extensions": {
                "jupyter_gpumem": True,
                "jupyterlab": False,
                "jupyter_lsp": False,
                "notebook_shim": False,
                "jupyter_server_terminals": False,
            },
        },
        "IdentityProvider": {"token": token},
        "GpuMem": {"poll_interval": POLL_INTERVAL},
    }
    path.write_text(json.dumps(config))


class Server:
    """A jupyter_server subprocess on loopback, stopped by ``close``."""

    def __init__(self, workdir: Path):
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        config_dir = workdir / "config"
        config_dir.mkdir()
        root = workdir / "root"
        root.mkdir()
        _server_config(config_dir / "jupyter_server_config.json", self.port, self.token, root)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(DROPIN), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["JUPYTER_GPUMEM_FAKE_NVML"] = "three_gpus"
        env["JUPYTER_CONFIG_DIR"] = str(config_dir)
        env["JUPYTER_RUNTIME_DIR"] = str(workdir / "runtime")
        self.log = open(workdir / "server.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", "--no-browser"],
            env=env, cwd=str(workdir), stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.ps = psutil.Process(self.proc.pid)

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    async def wait_ready(self, client: AsyncHTTPClient) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                tail = self.log.read()[-2000:]
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{tail}")
            try:
                await self.get(client, "jupyter-gpumem/api/config")
                return
            except Exception:
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the server did not answer within {STARTUP_TIMEOUT:g} s")

    async def get(self, client: AsyncHTTPClient, path: str) -> dict:
        request = HTTPRequest(self.url(path), headers={"Authorization": f"token {self.token}"}, request_timeout=30)
        response = await client.fetch(request)
        return json.loads(response.body)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


async def _level(server: Server, clients: int, duration: float) -> list[dict]:
    client = AsyncHTTPClient(force_instance=True, max_clients=clients + 2)
    latencies: list[float] = []
    errors = 0
    before = await server.get(client, "jupyter-gpumem/api/config")
    cpu0 = server.ps.cpu_times()
    t0 = time.monotonic()
    end = t0 + duration

    async def one_client() -> None:
        nonlocal errors
        await asyncio.sleep(random.uniform(0, CLIENT_PERIOD))
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                await server.get(client, "jupyter-gpumem/api/devices")
                latencies.append(time.monotonic() - start)
            except Exception:
                errors += 1
            await asyncio.sleep(max(0.0, CLIENT_PERIOD - (time.monotonic() - start)))

    await asyncio.gather(*(one_client() for _ in range(clients)))
    wall = time.monotonic() - t0
    cpu1 = server.ps.cpu_times()
    after = await server.get(client, "jupyter-gpumem/api/config")
    client.close()
    cpu = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall * 100
    rss = server.ps.memory_info().rss / 2**20
    calls = (after["sampler"]["nvml_calls"] - before["sampler"]["nvml_calls"]) / wall
    note = f"{clients} clients, each polling every {CLIENT_PERIOD:g} s for {duration:g} s; fake NVML three_gpus (synthetic)"
    tag = f"server_load_{clients}_clients"
    return [
        {"name": f"{tag}_p50_latency", "value": round(_percentile(latencies, 50) * 1000, 2), "unit": "ms", "note": note},
        {"name": f"{tag}_p99_latency", "value": round(_percentile(latencies, 99) * 1000, 2), "unit": "ms", "note": note},
        {"name": f"{tag}_requests", "value": round(len(latencies) / wall, 1), "unit": "req/s",
         "note": f"{note}; {errors} errors"},
        {"name": f"{tag}_server_cpu", "value": round(cpu, 1), "unit": "% of one core", "note": note},
        {"name": f"{tag}_server_rss", "value": round(rss, 1), "unit": "MiB", "note": note},
        {"name": f"{tag}_nvml_calls", "value": round(calls, 2), "unit": "calls/s",
         "note": f"{note}; server poll interval {POLL_INTERVAL:g} s"},
    ]


async def _run(levels: tuple[int, ...], duration: float) -> list[dict]:
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpumem-bench-") as tmp:
        server = Server(Path(tmp))
        try:
            probe = AsyncHTTPClient(force_instance=True)
            await server.wait_ready(probe)
            probe.close()
            for clients in levels:
                results.extend(await _level(server, clients, duration))
        finally:
            server.close()
    return results


def run(duration: float = 10.0, levels: tuple[int, ...] = LEVELS) -> list[dict]:
    """Results as ``[{"name", "value", "unit", "note"}]``. Bounded: at most ``MAX_DURATION`` per level."""
    duration = max(1.0, min(float(duration), MAX_DURATION))
    return asyncio.run(_run(tuple(levels), duration))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="60 s per level instead of 10 s")
    parser.add_argument("--duration", type=float, default=None, help="seconds per level (1 to 120)")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="client counts, e.g. 1,10,50")
    args = parser.parse_args(argv)
    duration = args.duration if args.duration is not None else (60.0 if args.long else 10.0)
    try:
        levels = tuple(int(x) for x in args.levels.split(",") if x.strip())
    except ValueError:
        parser.error("--levels takes client counts separated by commas, e.g. 1,10,50")
    if not levels or any(not 1 <= n <= 200 for n in levels):
        parser.error("--levels: each count must be from 1 to 200")
    for row in run(duration, levels):
        print(f"{row['name']:<42} {row['value']:>10} {row['unit']:<14} {row['note']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
