"""Ports for the servers a test starts (Jupyter, Prometheus, a metrics listener, a hub).

Each is one the kernel hands out as free when the test starts, never a fixed number: the gate
runs beside other jobs on one machine, and two clones running the same test at once both wanted
9140 (a run of tests/server failed with "port 9140 is not available"). A port can still be
taken between this choice and the server's bind, which no choice made before the bind avoids;
the window is the test's start-up, not the whole run.

Tests import it from here (``from ports import free_ports``).
"""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):  # held open together, so that no port is handed out twice
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
