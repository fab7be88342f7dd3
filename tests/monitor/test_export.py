"""A notebook with a live monitor, run by nbconvert's engine (nbclient) and saved: what GitHub,
nbviewer, VS Code without a widget manager and a PDF get from it. The kernel reads the fake
three-GPU world (synthetic NVML) and JAX on the CPU (real arrays)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest
from child_env import ROOT, ipython_dir, pythonpath
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from wheel_notebooks import kernel_env

SVG = "{http://www.w3.org/2000/svg}"
WIDGET = "application/vnd.jupyter.widget-view+json"
WAIT = "n = m.updates\nassert m.wait_for_update(n)"  # the monitor has drawn the arrays


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """The notebook, run top to bottom in a fresh kernel and written to disk, as
    ``jupyter nbconvert --to notebook --execute`` writes it (nbclient, widget state stored)."""
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext jupyter_gpumem"),
            new_code_cell("import jupyter_gpumem\nm = jupyter_gpumem.Monitor(interval=0.2)\nm"),
            new_code_cell(f"import jax.numpy as jnp\nx = jnp.ones((1 << 22,), jnp.float32)  # 16 MiB\n{WAIT}"),
            new_code_cell(f"y = jnp.ones((1 << 23,), jnp.float32)  # 32 MiB\n{WAIT}"),
            new_code_cell("print('done')"),
        ]
    )
    env = kernel_env() | ipython_dir()
    env["JUPYTER_GPUMEM_FAKE_NVML"] = "three_gpus"
    env["PYTHONPATH"] = pythonpath(ROOT / "jupyter_gpumem" / "testing" / "pynvml_dropin")
    # IPC sockets: TCP port picking races with other processes on a busy machine.
    km = KernelManager(
        kernel_name="python3", transport="ipc", ip=os.path.join(tempfile.mkdtemp(prefix="gpumem-nb-"), "kernel")
    )
    NotebookClient(nb, km=km, timeout=120, startup_timeout=60, store_widget_state=True).execute(env=env)
    path = tmp_path_factory.mktemp("export") / "monitor.ipynb"
    nbformat.write(nb, path)
    return path


def monitor_outputs(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells[1].outputs


def test_the_saved_notebook_keeps_a_picture_of_the_monitors_last_window(saved):
    widget, still = monitor_outputs(saved)
    assert WIDGET in widget.data
    svg = ET.fromstring(still.data["image/svg+xml"])  # well-formed
    titles = [t.text for t in svg.iter(f"{SVG}text") if t.text and t.text[:5] in ("GPU 0", "GPU 1", "GPU 2", "CPU: ")]
    assert titles == [*(f"GPU {i}: NVIDIA A100-SXM4-40GB [SYNTHETIC]" for i in range(3)), "CPU: JAX arrays"]


def test_the_saved_notebook_says_in_words_what_the_monitor_showed(saved):
    widget, still = monitor_outputs(saved)
    assert widget.data["text/plain"].startswith("jupyter_gpumem monitor: ")  # not VBox(children=...
    text = still.data["text/plain"]
    assert "GPU 0: NVIDIA A100-SXM4-40GB [synthetic]" in text
    # The last cell's end drew it: both arrays, 16 + 32 MiB, and the cells that made them.
    assert "CPU: JAX arrays" in text and "JAX live arrays (CPU) 48.00 MiB" in text
    assert "cells run in the window: [3] [4]" in text


def test_the_saved_notebook_and_its_html_export_stay_under_a_megabyte(saved):
    # Before: 5.0 MB and 5.3 MB, almost all of it plotly.js in the stored widget state.
    assert saved.stat().st_size < 1_000_000
    subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(saved)], check=True, capture_output=True
    )
    assert saved.with_suffix(".html").stat().st_size < 1_000_000
    state = nbformat.read(saved, as_version=4).metadata["widgets"]["application/vnd.jupyter.widget-state+json"]
    assert not any(model["state"].get("plotly_js") for model in state["state"].values())
