"""The gauges through the hub's proxy: ``GET {base_url}jupyter-gpumem/metrics``, for a bearer token
that the hub says holds ``GpuMem.hub_metrics_scope`` (docs/server.md, "Who answers a scrape").

Under JupyterHub the proxy sends ``/user/<name>/<server>/`` to the server the hub started for that
user, and only there: the route is the hub's, so a scrape of it is answered by that server and no
other, whoever listens on which port. The hub's own tokens are no use here: a single-user server
lets in only a token with ``access:servers`` for it, which is full access (run code as the user).
So Prometheus holds a token of a JupyterHub custom scope (``custom:...``, JupyterHub 5 and later)
that the hub defines and grants, and that nothing but this route reads; the route asks the hub's
whoami (``GET /hub/api/user`` with that token, ``hub_api.Hub.scopes``) which scopes the token
holds, and answers with the gauges where the scope is among them. This is a plain tornado
handler: jupyter_server's login and Authorizer, which want ``access:servers``, are not asked.

Verdicts are kept per token (a SHA-256 of it) for a while, so a scrape every few seconds costs
the hub one request a minute; a hub that does not answer is a 503, and is asked again next time.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from tornado import web

from jupyter_gpumem.server.hub_api import Hub, HubError, HubRefused
from jupyter_gpumem.server.metrics import listener_exposition

ALLOWED_SECONDS = 60.0  # a token the hub let in is asked about again after this long
REFUSED_SECONDS = 10.0  # and one it refused
MAX_VERDICTS = 64  # tokens remembered at once, the oldest forgotten first
HUB_SECONDS = 5.0  # the whoami's answer, whole; a scrape times out after 10 s by default


def accepted_scopes(scope: str, user: str, server_name: str) -> frozenset[str]:
    """The scope, and the same scope filtered to this server's user or to this server
    (JupyterHub's ``!user=`` and ``!server=`` filters), any of which lets a token in."""
    return frozenset({scope, f"{scope}!user={user}", f"{scope}!server={user}/{server_name}"})


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` (or ``token <token>``) header, else None."""
    kind, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if kind.lower() in ("bearer", "token") and token and " " not in token else None


class ScopeCheck:
    """Whether the hub says a token holds one of ``accepted``; verdicts kept per token."""

    def __init__(
        self,
        api_url: str,
        accepted: frozenset[str],
        scopes_of: Callable[[str], list[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.accepted = accepted
        self._scopes_of = scopes_of or (lambda token: Hub(api_url, token, HUB_SECONDS, HUB_SECONDS).scopes())
        self._clock = clock
        self._verdicts: OrderedDict[bytes, tuple[bool, float]] = OrderedDict()
        self.hub_requests = 0

    async def allows(self, token: str) -> bool | None:
        """True or False as the hub says; None where the hub did not answer (nothing kept)."""
        key = hashlib.sha256(token.encode()).digest()
        kept = self._verdicts.get(key)
        if kept is not None and kept[1] > self._clock():
            return kept[0]
        self.hub_requests += 1
        try:
            scopes = await asyncio.get_running_loop().run_in_executor(None, self._scopes_of, token)
        except HubRefused:
            allowed = False
        except HubError:
            return None
        else:
            allowed = not self.accepted.isdisjoint(scopes)
        self._verdicts[key] = (allowed, self._clock() + (ALLOWED_SECONDS if allowed else REFUSED_SECONDS))
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > MAX_VERDICTS:
            self._verdicts.popitem(last=False)
        return allowed


class HubScrapeHandler(web.RequestHandler):
    """``GET``/``HEAD`` of the gauges, as the metrics listener gives them, for a token with the scope."""

    SUPPORTED_METHODS = ("GET", "HEAD")

    def initialize(self, check: ScopeCheck) -> None:
        self.check = check

    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        token = bearer_token(self.request.headers.get("Authorization", ""))
        if token is None:
            self.set_header("WWW-Authenticate", "Bearer")
            return self._refuse(401, "a bearer token with the hub's metrics scope is needed")
        allowed = await self.check.allows(token)
        if allowed is None:
            return self._refuse(503, "the hub did not answer whether the token holds the metrics scope")
        if not allowed:
            return self._refuse(403, "the hub says this token holds none of " + ", ".join(sorted(self.check.accepted)))
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(listener_exposition(kernel_names=False))

    head = get

    def _refuse(self, code: int, reason: str) -> None:
        self.set_status(code)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(reason + "\n")


def hub_scrape_route(base_url: str, scope: str, environ: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    """The route, where the server runs under a hub (``JUPYTERHUB_API_URL`` and ``JUPYTERHUB_USER``
    set) and ``scope`` is not empty; else none."""
    env = os.environ if environ is None else environ
    api_url, user = env.get("JUPYTERHUB_API_URL", ""), env.get("JUPYTERHUB_USER", "")
    if not scope or not api_url or not user:
        return []
    check = ScopeCheck(api_url, accepted_scopes(scope, user, env.get("JUPYTERHUB_SERVER_NAME", "")))
    return [(base_url.rstrip("/") + "/jupyter-gpumem/metrics", HubScrapeHandler, {"check": check})]
