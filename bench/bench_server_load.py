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
import tempfile
import time
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from _common import DROPIN, ROOT, JupyterServer, parse_levels, percentile, print_rows

LEVELS = (1, 10, 50, 100)
POLL_INTERVAL = 2.0
CLIENT_PERIOD = 1.0  # each client asks twice per server poll interval: more than a panel does
STARTUP_TIMEOUT = 60.0
MAX_DURATION = 120.0


def _server(workdir: Path) -> JupyterServer:
    python_path = [str(DROPIN), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return JupyterServer(
        "the server",
        workdir,
        {"jupyter_gpumem": True},
        python_path,
        ["-m", "jupyter_server", "--no-browser"],
        poll_interval=POLL_INTERVAL,
    )


async def _get(server: JupyterServer, client: AsyncHTTPClient, path: str) -> dict:
    response = await client.fetch(HTTPRequest(server.url(path), headers=server.headers(), request_timeout=30))
    return json.loads(response.body)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


async def _level(server: JupyterServer, clients: int, duration: float) -> list[dict]:
    client = AsyncHTTPClient(force_instance=True, max_clients=clients + 2)
    latencies: list[float] = []
    errors = 0
    before = await _get(server, client, "jupyter-gpumem/api/config")
    cpu0 = server.ps.cpu_times()
    t0 = time.monotonic()
    end = t0 + duration

    async def one_client() -> None:
        nonlocal errors
        await asyncio.sleep(random.uniform(0, CLIENT_PERIOD))
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                await _get(server, client, "jupyter-gpumem/api/devices")
                latencies.append(time.monotonic() - start)
            except Exception:
                errors += 1
            await asyncio.sleep(max(0.0, CLIENT_PERIOD - (time.monotonic() - start)))

    await asyncio.gather(*(one_client() for _ in range(clients)))
    wall = time.monotonic() - t0
    cpu1 = server.ps.cpu_times()
    after = await _get(server, client, "jupyter-gpumem/api/config")
    client.close()
    cpu = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall * 100
    rss = server.ps.memory_info().rss / 2**20
    calls = (after["sampler"]["nvml_calls"] - before["sampler"]["nvml_calls"]) / wall
    note = f"{clients} clients, each polling every {CLIENT_PERIOD:g} s for {duration:g} s; fake NVML three_gpus (synthetic)"
    tag = f"server_load_{clients}_clients"
    return [
        {"name": f"{tag}_p50_latency", "value": _ms(percentile(latencies, 50)), "unit": "ms", "note": note},
        {"name": f"{tag}_p99_latency", "value": _ms(percentile(latencies, 99)), "unit": "ms", "note": note},
        {
            "name": f"{tag}_requests",
            "value": round(len(latencies) / wall, 1),
            "unit": "req/s",
            "note": f"{note}; {errors} errors",
        },
        {"name": f"{tag}_server_cpu", "value": round(cpu, 1), "unit": "% of one core", "note": note},
        {"name": f"{tag}_server_rss", "value": round(rss, 1), "unit": "MiB", "note": note},
        {
            "name": f"{tag}_nvml_calls",
            "value": round(calls, 2),
            "unit": "calls/s",
            "note": f"{note}; server poll interval {POLL_INTERVAL:g} s",
        },
    ]


async def _run(levels: tuple[int, ...], duration: float) -> list[dict]:
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpumem-bench-") as tmp:
        server = _server(Path(tmp))
        try:
            await server.wait_ready("jupyter-gpumem/api/config", STARTUP_TIMEOUT)
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
    print_rows(run(duration, parse_levels(parser, args.levels)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
