"""What several benches share: CPU timing, percentiles, client levels, a jupyter_server on
loopback reading the fake NVML world, and printing rows."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DROPIN = ROOT / "jupyter_gpumem" / "testing" / "pynvml_dropin"
FAKE_WORLD = "three_gpus"
# Server extensions a plain JupyterLab install enables; each bench turns on only what it measures.
_OTHER_EXTENSIONS = ("jupyterlab", "jupyter_lsp", "notebook_shim", "jupyter_server_terminals")


def median_thread_cpu(fn: Callable[[], object], repeats: int, calls: int = 1) -> float:
    """Median over ``repeats`` blocks of this thread's CPU seconds per call of ``fn`` (after one warm-up call)."""
    fn()
    per_block = []
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        per_block.append((time.thread_time() - start) / calls)
    return statistics.median(per_block)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def parse_levels(parser: argparse.ArgumentParser, text: str) -> tuple[int, ...]:
    """Client counts from ``1,10,50``; a clear parser error for anything else."""
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        parser.error("--levels takes client counts separated by commas, e.g. 1,10,50")
    if not levels or any(not 1 <= n <= 200 for n in levels):
        parser.error("--levels: each count must be from 1 to 200")
    return levels


def print_rows(rows: list[dict]) -> None:
    width = max((len(r["name"]) for r in rows), default=0)
    for row in rows:
        value = "-" if row["value"] is None else row["value"]
        if isinstance(value, float):
            value = f"{value:.4g}"
        print(f"{row['name']:<{width}}  {value:>10}  {row['unit']:<12}  {row['note']}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterServer:
    """A jupyter_server subprocess on 127.0.0.1 with the given server extensions enabled, the
    pynvml drop-in reading ``three_gpus`` (synthetic), and a random token. ``close()`` stops it."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        extensions: dict[str, bool],
        python_path: list[str],
        args: list[str],
        poll_interval: float = 2.0,
    ):
        import psutil

        self.name = name
        self.port = free_port()
        self.token = secrets.token_hex(16)
        (workdir / "config").mkdir()
        (workdir / "root").mkdir()
        config = {
            "ServerApp": {
                "ip": "127.0.0.1",
                "port": self.port,
                "port_retries": 0,
                "open_browser": False,
                "allow_root": True,  # containers and CI often run as root
                "root_dir": str(workdir / "root"),
                "jpserver_extensions": {**{m: False for m in _OTHER_EXTENSIONS}, **extensions},
            },
            "IdentityProvider": {"token": self.token},
            "GpuMem": {"poll_interval": poll_interval},
        }
        (workdir / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in python_path if p)
        env["JUPYTER_GPUMEM_FAKE_NVML"] = FAKE_WORLD
        env["JUPYTER_CONFIG_DIR"] = str(workdir / "config")
        env["JUPYTER_RUNTIME_DIR"] = str(workdir / "runtime")
        self.log = open(workdir / "server.log", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, *args], env=env, cwd=str(workdir), stdout=self.log, stderr=subprocess.STDOUT
        )
        self.ps = psutil.Process(self.proc.pid)

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{path}"

    def headers(self) -> dict:
        return {"Authorization": f"token {self.token}"}

    async def wait_ready(self, path: str, timeout: float) -> None:
        """Return once GET ``path`` answers; raise with the server's log if it exits or times out."""
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest

        client = AsyncHTTPClient(force_instance=True)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log.read()[-2000:]}")
                try:
                    await client.fetch(HTTPRequest(self.url(path), headers=self.headers(), request_timeout=5))
                    return
                except Exception:
                    await asyncio.sleep(0.2)
            raise RuntimeError(f"{self.name} did not answer within {timeout:g} s")
        finally:
            client.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
