"""Who gets the /devices answer pushed, and when: ``GET /jupyter-gpumem/api/devices/ws``.

A websocket that receives the same JSON as ``GET /devices`` (``?notebook=`` too): once on
connecting, then after each reading whose values differ from the last one sent (the answer's
ETag). Nothing is sent while nothing changes, and no request is made per client: the answer is
built once per reading and the same bytes go to every socket. An open socket keeps the shared
sampler reading. Authentication is jupyter_server's own for websockets (``ws_authenticated``,
jupyter_server 2.13+, as its kernel websocket uses it), then the Authorizer must allow ``read``
on ``kernels`` (the kernel websocket asks it for ``execute`` in ``pre_get``,
jupyter_server/services/kernels/websocket.py, 2.21.1): a refusal is a 403 before the upgrade.
A bad ``notebook`` closes the socket with code 1008 (policy) and the reason, before anything
is sent.
"""

from __future__ import annotations

import logging
from typing import Any

from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.utils import url_path_join
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from jupyter_gpumem.server.handlers import (
    API_PREFIX,
    AUTH_PARAMS,
    KERNELS_RESOURCE,
    BadRequest,
    check_notebook_path,
    escaped,
    unknown_params_message,
)

log = logging.getLogger(__name__)

POLICY_VIOLATION = 1008  # RFC 6455, 7.4.1
GOING_AWAY = 1001
# A close frame's payload is at most 125 bytes: 2 for the code, 123 for the reason (RFC 6455,
# 5.5 and 5.5.1); tornado raises on more (tornado/websocket.py, _write_frame).
MAX_CLOSE_REASON_BYTES = 123


def close_reason(text: str) -> str:
    """``text`` as a close reason: control characters escaped, then cut to at most
    MAX_CLOSE_REASON_BYTES of UTF-8 without splitting a character."""
    data = escaped(text).encode("utf-8")
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return data.decode("utf-8")
    return data[: MAX_CLOSE_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."


class Watchers:
    """The open sockets of one server, each with the notebook it asked for and what it was sent."""

    def __init__(self) -> None:
        self._sockets: dict[Any, str | None] = {}  # socket -> ETag last sent

    def __len__(self) -> int:
        return len(self._sockets)

    def add(self, socket: Any) -> None:
        self._sockets[socket] = None

    def discard(self, socket: Any) -> None:
        self._sockets.pop(socket, None)

    def send(self, socket: Any, answer: Any) -> None:
        """Send ``answer`` unless this socket has these values already."""
        if self._sockets.get(socket, answer.etag) == answer.etag:
            return  # closed meanwhile, or nothing new
        try:
            socket.write_message(answer.body)
        except WebSocketClosedError:
            self.discard(socket)
            return
        self._sockets[socket] = answer.etag

    def close_all(self) -> None:
        """The server extension stops: no more answers will come."""
        for socket in list(self._sockets):
            self.discard(socket)
            socket.close(GOING_AWAY, "jupyter-gpumem stopped")

    def push(self, answer_for: Any) -> None:
        """After a reading: each socket gets its notebook's answer if it changed."""
        for socket in list(self._sockets):
            self.send(socket, answer_for(socket.notebook))


class DevicesSocket(WebSocketMixin, WebSocketHandler, JupyterHandler):
    notebook: str | None = None
    auth_resource = KERNELS_RESOURCE

    def set_default_headers(self) -> None:
        """No page headers (CSP and the like) on a websocket upgrade, as jupyter_server's own."""

    @property
    def service(self) -> Any:
        return self.settings["jupyter_gpumem"]

    @ws_authenticated
    @authorized
    async def get(self, *args: Any, **kwargs: Any) -> None:
        await super().get(*args, **kwargs)

    async def open(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().open()  # jupyter_server's keep-alive pings
        try:
            self.notebook = self._notebook()
        except BadRequest as exc:
            reason = close_reason(str(exc))
            log.info("jupyter-gpumem: refused a /devices socket: %s", reason)
            self.close(POLICY_VIOLATION, reason)
            return
        watchers = self.service.watchers
        watchers.add(self)
        self.service.sampler.touch()
        answer = await self.service.devices_answer(self.notebook)
        watchers.send(self, answer)

    def _notebook(self) -> str | None:
        args = {k: v for k, v in self.request.query_arguments.items() if k not in AUTH_PARAMS}
        unknown = sorted(set(args) - {"notebook"})
        if unknown:
            raise BadRequest(unknown_params_message(unknown, "notebook"))
        values = args.get("notebook")
        if values is None:
            return None
        if len(values) != 1:
            raise BadRequest("give the query parameter 'notebook' once")
        return check_notebook_path(values[0].decode("utf-8", "replace"))

    def on_message(self, message: Any) -> None:
        """The socket only speaks; what a client says is ignored."""

    def on_close(self) -> None:
        service = self.settings.get("jupyter_gpumem")  # gone when the server is shutting down
        if service is not None:
            service.watchers.discard(self)


def route(base_url: str) -> tuple[str, type]:
    return (url_path_join(base_url, API_PREFIX, "devices", "ws") + "/?", DevicesSocket)
