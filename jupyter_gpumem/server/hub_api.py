"""JupyterHub's REST API, as the hub discovery service reads it (which scopes its token holds and
which servers are ready) and as a server checks a scrape's token (which scopes it holds,
``hub_scrape.py``). Nothing else in the package speaks to the hub.

Read from JupyterHub's source (jupyterhub 6.1.1, jupyterhub/apihandlers/): ``GET /hub/api/user``
(whoami, ``SelfAPIHandler`` in users.py) answers the token owner's model with ``scopes``, the
sorted expanded scopes; ``GET /hub/api/users?state=ready`` (``UserListAPIHandler.get``) answers,
to a request that accepts ``PAGINATION_MEDIA_TYPE``, ``{"items": [...], "_pagination": {"offset",
"limit", "total", "next"}}`` (``paginated_model`` in base.py), each item a user model
(``user_model``) whose ``servers`` maps a server name to its server model (``server_model``, with
``ready``), the key present only with ``read:servers``.
"""

from __future__ import annotations

import json
import reprlib
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

# jupyterhub/apihandlers/base.py (6.1.1): PAGINATION_MEDIA_TYPE; with it GET /users answers
# {"items": [...], "_pagination": {"offset", "limit", "total", "next"}}.
PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"
SCOPES_NEEDED = ("list:users", "read:users:name", "read:servers")
# The page size asked for: JupyterHub's default api_page_max_limit (jupyterhub/app.py, 6.1.1); a
# hub whose maximum is lower answers pages of its maximum (``get_api_pagination``, base.py).
PAGE_LIMIT = 200
MAX_PAGES = 1_000  # requests to GET /users in one refresh: 200,000 users at PAGE_LIMIT
# One answer's bytes: a bound for a hub gone wrong, far above a page of 200 user models whose
# server models hold a dozen short fields each (``server_model``, base.py; ``user_options`` is the
# one the user fills).
MAX_ANSWER_BYTES = 16 << 20
# One answer's seconds, from the request to its last byte: the socket's timeout bounds each wait
# for a byte, not an answer that comes a byte at a time.
ANSWER_SECONDS = 60.0
_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlevel, _SHOWN.maxdict, _SHOWN.maxlist, _SHOWN.maxtuple, _SHOWN.maxset = 2, 4, 4, 4, 4


def shown(value: object) -> str:
    """``value`` (a name, or whatever the hub answered) as a message or a log line may hold it: a
    repr, so a newline, an escape sequence or any other unprintable character shows as its escape,
    cut to about 80 characters (and containers to a few items)."""
    return _SHOWN.repr(value)


class HubError(Exception):
    """The hub refused, did not answer, or answered what the service cannot use: the message says
    which, and what to give the service where it is the service's to fix."""


class HubRefused(HubError):
    """The hub answered 401 or 403: it does not take the token (or the token lacks the scope)."""


@dataclass(frozen=True)
class Server:
    """One ready single-user server, as the hub names it."""

    user: str
    name: str = ""  # "" is the user's default server
    # Its URL path behind the hub's proxy (the server model's ``url``: ``/user/alice/``, the hub's
    # base URL and escaping included); "" where the hub gave none. Not part of which server it is.
    url: str = field(default="", compare=False)


def ready_servers(users: Iterable[object]) -> list[Server]:
    """The servers the hub says are ready, from user models as ``GET /hub/api/users`` gives them:
    each a dict with ``name`` and ``servers`` (name -> server model with that ``name`` and
    ``ready``, true once the server answers). A HubError for anything else, so a list the service
    cannot read never replaces the targets. A user model without ``servers`` means the token lacks
    ``read:servers`` (the hub leaves the key out then, ``user_model`` in base.py, 6.1.1)."""
    found = set()
    for user in users:
        if not isinstance(user, dict) or not isinstance(user.get("name"), str) or not user["name"]:
            raise HubError(
                f"the hub's user list holds {shown(user)}, where JupyterHub gives a user model with a name "
                "(a string) and its servers"
            )
        if "servers" not in user:
            raise HubError(
                f"the hub's model of user {shown(user['name'])} has no servers: give the service the scope read:servers"
            )
        if not isinstance(user["servers"], dict):
            raise HubError(
                f"the hub's model of user {shown(user['name'])} has servers {shown(user['servers'])}, where JupyterHub "
                "gives an object of server models by name"
            )
        for name, model in user["servers"].items():
            if not isinstance(model, dict) or model.get("name") != name or not isinstance(model.get("ready"), bool):
                raise HubError(
                    f"the hub's model of server {shown(name)} of user {shown(user['name'])} is {shown(model)}, where "
                    "JupyterHub gives a server model with its name and ready (true or false)"
                )
            if model["ready"]:
                url = model.get("url")
                found.add(Server(user["name"], name, url if isinstance(url, str) and url.startswith("/") else ""))
    return sorted(found, key=lambda s: (s.user, s.name))


def checked_page(page: object, offset: int) -> tuple[list, int | None]:
    """A page of ``GET /users`` asked at ``offset``: its items, and the offset of the next page
    (None at the last). ``paginated_model`` (base.py, 6.1.1) gives ``next`` as null or
    ``{"offset": offset + limit, "limit", "url"}``; the url is never followed, and a ``next``
    that does not move on is a HubError, so paging always ends."""
    pagination = page.get("_pagination") if isinstance(page, dict) else None
    if not isinstance(pagination, dict) or not isinstance(page.get("items"), list):
        raise HubError(
            f"the hub's user list at offset {offset} is not a page of JupyterHub 2.0 or later "
            f'({{"items": [...], "_pagination": {{...}}}}): it is {shown(page)}'
        )
    following = pagination.get("next")
    if following is None:
        return page["items"], None
    further = following.get("offset") if isinstance(following, dict) else None
    if type(further) is not int or further <= offset:
        raise HubError(
            f"the hub's user list at offset {offset}: _pagination.next is {shown(following)}, where JupyterHub "
            f'gives null or an offset past {offset} ({{"offset": {offset + PAGE_LIMIT}, ...}})'
        )
    return page["items"], further


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is an HTTPError: urllib would send the request's headers, the token with them, on to
    wherever the answer points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class Hub:
    """The hub's REST API, read with the service's token (``Authorization: token ...``)."""

    def __init__(self, api_url: str, token: str, timeout: float = 10.0, answer_seconds: float = ANSWER_SECONDS) -> None:
        self.api_url = api_url.rstrip("/") + "/"
        self.token, self.timeout, self.answer_seconds = token, timeout, answer_seconds

    def get(self, path: str, accept: str = "application/json") -> object:
        """The hub's answer to ``GET path``, parsed; a HubError where it refuses, does not answer,
        or answers more than MAX_ANSWER_BYTES or what is not JSON."""
        request = urllib.request.Request(self.api_url + path.lstrip("/"))
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Accept", accept)
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                body = self.read_answer(response, path, time.monotonic() + self.answer_seconds)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise HubRefused(
                    f"the hub refused {path} ({exc.code}): give the service a role with the scopes "
                    + ", ".join(SCOPES_NEEDED)
                ) from None
            raise HubError(f"the hub answered {exc.code} to {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HubError(f"the hub at {self.api_url} did not answer {path}: {exc}") from None
        try:
            return json.loads(body.decode())
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python parses
            raise HubError(f"the hub's answer to {path} is not JSON: {shown(str(exc))}") from None

    def read_answer(self, response: IO[bytes], path: str, deadline: float) -> bytes:
        """The answer's bytes, read until it ends; a HubError once it is over MAX_ANSWER_BYTES or
        still coming at ``deadline`` (``time.monotonic()``)."""
        chunks, size = [], 0
        while chunk := response.read1(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise HubError(f"the hub's answer to {path} is over {MAX_ANSWER_BYTES:,} bytes; nothing of it was used")
            if time.monotonic() > deadline:
                raise HubError(
                    f"the hub did not finish its answer to {path} within {self.answer_seconds:g} s "
                    f"({size:,} bytes by then); nothing of it was used"
                )
        return b"".join(chunks)

    def scopes(self) -> list[str]:
        """The scopes the token holds, as the hub's whoami (``GET /user``) lists them."""
        model = self.get("user")
        scopes = model.get("scopes") if isinstance(model, dict) else None
        if not isinstance(scopes, list) or not all(isinstance(scope, str) for scope in scopes):
            raise HubError(
                "the hub's whoami answer (GET /hub/api/user) has no list of scopes, which JupyterHub 2.0 and "
                f"later give; the service cannot tell whether its token reaches servers (it has {shown(model)})"
            )
        return scopes

    def users_with_ready_servers(self) -> list[object]:
        """The user models of every page of users with a ready server (at most MAX_PAGES requests)."""
        users: list[object] = []
        offset: int | None = 0
        for _ in range(MAX_PAGES):
            page = self.get(f"users?state=ready&offset={offset}&limit={PAGE_LIMIT}", accept=PAGINATION_MEDIA_TYPE)
            items, offset = checked_page(page, offset)
            users.extend(items)
            if offset is None:
                return users
        raise HubError(
            f"the hub's user list did not end within {MAX_PAGES:,} requests (the last at offset {offset}); "
            "nothing of it was used"
        )
