"""REST handlers under ``/jupyter-gpumem/api/``. All need a valid token (403 without one) and
the Authorizer's consent: ``read`` on ``kernels`` for the routes that name kernels (/devices,
/kernels), ``write`` on ``kernels`` for ``POST /keep`` (as for interrupting or restarting a
kernel), ``read`` on ``api`` for /config, as jupyter_server's own handlers ask it
(``@authorized`` with ``auth_resource``, which maps POST to ``write``:
jupyter_server/services/kernels/handlers.py, services/api/handlers.py and auth/decorator.py,
2.21.1). A request the Authorizer refuses is a 403.

A bad parameter is a 400 with ``{"error": ...}`` naming the valid values; anything unexpected
is logged and answered with a 500 carrying JSON, never a crashed server. ``?token=`` is how
Jupyter authenticates a script or a link, so it is never an unknown parameter.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_gpumem.server.culling import UnknownKernel, human_duration

log = logging.getLogger(__name__)

API_PREFIX = "jupyter-gpumem/api"
# jupyter_server's resource names (each handler module's AUTH_RESOURCE, 2.21.1): what
# names kernels, their pids and notebooks is "kernels"; the server's own description is "api".
KERNELS_RESOURCE = "kernels"
SERVER_RESOURCE = "api"
MAX_PATH = 4096
# jupyter_server's kernel ids are UUIDs; its own routes take ``\w+-\w+-\w+-\w+-\w+``
# (services/kernels/handlers.py, _kernel_id_regex, 2.21.1).
KERNEL_ID = re.compile(r"\w+-\w+-\w+-\w+-\w+")
MAX_KERNEL_ID = 64

# Read by jupyter_server's authentication before any handler runs: IdentityProvider.get_token
# takes handler.get_argument("token") (jupyter_server/auth/identity.py, 2.21.1), as it does for
# /metrics and the server's own REST API.
AUTH_PARAMS = ("token",)


class BadRequest(Exception):
    """A malformed parameter; the message names the valid values."""


def escaped(text: str) -> str:
    """``text`` with control and other unprintable characters written as Python escapes
    (``\\x1b``, ``\\u2028``): what a client sent, safe to put in an answer, a close reason or a log line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def param_name(key: str) -> str:
    """A query parameter's name as the client wrote it: tornado keeps names as latin-1 text
    (tornado/escape.py, parse_qs_bytes, 6.5); UTF-8 names are read back as UTF-8."""
    return key.encode("latin-1").decode("utf-8", "replace")


def unknown_params_message(unknown: list[str], valid: str) -> str:
    names = ", ".join(escaped(param_name(k)) for k in unknown)
    return f"unknown query parameter(s) {names}; valid parameters: {valid}"


class Conflict(Exception):
    """A request that cannot be done in the server's present state (409); the message says why."""


class _GpuMemHandler(APIHandler):
    allowed_params: tuple[str, ...] = ()

    @property
    def service(self) -> Any:
        return self.settings["jupyter_gpumem"]

    def _check_params(self) -> dict[str, str]:
        # JupyterLab's request helper appends a bare "?<timestamp>" cache-buster: not a parameter;
        # nor is the token, which authentication has already checked.
        args = {
            k: v
            for k, v in self.request.query_arguments.items()
            if not (k.isdigit() and v == [b""]) and k not in AUTH_PARAMS
        }
        unknown = sorted(set(args) - set(self.allowed_params))
        if unknown:
            valid = ", ".join(self.allowed_params) if self.allowed_params else "none"
            raise BadRequest(unknown_params_message(unknown, valid))
        out = {}
        for name, values in args.items():
            if len(values) != 1:
                raise BadRequest(f"give the query parameter {name!r} once, not {len(values)} times")
            try:
                out[name] = values[0].decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest(f"the query parameter {name!r} is not UTF-8 text") from None
        return out

    def _send(self, status: int, body: dict) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(body))

    async def _answer(self, produce: Any) -> None:
        try:
            params = self._check_params()
            body = await produce(params)
        except BadRequest as exc:
            self._send(400, {"error": str(exc)})
            return
        except UnknownKernel as exc:
            self._send(404, {"error": str(exc)})
            return
        except Conflict as exc:
            self._send(409, {"error": str(exc)})
            return
        except web.HTTPError:
            raise
        except Exception as exc:
            log.exception("jupyter-gpumem: %s failed", self.request.path)
            self._send(500, {"error": f"internal error: {type(exc).__name__}: {exc}"})
            return
        self._send(200, body)


def check_notebook_path(value: str) -> str:
    """A notebook path relative to the server root, as the session API spells it."""
    if not value:
        raise BadRequest(
            "notebook must be a notebook path relative to the server root, e.g. notebooks/a.ipynb; got an empty value"
        )
    if len(value) > MAX_PATH:
        raise BadRequest(f"notebook must be a path of at most {MAX_PATH} characters")
    if "\x00" in value or value.startswith("/") or "\\" in value:
        raise BadRequest(
            f"notebook must be a path relative to the server root, e.g. notebooks/a.ipynb; got {value[:200]!r}"
        )
    if ".." in value.split("/") or posixpath.normpath(value) != value:
        raise BadRequest(
            f"notebook must be a normalised path inside the server root (no '..', '.', '//'); got {value[:200]!r}"
        )
    return value


def check_kernel_id(value: str | None) -> str:
    """A kernel id as jupyter_server writes them (a UUID)."""
    if value is None:
        raise BadRequest("give the kernel to keep running: ?kernel=<kernel id>, e.g. ?kernel=3f1c9a2e-...")
    if len(value) > MAX_KERNEL_ID or not KERNEL_ID.fullmatch(value):
        raise BadRequest(
            f"kernel must be a kernel id such as 3f1c9a2e-5b7d-4e21-9c0a-1d2e3f4a5b6c; got {escaped(value[:80])!r}"
        )
    return value


class DevicesHandler(_GpuMemHandler):
    """The answer is built once per reading and shared; a client that sends the ETag of the copy
    it has (``If-None-Match``) gets a bodiless 304 while the values are the same. ``no-cache``
    lets a browser keep the copy but never use it without asking, and ``private`` keeps it out of
    shared caches (it names users' processes)."""

    allowed_params = ("notebook",)
    auth_resource = KERNELS_RESOURCE

    @web.authenticated
    @authorized
    async def get(self) -> None:
        async def produce(params: dict) -> Any:
            notebook = params.get("notebook")
            if notebook is not None:
                notebook = check_notebook_path(notebook)
            return await self.service.devices_answer(notebook)

        await self._answer(produce)

    def _send(self, status: int, body: Any) -> None:
        if status != 200:
            super()._send(status, body)
            return
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-cache, private")
        self.set_header("Etag", body.etag)  # tornado then leaves the ETag and the 304 to us
        if self.check_etag_header():
            self.service.answers_sent["not_modified"] += 1
            self.set_status(304)
            self.finish()
            return
        self.service.answers_sent["full"] += 1
        self.finish(body.body)


class KernelsHandler(_GpuMemHandler):
    auth_resource = KERNELS_RESOURCE

    @web.authenticated
    @authorized
    async def get(self) -> None:
        async def produce(params: dict) -> dict:
            kernels = await self.service.kernels()
            return {"kernels": [k.to_json() for k in kernels]}

        await self._answer(produce)


class KeepHandler(_GpuMemHandler):
    """``POST /keep?kernel=<id>``: the user keeps an idle kernel, so the culler counts its idle
    time from now (``Culler.keep``). A malformed id is a 400, an unknown kernel a 404, culling
    off a 409; none of them changes anything."""

    allowed_params = ("kernel",)
    auth_resource = KERNELS_RESOURCE

    @web.authenticated
    @authorized
    async def post(self) -> None:
        async def produce(params: dict) -> dict:
            kernel_id = check_kernel_id(params.get("kernel"))
            culler = self.service.culler
            idle_after = culler.config.cull_idle_after
            if idle_after <= 0:
                raise Conflict(
                    "culling is off on this server (GpuMem.cull_idle_after=0): no kernel is shut down for idling"
                )
            earliest = culler.keep(kernel_id)
            return {
                "kernel_id": kernel_id,
                "cull_at": earliest,
                "message": f"kept running: it is shut down only once idle {human_duration(idle_after)} again",
            }

        await self._answer(produce)


class ConfigHandler(_GpuMemHandler):
    auth_resource = SERVER_RESOURCE

    @web.authenticated
    @authorized
    async def get(self) -> None:
        async def produce(params: dict) -> dict:
            return self.service.config_json()

        await self._answer(produce)


ROUTES = (
    ("devices", DevicesHandler),
    ("kernels", KernelsHandler),
    ("keep", KeepHandler),
    ("config", ConfigHandler),
)


def handlers(base_url: str) -> list[tuple[str, type]]:
    return [(url_path_join(base_url, API_PREFIX, name) + "/?", cls) for name, cls in ROUTES]
