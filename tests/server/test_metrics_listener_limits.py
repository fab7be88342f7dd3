"""The metrics listener (``GpuMem.metrics_port``) holds when whoever reaches its port misbehaves
(issue 36): half-open requests, requests with bodies, and a process out of file descriptors.

The tests of what a flood does to the server run a real jupyter_server subprocess on the fake
three-GPU world, started as tests/server/test_prometheus_deploy.py starts it, with its file limit
(soft and hard) at SERVER_FILES: below the flood, as where 1,100 half-open requests took a server
down. (jupyter_server raises its soft limit to 4,096 where the hard limit allows,
``ServerApp.min_open_files_limit``; a container's hard limit is often 1,024.) The tests of one timeout run a listener in this process,
with that timeout cut to 1 s. Every client is on 127.0.0.1, counted, and closed by the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import secrets
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from jupyter_gpumem.server import metrics_listener
from jupyter_gpumem.server.metrics_listener import HEADER_SECONDS, MAX_CONNECTIONS, MetricsListener
from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR, scenario

ROOT = Path(__file__).resolve().parents[2]
SERVER_FILES = 512  # the server's RLIMIT_NOFILE
FLOOD = 1000
HALF_OPEN = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # no blank line: the headers never end
MiB = 1024**2
CONNECTS_WITHIN = 60.0  # seconds: generous bounds, never what a test expects to take
ANSWERS_WITHIN = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], object], timeout: float, what: str, step: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(step)


class Server:
    """A jupyter_server subprocess with the metrics listener on 127.0.0.1; ``stop()`` ends it."""

    def __init__(self, tmp: Path) -> None:
        self.port, self.metrics_port, self.token = free_port(), free_port(), secrets.token_hex(16)
        for folder in ("config", "root", "runtime"):
            (tmp / folder).mkdir()
        world_file = tmp / "world.json"
        scenario("three_gpus").save(world_file)
        config = {
            "ServerApp": {
                "ip": "127.0.0.1",
                "port": self.port,
                "port_retries": 0,
                "open_browser": False,
                "allow_root": True,
                "root_dir": str(tmp / "root"),
                "jpserver_extensions": {
                    "jupyter_gpumem": True,
                    "jupyterlab": False,
                    "notebook_shim": False,
                    "jupyter_lsp": False,
                    "jupyter_server_terminals": False,
                },
            },
            "IdentityProvider": {"token": self.token},
            "GpuMem": {"metrics_port": self.metrics_port, "metrics_ip": "127.0.0.1"},
        }
        (tmp / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(DROPIN_DIR), str(ROOT)]),
            JUPYTER_CONFIG_DIR=str(tmp / "config"),
            JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        )
        env[ENV_VAR] = str(world_file)
        self.log = tmp / "server.log"

        def file_limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FILES, SERVER_FILES))

        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyter_server"],
                env=env,
                cwd=tmp,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=file_limit,
            )
        self.ps = psutil.Process(self.proc.pid)
        try:
            wait_until(lambda: self._answers("api/status"), 120, "the server's /api/status", step=0.3)
            wait_until(lambda: "metrics on http://" in self.log_text(), 30, "the metrics listener")
        except BaseException:
            self.stop()
            raise

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def _answers(self, path: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
        try:
            self.get(path, timeout=5)
            return True
        except OSError:
            return False

    def get(self, path: str, timeout: float = ANSWERS_WITHIN) -> bytes:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/{path}")
        request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    def listener_connections(self) -> int:
        """Connections the listener has accepted and not yet closed."""
        return sum(
            1
            for c in self.ps.net_connections("tcp")
            if c.laddr and c.laddr.port == self.metrics_port and c.status == psutil.CONN_ESTABLISHED
        )

    def peak_rss(self) -> int:
        """The process's peak resident memory (``VmHWM`` of /proc/PID/status), in bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = Server(tmp_path_factory.mktemp("listener"))
    yield started
    started.stop()


@pytest.fixture
def clean(server):
    """The server, with no connection to its listener left by an earlier test."""
    wait_until(lambda: server.listener_connections() == 0, ANSWERS_WITHIN, "earlier connections closed")
    return server


class Flood:
    """``count`` connections to ``port``, each sending HALF_OPEN once connected and then nothing.

    A thread keeps sending to the sockets that connect late (a full listen queue drops SYNs, and
    the kernel retries them) until ``close()``."""

    def __init__(self, port: int, count: int) -> None:
        self.sockets: list[socket.socket] = []
        self.sent = 0
        self._selector = selectors.DefaultSelector()
        for _ in range(count):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            self.sockets.append(s)
            self._selector.register(s, selectors.EVENT_WRITE)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send_when_connected, daemon=True)
        self._thread.start()

    def _send_when_connected(self) -> None:
        while not self._stop.is_set() and self._selector.get_map():
            for key, _ in self._selector.select(timeout=0.2):
                s = key.fileobj
                self._selector.unregister(s)
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    try:
                        s.send(HALF_OPEN)
                        self.sent += 1
                    except OSError:
                        pass

    def closed_by_server(self) -> int:
        """How many of the sockets the server has closed (EOF or reset)."""
        closed = 0
        for s in self.sockets:
            try:
                if s.recv(1024, socket.MSG_PEEK) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._selector.close()
        for s in self.sockets:
            s.close()


def raw_request(port: int, head: bytes, timeout: float = ANSWERS_WITHIN) -> bytes:
    """What the listener answers to ``head`` (a request line and headers, no body), read to EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_the_main_server_answers_within_a_second_through_1000_half_open_requests_to_the_listener(clean):
    fds_before = clean.ps.num_fds()
    flood = Flood(clean.metrics_port, FLOOD)
    try:
        wait_until(lambda: flood.sent >= MAX_CONNECTIONS, CONNECTS_WITHIN, "the flood's first connections")
        latencies = []
        for _ in range(40):  # about 10 s of asking, across the listener's header timeout
            start = time.monotonic()
            try:
                answered = json.loads(clean.get("api/status", timeout=5))["started"]
            except OSError:
                answered = False
            latencies.append(time.monotonic() - start if answered else float("inf"))
            if latencies.count(float("inf")) == 3:
                break
            time.sleep(0.25)
        fds_during = clean.ps.num_fds()
    finally:
        flood.close()
    print(
        f"/api/status during the flood ({flood.sent} half-open requests sent): "
        f"median {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms, "
        f"{latencies.count(float('inf'))} of {len(latencies)} unanswered within 5 s; "
        f"server's open files {fds_before} before, {fds_during} during; log {clean.log.stat().st_size} bytes"
    )
    assert max(latencies) < 1.0
    assert fds_during <= fds_before + MAX_CONNECTIONS + 8


def test_the_listener_accepts_at_most_its_cap_of_connections_at_once(clean):
    flood = Flood(clean.metrics_port, 3 * MAX_CONNECTIONS)
    try:
        wait_until(lambda: flood.sent >= 2 * MAX_CONNECTIONS, CONNECTS_WITHIN, "the flood's connections")
        wait_until(lambda: clean.listener_connections() >= MAX_CONNECTIONS, ANSWERS_WITHIN, "the cap reached")
        assert clean.listener_connections() == MAX_CONNECTIONS
    finally:
        flood.close()


def test_the_listener_closes_half_open_requests_after_its_header_timeout(clean):
    flood = Flood(clean.metrics_port, MAX_CONNECTIONS // 2)
    try:
        wait_until(lambda: flood.sent == MAX_CONNECTIONS // 2, CONNECTS_WITHIN, "the connections")
        start = time.monotonic()
        wait_until(
            lambda: flood.closed_by_server() == MAX_CONNECTIONS // 2,
            HEADER_SECONDS + ANSWERS_WITHIN,
            "every half-open request closed by the listener",
        )
        print(f"closed {time.monotonic() - start:.1f} s after the headers began (timeout {HEADER_SECONDS:g} s)")
    finally:
        flood.close()


def test_headers_trickled_a_byte_at_a_time_are_cut_off_at_the_header_timeout(clean):
    """The timeout covers the whole of the headers, not the gap between two bytes."""
    with socket.create_connection(("127.0.0.1", clean.metrics_port), timeout=ANSWERS_WITHIN) as s:
        deadline = time.monotonic() + HEADER_SECONDS + ANSWERS_WITHIN
        s.sendall(HALF_OPEN)
        with pytest.raises(OSError):  # the server closes: a reset, or a broken pipe
            while time.monotonic() < deadline:
                s.sendall(b"X")
                s.setblocking(False)
                try:
                    if s.recv(1024) == b"":
                        raise ConnectionResetError("closed by the server")
                except BlockingIOError:
                    pass
                s.setblocking(True)
                time.sleep(0.5)
        assert time.monotonic() < deadline


def test_a_connection_kept_busy_is_closed_at_the_end_of_its_lifetime(monkeypatch):
    """However busy a client keeps a connection (or however long it leaves its answer unread),
    it holds one of the listener's slots for CONNECTION_SECONDS at most. In this process, with
    the lifetime cut to 1 s."""
    monkeypatch.setattr(metrics_listener, "CONNECTION_SECONDS", 1.0)

    async def scrape_until_closed() -> tuple[int, float | None]:
        listener = MetricsListener("127.0.0.1", 0, kernel_names=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        start, answers = time.monotonic(), 0
        try:
            while time.monotonic() - start < ANSWERS_WITHIN:
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                    await reader.readexactly(int(re.search(rb"Content-Length: (\d+)", head)[1]))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return answers, time.monotonic() - start
                answers += 1
                await asyncio.sleep(0.2)
            return answers, None
        finally:
            writer.close()
            listener.stop()

    answers, closed_after = asyncio.run(scrape_until_closed())
    assert answers >= 1 and closed_after is not None and closed_after >= 1.0


def answer_in_process(head: bytes, stall: float = ANSWERS_WITHIN) -> tuple[bytes, float]:
    """What a listener in this process answers to ``head`` (sent, then nothing more for up to
    ``stall`` s), read to EOF, and the seconds until the connection closed."""

    async def ask() -> tuple[bytes, float]:
        listener = MetricsListener("127.0.0.1", 0, kernel_names=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        start = time.monotonic()
        try:
            writer.write(head)
            answer = await asyncio.wait_for(reader.read(), stall)
            return answer, time.monotonic() - start
        finally:
            writer.close()
            listener.stop()

    return asyncio.run(ask())


def test_headers_over_16_kib_close_the_connection_unanswered():
    answer, _ = answer_in_process(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"x" * 20000 + b"\r\n\r\n")
    assert answer == b""


def test_a_chunked_body_that_never_ends_is_cut_off_at_the_body_timeout(monkeypatch):
    """The one body the listener lets in, an empty chunked one, has BODY_SECONDS to arrive. In
    this process, with the timeout cut to 1 s."""
    monkeypatch.setattr(metrics_listener, "BODY_SECONDS", 1.0)
    head = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer, closed_after = answer_in_process(head)
    assert answer == b"" and 1.0 <= closed_after < ANSWERS_WITHIN


def test_a_stopped_listener_closes_its_open_connections(monkeypatch):
    monkeypatch.setattr(metrics_listener, "HEADER_SECONDS", 3600.0)  # only the stop can close it

    async def stop_with_one_open() -> bytes:
        listener = MetricsListener("127.0.0.1", 0, kernel_names=False)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
        try:
            writer.write(HALF_OPEN)
            await asyncio.wait_for(_until(lambda: listener.open_connections == 1), ANSWERS_WITHIN)
            listener.stop()
            return await asyncio.wait_for(reader.read(), ANSWERS_WITHIN)
        finally:
            writer.close()

    assert asyncio.run(stop_with_one_open()) == b""


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("method", ["POST", "PUT", "GET"])
def test_a_request_with_a_body_is_refused_before_its_body_is_sent(clean, method):
    head = f"{method} /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99000000\r\n\r\n".encode()
    answer = raw_request(clean.metrics_port, head)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]


def test_three_99_mb_posts_leave_the_servers_memory_where_it_was(clean):
    """The tester's three 99 MB POSTs raised the server from 84 to 367 MiB: the body was read
    into memory before the 405."""
    peak_before = clean.peak_rss()
    body = b"x" * MiB
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", clean.metrics_port), timeout=ANSWERS_WITHIN) as s:
            s.sendall(b"POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % (99 * MiB))
            try:
                for _ in range(99):
                    s.sendall(body)
                while s.recv(65536):
                    pass
            except OSError:
                pass  # refused: the server closed the connection under the body
    grown = (clean.peak_rss() - peak_before) / MiB
    print(f"peak RSS grew {grown:.1f} MiB over three 99 MiB POSTs")
    assert grown < 16


def test_head_metrics_answers_a_scrapes_headers_without_its_body(clean):
    answer = raw_request(clean.metrics_port, b"HEAD /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Type: text/plain" in head and body == b""


def test_accept_failures_back_off_and_are_logged_once_then_the_listener_recovers(tmp_path):
    """Out of file descriptors, accept() fails for as long as a connection waits. tornado's own
    accept handler raises and is called again at once (a log of tracebacks, a busy core).

    The server gets room for HELD more descriptors; HELD half-open requests take them, and the
    requests after them wait while the held ones stay open (HEADER_SECONDS)."""
    held, waiting = 3, 5
    server = Server(tmp_path)
    clients: list[socket.socket] = []
    try:
        soft, hard = server.ps.rlimit(psutil.RLIMIT_NOFILE)
        server.ps.rlimit(psutil.RLIMIT_NOFILE, (server.ps.num_fds() + held, hard))
        for _ in range(held + waiting):
            s = socket.create_connection(("127.0.0.1", server.metrics_port), timeout=ANSWERS_WITHIN)
            s.sendall(HALF_OPEN)
            clients.append(s)
        wait_until(lambda: "Too many open files" in server.log_text(), ANSWERS_WITHIN, "the accept failure logged")
        cpu_before, window_start = sum(server.ps.cpu_times()[:2]), time.monotonic()
        time.sleep(3.0)  # a window in which a retrying accept() would fail again and again
        cpu = sum(server.ps.cpu_times()[:2]) - cpu_before
        window = time.monotonic() - window_start
        text = server.log_text()
        failures = text.count("Too many open files") + text.count("Traceback")
        print(f"accept failures: {failures} log lines; {cpu:.2f} s of CPU in {window:.1f} s")
        assert failures == 1, text[-3000:]
        assert cpu < window / 2
        server.ps.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))
        for s in clients[held:]:  # each waiting request is served once accept() works again
            s.sendall(b"Connection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    finally:
        for s in clients:
            s.close()
        server.stop()
