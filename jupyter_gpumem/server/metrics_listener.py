"""The metrics listener (``GpuMem.metrics_port``): ``GET``/``HEAD /metrics`` on a port of its own,
with no credential, built to hold when whoever reaches the port misbehaves (docs/server.md, "The
metrics listener").

Its limits are tornado's own knobs on the ``HTTPServer`` (tornado 6.6.1,
``tornado/httpserver.py`` and ``tornado/http1connection.py``: header and body timeouts, header
and body sizes) and three guards of ours: a cap on open connections, a lifetime for each, and,
in place of tornado's accept loop (``tornado/netutil.py``, ``add_accept_handler``), one that
pauses, rather than retries at once, when ``accept()`` fails. A flood of half-open
requests then holds at most MAX_CONNECTIONS descriptors of the server, each for at most
HEADER_SECONDS, and the Jupyter server beside it keeps its descriptors and its IOLoop.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.netutil import bind_sockets

from jupyter_gpumem.server.metrics import listener_exposition

# At most this many connections open at once; past it the listener accepts none until one
# closes (those waiting stay in the kernel's listen queue and hold no descriptor of ours).
# Prometheus keeps one connection per target, two for a high-availability pair.
MAX_CONNECTIONS = 32
# A request's headers must be complete this long after the connection (or its previous answer)
# began waiting for them: one deadline for the whole headers, however slowly they trickle in. It
# is also how long a kept-alive connection may sit idle between scrapes.
HEADER_SECONDS = 10.0
# A chunked request's empty body (the only body let in, see MAX_BODY_BYTES) must arrive in this.
BODY_SECONDS = 10.0
# Any connection is closed this long after it was accepted, whatever it is doing: a client that
# never reads its answer cannot hold a slot for ever (tornado has no write timeout).
CONNECTION_SECONDS = 60.0
MAX_HEADER_BYTES = 16 * 1024
# No request body at all: a Content-Length above 0, or a chunk, is answered 400 and the
# connection closed before a byte of the body is read (HTTP1Connection._read_body).
MAX_BODY_BYTES = 0
MAX_BUFFER_BYTES = 256 * 1024  # what one connection's stream may buffer (tornado's default: 100 MB)
# After a failed accept() (out of descriptors: EMFILE, ENFILE; out of memory: ENOBUFS, ENOMEM)
# the listener waits, from the first delay doubling to the last, then tries again.
ACCEPT_RETRY_SECONDS = (0.05, 2.0)
ACCEPT_LOG_SECONDS = 60.0  # accept failures are logged at most once in this long
_ACCEPTS_PER_WAKE = 128  # as tornado's accept handler (netutil._DEFAULT_BACKLOG)


class _ListenerHandler(web.RequestHandler):
    """``GET`` and ``HEAD /metrics``; any other method is a 405 (tornado's SUPPORTED_METHODS)."""

    SUPPORTED_METHODS = ("GET", "HEAD")

    def initialize(self, kernel_names: bool) -> None:
        self.kernel_names = kernel_names

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.set_header("Cache-Control", "no-store")
        self.finish(listener_exposition(self.kernel_names))

    head = get  # tornado sends the headers of the GET, Content-Length included, and no body


class _RareWarning:
    """A warning logged at most once per ACCEPT_LOG_SECONDS, saying how often it happened since
    the last time it was logged: a failure that repeats many times a second fills no log."""

    def __init__(self, log: logging.Logger | logging.LoggerAdapter, message: str) -> None:
        self._log = log
        self._message = message  # %-style, for (*args, times since it was last logged)
        self._times = 0
        self._logged_at: float | None = None

    def __call__(self, *args: object) -> None:
        self._times += 1
        now = time.monotonic()
        if self._logged_at is None or now - self._logged_at >= ACCEPT_LOG_SECONDS:
            self._log.warning(self._message, *args, self._times)
            self._logged_at, self._times = now, 0


class _Acceptor:
    """Accepts connections on one listening socket, as tornado's ``netutil.add_accept_handler``
    does (tornado 6.6.1, tornado/netutil.py), except in two cases where it stops watching the
    socket. While the server is full (``is_full``) it waits for ``resume``. When ``accept()``
    fails it tries again after a delay, and logs the failure at most once per
    ACCEPT_LOG_SECONDS; tornado's handler lets the error out of the IOLoop's callback, which
    asyncio logs with its traceback and calls again at once, for as long as a connection waits."""

    def __init__(
        self,
        sock: socket.socket,
        on_connection: Callable[[socket.socket, Any], None],
        is_full: Callable[[], bool],
        log: logging.Logger | logging.LoggerAdapter,
    ) -> None:
        self._sock = sock
        self._on_connection = on_connection
        self._is_full = is_full
        self._loop = IOLoop.current()
        self._watching = False
        self._closed = False
        self._retry: object | None = None  # the IOLoop timeout of the next try, after a failure
        self._delay = ACCEPT_RETRY_SECONDS[0]
        self._warn = _RareWarning(
            log,
            "jupyter-gpumem: the metrics listener could not accept a connection: %s; it tries again in %g s "
            f"(failures since this was last logged: %d; logged at most once in {ACCEPT_LOG_SECONDS:g} s)",
        )

    def resume(self) -> None:
        """Watch the socket again, unless closed, full, or waiting to retry after a failure."""
        if self._closed or self._watching or self._retry is not None or self._is_full():
            return
        self._loop.add_handler(self._sock, self._accept, IOLoop.READ)
        self._watching = True

    def close(self) -> None:
        self._closed = True
        self._pause()
        if self._retry is not None:
            self._loop.remove_timeout(self._retry)
            self._retry = None

    def _pause(self) -> None:
        if self._watching:
            self._loop.remove_handler(self._sock)
            self._watching = False

    def _accept(self, _fd: Any, _events: int) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):  # bounded, so a stream of connections starves nothing
            if self._closed:
                return
            if self._is_full():
                self._pause()
                return
            try:
                connection, address = self._sock.accept()
            except BlockingIOError:
                return  # every waiting connection taken
            except ConnectionAbortedError:
                continue  # closed by the client while it waited
            except OSError as exc:
                self._failed(exc)
                return
            self._delay = ACCEPT_RETRY_SECONDS[0]
            self._on_connection(connection, address)

    def _failed(self, exc: OSError) -> None:
        self._pause()
        self._warn(exc, self._delay)
        self._retry = self._loop.call_later(self._delay, self._retry_now)
        self._delay = min(self._delay * 2, ACCEPT_RETRY_SECONDS[1])

    def _retry_now(self) -> None:
        self._retry = None
        self.resume()


class _GuardedHTTPServer(HTTPServer):
    """tornado's ``HTTPServer`` that keeps at most ``max_connections`` open, closes each one
    CONNECTION_SECONDS after it was accepted, and accepts through ``_Acceptor``.

    It fills ``TCPServer._sockets`` and ``_handlers`` as ``TCPServer.add_sockets`` does, so
    ``TCPServer.stop`` stops it, and hands each connection to ``TCPServer._handle_connection``
    (tornado 6.6.1, tornado/tcpserver.py)."""

    def initialize(
        self, *args: Any, max_connections: int, log: logging.Logger | logging.LoggerAdapter, **kwargs: Any
    ) -> None:
        super().initialize(*args, **kwargs)
        self._max_connections = max_connections
        self._log = log
        self._acceptors: list[_Acceptor] = []
        self._deadlines: dict[IOStream, object] = {}  # each open connection's CONNECTION_SECONDS timeout
        self._warn_full = _RareWarning(
            log,
            f"jupyter-gpumem: the metrics listener has {max_connections} connections open, its most; it accepts "
            "more as they close (times full since this was last logged: %d; logged at most once in "
            f"{ACCEPT_LOG_SECONDS:g} s)",
        )

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        for sock in sockets:
            acceptor = _Acceptor(sock, self._handle_connection, self.is_full, self._log)
            self._sockets[sock.fileno()] = sock
            self._handlers[sock.fileno()] = acceptor.close
            self._acceptors.append(acceptor)
            acceptor.resume()

    @property
    def open_connections(self) -> int:
        return len(self._deadlines)

    def is_full(self) -> bool:
        return self.open_connections >= self._max_connections

    def handle_stream(self, stream: IOStream, address: tuple) -> None:
        self._deadlines[stream] = IOLoop.current().call_later(CONNECTION_SECONDS, stream.close)
        super().handle_stream(stream, address)
        if self.is_full():
            self._warn_full()

    def stop(self) -> None:
        """Stop accepting, and close every open connection (tornado's ``stop`` leaves them open)."""
        super().stop()
        for stream in list(self._deadlines):
            stream.close()

    def on_close(self, server_conn: object) -> None:
        """A connection's request loop ended (``HTTP1ServerConnection._server_request_loop``)."""
        super().on_close(server_conn)
        deadline = self._deadlines.pop(getattr(server_conn, "stream", None), None)
        if deadline is not None:
            IOLoop.current().remove_timeout(deadline)
        for acceptor in self._acceptors:
            acceptor.resume()


class MetricsListener:
    """A listener of its own for the gauges (``GpuMem.metrics_port``): one read-only route,
    ``/metrics``, with no token, no cookie, no kernel or file access behind it. What it can
    tell is what ``listener_exposition`` says, so Prometheus needs no Jupyter credential."""

    def __init__(
        self,
        address: str,
        port: int,
        kernel_names: bool,
        log: logging.Logger | logging.LoggerAdapter | None = None,
    ) -> None:
        app = web.Application([(r"/metrics", _ListenerHandler, {"kernel_names": kernel_names})])
        self._server = _GuardedHTTPServer(
            app,
            xheaders=False,
            max_connections=MAX_CONNECTIONS,
            log=log or logging.getLogger(__name__),
            idle_connection_timeout=HEADER_SECONDS,  # tornado's header_timeout
            body_timeout=BODY_SECONDS,
            max_header_size=MAX_HEADER_BYTES,
            max_body_size=MAX_BODY_BYTES,
            max_buffer_size=MAX_BUFFER_BYTES,
        )
        self._sockets = bind_sockets(port, address or None)
        self._server.add_sockets(self._sockets)

    @property
    def port(self) -> int:
        return self._sockets[0].getsockname()[1]

    @property
    def open_connections(self) -> int:
        """Connections accepted and not yet closed."""
        return self._server.open_connections

    def stop(self) -> None:
        self._server.stop()


@dataclass(frozen=True)
class ListenerStatus:
    """What became of ``GpuMem.metrics_port``, as ``/jupyter-gpumem/api/config`` tells it:
    ``off`` (no port set), ``serving`` or ``failed`` (with the reason, for the log and the panel)."""

    state: str
    address: str | None = None
    reason: str | None = None

    def as_json(self) -> dict:
        return {"state": self.state, "address": self.address, "reason": self.reason}


def failure_reason(address: str, exc: OSError) -> str:
    """Why the listener is not serving, in words an operator can act on: a port taken is someone
    else answering there, and a Prometheus that scrapes that address reads their numbers."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{address} is taken by another process ({exc.strerror}); whatever answers there is not this server, "
            "and a Prometheus scraping that address would read its numbers as this server's. This server serves "
            "no metrics listener: free the port (or set another GpuMem.metrics_port) and restart it, or have "
            'Prometheus scrape through the hub\'s proxy (docs/server.md, "Who answers a scrape")'
        )
    return f"{address} cannot be bound ({exc.strerror or exc}); this server serves no metrics listener"


def start_listener(
    address: str, port: int, kernel_names: bool, log: logging.Logger | logging.LoggerAdapter
) -> tuple[MetricsListener | None, ListenerStatus]:
    """The listener ``GpuMem.metrics_port`` asks for, and its status. A port that cannot be bound is
    an ERROR in the log and a ``failed`` status, never a listener that someone else's process
    stands in for."""
    if not port:
        return None, ListenerStatus("off")
    where = f"{address or '*'}:{port}"
    try:
        listener = MetricsListener(address, port, kernel_names, log=log)
    except OSError as exc:
        reason = failure_reason(where, exc)
        log.error("jupyter-gpumem: the metrics listener (GpuMem.metrics_ip, metrics_port) did not start: %s", reason)
        return None, ListenerStatus("failed", where, reason)
    log.info(
        "jupyter-gpumem: metrics on http://%s/metrics (no authentication%s)",
        where,
        ", with kernel ids and notebook paths" if kernel_names else "",
    )
    return listener, ListenerStatus("serving", where)
