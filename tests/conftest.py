"""Shared test configuration.

``gpu`` tests run only where a CUDA device is visible; elsewhere they are reported as skipped
(never counted as passed).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

pytest_plugins = ("pytest_jupyter.jupyter_server",)


@pytest.fixture
def jp_serverapp(jp_serverapp):
    """pytest-jupyter's server, with jupyter-gpumem unloaded after the test as a stopping server
    would: its NVML reader thread does not outlive the test."""
    yield jp_serverapp
    from jupyter_gpumem import server as extension

    extension._unload_jupyter_server_extension(jp_serverapp)


def _cuda_visible() -> bool:
    if os.environ.get("JUPYTER_GPUMEM_FORCE_GPU_TESTS") == "1":
        return True
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except Exception:
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def pytest_collection_modifyitems(config, items):
    if _cuda_visible():
        return
    skip = pytest.mark.skip(reason="no CUDA device visible on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
