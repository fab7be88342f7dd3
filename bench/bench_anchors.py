"""Side by side, in one run, on the same fake NVML world: jupyter-gpumem, jupyterlab-nvdashboard
and jupyter-resource-usage, each in a jupyter_server of its own on 127.0.0.1.

Every server gets the drop-in ``pynvml`` first on its path, reading ``three_gpus`` (synthetic),
so the anchors' unchanged code reads the same fake GPUs as ours. A small launcher counts the
NVML calls made in the server process (every tool's calls, through the drop-in's counter).

Each client does what the tool's front end does with its default settings:
- jupyter-gpumem: a websocket to /jupyter-gpumem/api/devices/ws?notebook=..., as the panel
  opens it with a notebook active; the server sends the answer once, then after each 2 s reading
  whose values changed;
- jupyter-gpumem polling: the panel where no socket can be opened (a proxy that blocks
  websockets): GET /jupyter-gpumem/api/devices?notebook=... every 2 s (the panel's default), as
  the browser sends it: the panel fetches with ``cache: "no-cache"``, so the browser keeps the
  last answer and sends its ETag in ``If-None-Match``; a 304 has no body;
- jupyterlab-nvdashboard: a websocket to /nvdashboard/gpu_resource, sending the front end's
  default ``{"updateFrequency": 100, "isPaused": false}``; the server then pushes every 100 ms;
- jupyter-resource-usage: GET /api/metrics/v1 every 5 s (its default refreshRate). It reads no
  GPU at all; it is here for the cost of its polling, not for GPU readings.

Reported per tool and client count: NVML calls per second, the server's CPU and RSS, bytes
sent per client per minute (response bodies / websocket payloads), and p50/p99 latency for the
request/response tools.

    python bench/bench_anchors.py --install          # once: the anchors into .venv/bench-anchors
    python bench/bench_anchors.py [--duration 10] [--levels 1,10,50,100] [--changing] [--only NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DROPIN, ROOT, JupyterServer, parse_levels, percentile, print_rows

ANCHORS = ROOT / ".venv" / "bench-anchors"  # outside the venv's site-packages: enabled only here
# The newest nvdashboard on PyPI; it reads GPUs through pynvml (nvidia-ml-py), see docs/performance.md.
ANCHOR_PINS = ("jupyterlab-nvdashboard==0.15.0", "jupyter-resource-usage==1.3.0")
LEVELS = (1, 10, 50, 100)
# The panel asks for the active notebook's kernel; the clients share one notebook (none runs here).
NOTEBOOK = "bench.ipynb"
STARTUP_TIMEOUT = 90.0
TOOLS = {
    # name: (server extension module, route, client kind, client period in seconds)
    "jupyter-gpumem": ("jupyter_gpumem", f"jupyter-gpumem/api/devices/ws?notebook={NOTEBOOK}", "websocket", 2.0),
    "jupyter-gpumem polling": ("jupyter_gpumem", f"jupyter-gpumem/api/devices?notebook={NOTEBOOK}", "poll", 2.0),
    "nvdashboard": ("jupyterlab_nvdashboard", "nvdashboard/gpu_resource", "websocket", 0.1),
    "resource-usage": ("jupyter_resource_usage", "api/metrics/v1", "poll", 5.0),
}

# Runs in the server process: writes the drop-in's NVML call count to a file, then serves.
LAUNCHER = r"""
import os, sys, threading, time
import pynvml
out, changing = sys.argv[1], sys.argv[2] == "changing"
def dump():
    step = 0
    while True:
        if changing:  # GPU 0's used memory grows by 1 MiB every 0.1 s, 1 GiB at most: every reading differs
            step = (step + 1) % 1024
            world = pynvml._world.current()
            world.set_used(0, world.gpu(0).used_bytes + (2**20 if step else -1023 * 2**20))
        tmp = out + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(pynvml._world.current().total_calls()))
        os.replace(tmp, out)
        time.sleep(0.1)
threading.Thread(target=dump, daemon=True).start()
sys.argv = ["jupyter-server", "--no-browser"]
from jupyter_server.serverapp import main
main()
"""


def install() -> int:
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--upgrade", "--target", str(ANCHORS), *ANCHOR_PINS]
    print(" ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd)


class ToolServer(JupyterServer):
    """A jupyter_server with one tool's extension enabled, counting NVML calls in its process."""

    def __init__(self, tool: str, workdir: Path, changing: bool = False):
        self.tool = tool
        self.calls_file = workdir / "nvml_calls"
        extensions = {m: False for m in ("jupyter_gpumem", "jupyterlab_nvdashboard", "jupyter_resource_usage")}
        extensions[TOOLS[tool][0]] = True
        super().__init__(
            f"{tool} server",
            workdir,
            extensions,
            [str(DROPIN), str(ANCHORS), str(ROOT)],
            ["-c", LAUNCHER, str(self.calls_file), "changing" if changing else "still"],
        )

    def nvml_calls(self) -> int:
        try:
            return int(self.calls_file.read_text() or 0)
        except (OSError, ValueError):
            return 0


async def _level(server: ToolServer, clients: int, duration: float) -> dict:
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    from tornado.websocket import websocket_connect

    _, route, kind, period = TOOLS[server.tool]
    http = AsyncHTTPClient(force_instance=True, max_clients=clients + 2)
    latencies: list[float] = []
    received = [0]
    errors = [0]
    not_modified = [0]
    end = [0.0]

    async def poller() -> None:
        await asyncio.sleep(random.uniform(0, period))
        etag = None  # what a browser cache keeps for a no-cache fetch
        while time.monotonic() < end[0]:
            start = time.monotonic()
            headers = dict(server.headers(), **({"If-None-Match": etag} if etag else {}))
            try:
                response = await http.fetch(
                    HTTPRequest(server.url(route), headers=headers, request_timeout=30), raise_error=False
                )
                if response.code not in (200, 304):
                    raise RuntimeError(f"HTTP {response.code}")
                latencies.append(time.monotonic() - start)
                received[0] += len(response.body or b"")
                not_modified[0] += response.code == 304
                etag = response.headers.get("Etag") or etag
            except Exception:
                errors[0] += 1
            await asyncio.sleep(max(0.0, period - (time.monotonic() - start)))

    async def watcher() -> None:
        try:
            conn = await websocket_connect(HTTPRequest(server.url(route, "ws"), headers=server.headers()))
        except Exception:
            errors[0] += 1
            return
        if server.tool == "nvdashboard":  # its front end's first message; ours needs none
            await conn.write_message(json.dumps({"updateFrequency": int(period * 1000), "isPaused": False}))
        while True:
            remaining = end[0] - time.monotonic()
            if remaining <= 0:
                break
            try:
                message = await asyncio.wait_for(conn.read_message(), remaining)
            except asyncio.TimeoutError:
                break
            if message is None:
                errors[0] += 1
                break
            received[0] += len(message)
        conn.close()

    calls0, cpu0 = server.nvml_calls(), server.ps.cpu_times()
    t0 = time.monotonic()
    end[0] = t0 + duration
    work = poller if kind == "poll" else watcher
    await asyncio.gather(*(work() for _ in range(clients)))
    wall = time.monotonic() - t0
    await asyncio.sleep(0.25)  # let the launcher write the last count
    cpu1, calls1 = server.ps.cpu_times(), server.nvml_calls()
    http.close()
    return {
        "nvml_calls_per_s": (calls1 - calls0) / wall,
        "server_cpu_pct": ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / wall * 100,
        "server_rss_mib": server.ps.memory_info().rss / 2**20,
        "bytes_per_client_per_min": received[0] / clients / wall * 60,
        "p50_ms": None if not latencies else percentile(latencies, 50) * 1000,
        "p99_ms": None if not latencies else percentile(latencies, 99) * 1000,
        "errors": errors[0],
        "not_modified_share": not_modified[0] / len(latencies) if latencies else None,
    }


async def _run(levels: tuple[int, ...], duration: float, changing: bool = False, only: str = "") -> dict:
    results: dict = {}
    for tool in TOOLS:
        if only and only not in tool:
            continue
        with tempfile.TemporaryDirectory(prefix=f"gpumem-anchor-{tool}-") as tmp:
            server = ToolServer(tool, Path(tmp), changing)
            try:
                await server.wait_ready("api/status", STARTUP_TIMEOUT)
                for clients in levels:
                    results[(tool, clients)] = await _level(server, clients, duration)
            finally:
                server.close()
    return results


def _rows(results: dict, duration: float, changing: bool = False) -> list[dict]:
    rows = []
    for (tool, clients), r in results.items():
        _, route, kind, period = TOOLS[tool]
        answers = "" if r["not_modified_share"] is None else f"; {r['not_modified_share']:.0%} answered 304"
        note = (
            f"{clients} clients x {duration:g} s; {'GET' if kind == 'poll' else 'websocket'} /{route} "
            f"every {period:g} s; fake NVML three_gpus (synthetic{', GPU 0 changing' if changing else ''}); "
            f"{r['errors']} errors{answers}"
        )
        tag = f"{tool} {clients:>3} clients"
        rows += [
            {"name": f"{tag}: NVML calls", "value": round(r["nvml_calls_per_s"], 1), "unit": "calls/s", "note": note},
            {"name": f"{tag}: server CPU", "value": round(r["server_cpu_pct"], 1), "unit": "% of a core", "note": note},
            {"name": f"{tag}: server RSS", "value": round(r["server_rss_mib"], 1), "unit": "MiB", "note": note},
            {
                "name": f"{tag}: sent per client",
                "value": round(r["bytes_per_client_per_min"]),
                "unit": "bytes/min",
                "note": note,
            },
        ]
        if r["p50_ms"] is not None:
            rows += [
                {"name": f"{tag}: p50 latency", "value": round(r["p50_ms"], 2), "unit": "ms", "note": note},
                {"name": f"{tag}: p99 latency", "value": round(r["p99_ms"], 2), "unit": "ms", "note": note},
            ]
    return rows


def run(duration: float = 10.0, levels: tuple[int, ...] = LEVELS, changing: bool = False, only: str = "") -> list[dict]:
    """Rows ``{"name", "value", "unit", "note"}``; a clear row when the anchors are not installed."""
    if not (ANCHORS / "jupyterlab_nvdashboard").is_dir() or not (ANCHORS / "jupyter_resource_usage").is_dir():
        return [
            {
                "name": "anchors",
                "value": None,
                "unit": "",
                "note": "not installed: run python bench/bench_anchors.py --install first",
            }
        ]
    duration = max(2.0, min(float(duration), 120.0))
    return _rows(asyncio.run(_run(tuple(levels), duration, changing, only)), duration, changing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help=f"install {', '.join(ANCHOR_PINS)} into {ANCHORS}")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level (2 to 120)")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="client counts, e.g. 1,10,50")
    parser.add_argument(
        "--changing",
        action="store_true",
        help="GPU 0's used memory changes every 0.1 s, so every reading differs (few 304s, a push per reading)",
    )
    parser.add_argument("--only", default="", help="only the tools whose name contains this, e.g. jupyter-gpumem")
    args = parser.parse_args(argv)
    if args.install:
        return install()
    print_rows(run(args.duration, parse_levels(parser, args.levels), args.changing, args.only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
