"""Prometheus targets from a JupyterHub: one per running single-user server's metrics listener.

``python -m jupyter_gpumem.server.hub_discovery --output FILE --via-proxy URL`` runs as a
JupyterHub service. It asks the hub's REST API which servers are ready
(``GET /hub/api/users?state=ready``) and writes a Prometheus ``file_sd`` file with one target
per server, labelled ``hub_user`` and ``server_name`` from the hub's answer: the hub's proxy and
the server's own route, ``<its URL path>jupyter-gpumem/metrics`` (``hub_scrape.py``; who answers
there is the hub's to say), or with ``--target``/``--target-for`` the address its
``GpuMem.metrics_port`` listener has (whoever holds that address answers). A server's own environment (``JUPYTERHUB_USER``) is its
user's to change, so identity is never taken from it: Prometheus's scrape job keeps these target
labels over anything a server exports (``honor_labels: false``, deploy/prometheus/prometheus.yml).

For the listener, the hub's server model names no address a server listens on (``server_model`` in
jupyterhub/apihandlers/base.py, JupyterHub 6.1.1, has name, url path, ready, pending, and
``state`` only with ``admin:server_state``), so the address is the operator's: a template over
the hub's names (``jupyter-{username}:9500``, a container or service name the spawner gives
each server, with the port set by ``c.GpuMem.metrics_port`` in the Spawner's config), or one
address per server (``--target-for alice=10.0.0.5:9500``).

The service's token needs ``list:users`` (the list; it brings ``read:users:name``) and
``read:servers`` (each user's server models). Neither reaches a server: per jupyterhub/scopes.py
(6.1.1) ``read:servers`` reads "users' names and their server models (excluding the server
state)", while ``access:servers`` ("Access user servers via API or browser") is what a
single-user server checks before it lets a token in. At start the service asks the hub which
scopes its token holds (``GET /hub/api/user``) and refuses to run with one that can reach a
kernel (``SCOPES_THAT_REACH_SERVERS``).

The file is written atomically (a temporary file beside it, then renamed), and only when it
changes; while the hub does not answer, the last file stays as it was. A link, FIFO, device or
folder at its path is refused, never read or replaced (``core/files.py``), and what is there is
read no further than the new text's length.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import re
import signal
import string
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_gpumem.core import files
from jupyter_gpumem.server.hub_api import SCOPES_NEEDED, Hub, HubError, Server, ready_servers, shown

log = logging.getLogger("jupyter_gpumem.hub_discovery")

# Scopes (jupyterhub/scopes.py, 6.1.1) that reach a user's server, directly or by making a token
# that does: access:servers; tokens ("Read, write, create and delete user tokens"); admin:users
# ("tantamount to superuser"); shares (it includes access:servers).
SCOPES_THAT_REACH_SERVERS = ("access:servers", "tokens", "admin:users", "shares")
TEMPLATE_FIELDS = ("username", "servername", "server_suffix")
METRICS_ROUTE = "jupyter-gpumem/metrics"  # under a server's URL path (server/hub_scrape.py)
INTERVAL_RANGE = (1.0, 3600.0)
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])")
# What a hub name may hold to go into a --target: one host label's characters. A '.' would make
# another domain (alice.default in jupyter-{username} is the service jupyter-alice of namespace
# default to a Kubernetes resolver), and spawners that name containers escape the rest anyway.
_NAME_IN_HOST = re.compile(r"[A-Za-z0-9_-]*")  # fullmatch: "$" would let a final newline in


class DiscoveryError(Exception):
    """Bad input or a hub that refuses: the message says what is wrong and what is valid."""


class TokenReachesServers(DiscoveryError):
    """The service's token holds a scope that reaches users' servers: the service will not run."""


@dataclass(frozen=True)
class Addresses:
    """Where each server's metrics listener is: per-server addresses first, else the template."""

    template: str | None = None
    per_server: dict[tuple[str, str], str] = field(default_factory=dict)

    def address_of(self, server: Server) -> str | None:
        """The address given for ``server``, else the template's (a DiscoveryError where a name the
        template uses is not one host label's characters), else None."""
        fixed = self.per_server.get((server.user, server.name))
        if fixed is not None:
            return fixed
        if self.template is None:
            return None
        used = {name for _, name, _, _ in string.Formatter().parse(self.template) if name}
        names = {"username": server.user, "servername": server.name, "server_suffix": server.name}
        if any(not _NAME_IN_HOST.fullmatch(names[f]) for f in used):
            raise DiscoveryError(
                "its name has characters other than letters, digits, '-' and '_', which --target does not put "
                "into a host name; give it a --target-for"
            )
        suffix = f"-{server.name}" if server.name else ""
        return self.template.format(username=server.user, servername=server.name, server_suffix=suffix)


@dataclass(frozen=True)
class ThroughProxy:
    """Every server scraped through the hub's proxy (``--via-proxy``): one address, the proxy's, and
    each server's own route, ``<its URL path>jupyter-gpumem/metrics``. The proxy sends a route to
    the server the hub started for it, so who answers is the hub's to say, not a port's."""

    scheme: str
    address: str

    def group(self, server: Server) -> dict:
        """The file_sd group of ``server``: its route as ``__metrics_path__``, unescaped, since
        Prometheus escapes the path it is given (``url.URL.Path``)."""
        path = urllib.parse.unquote(server.url).rstrip("/") + "/" + METRICS_ROUTE
        labels = {"hub_user": server.user, "server_name": server.name, "__metrics_path__": path}
        return {"targets": [self.address], "labels": {**labels, "__scheme__": self.scheme}}


def proxy_from(url: str) -> ThroughProxy:
    """``--via-proxy``: the hub's public URL as Prometheus reaches it, scheme and host only."""
    parts = urllib.parse.urlsplit(url)
    wrong = parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc
    if wrong or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise DiscoveryError(
            f"--via-proxy {shown(url)}: give the hub's public URL as http(s)://HOST[:PORT], with no path (the "
            "servers' URL paths come from the hub)"
        )
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0  # not a port: refused below
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return ThroughProxy(parts.scheme, checked_address(f"{host}:{port}", f"--via-proxy {shown(url)}"))


def server_label(server: Server) -> str:
    return shown(f"{server.user}/{server.name}" if server.name else server.user)


def listener(address: str) -> tuple[str, int]:
    """Where ``address`` (``HOST:PORT``, checked) connects: the host without case (RFC 4343) and an IP
    address in one spelling, and the port as a number, so two spellings of one place are equal."""
    host, _, port = address.rpartition(":")
    try:
        host = ipaddress.ip_address(host.strip("[]")).compressed
    except ValueError:
        host = host.lower()
    return host, int(port)


def checked_address(address: str, what: str) -> str:
    """``address`` if it is ``host:port`` (port 1 to 65535), else a DiscoveryError naming ``what``."""
    host, sep, port = address.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise DiscoveryError(
            f"{what}: {shown(address)} is not HOST:PORT (a host name or IP address of letters, digits, '.', '-', '_', "
            "or [IPv6], and a port from 1 to 65535)"
        )
    return address


def checked_template(template: str) -> str:
    """The template if it formats with the hub's names only and gives ``HOST:PORT``."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise DiscoveryError(f"--target {template!r}: {exc}") from None
    unknown = sorted(f for f in fields if f not in TEMPLATE_FIELDS)
    if unknown:
        raise DiscoveryError(
            f"--target {template!r}: unknown field(s) {', '.join(unknown)}; valid fields: "
            + ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
        )
    checked_address(template.format(username="alice", servername="gpu", server_suffix="-gpu"), f"--target {template!r}")
    return template


def parse_target_for(text: str) -> tuple[tuple[str, str], str]:
    """``USER[/SERVER]=HOST:PORT`` as ``((user, server_name), address)``."""
    name, sep, address = text.partition("=")
    user, _, server_name = name.partition("/")
    if not sep or not user:
        raise DiscoveryError(f"--target-for {text!r}: expected USER=HOST:PORT or USER/SERVER=HOST:PORT")
    return (user, server_name), checked_address(address, f"--target-for {text!r}")


def target_groups(servers: Iterable[Server], addresses: Addresses | ThroughProxy) -> tuple[list[dict], list[str]]:
    """The file_sd groups (one per server with an address of its own, or its route through the
    proxy) and a line for each server left out. Servers that would share a listener are all left
    out, in one line naming each: one address cannot tell two servers apart, so no label can be
    right for it."""
    if isinstance(addresses, ThroughProxy):
        return routes_through(addresses, servers)
    at: dict[tuple[str, int], list[tuple[Server, str]]] = {}
    left_out = []
    for server in dict.fromkeys(servers):  # a server listed twice is one server
        try:
            address = addresses.address_of(server)
            if address is None:
                raise DiscoveryError("no --target template and no --target-for for it")
            checked_address(address, "its address")
        except DiscoveryError as exc:
            left_out.append(f"{server_label(server)}: {exc}")
            continue
        at.setdefault(listener(address), []).append((server, address))
    groups = []
    for claims in at.values():
        if len(claims) > 1:
            left_out.append(sharing_line([server for server, _ in claims], claims[0][1]))
            continue
        ((server, address),) = claims
        groups.append({"targets": [address], "labels": {"hub_user": server.user, "server_name": server.name}})
    groups.sort(key=lambda g: (g["labels"]["hub_user"], g["labels"]["server_name"]))
    return groups, left_out


def routes_through(proxy: ThroughProxy, servers: Iterable[Server]) -> tuple[list[dict], list[str]]:
    """One group per server with a URL path from the hub; a line for each without one."""
    groups, left_out = [], []
    for server in dict.fromkeys(servers):
        if server.url:
            groups.append(proxy.group(server))
        else:
            left_out.append(
                f"{server_label(server)}: the hub's model of it has no URL path to scrape through the proxy"
            )
    groups.sort(key=lambda g: (g["labels"]["hub_user"], g["labels"]["server_name"]))
    return groups, left_out


def sharing_line(servers: list[Server], address: str) -> str:
    labels = sorted(server_label(server) for server in servers)
    named = ", ".join(labels[:-1]) + " and " + labels[-1]
    return (
        f"{named} would {'both' if len(labels) == 2 else 'all'} be scraped at {address}, so "
        f"{'neither' if len(labels) == 2 else 'none'} is written: give each its own --target-for, or a --target "
        "that keeps them apart"
    )


def scopes_reaching_servers(scopes: Iterable[str]) -> list[str]:
    """The scopes (filters kept, ``access:servers!user=alice``) that reach a server."""
    return sorted(s for s in scopes if s.partition("!")[0] in SCOPES_THAT_REACH_SERVERS)


def file_text(groups: list[dict]) -> str:
    return json.dumps(groups, indent=1, sort_keys=True) + "\n"


def holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` holds ``data`` now, read without following a link or blocking on a FIFO and
    no further than ``len(data) + 1`` bytes; a DiscoveryError where it is not a regular file."""
    try:
        with files.open_regular_for_reading(path) as current:
            return current.read(len(data) + 1) == data
    except FileNotFoundError:
        return False
    except files.UnsafePathError as exc:
        raise DiscoveryError(f"the targets file: {exc}") from None
    except OSError:
        return False  # unreadable: it is replaced


def write_atomically(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` through a temporary file beside it (created exclusively, mode 0644)
    and a rename, so Prometheus never reads half a file. False (nothing written) when the file
    already holds it; a DiscoveryError, with nothing changed, where a link, FIFO, device or folder
    is at ``path`` or the file cannot be written."""
    data = text.encode()
    if holds(path, data):
        return False
    try:
        with files.replaced_on_success(path, mode=0o600) as out:
            os.fchmod(out.fileno(), 0o644)  # Prometheus often runs as another user; no umask applies
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except files.UnsafePathError as exc:
        raise DiscoveryError(f"the targets file: {exc}") from None
    except OSError as exc:
        raise DiscoveryError(f"could not write the targets file {str(path)!r}: {exc.strerror or exc}") from None
    return True


def refuse_scopes_that_reach_servers(hub: Hub) -> None:
    reaching = scopes_reaching_servers(hub.scopes())
    if reaching:
        raise TokenReachesServers(
            "this token can reach users' servers (" + ", ".join(reaching) + "); give the service a role with "
            "only " + ", ".join(SCOPES_NEEDED)
        )


def checking_scopes_first(hub: Hub, discover: Callable[[], int]) -> Callable[[], int]:
    """``discover``, run only once the hub has said the token reaches no server (asked until it answers)."""
    checked = threading.Event()

    def discover_if_safe() -> int:
        if not checked.is_set():
            refuse_scopes_that_reach_servers(hub)
            checked.set()
        return discover()

    return discover_if_safe


def discover_once(hub: Hub, addresses: Addresses | ThroughProxy, output: Path, said: set[str] | None = None) -> int:
    """Read the hub, write the file; the number of targets written. Each server left out is logged;
    with ``said`` (kept between calls: the lines logged and still true), only when it is new."""
    groups, left_out = target_groups(ready_servers(hub.users_with_ready_servers()), addresses)
    for line in left_out:
        if said is None or line not in said:
            log.warning("jupyter-gpumem hub discovery: no target for %s", line)
    if said is not None:
        said.clear()  # a line true again after a gap is logged again
        said.update(left_out)
    if write_atomically(output, file_text(groups)):
        log.info("jupyter-gpumem hub discovery: %d target(s) written to %s", len(groups), output)
    return len(groups)


def run_forever(discover: Callable[[], int], interval: float, stop: threading.Event) -> None:
    """``discover`` every ``interval`` seconds until ``stop``; a hub that does not answer, or answers
    what cannot be used, is asked again at the next interval (the file keeps its last targets
    meanwhile). An error is logged when it starts or changes, not at each interval, and the first
    refresh that works after it says so. A token that reaches servers ends it
    (``TokenReachesServers`` is raised)."""
    failing = None
    while not stop.is_set():
        try:
            written = discover()
        except TokenReachesServers:
            raise
        except (DiscoveryError, HubError) as exc:
            if str(exc) != failing:
                log.error("jupyter-gpumem hub discovery: %s", exc)
            failing = str(exc)
        else:
            if failing is not None:
                log.info("jupyter-gpumem hub discovery: %d target(s) from the hub again", written)
            failing = None
        stop.wait(interval)


def interval_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    low, high = INTERVAL_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds from {low:g} to {high:g}")
    return value


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_gpumem.server.hub_discovery",
        description="Write a Prometheus file_sd file with one target per ready JupyterHub server's "
        "jupyter-gpumem metrics listener, labelled hub_user and server_name by the hub.",
        epilog="The hub's API URL and the token come from JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN "
        "(JupyterHub sets both for a service it starts). The token needs only the scopes "
        + ", ".join(SCOPES_NEEDED)
        + "; one that can reach a server is refused.",
    )
    parser.add_argument("--output", required=True, type=Path, help="the targets file Prometheus reads (JSON)")
    parser.add_argument(
        "--target",
        help="address template of a server's metrics listener, HOST:PORT with "
        + ", ".join("{" + f + "}" for f in TEMPLATE_FIELDS)
        + " (e.g. jupyter-{username}{server_suffix}:9500)",
    )
    parser.add_argument(
        "--target-for",
        action="append",
        default=[],
        metavar="USER[/SERVER]=HOST:PORT",
        help="the address of one server's metrics listener (repeatable; wins over --target)",
    )
    parser.add_argument(
        "--via-proxy",
        metavar="URL",
        help="scrape every server through the hub's proxy at this URL (http(s)://HOST[:PORT], as Prometheus "
        "reaches it), at <its URL path>jupyter-gpumem/metrics; instead of --target and --target-for",
    )
    parser.add_argument("--interval", type=interval_seconds, default=30.0, help="seconds between reads (1 to 3600)")
    parser.add_argument("--once", action="store_true", help="read the hub once, write the file, exit")
    parser.add_argument("--hub-api-url", default=os.environ.get("JUPYTERHUB_API_URL"), help=argparse.SUPPRESS)
    return parser


def addresses_from(args: argparse.Namespace) -> Addresses | ThroughProxy:
    if args.via_proxy is not None:
        if args.target is not None or args.target_for:
            raise DiscoveryError("give --via-proxy, or --target and --target-for, not both")
        return proxy_from(args.via_proxy)
    if args.target is None and not args.target_for:
        raise DiscoveryError(
            "give --via-proxy URL, or --target TEMPLATE, or --target-for USER=HOST:PORT for each server"
        )
    template = None if args.target is None else checked_template(args.target)
    per_server: dict[tuple[str, str], str] = {}
    given: dict[tuple[str, int], str] = {}
    for text in args.target_for:
        server, address = parse_target_for(text)
        if server in per_server:
            raise DiscoveryError(f"--target-for {text!r}: {server_label(Server(*server))} has an address already")
        earlier = given.setdefault(listener(address), text)
        if earlier != text:
            raise DiscoveryError(f"--target-for {text!r} and {earlier!r}: two servers cannot share one address")
        per_server[server] = address
    return Addresses(template, per_server)


def checked_output(path: Path) -> Path:
    if not path.parent.is_dir():
        raise DiscoveryError(f"--output {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise DiscoveryError(f"--output {path}: is a folder; give the targets file's path")
    try:
        files.check_writable_name(path)
    except files.UnsafePathError as exc:
        raise DiscoveryError(f"--output: {exc}") from None
    return path


def hub_from_environment(api_url: str | None) -> Hub:
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not api_url or not token:
        raise DiscoveryError(
            "JUPYTERHUB_API_URL and JUPYTERHUB_API_TOKEN must be set (JupyterHub sets both for a service "
            "it starts; for one it does not, set them to the hub's API URL and the service's api_token)"
        )
    if urllib.parse.urlsplit(api_url).scheme not in ("http", "https"):
        raise DiscoveryError(f"JUPYTERHUB_API_URL {api_url!r} is not an http:// or https:// URL")
    return Hub(api_url, token)


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    try:
        addresses, output = addresses_from(args), checked_output(args.output)
        hub = hub_from_environment(args.hub_api_url)
        said: set[str] = set()
        discover = checking_scopes_first(hub, lambda: discover_once(hub, addresses, output, said))
        if args.once:
            discover()
            return 0
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        run_forever(discover, args.interval, stop)
    except (DiscoveryError, HubError) as exc:
        print(f"jupyter-gpumem hub discovery: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
