"""Shutting down kernels that hold GPU memory while idle (``GpuMem.cull_idle_after``).

``cull_plan`` is the decision, a pure function of one /devices report (NVML's processes already
joined to this server's kernels by pid), the kernel list and the time: which kernels to warn
about and which to shut down. A kernel is a candidate only when jupyter_server says it is
``idle`` (or ``starting``, which it keeps saying of a kernel whose first status it missed), it
has a ``last_activity``, and the report's process rows of kind ``kernel`` give it at least
``cull_min_bytes``. A busy kernel, one holding less, and one whose pid matches no GPU process (no
row, or a host pid seen from a container) are never touched. Before a shutdown the kernel's own
shell must answer a request (``idle_proof``): what jupyter_server says is not proof, since any
control-channel request makes a kernel in the middle of a cell read "idle". A replay is
never acted on: its memory is the recording's, not this machine's.

``Culler`` is the thin shell: a periodic check on the server's IOLoop that asks the shared
sampler for the latest reading, applies the plan through jupyter_server's kernel manager, logs
and counts each cull, and keeps a short record of them (``CullRecord``) for the panel to say what
happened. jupyter_server's MappingKernelManager moves ``last_activity`` on every iopub message
(services/kernels/kernelmanager.py, 2.21.1), so any activity resets the clock; so does the
user's "keep running" (``Culler.keep``), which is the culler's own record and moves nothing of
jupyter_server's.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.units import format_bytes
from jupyter_gpumem.server.idle_proof import SHELL_ANSWER_WITHIN, shell_answers
from jupyter_gpumem.server.kernels import KERNEL_GONE, KernelInfo, last_activity

log = logging.getLogger(__name__)

# What jupyter_server says of a kernel that may be culled, once its shell has answered
# (``idle_proof.shell_answers``): "idle", which any control request can make it say in the middle
# of a cell, and "starting", which it says for ever of a kernel whose first status it missed.
CULLABLE_STATES = ("idle", "starting")

# Bounds of the time between two checks: never busier than the readings, never slower than a minute.
MAX_CHECK_EVERY = 60.0

# The record of recent culls the panel reads: the last RECENT_CULLS_KEPT, for RECENT_CULLS_FOR seconds.
RECENT_CULLS_KEPT = 20
RECENT_CULLS_FOR = 3600.0


@dataclass(frozen=True)
class PendingCull:
    """One kernel to warn about or to shut down."""

    kernel_id: str
    notebook_path: str | None
    held_bytes: int  # summed over GPUs
    per_device: tuple[tuple[int, int], ...]  # (GPU index, bytes), most first
    idle_seconds: float
    cull_at: float  # POSIX seconds: last activity + cull_idle_after
    message: str

    def to_json(self) -> dict:
        return {
            "cull_at": self.cull_at,
            "idle_seconds": round(self.idle_seconds, 1),
            "held_bytes": self.held_bytes,
            "per_device": [list(pair) for pair in self.per_device],
            "message": self.message,
        }


@dataclass(frozen=True)
class CullRecord:
    """One kernel the culler shut down: what it freed, when and why."""

    kernel_id: str
    notebook_path: str | None
    freed_bytes: int  # what NVML said it held at the last reading before the shutdown
    per_device: tuple[tuple[int, int], ...]
    culled_at: float  # POSIX seconds
    idle_seconds: float
    idle_after: float  # GpuMem.cull_idle_after then
    reason: str

    def to_json(self) -> dict:
        return {
            "kernel_id": self.kernel_id,
            "notebook_path": self.notebook_path,
            "freed_bytes": self.freed_bytes,
            "per_device": [list(pair) for pair in self.per_device],
            "culled_at": self.culled_at,
            "idle_seconds": round(self.idle_seconds, 1),
            "idle_after": self.idle_after,
            "reason": self.reason,
        }


def cull_record(pending: PendingCull, culled_at: float, idle_after: float, min_bytes: int) -> CullRecord:
    """The record of ``pending`` shut down at ``culled_at``, with the reason in words."""
    held = " and ".join(f"{format_bytes(n)} of GPU {index}" for index, n in pending.per_device)
    reason = (
        f"it had been idle {human_duration(pending.idle_seconds)} while holding {held}; this server shuts "
        f"down kernels idle {human_duration(idle_after)} that hold {format_bytes(min_bytes)} or more "
        f"(GpuMem.cull_idle_after={idle_after:g})"
    )
    return CullRecord(
        kernel_id=pending.kernel_id,
        notebook_path=pending.notebook_path,
        freed_bytes=pending.held_bytes,
        per_device=pending.per_device,
        culled_at=culled_at,
        idle_seconds=pending.idle_seconds,
        idle_after=idle_after,
        reason=reason,
    )


def recent_culls(records: Iterable[CullRecord], now: float) -> list[dict]:
    """The records of the last RECENT_CULLS_FOR seconds before ``now``, newest first, as JSON."""
    return [r.to_json() for r in sorted(records, key=lambda r: -r.culled_at) if now - r.culled_at <= RECENT_CULLS_FOR]


@dataclass(frozen=True)
class CullPlan:
    warn: tuple[PendingCull, ...] = ()  # within cull_warn_before of their cull
    cull: tuple[PendingCull, ...] = ()  # idle for cull_idle_after or longer: shut down now

    def pending(self) -> dict[str, PendingCull]:
        """kernel id -> its pending cull, for every kernel warned about or due."""
        return {p.kernel_id: p for p in (*self.warn, *self.cull)}


def held_by_kernel(report: dict) -> dict[str, dict[int, int]]:
    """kernel id -> {GPU index: bytes} from the report's process rows of kind ``kernel``."""
    held: dict[str, dict[int, int]] = {}
    for dev in report.get("devices", ()):
        for proc in dev.get("processes", ()):
            if proc.get("kind") != "kernel" or not proc.get("kernel_id"):
                continue
            per_device = held.setdefault(proc["kernel_id"], {})
            per_device[dev["index"]] = per_device.get(dev["index"], 0) + (proc.get("used") or 0)
    return held


def human_duration(seconds: float) -> str:
    """``"45 s"``, ``"55 min"``, ``"3.2 h"``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cull_message(per_device: Iterable[tuple[int, int]], idle_seconds: float, left_seconds: float) -> str:
    """ "this kernel holds 30.00 GiB of GPU 2 and has been idle 55 min; it will be shut down in 5 min"."""
    held = " and ".join(f"{format_bytes(n)} of GPU {index}" for index, n in per_device)
    when = f"in {human_duration(left_seconds)}" if left_seconds > 0 else "now"
    return f"this kernel holds {held} and has been idle {human_duration(idle_seconds)}; it will be shut down {when}"


def start_line(idle_after: float, min_bytes: int, warn_before: float, every: float) -> str:
    """What the server logs when culling starts, in the words the notices use: "kernels idle
    60 min or more that hold 1.00 GiB of GPU memory or more are shut down, with a warning 5 min
    before; checked every 60 s". A warning no shorter than the idle time comes as soon as the
    kernel is idle (``cull_plan``), and is said so."""
    warning = "as soon as they are idle" if warn_before >= idle_after else f"{human_duration(warn_before)} before"
    return (
        f"jupyter-gpumem: kernels idle {human_duration(idle_after)} or more that hold {format_bytes(min_bytes)} "
        f"of GPU memory or more are shut down, with a warning {warning}; checked every {human_duration(every)}"
    )


def cull_plan(
    report: dict,
    kernels: Iterable[KernelInfo],
    now: float,
    *,
    idle_after: float,
    min_bytes: int,
    warn_before: float,
    kept: Mapping[str, float] | None = None,
) -> CullPlan:
    """Which kernels to warn about and which to shut down at ``now`` (POSIX seconds).

    Culling is off when ``idle_after`` is 0. The warning starts ``warn_before`` seconds before
    the cull, or as soon as the kernel is idle when ``warn_before`` is not less than
    ``idle_after``. ``kept`` (kernel id -> POSIX seconds) says when the user last asked to keep a
    kernel: its idle time counts from then where that is later than its last activity.
    """
    kept = kept or {}
    if idle_after <= 0 or report.get("source") != "nvml" or report.get("state") != "ok":
        return CullPlan()
    held = held_by_kernel(report)
    warn_from = max(0.0, idle_after - warn_before)
    warn: list[PendingCull] = []
    cull: list[PendingCull] = []
    for kernel in kernels:
        if kernel.execution_state not in CULLABLE_STATES or kernel.last_activity is None:
            continue
        if kernel.kernel_id not in held:
            continue
        per_device = tuple(sorted(held[kernel.kernel_id].items(), key=lambda item: (-item[1], item[0])))
        total = sum(n for _, n in per_device)
        since = max(kernel.last_activity.timestamp(), kept.get(kernel.kernel_id, 0.0))
        idle = max(0.0, now - since)  # a reading taken just before the last activity
        if total < min_bytes or idle < warn_from:
            continue
        pending = PendingCull(
            kernel_id=kernel.kernel_id,
            notebook_path=kernel.notebook_path,
            held_bytes=total,
            per_device=per_device,
            idle_seconds=idle,
            cull_at=since + idle_after,
            message=cull_message(per_device, idle, idle_after - idle),
        )
        (cull if idle >= idle_after else warn).append(pending)
    return CullPlan(tuple(warn), tuple(cull))


def annotate(report: dict, plan: CullPlan) -> dict:
    """The report with ``pending_cull`` on each process row (None where no cull is pending)."""
    pending = plan.pending()
    for dev in report.get("devices", ()):
        for proc in dev.get("processes", ()):
            found = pending.get(proc.get("kernel_id")) if proc.get("kind") == "kernel" else None
            proc["pending_cull"] = found.to_json() if found is not None else None
    return report


def check_every(idle_after: float, poll_interval: float) -> float:
    """Seconds between two checks: an eighth of ``idle_after``, between the poll interval and a minute."""
    return min(MAX_CHECK_EVERY, max(poll_interval, idle_after / 8))


def still_idle_since(kernel_manager: Any, kernel: KernelInfo) -> bool:
    """Whether the kernel still reads as it did when the plan was made (idle, or a "starting"
    whose status the server missed), with the same last activity."""
    try:
        km = kernel_manager.get_kernel(kernel.kernel_id)
    except KERNEL_GONE:
        return False
    state = getattr(km, "execution_state", None)
    return state == kernel.execution_state and state in CULLABLE_STATES and last_activity(km) == kernel.last_activity


class UnknownKernel(Exception):
    """No kernel of that id on this server; the message says so in words."""


class Culler:
    """Applies ``cull_plan`` every ``check_every`` seconds on the server's IOLoop.

    ``clock`` says the time a check decides at (POSIX seconds, as ``last_activity`` is); tests
    move it instead of waiting for a kernel to grow idle. ``keep`` records that the user asked to
    keep a kernel, at that clock's time.
    """

    def __init__(
        self, service: Any, kernel_manager: Any, on_cull: Any = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.service = service
        self.kernel_manager = kernel_manager
        self.on_cull = on_cull  # called with each CullRecord (the /metrics counter, the answers' cache)
        self.clock = clock
        self._callback: Any = None
        self._checking = False
        self.culled: deque[CullRecord] = deque(maxlen=RECENT_CULLS_KEPT)
        self.kept: dict[str, float] = {}  # kernel id -> when the user last asked to keep it
        self.log: logging.Logger | logging.LoggerAdapter = log  # the server's own log once loaded

    @property
    def config(self) -> Any:
        return self.service.config

    def keep(self, kernel_id: str) -> float:
        """Starts the kernel's idle clock again now; the time it may next be culled, at the
        earliest. Raises UnknownKernel for a kernel this server does not run."""
        try:
            self.kernel_manager.get_kernel(kernel_id)
        except KERNEL_GONE:
            raise UnknownKernel(f"no kernel {kernel_id} on this server: it was shut down, or the id is wrong") from None
        now = self.clock()
        self.kept[kernel_id] = now
        self.log.info("jupyter-gpumem: kernel %s kept running at its user's request; idle clock reset", kernel_id)
        return now + self.config.cull_idle_after

    def recent(self) -> list[dict]:
        """The culls of the last hour, newest first, as the devices reply carries them."""
        return recent_culls(self.culled, self.clock())

    def start(self) -> None:
        from tornado.ioloop import PeriodicCallback

        c = self.config
        if c.cull_idle_after <= 0 or self._callback is not None:
            return
        every = check_every(c.cull_idle_after, c.poll_interval)
        self._callback = PeriodicCallback(self._tick, every * 1000)
        self._callback.start()
        self.log.info(start_line(c.cull_idle_after, c.cull_min_bytes, c.cull_warn_before, every))

    def stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    async def _tick(self) -> None:
        if self._checking:  # a slow shutdown outlived the interval
            return
        self._checking = True
        try:
            # An error is not caught here: tornado's PeriodicCallback logs it with its traceback
            # (tornado/ioloop.py, PeriodicCallback._run, tornado 6.6.1) and calls again at the next interval.
            await self.check_once()
        finally:
            self._checking = False

    async def check_once(self, now: float | None = None) -> list[CullRecord]:
        """Shut down the kernels the plan says are due at ``now`` (the clock's time when None);
        the records of those shut down."""
        c = self.config
        reading = await self.service.sampler.latest()
        kernels = await self.service.kernels()
        running = set(self.kernel_manager.list_kernel_ids())
        self.kept = {kid: at for kid, at in self.kept.items() if kid in running}
        report = self.service.report(reading, kernels)
        kept = dict(self.kept)
        plan = cull_plan(
            report,
            kernels,
            self.clock() if now is None else now,
            idle_after=c.cull_idle_after,
            min_bytes=c.cull_min_bytes,
            warn_before=c.cull_warn_before,
            kept=kept,
        )
        by_id = {k.kernel_id: k for k in kernels}
        done: list[CullRecord] = []
        for pending in plan.cull:
            kernel = by_id[pending.kernel_id]
            if not await self._still_due(kernel, kept):
                continue
            await self.kernel_manager.shutdown_kernel(pending.kernel_id)
            self.kept.pop(pending.kernel_id, None)
            record = cull_record(pending, self.clock(), c.cull_idle_after, c.cull_min_bytes)
            self.log.warning(
                "jupyter-gpumem: shut down kernel %s (notebook %s): it held %d bytes (%s) of GPU memory "
                "and had been idle %.0f s (GpuMem.cull_idle_after=%g)",
                pending.kernel_id,
                pending.notebook_path or "none",
                pending.held_bytes,
                format_bytes(pending.held_bytes),
                pending.idle_seconds,
                c.cull_idle_after,
            )
            done.append(record)
            self.culled.append(record)
            if self.on_cull is not None:
                self.on_cull(record)
        return done

    async def _still_due(self, kernel: KernelInfo, kept: Mapping[str, float]) -> bool:
        """Whether nothing has happened to the kernel since the plan: no activity, no "keep
        running", and its own shell answers (it is not in the middle of a cell)."""
        if not still_idle_since(self.kernel_manager, kernel) or self.kept.get(kernel.kernel_id) != kept.get(
            kernel.kernel_id
        ):
            return False  # activity, or the user's keep, since the listing: the clock starts again
        # kernel_info is one of jupyter_server's untracked_message_types: asking moves neither
        # the kernel's state nor its last activity (services/kernels/kernelmanager.py, 2.21.1).
        try:
            km = self.kernel_manager.get_kernel(kernel.kernel_id)
        except KERNEL_GONE:
            return False
        if not await shell_answers(km):
            self.log.info(
                "jupyter-gpumem: kernel %s reads %s but its shell did not answer within %gs: it is "
                "running a cell, so it is kept",
                kernel.kernel_id,
                kernel.execution_state,
                SHELL_ANSWER_WITHIN,
            )
            return False
        # The shell's answer took a while: the user may have asked to keep it meanwhile.
        return self.kept.get(kernel.kernel_id) == kept.get(kernel.kernel_id)
