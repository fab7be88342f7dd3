"""Numbers that say who gives them: a server whose metrics port someone else holds says so, and
the gauges through the hub's proxy answer only a token the hub says holds the metrics scope."""

from __future__ import annotations

import json
import socket

import pytest

from ports import free_ports

EXT = {"jupyter_gpumem": True}


@pytest.fixture
def squatter():
    """A listening socket on a free port of 127.0.0.1, as another user's process would hold it."""
    (port,) = free_ports(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield port


@pytest.fixture
def jp_server_config(squatter):
    return {
        "ServerApp": {"jpserver_extensions": EXT},
        "GpuMem": {"metrics_port": squatter, "metrics_ip": "127.0.0.1"},
    }


async def test_a_taken_metrics_port_is_a_failed_listener_the_status_names(jp_fetch, jp_serverapp, squatter):
    service = jp_serverapp.web_app.settings["jupyter_gpumem"]
    assert service.metrics_listener is None
    status = json.loads((await jp_fetch("jupyter-gpumem", "api", "config")).body)["metrics_listener"]
    assert status["state"] == "failed" and status["address"] == f"127.0.0.1:{squatter}"
    assert "taken by another process" in status["reason"] and "is not this server" in status["reason"]
