"""What an idle kernel costs while a live monitor is on screen, in a real browser.

JupyterLab runs on the fake NVML world ``three_gpus`` (synthetic) and headless chromium opens a
notebook that starts ``%gpumem monitor --interval 1`` (or several), opens the GPU memory panel
and lets both settle. Then, for ``--seconds`` with nobody touching anything, it reads the kernel
process's CPU time (psutil, user + system, its threads included) and counts how often the
kernel's status turned Busy (a comm message from the browser, or a request from the panel,
each shows as Busy). Reported: the medians over ``--runs`` fresh kernels.

Needs ui-tests' node_modules (``cd ui-tests && jlpm install``) and chromium; without them it
prints one row saying so.

    python bench/bench_browser_idle.py [--monitors N] [--runs 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import DROPIN, ROOT, JupyterServer, print_rows

DRIVER = Path(__file__).with_name("browser_idle.js")
PLAYWRIGHT = ROOT / "ui-tests" / "node_modules" / "playwright"
CHROMIUM = "/usr/bin/chromium"
SETTLE_S = 5.0  # after the monitor draws and the panel opens, before the idle span


def _notebook(monitors: int) -> dict:
    cells = ["%load_ext jupyter_gpumem"] + ["%gpumem monitor --interval 1"] * monitors
    return {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def _kernels(server: JupyterServer) -> list:
    return [p for p in server.ps.children(recursive=True) if any("ipykernel" in a for a in p.cmdline())]


def _one_run(server: JupyterServer, seconds: float) -> tuple[float, int, int]:
    """(kernel CPU seconds per wall second, Busy count, points the plots gained) over one idle span."""
    url = server.url(f"lab?token={server.token}")
    node = subprocess.Popen(
        ["node", str(DRIVER), url, "idle.ipynb", str(seconds), str(SETTLE_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    try:
        line = node.stdout.readline().strip()
        if line != "READY":
            raise RuntimeError(f"the browser driver stopped: {line}\n{node.stderr.read()[-2000:]}")
        kernels = _kernels(server)
        if len(kernels) != 1:
            raise RuntimeError(f"expected one kernel, found {len(kernels)}")
        kernel = kernels[0]
        start_cpu, start = sum(kernel.cpu_times()[:2]), time.monotonic()
        done = node.stdout.readline().strip()
        cpu, wall = sum(kernel.cpu_times()[:2]) - start_cpu, time.monotonic() - start
        if not done.startswith("DONE "):
            raise RuntimeError(f"the browser driver stopped: {done}\n{node.stderr.read()[-2000:]}")
        node.wait(60)
        for _ in range(100):  # the next run starts with no kernel
            if not _kernels(server):
                break
            time.sleep(0.1)
        _, busy, points = done.split()
        return cpu / wall, int(busy), int(points)
    finally:
        if node.poll() is None:
            node.kill()


def run(monitors: int = 1, runs: int = 3, seconds: float = 10.0) -> list[dict]:
    name = f"idle kernel, {monitors} live monitor{'s' if monitors > 1 else ''} at 1 s + panel"
    missing = [
        w
        for w, ok in (
            ("chromium", Path(CHROMIUM).exists()),
            ("node", shutil.which("node")),
            ("ui-tests/node_modules", PLAYWRIGHT.exists()),
        )
        if not ok
    ]
    if missing:
        return [dict(name=name, value=None, unit="", note="skipped: no " + ", ".join(missing))]
    with tempfile.TemporaryDirectory(prefix="gpumem-bench-idle-") as tmp:
        workdir = Path(tmp)
        server = JupyterServer(
            "JupyterLab",
            workdir,
            {"jupyterlab": True, "jupyter_gpumem": True},
            [str(DROPIN), str(ROOT)],
            [
                "-m",
                "jupyterlab",
                "--no-browser",
                "--LabApp.expose_app_in_browser=True",
                f"--LabApp.workspaces_dir={workdir / 'workspaces'}",
            ],
        )
        try:
            asyncio.run(server.wait_ready("api/status", 120))
            (workdir / "root" / "idle.ipynb").write_text(json.dumps(_notebook(monitors)))
            results = [_one_run(server, seconds) for _ in range(runs)]
        finally:
            server.close()
    cpu = [r[0] for r in results]
    busy = [r[1] for r in results]
    each = ", ".join(f"{c * 100:.2f}%/{b}/{p}" for c, b, p in results)
    return [
        dict(
            name=f"{name}: kernel CPU",
            value=statistics.median(cpu) * 100,
            unit="% of a core",
            note=f"median of {runs} x {seconds:g} s (each run CPU/Busy/points drawn: {each}); target < 1%",
        ),
        dict(
            name=f"{name}: Busy flickers",
            value=statistics.median(busy),
            unit=f"per {seconds:g} s",
            note="kernel status changes to busy; target 0",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--monitors", type=int, default=1, choices=range(1, 5))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print_rows(run(args.monitors, args.runs, args.seconds))
