"""Where the server's device readings come from: live NVML or a replayed trace.

Both answer ``read() -> Reading``. ``read`` runs on the shared sampler's worker thread, so it
may block. A failure of NVML or of the trace is a ``NotAvailable`` in ``Reading.devices``,
answered by the source that met it; the shared sampler catches anything else.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from jupyter_gpumem.core.attribution import pid_in_namespace
from jupyter_gpumem.core.readings import ERROR, DeviceReading, NotAvailable
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.sources.nvml import NvmlSource, is_fake
from jupyter_gpumem.sources.replay import ReplaySource

# Command lines are shown in a narrow panel; the rest is noise.
MAX_CMDLINE = 300


@dataclass(frozen=True)
class ProcessFacts:
    """What this machine says about a pid NVML reported (never about a replayed pid)."""

    exists: bool
    uid: int | None = None
    user: str | None = None
    cmdline: str | None = None


@dataclass(frozen=True)
class Reading:
    """One reading of every device, with where it came from."""

    t: float
    devices: tuple | NotAvailable
    source: str  # "nvml" or "replay"
    synthetic: bool = False
    # Replay only: trace pids that stand for "this server's 1st, 2nd, ... kernel".
    placeholder_pids: tuple[int, ...] = ()
    # Live only: facts about each pid in ``devices``, read on the worker thread.
    processes: Mapping[int, ProcessFacts] = field(default_factory=dict)


class DeviceSource(Protocol):
    """What the shared sampler reads: ``NvmlDevices`` or ``ReplayDevices``."""

    label: str
    placeholder_pids: tuple[int, ...]

    @property
    def calls(self) -> int: ...

    def read(self) -> Reading: ...


def process_facts(pid: int) -> ProcessFacts:
    """Owner and command line of ``pid`` as seen from this PID namespace.

    ``exists`` False is the evidence of a container: NVML lists the host's pids
    (NVIDIA/nvidia-docker#1483), and a container with its own /proc shows no such process. A
    process /proc hides (``hidepid``) exists, with nothing more known about it.
    (Its ``NSpid`` line shows one pid there, so it cannot tell a container from the host.)
    """
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            uid = proc.uids().real
            try:
                user = proc.username()
            except psutil.Error:
                user = str(uid)
            try:
                cmdline = " ".join(proc.cmdline())[:MAX_CMDLINE] or proc.name()
            except psutil.Error:  # another user's process, or a zombie: no command line
                cmdline = None
        return ProcessFacts(exists=True, uid=uid, user=user, cmdline=cmdline)
    except psutil.NoSuchProcess:
        # /proc mounted hidepid hides other users' processes from psutil; kill(pid, 0) still sees them.
        return ProcessFacts(exists=pid_in_namespace(pid))
    except psutil.Error:  # AccessDenied: it is there, and says nothing more
        return ProcessFacts(exists=True)


def _pids(devices: Any) -> set[int]:
    pids: set[int] = set()
    if isinstance(devices, NotAvailable):
        return pids
    for dev in devices:
        if isinstance(dev, DeviceReading) and not isinstance(dev.processes, NotAvailable):
            pids.update(proc.pid for proc in dev.processes)
    return pids


class NvmlDevices:
    """Live readings from ``jupyter_gpumem.sources.nvml.NvmlSource`` (NVML starts on the first read)."""

    label = "nvml"
    placeholder_pids: tuple[int, ...] = ()

    def __init__(self) -> None:
        self._source = NvmlSource()

    @property
    def calls(self) -> int:
        """NVML calls made so far."""
        return self._source.calls

    def read(self) -> Reading:
        t = time.time()
        devices = self._source.read()
        facts = {pid: process_facts(pid) for pid in _pids(devices)}
        # The fake world's drop-in pynvml makes its readings up: they are labelled synthetic.
        return Reading(t=t, devices=devices, source="nvml", processes=facts, synthetic=is_fake())


class ReplayDevices:
    """A trace file served as if live. A path that cannot be replayed is an error state."""

    label = "replay"
    calls = 0  # a replay never calls NVML

    def __init__(self, path: str, speed: float = 1.0, loop: bool = True) -> None:
        self.path = path
        self.error: NotAvailable | None = None
        self.synthetic = False
        self.placeholder_pids: tuple[int, ...] = ()
        self._source: ReplaySource | None = None
        try:
            trace = read_trace(path)
            self.synthetic = trace.synthetic
            if trace.error is not None:
                raise ValueError(f"the trace is broken at {trace.error}")
            self.placeholder_pids = _placeholder_pids(trace.header)
            self._source = ReplaySource(trace, speed=speed, loop=loop)
        except OSError as exc:
            self.error = NotAvailable(ERROR, f"cannot replay {path}: {exc.strerror or exc}")
        except ValueError as exc:  # a broken trace, a bad header, or a trace with no samples
            self.error = NotAvailable(ERROR, f"cannot replay {path}: {exc}")

    def read(self) -> Reading:
        t = time.time()
        devices = self.error if self._source is None else self._source.read_devices()
        return Reading(
            t=t,
            devices=devices,
            source="replay",
            synthetic=self.synthetic,
            placeholder_pids=self.placeholder_pids,
        )


def _placeholder_pids(header: Mapping[str, Any]) -> tuple[int, ...]:
    """The header's ``kernel_placeholder_pids``: a list of pids, or absent."""
    value = header.get("kernel_placeholder_pids")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in value):
        raise ValueError("header.kernel_placeholder_pids must be a list of integer pids")
    return tuple(value)


def make_source(replay: str | None, speed: float = 1.0, loop: bool = True) -> NvmlDevices | ReplayDevices:
    if replay:
        return ReplayDevices(os.path.expanduser(replay), speed=speed, loop=loop)
    return NvmlDevices()
