"""This server's kernels: id, name, pid, notebook path, execution state, last activity, and the
allocator settings a kernel with jupyter_gpumem loaded published (``kernel_settings.py``).

A kernel's pid comes from its own answer to a control-channel ``usage_request`` (ipykernel
>= 6.10 replies with ``pid``), which is right even when the kernel was launched through a
wrapper script. Until that answer arrives, or when a kernel does not answer, the pid of the
process the provisioner started is used. Pids are cached per kernel and asked for again only
when the provisioner's process changes (a restart).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from queue import Empty
from typing import Any

import zmq
from tornado.web import HTTPError
from traitlets import TraitError

from jupyter_gpumem.core.env_table import ALLOCATOR_VAR, PREALLOCATE_VAR
from jupyter_gpumem.server.idle_proof import shell_answers
from jupyter_gpumem.server.kernel_settings import PublishedSettingsReader, connection_dir, remove_stale_files
from jupyter_gpumem.settings.published import PASSTHROUGH, REJECTED, PublishedSettings, allocator_kind

log = logging.getLogger(__name__)

ASK_AGAIN_AFTER = 30.0  # seconds before asking a kernel that did not answer again
STARTING_NUDGE_AFTER = 20.0  # seconds a kernel may read "starting" before it is asked for a status
SWEEP_EVERY_S = 60.0  # how often the runtime folder is searched for files of killed kernels


@dataclass(frozen=True)
class KernelInfo:
    kernel_id: str
    kernel_name: str | None
    pid: int | None
    notebook_path: str | None
    execution_state: str | None
    last_activity: datetime | None = None  # timezone-aware UTC, as jupyter_server sets it
    # What the kernel's launch environment says about preallocation (see launch_preallocates);
    # not in the JSON: /devices shows the decision (device_report.preallocation).
    launch_preallocates: bool | None = None
    # The settings the kernel published (jupyter_gpumem loaded in it), else None.
    settings: PublishedSettings | None = None

    def to_json(self) -> dict:
        return {
            "kernel_id": self.kernel_id,
            "kernel_name": self.kernel_name,
            "pid": self.pid,
            "notebook_path": self.notebook_path,
            "execution_state": self.execution_state,
            "last_activity": iso_utc(self.last_activity),
        }


def iso_utc(when: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z``, as jupyter_server's own kernel model writes it; None stays None.

    A naive datetime is taken to be UTC (jupyter_server's ``utcnow()`` is always aware).
    """
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


# What asking jupyter_server's kernel manager for a kernel shut down meanwhile raises: its
# MappingKernelManager answers 404 (``_check_kernel_id``, services/kernels/kernelmanager.py,
# jupyter_server 2.21.1); jupyter_client's MultiKernelManager raises KeyError.
KERNEL_GONE = (KeyError, HTTPError)


def last_activity(km: Any) -> datetime | None:
    """The kernel's ``last_activity``: set by jupyter_server's MappingKernelManager when it starts
    the kernel and on every iopub message (services/kernels/kernelmanager.py, 2.21.1); None
    before that or from a kernel manager that does not keep it. Before it is set, reading
    ServerKernelManager's trait raises TraitError (``Instance(datetime)``, no default): a kernel
    listed while it starts made a whole kernels listing fail."""
    try:
        value = km.last_activity
    except (AttributeError, TraitError):
        return None
    return value if isinstance(value, datetime) else None


@dataclass
class _PidEntry:
    provisioner_pid: int | None
    pid: int | None
    answered: bool = False  # the kernel said its pid in a usage_reply
    ask_again_at: float = 0.0  # monotonic time; kernels still starting may not answer yet


def provisioner_pid(km: Any) -> int | None:
    """The pid of the process a local provisioner started, or None (remote kernels)."""
    provisioner = getattr(km, "provisioner", None)  # None while the kernel is not running
    process = getattr(provisioner, "process", None)
    pid = getattr(process, "pid", None)
    if isinstance(pid, int) and pid > 0:
        return pid
    pid = getattr(provisioner, "pid", None)  # some provisioners say it directly
    return pid if isinstance(pid, int) and pid > 0 else None


# What asking a kernel over its control channel raises: Empty when no reply comes in time,
# ZMQError and OSError when the kernel or its sockets are gone, RuntimeError from a client
# whose kernel has no connection info.
_NO_ANSWER = (Empty, zmq.ZMQError, OSError, RuntimeError)


# The messages of the pid question. ipykernel publishes a busy and an idle status for a control
# request, parented to it (Kernel.dispatch_control, ipykernel/kernelbase.py, 7.4.0), and
# jupyter_server sets execution_state and last_activity from a status whose parent's type it
# tracks (MappingKernelManager.record_activity, jupyter_server 2.21.1): left tracked, asking a
# busy kernel its pid would make it read idle (and cullable), and an idle one look active.
USAGE_MESSAGE_TYPES = ("usage_request", "usage_reply")


def untrack_usage_messages(kernel_manager: Any) -> None:
    """Add the pid question's message types to the kernel manager's ``untracked_message_types``
    (a jupyter_server trait; a manager without it is left as it is)."""
    untracked = getattr(kernel_manager, "untracked_message_types", None)
    if untracked is None:
        return
    missing = [t for t in USAGE_MESSAGE_TYPES if t not in untracked]
    if missing:
        kernel_manager.untracked_message_types = [*untracked, *missing]


async def usage_pid(km: Any, timeout: float) -> int | None:
    """The pid the kernel reports in its ``usage_reply``, or None if it does not answer."""
    client = None
    try:
        client = km.client()
        client.start_channels(shell=False, iopub=False, stdin=False, hb=False, control=True)
        msg = client.session.msg("usage_request", {})
        client.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            reply = await client.control_channel.get_msg(timeout=left)
            if reply.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                continue
            pid = reply.get("content", {}).get("pid")
            return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
    except _NO_ANSWER:
        return None
    finally:
        if client is not None:
            client.stop_channels()


# jaxlib 0.10.2, xla_client.generate_pjrt_gpu_plugin_options: XLA_PYTHON_CLIENT_PREALLOCATE
# set to anything but these turns preallocation on; these turn it off.
_PREALLOCATE_OFF = ("false", "False", "0")


def installed_jax_version() -> str | None:
    """The version of the jax distribution installed beside this server (read from its
    metadata, jax is not imported); None when there is none. A kernel of this environment runs
    it; a kernel of another environment says its own in the settings it publishes."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jax")
    except (PackageNotFoundError, ValueError):
        return None


def launch_env(km: Any) -> dict[str, str]:
    """The environment the kernel was launched with, as far as the server knows it: the ``env``
    jupyter_server's session manager passes to ``start_kernel`` (kept by jupyter_client 8.10's
    KernelManager in ``_launch_args``), then the kernelspec's ``env``, which the provisioner
    applies on top (provisioning/provisioner_base.py). Empty when neither is there."""
    env: dict[str, str] = {}
    args = getattr(km, "_launch_args", None)
    if isinstance(args, dict) and isinstance(args.get("env"), dict):
        env.update(args["env"])
    spec_env = getattr(getattr(km, "_kernel_spec", None), "env", None)  # no lookup: the cached spec only
    if isinstance(spec_env, dict):
        env.update(spec_env)
    return env


def launch_preallocates(env: dict[str, str], jax_version: str | None = None) -> bool | None:
    """False when the launch environment turns JAX's preallocation off (the variable, or an
    allocator that keeps no pool on JAX ``jax_version``), True when it turns it on explicitly,
    None when it does not say: JAX would then preallocate, unless the notebook changes the
    setting before JAX starts (``%gpumem preallocate off``), which only the settings it
    publishes tell the server.

    ``platform`` keeps no pool, except on JAX 0.10.1 and 0.10.2, where it is BFC and follows
    the preallocation variable (jax#39145; ``settings.published.allocator_kind``); on a JAX
    whose ``platform`` is not known here, nothing is said.
    """
    allocator = env.get(ALLOCATOR_VAR, "")
    if allocator.lower() in ("platform", "address"):
        kind = allocator_kind(allocator, jax_version)
        if kind in (PASSTHROUGH, REJECTED):
            return False
        if kind is None:
            return None
    value = env.get(PREALLOCATE_VAR, "")
    if not value:
        return None
    return value not in _PREALLOCATE_OFF


class KernelDirectory:
    """Lists the server's kernels with their pids and notebooks."""

    def __init__(self, kernel_manager: Any, session_manager: Any, pid_timeout: float = 2.0) -> None:
        self.kernel_manager = kernel_manager
        self.session_manager = session_manager
        self.pid_timeout = pid_timeout
        self._pids: dict[str, _PidEntry] = {}
        self._asking: dict[str, asyncio.Task] = {}
        self._nudging: dict[str, asyncio.Task] = {}  # kernels stuck at "starting", asked for a status
        self._nudge_again_at: dict[str, float] = {}
        self.published = PublishedSettingsReader()
        self._next_sweep = 0.0  # monotonic time of the next look for files of killed kernels

    def kernel_pid(self, kernel_id: str, km: Any) -> int | None:
        """The cached pid; starts asking the kernel in the background when not yet known."""
        prov = provisioner_pid(km)
        entry = self._pids.get(kernel_id)
        if entry is None or entry.provisioner_pid != prov:
            entry = _PidEntry(provisioner_pid=prov, pid=prov)
            self._pids[kernel_id] = entry
        if not entry.answered and kernel_id not in self._asking and time.monotonic() >= entry.ask_again_at:
            task = asyncio.ensure_future(self._ask(kernel_id, km, entry))
            self._asking[kernel_id] = task
        return entry.pid

    async def _ask(self, kernel_id: str, km: Any, entry: _PidEntry) -> None:
        try:
            pid = await usage_pid(km, self.pid_timeout)
            if pid is not None:
                entry.pid, entry.answered = pid, True
            else:
                entry.ask_again_at = time.monotonic() + ASK_AGAIN_AFTER
        finally:
            self._asking.pop(kernel_id, None)

    async def wait_for_pids(self) -> None:
        """Wait until the kernels asked so far have answered or timed out (tests, benches)."""
        tasks = [*self._asking.values(), *self._nudging.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def notebook_paths(self) -> dict[str, str]:
        """kernel id -> notebook path (relative to the server root), from the session manager."""
        paths: dict[str, str] = {}
        if self.session_manager is None:
            return paths
        try:
            sessions = await self.session_manager.list_sessions()
        except sqlite3.Error:  # the session store is a SQLite database
            log.exception("jupyter-gpumem: listing sessions failed")
            return paths
        for session in sessions:
            kernel = session.get("kernel") or {}
            kid, path = kernel.get("id"), session.get("path")
            if kid and path and kid not in paths:
                paths[kid] = path
        return paths

    async def kernels(self) -> list[KernelInfo]:
        """Every running kernel of this server, in the order they were started."""
        mkm = self.kernel_manager
        paths = await self.notebook_paths()
        out: list[KernelInfo] = []
        ids = list(mkm.list_kernel_ids())
        published: set[tuple[str | None, int | None]] = set()
        for kid in ids:
            try:
                km = mkm.get_kernel(kid)
            except KERNEL_GONE:  # shut down meanwhile
                continue
            pid = self.kernel_pid(kid, km)
            self._nudge_if_stuck_starting(kid, km)
            where = connection_dir(km)
            published.add((where, pid))
            out.append(
                KernelInfo(
                    kernel_id=kid,
                    kernel_name=getattr(km, "kernel_name", None),
                    pid=pid,
                    notebook_path=paths.get(kid),
                    execution_state=getattr(km, "execution_state", None),
                    last_activity=last_activity(km),
                    launch_preallocates=launch_preallocates(launch_env(km), installed_jax_version()),
                    settings=self.published.read(where, pid, kid),
                )
            )
        for gone in set(self._pids) - set(ids):
            self._pids.pop(gone, None)
        for gone in set(self._nudge_again_at) - set(ids):
            self._nudge_again_at.pop(gone, None)
        self.published.forget_except(published)
        self._sweep({d for d, _ in published if d is not None})
        return out

    def _nudge_if_stuck_starting(self, kernel_id: str, km: Any) -> None:
        """Ask a kernel that still reads "starting" ``STARTING_NUDGE_AFTER`` seconds after its last
        activity for its ``kernel_info``, in the background. jupyter_server keeps "starting" until it
        sees a status message, and drops those sent before it subscribed; it turns "starting" into
        "idle" on any later status, its own untracked requests' included, without moving the
        kernel's ``last_activity`` (``record_activity`` in
        ``MappingKernelManager.start_watching_activity``, services/kernels/kernelmanager.py,
        jupyter_server 2.21.1). Without a status, the kernel was never shown idle, alerted on or
        culled, however long it held a GPU."""
        since = last_activity(km)
        if getattr(km, "execution_state", None) != "starting" or since is None or kernel_id in self._nudging:
            return
        if (datetime.now(timezone.utc) - since).total_seconds() < STARTING_NUDGE_AFTER:
            return
        if time.monotonic() < self._nudge_again_at.get(kernel_id, 0.0):
            return
        self._nudge_again_at[kernel_id] = time.monotonic() + ASK_AGAIN_AFTER
        task = asyncio.ensure_future(shell_answers(km))
        self._nudging[kernel_id] = task
        task.add_done_callback(lambda _t: self._nudging.pop(kernel_id, None))

    def _sweep(self, directories: set[str]) -> None:
        """Now and then, remove settings files left by kernels that were killed (their own
        exit hook never ran), in the folders this server's kernels publish to."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_S
        runtime = getattr(self.kernel_manager, "connection_dir", None)
        if isinstance(runtime, str) and runtime:
            directories = directories | {os.path.abspath(runtime)}
        ours = {p for e in self._pids.values() for p in (e.pid, e.provisioner_pid) if p is not None}
        for path in remove_stale_files(directories, ours):
            log.info("jupyter-gpumem: removed %s, left by a kernel that is gone", path)
