"""JupyterHub's REST API, as the hub discovery service reads it: which scopes its token holds and
which servers are ready. Nothing else in the package speaks to the hub.

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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

# jupyterhub/apihandlers/base.py (6.1.1): PAGINATION_MEDIA_TYPE; with it GET /users answers
# {"items": [...], "_pagination": {"offset", "limit", "total", "next"}}.
PAGINATION_MEDIA_TYPE = "application/jupyterhub-pagination+json"
SCOPES_NEEDED = ("list:users", "read:users:name", "read:servers")


class HubError(Exception):
    """The hub refused, did not answer, or answered what the service cannot use: the message says
    which, and what to give the service where it is the service's to fix."""


@dataclass(frozen=True)
class Server:
    """One ready single-user server, as the hub names it."""

    user: str
    name: str = ""  # "" is the user's default server


def ready_servers(users: Iterable[dict]) -> list[Server]:
    """The servers the hub says are ready, from user models as ``GET /hub/api/users`` gives them
    (each with ``servers``: name -> server model, whose ``ready`` is true once the server answers).
    A user model without ``servers`` means the token lacks ``read:servers`` (the hub leaves the key
    out then, ``user_model`` in jupyterhub/apihandlers/base.py, 6.1.1): a HubError, so an
    empty file never replaces the targets."""
    found = []
    for user in users:
        if not isinstance(user.get("servers"), dict):
            raise HubError(
                f"the hub's model of user {user.get('name')!r} has no servers: give the service the scope read:servers"
            )
        for name, model in user["servers"].items():
            if isinstance(model, dict) and model.get("ready"):
                found.append(Server(str(user["name"]), str(name)))
    return sorted(found, key=lambda s: (s.user, s.name))


class Hub:
    """The hub's REST API, read with the service's token (``Authorization: token ...``)."""

    def __init__(self, api_url: str, token: str, timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/") + "/"
        self.token, self.timeout = token, timeout

    def get(self, path: str, accept: str = "application/json") -> object:
        request = urllib.request.Request(self.api_url + path.lstrip("/"))
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise HubError(
                    f"the hub refused {path} ({exc.code}): give the service a role with the scopes "
                    + ", ".join(SCOPES_NEEDED)
                ) from None
            raise HubError(f"the hub answered {exc.code} to {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HubError(f"the hub at {self.api_url} did not answer {path}: {exc}") from None

    def scopes(self) -> list[str]:
        """The scopes the token holds, as the hub's whoami (``GET /user``) lists them."""
        model = self.get("user")
        return list(model.get("scopes", [])) if isinstance(model, dict) else []

    def users_with_ready_servers(self) -> list[dict]:
        """Every user with a ready server, page by page."""
        users: list[dict] = []
        offset = 0
        while True:
            page = self.get(f"users?state=ready&offset={offset}", accept=PAGINATION_MEDIA_TYPE)
            if isinstance(page, list):  # a hub before pagination answers one list
                return users + page
            if not isinstance(page, dict) or not isinstance(page.get("items"), list):
                raise HubError("the hub's user list is not a list of users")
            users.extend(page["items"])
            following = (page.get("_pagination") or {}).get("next")
            if not following:
                return users
            offset = int(following["offset"])
