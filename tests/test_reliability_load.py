"""Load, short enough for CI: 100 loopback clients poll /devices for 8 s against the in-process
server reading the fake NVML world (synthetic). The server must answer every request, stay
responsive, read NVML no more often than its poll interval, and keep its memory flat.

The 60 s version, with a server in its own process, is ``bench/bench_server_load.py --long``.
"""

from __future__ import annotations

import asyncio
import random
import time

import psutil
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from jupyter_gpumem.testing import fake_nvml

CLIENTS = 100
DURATION = 8.0  # seconds; bounded so that CI spends ~10 s here
CLIENT_PERIOD = 1.0
POLL_INTERVAL = 0.5
MiB = 2**20


@pytest.fixture
def jp_server_config():
    return {"ServerApp": {"jpserver_extensions": {"jupyter_gpumem": True}}, "GpuMem": {"poll_interval": POLL_INTERVAL}}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def test_hundred_clients_are_all_answered_with_flat_nvml_reads_and_flat_memory(
    jp_fetch, jp_serverapp, jp_http_port, jp_base_url, jp_auth_header
):
    service = jp_serverapp.web_app.settings["jupyter_gpumem"]
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}jupyter-gpumem/api/devices"
    client = AsyncHTTPClient(force_instance=True, max_clients=CLIENTS + 5)
    me = psutil.Process()
    latencies, failures, rss = [], [], {}

    async def poll(end):
        await asyncio.sleep(random.uniform(0, CLIENT_PERIOD))
        while time.monotonic() < end:
            start = time.monotonic()
            try:
                response = await client.fetch(HTTPRequest(url, headers=dict(jp_auth_header), request_timeout=20))
                latencies.append(time.monotonic() - start)
                assert response.code == 200
            except Exception as exc:  # counted, then asserted on below
                failures.append(repr(exc))
            await asyncio.sleep(max(0.0, CLIENT_PERIOD - (time.monotonic() - start)))

    async def watch_memory(end):
        await asyncio.sleep(DURATION / 4)  # after warm-up: imports, first reading, connection pool
        rss["warm"] = me.memory_info().rss
        while time.monotonic() < end:
            await asyncio.sleep(0.25)
        rss["end"] = me.memory_info().rss

    with fake_nvml("three_gpus"):
        await jp_fetch("jupyter-gpumem", "api", "devices")
        reads_before = service.sampler.reads
        t0 = time.monotonic()
        end = t0 + DURATION
        await asyncio.gather(watch_memory(end), *(poll(end) for _ in range(CLIENTS)))
        wall = time.monotonic() - t0
        reads = service.sampler.reads - reads_before
        config = await jp_fetch("jupyter-gpumem", "api", "config")
    client.close()

    assert failures == []
    assert len(latencies) >= CLIENTS * (DURATION - 1) / CLIENT_PERIOD
    assert percentile(latencies, 99) < 2.0  # generous: CI machines are shared and slow
    assert reads <= wall / POLL_INTERVAL + 2  # one NVML read per interval, whatever the client count
    assert config.code == 200
    assert (rss["end"] - rss["warm"]) < 24 * MiB
