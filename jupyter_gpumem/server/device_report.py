"""The JSON of ``GET /jupyter-gpumem/api/devices``, built from one reading and the kernel list.

Pure functions: everything they need is passed in, so the join (NVML pid -> kernel ->
notebook) is tested without a server. Inside a container NVML lists the host's pids
(NVIDIA/nvidia-docker#1483), which match no kernel here: ``attribution.attribute`` decides, per
kernel, whether its pid is listed or whether it cannot be told.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.attribution import CANNOT_TELL, attribute, shares_pid_namespace
from jupyter_gpumem.core.readings import (
    NO_DRIVER,
    NO_LIBRARY,
    NO_PERMISSION,
    DeviceReading,
    DeviceUnreadable,
    NotAvailable,
)
from jupyter_gpumem.server.kernels import KernelInfo, iso_utc
from jupyter_gpumem.server.readings import ProcessFacts, Reading
from jupyter_gpumem.settings.published import preallocates, reserved_bytes

STATES = {NO_LIBRARY: "no_library", NO_DRIVER: "no_driver", NO_PERMISSION: "no_permission"}

# Kernels that between them hold at least this share of a GPU on which one of them preallocated
# have filled it: a kernel that starts after the first took only what was left.
OVERCOMMIT_FULL_SHARE = 0.9
# Left free per kernel in the suggested fraction, for its CUDA context and loaded kernels.
SUGGESTION_MARGIN = 0.05
# With no processes listed, this share of a GPU in use is more than driver overhead.
UNATTRIBUTED_SHARE = 0.1

# What decided a kernel's ``preallocated``, most trusted first.
FROM_SETTINGS = "kernel_settings"  # the settings the kernel published, JAX started
FROM_READING = "reading"  # it holds preallocated_fraction of the card or more
FROM_LAUNCH = "launch_environment"  # its launch environment turns preallocation off
PREALLOCATED_SOURCES = (FROM_SETTINGS, FROM_READING, FROM_LAUNCH)


def _maybe(value: Any) -> Any:
    return None if isinstance(value, NotAvailable) else value


def suggested_fraction(kernels_on_device: int) -> float:
    """About 1/N of the card each, less a margin, rounded down to a hundredth."""
    n = max(1, kernels_on_device)
    return max(0.05, math.floor((1.0 / n - SUGGESTION_MARGIN) * 100) / 100)


def placeholder_map(placeholders: Iterable[int], kernels: list[KernelInfo]) -> dict[int, KernelInfo]:
    """Replay demos: the i-th placeholder pid of the trace stands for the i-th kernel."""
    out: dict[int, KernelInfo] = {}
    live = [k for k in kernels if k.pid is not None]
    for placeholder, kernel in zip(placeholders, live):
        out[placeholder] = kernel
    return out


def _merged_processes(dev: DeviceReading) -> list[tuple[int, int | None, Any]]:
    """(pid, used bytes or None, the first ProcessReading) with duplicate pids summed."""
    merged: dict[int, list] = {}
    for proc in dev.processes:  # type: ignore[union-attr]
        used = _maybe(proc.used_bytes)
        if proc.pid in merged:
            prev = merged[proc.pid]
            prev[1] = None if prev[1] is None or used is None else prev[1] + used
        else:
            merged[proc.pid] = [proc.pid, used, proc]
    return [tuple(v) for v in merged.values()]  # type: ignore[misc]


def _pids_visibility(dev: DeviceReading) -> tuple[bool, str | None]:
    """Whether NVML's processes carry what matching them needs, and if not, why."""
    if isinstance(dev.processes, NotAvailable):
        return False, dev.processes.reason
    mig = " (MIG is on)" if dev.mig_mode is True else ""
    if dev.processes and all(isinstance(p.used_bytes, NotAvailable) for p in dev.processes):
        return False, f"NVML lists processes but not the memory each holds{mig}"
    listed_bytes = sum(_maybe(p.used_bytes) or 0 for p in dev.processes)
    unattributed = dev.used_bytes - listed_bytes - (_maybe(dev.reserved_bytes) or 0)
    if not dev.processes and dev.total_bytes and unattributed > UNATTRIBUTED_SHARE * dev.total_bytes:
        return False, (
            f"NVML lists no processes while {unattributed / 2**30:.1f} GiB are in use{mig}; "
            "memory cannot be matched to processes"
        )
    return True, None


# Why a GPU's host pids are no kernel's, the same words on every GPU so that the panel says it
# once for all of them; each GPU's pids are in its processes (kind "host_pid").
HOST_PIDS_REASON = (
    "NVML lists pids that are not processes in this server's PID namespace (inside a container NVML "
    "lists the host's pids); it cannot tell which of them, if any, are this server's kernels, so their "
    "memory is not counted as any kernel's and over-commit between kernels is not checked"
)


def _host_pids(
    dev: DeviceReading, kernels: list[KernelInfo], pids_not_here: set[int] | None, shared_namespace: bool = False
) -> tuple[set[int], str | None]:
    """The pids on ``dev`` that may be kernels of this server although no kernel has that pid
    (the host's pids, seen from a container), and ``HOST_PIDS_REASON`` where there are any; none
    when every kernel is matched, the evidence is missing, or ``shared_namespace`` (a kernel's pid
    listed on some GPU) shows NVML's pids are this server's: those not here have ended."""
    unknown: set[int] = set()
    for kernel in kernels:
        if kernel.pid is None:
            continue
        who = attribute(
            dev, kernel.pid, pids_not_here, shared_namespace=shared_namespace
        )  # no kernel's JAX is known here
        if who.how == CANNOT_TELL:
            unknown.update(p.pid for p in who.unknown)
    return unknown, HOST_PIDS_REASON if unknown else None


@dataclass(frozen=True)
class _Join:
    """What joins a device's processes to kernels and people: the kernels by pid (and by a
    replay's placeholder pid), this notebook's kernels, and who may see whose command line."""

    kernels: list[KernelInfo]
    by_pid: dict[int, KernelInfo]
    by_placeholder: dict[int, KernelInfo]
    this_kernel_ids: set[str]
    live: bool
    preallocated_fraction: float
    show_other_users: bool
    my_uid: int | None
    facts_of: Callable[[int], ProcessFacts]
    shared_namespace: bool = False  # a kernel's pid listed on some GPU: NVML's pids are this server's


def build_devices_report(
    reading: Reading,
    kernels: list[KernelInfo],
    *,
    poll_interval: float,
    notebook: str | None = None,
    show_other_users: bool = False,
    preallocated_fraction: float = 0.7,
    my_uid: int | None = None,
    facts_for: Callable[[int], ProcessFacts] | None = None,
) -> dict:
    """The /devices JSON (see docs/server.md). Reads only this server's uid and, through
    ``facts_for``, the processes' facts the reading lacks; the rest is pure."""
    if my_uid is None and hasattr(os, "getuid"):
        my_uid = os.getuid()
    report: dict[str, Any] = {
        "t": reading.t,
        "source": reading.source,
        "synthetic": bool(reading.synthetic),
        "state": "ok",
        "reason": None,
        "poll_interval": poll_interval,
        "devices": [],
        "warnings": [],
    }
    if isinstance(reading.devices, NotAvailable):
        report["state"] = STATES.get(reading.devices.code, "error")
        report["reason"] = reading.devices.reason
        return report

    live = reading.source == "nvml"
    facts = dict(reading.processes)

    def facts_of(pid: int) -> ProcessFacts:
        if pid not in facts:
            facts[pid] = facts_for(pid) if facts_for is not None else ProcessFacts(exists=True)
        return facts[pid]

    by_pid = {k.pid: k for k in kernels if k.pid is not None}
    join = _Join(
        kernels=kernels,
        by_pid=by_pid,
        by_placeholder=placeholder_map(reading.placeholder_pids, kernels) if not live else {},
        this_kernel_ids={k.kernel_id for k in kernels if notebook is not None and k.notebook_path == notebook},
        live=live,
        preallocated_fraction=preallocated_fraction,
        show_other_users=show_other_users,
        my_uid=my_uid,
        facts_of=facts_of,
        shared_namespace=shares_pid_namespace(reading.devices, by_pid) if live else False,
    )
    for dev in reading.devices:
        entry = _unreadable_json(dev) if isinstance(dev, DeviceUnreadable) else _device_entry(dev, join)
        report["devices"].append(entry)
        warning = None if isinstance(dev, DeviceUnreadable) else overcommit_warning(entry)
        if warning is not None:
            report["warnings"].append(warning)
    return report


def _who_runs(facts: ProcessFacts, show_other_users: bool, my_uid: int | None) -> dict:
    """A process's ``user`` and ``name`` (command line) for /devices. The owner is shown as
    ``ps`` shows it to anyone; another user's command line (it may carry paths, tokens,
    arguments) only with ``show_other_users``, else ``name_hidden`` says it was withheld."""
    if not facts.exists:
        return {}
    mine = facts.uid is not None and facts.uid == my_uid
    if show_other_users or mine:
        return {"user": facts.user, "name": facts.cmdline}
    return {"user": facts.user, "name_hidden": facts.uid is not None}


def _device_entry(dev: DeviceReading, join: _Join) -> dict:
    """One device's JSON: its memory, its processes joined to kernels, and whose bytes are whose."""
    pids_visible, pids_reason = _pids_visibility(dev)
    host_pids: set[int] = set()
    if pids_visible and join.live:  # evidence read here, now: a replay's pids are the recording's
        not_here = {p.pid for p in dev.processes if not join.facts_of(p.pid).exists}  # type: ignore[union-attr]
        host_pids, host_reason = _host_pids(dev, join.kernels, not_here, join.shared_namespace)
        if host_pids:
            pids_visible, pids_reason = False, host_reason
    entry = _device_json(dev, pids_visible, pids_reason)
    if isinstance(dev.processes, NotAvailable):
        return entry
    for pid, used, proc in _merged_processes(dev):
        placeholder = None
        if pid in join.by_placeholder:  # replay demo: the same join as a real pid below
            placeholder, pid = pid, join.by_placeholder[pid].pid
        kernel = join.by_pid.get(pid)
        entry["processes"].append(_joined_process(pid, used, proc, kernel, placeholder, pid in host_pids, dev, join))
        if kernel is not None:
            entry["kernels_bytes"] += used or 0
            if kernel.kernel_id in join.this_kernel_ids:
                entry["this_kernel_bytes"] += used or 0
        elif pid in host_pids:
            entry["host_pid_bytes"] += used or 0
        else:
            entry["other_bytes"] += used or 0
    return entry


def _joined_process(
    pid: int,
    used: int | None,
    proc: Any,
    kernel: KernelInfo | None,
    placeholder: int | None,
    host_pid: bool,
    dev: DeviceReading,
    join: _Join,
) -> dict:
    """One process row: its kernel, if any, and its command line and user where this user may see them."""
    item = _process_json(pid, used, kernel, dev, join.preallocated_fraction, join.live)
    if host_pid:
        item["kind"] = "host_pid"
    if placeholder is not None:
        item["replay_placeholder_pid"] = placeholder
    if join.live or placeholder is not None:
        item.update(_who_runs(join.facts_of(pid), join.show_other_users, join.my_uid))
    else:  # replay: what the recording kept
        item["name"], item["user"] = proc.name, proc.user
    return item


def _device_json(dev: DeviceReading, pids_visible: bool, pids_reason: str | None) -> dict:
    return {
        "index": dev.index,
        "name": dev.name,
        "uuid": dev.uuid,
        "total": dev.total_bytes,
        "used": dev.used_bytes,
        "free": dev.free_bytes,
        "reserved": _maybe(dev.reserved_bytes),
        "utilization": _maybe(dev.utilization_percent),
        "display_active": _maybe(dev.display_active),
        "mig": _maybe(dev.mig_mode),
        "readable": True,
        "reason": None,
        "pids_visible": pids_visible,
        "pids_reason": pids_reason,
        "this_kernel_bytes": 0,
        "kernels_bytes": 0,
        "other_bytes": 0,
        "host_pid_bytes": 0,
        "processes": [],
    }


def _unreadable_json(dev: DeviceUnreadable) -> dict:
    return {
        "index": dev.index,
        "name": dev.name or None,
        "uuid": dev.uuid or None,
        "total": None,
        "used": None,
        "free": None,
        "reserved": None,
        "utilization": None,
        "display_active": None,
        "mig": None,
        "readable": False,
        "reason": dev.why.reason,
        "pids_visible": False,
        "pids_reason": "the device cannot be read",
        "this_kernel_bytes": 0,
        "kernels_bytes": 0,
        "other_bytes": 0,
        "host_pid_bytes": 0,
        "processes": [],
    }


def preallocation(
    kernel: KernelInfo, used: int | None, total: int | None, preallocated_fraction: float, live: bool = True
) -> tuple[bool | None, str | None, int | None]:
    """Whether ``kernel`` preallocated on a GPU of ``total`` bytes where it holds ``used``, what
    said so (one of ``PREALLOCATED_SOURCES``, or None), and the bytes its settings reserved.

    The settings the kernel published decide once JAX has started there, and, for BFC with
    preallocation on, once its pool was taken (at the first allocation, not at start:
    ``settings.published.preallocates``). Otherwise: holding
    ``preallocated_fraction`` of the card means the pool was taken up front; a launch
    environment that turns preallocation off says no; anything else is unknown (a kernel
    holding less may use a small fraction, or JAX may not have started yet). A replay's memory
    is the trace's (``live`` false): only the reading speaks for it.
    """
    if live and kernel.settings is not None:
        said = preallocates(kernel.settings)
        if said is not None:
            return said, FROM_SETTINGS, reserved_bytes(kernel.settings, total)
    if used is not None and total and used >= preallocated_fraction * total:
        return True, FROM_READING, None
    if live and kernel.launch_preallocates is False:
        return False, FROM_LAUNCH, None
    return None, None, None


def _process_json(
    pid: int, used: int | None, kernel: KernelInfo | None, dev: DeviceReading, preallocated_fraction: float, live: bool
) -> dict:
    preallocated, decided_by, reserved = (
        preallocation(kernel, used, dev.total_bytes, preallocated_fraction, live)
        if kernel is not None
        else (None, None, None)
    )
    return {
        "pid": pid,
        "used": used,
        "kind": "kernel" if kernel is not None else "other",
        "kernel_id": kernel.kernel_id if kernel else None,
        "kernel_name": kernel.kernel_name if kernel else None,
        "notebook_path": kernel.notebook_path if kernel else None,
        "execution_state": kernel.execution_state if kernel else None,
        "last_activity": iso_utc(kernel.last_activity) if kernel else None,
        "preallocated": preallocated,
        "preallocated_source": decided_by,
        "reserved_bytes": reserved,
        "settings": kernel.settings.settings_json()
        if live and kernel is not None and kernel.settings is not None
        else None,
        "name": None,
        "name_hidden": False,
        "user": None,
    }


def overcommit_warning(device: Mapping[str, Any]) -> dict | None:
    """A warning when kernels on one GPU fight over it: one preallocated, and they fill it.

    JAX takes 75% of the card per process by default, so a second kernel with default settings
    only gets what the first left and runs out of memory early.
    """
    total = device["total"]
    kernels = [p for p in device["processes"] if p["kind"] == "kernel"]
    if not total or len(kernels) < 2:
        return None
    pre = [p for p in kernels if p["preallocated"]]
    held = sum(p["used"] or 0 for p in kernels) / total
    if not pre or held < OVERCOMMIT_FULL_SHARE:
        return None
    n = len(kernels)
    fraction = suggested_fraction(n)
    # The notebook's file name: its folder is in the kernels table, and a long path fills a sidebar.
    names = ", ".join(
        f"{posixpath.basename(p['notebook_path']) if p['notebook_path'] else p['kernel_id']} ({(p['used'] or 0) / total:.0%})"
        for p in pre
    )
    return {
        "kind": "overcommit",
        "device": device["index"],
        "message": (
            f"{n} kernels share GPU {device['index']} and hold {held:.0%} of it between them; "
            f"preallocated: {names}. JAX preallocates 75% per kernel by default ({n * 75}% for {n}). "
            f"Give each at most {fraction:g} of the card (%gpumem fraction {fraction:g}) "
            "or turn preallocation off (%gpumem preallocate off), then restart the kernels."
        ),
        "kernels": [p["kernel_id"] for p in kernels],
        "suggested_fraction": fraction,
    }
