"""What the handlers ask: the devices report, the kernel list, the configuration.

One ``GpuMemService`` per server: it owns the shared sampler, the kernel directory and the
Prometheus gauges. The /devices answer is built once per reading and kernel list (and per
notebook asked for), serialised once, and served to every client from that cache, with a weak
ETag over everything but the reading's time, so a client whose copy says the same gets a 304.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpumem.core.package_version import package_version
from jupyter_gpumem.server.config import GpuMem
from jupyter_gpumem.server.culling import Culler, CullRecord, annotate, cull_plan
from jupyter_gpumem.server.device_report import build_devices_report
from jupyter_gpumem.server.kernels import KernelDirectory, KernelInfo
from jupyter_gpumem.server.metrics import count_culled_kernel, gauges, set_touch, snapshot_from
from jupyter_gpumem.server.metrics_listener import ListenerStatus
from jupyter_gpumem.server.push import Watchers
from jupyter_gpumem.server.readings import Reading, make_source, process_facts
from jupyter_gpumem.server.shared_sampler import SharedSampler

log = logging.getLogger(__name__)

# Kernel lists are shared by the requests of one short window: listing sessions is not free.
KERNEL_LIST_MAX_AGE = 0.5
# Answers kept per reading and kernel list: one per notebook asked for, the rest built anew.
MAX_CACHED_ANSWERS = 256


@dataclass(frozen=True)
class Answer:
    """A /devices answer ready to send: the JSON bytes and their weak ETag."""

    body: bytes
    etag: str


@dataclass
class _Answers:
    reading: Reading
    kernels: list[KernelInfo]
    by_notebook: dict[str | None, Answer] = field(default_factory=dict)


def answer_of(report: dict) -> Answer:
    """The report serialised, with a weak ETag over everything but ``t``: two answers with the
    same values are the same to the panel, whenever they were read (RFC 9110, 8.8.1)."""
    values = dict(report)
    values.pop("t", None)
    digest = hashlib.sha1(json.dumps(values, sort_keys=True).encode()).hexdigest()
    return Answer(json.dumps(report).encode(), f'W/"{digest}"')


class GpuMemService:
    def __init__(self, config: GpuMem, kernel_manager: Any, session_manager: Any, export_metrics: bool = True) -> None:
        self.config = config
        self.kernels_dir = KernelDirectory(kernel_manager, session_manager, pid_timeout=config.kernel_pid_timeout)
        self.source = make_source(config.replay, speed=config.replay_speed, loop=config.replay_loop)
        if not config.replay_map_placeholder_pids:
            self.source.placeholder_pids = ()
        self.sampler = SharedSampler(
            self.source,
            interval=config.poll_interval,
            idle_intervals=config.idle_intervals,
            on_reading=self._after_reading,
        )
        self.export_metrics = export_metrics
        if export_metrics:
            set_touch(self.sampler.touch)
        self._kernels: list[KernelInfo] | None = None
        self._kernels_at = -1.0
        self._kernels_inflight: asyncio.Future | None = None
        self._answers: _Answers | None = None
        self.watchers = Watchers()  # open /devices/ws sockets
        self.answers_sent = {"full": 0, "not_modified": 0}  # /devices answers: 200s and 304s
        self.metrics_listener: Any = None  # metrics_listener.MetricsListener, where GpuMem.metrics_port asks
        self.metrics_listener_status = ListenerStatus("off")  # the loader's attempt, where one was made
        # Started by the extension's loader (it needs the server's IOLoop); off unless cull_idle_after > 0.
        self.culler = Culler(self, kernel_manager, on_cull=self._after_cull)

    async def kernels(self) -> list[KernelInfo]:
        """This server's kernels; one listing shared by the requests of a short window."""
        if self._kernels is not None and time.monotonic() - self._kernels_at <= KERNEL_LIST_MAX_AGE:
            return self._kernels
        if self._kernels_inflight is None or self._kernels_inflight.done():
            self._kernels_inflight = asyncio.ensure_future(self._list_kernels())
        return await asyncio.shield(self._kernels_inflight)

    async def _list_kernels(self) -> list[KernelInfo]:
        kernels = await self.kernels_dir.kernels()
        self._kernels, self._kernels_at = kernels, time.monotonic()
        return kernels

    def report(self, reading: Reading, kernels: list[KernelInfo], notebook: str | None = None) -> dict:
        report = self._report(reading, kernels, notebook)
        c = self.config
        plan = cull_plan(
            report,
            kernels,
            reading.t,
            idle_after=c.cull_idle_after,
            min_bytes=c.cull_min_bytes,
            warn_before=c.cull_warn_before,
            kept=self.culler.kept,
        )
        report["recent_culls"] = self.culler.recent()
        return annotate(report, plan)

    def _after_cull(self, record: CullRecord) -> None:
        self._answers = None  # the next answer carries the record, whatever the reading
        if self.export_metrics:
            count_culled_kernel(record)

    def _report(self, reading: Reading, kernels: list[KernelInfo], notebook: str | None = None) -> dict:
        return build_devices_report(
            reading,
            kernels,
            poll_interval=self.config.poll_interval,
            notebook=notebook,
            show_other_users=self.config.show_other_users,
            preallocated_fraction=self.config.preallocated_fraction,
            facts_for=process_facts,
        )

    async def devices(self, notebook: str | None = None) -> dict:
        reading = await self.sampler.latest()
        return self.report(reading, await self.kernels(), notebook)

    async def devices_answer(self, notebook: str | None = None) -> Answer:
        """The /devices answer for the latest reading, from the cache when built already."""
        reading = await self.sampler.latest()
        return self._answer_for(reading, await self.kernels(), notebook)

    def _answer_for(self, reading: Reading, kernels: list[KernelInfo], notebook: str | None) -> Answer:
        cached = self._answers
        if cached is None or cached.reading is not reading or cached.kernels is not kernels:
            cached = self._answers = _Answers(reading, kernels)
        answer = cached.by_notebook.get(notebook)
        if answer is None:
            answer = answer_of(self.report(reading, kernels, notebook))
            if len(cached.by_notebook) < MAX_CACHED_ANSWERS:
                cached.by_notebook[notebook] = answer
        return answer

    async def _after_reading(self, reading: Reading) -> None:
        kernels = await self.kernels()
        report = self.report(reading, kernels)
        if self._answers is None or self._answers.reading is not reading or self._answers.kernels is not kernels:
            self._answers = _Answers(reading, kernels, {None: answer_of(report)})  # what most clients ask for
        if len(self.watchers):
            self.sampler.touch()  # an open socket is a watcher
            self.watchers.push(lambda notebook: self._answer_for(reading, kernels, notebook))
        if not self.export_metrics:
            return
        c = self.config
        # Exported while the reader may still be alive: one interval past its idle stop.
        max_age = c.poll_interval * (c.idle_intervals + 1)
        gauges().update(snapshot_from(report, kernels, idle_after=c.idle_after, max_age=max_age))

    def config_json(self) -> dict:
        c = self.config
        return {
            "poll_interval": c.poll_interval,
            "replay": c.replay or None,
            "show_other_users": c.show_other_users,
            "version": package_version(),
            "source": self.source.label,
            "idle_intervals": c.idle_intervals,
            "replay_speed": c.replay_speed,
            "replay_loop": c.replay_loop,
            "replay_map_placeholder_pids": c.replay_map_placeholder_pids,
            "preallocated_fraction": c.preallocated_fraction,
            "idle_after": c.idle_after,
            "cull_idle_after": c.cull_idle_after,
            "cull_min_bytes": c.cull_min_bytes,
            "cull_warn_before": c.cull_warn_before,
            "sampler": {
                "running": self.sampler.running,
                "reads": self.sampler.reads,
                "nvml_calls": self.sampler.nvml_calls,
            },
            "devices_answers": dict(self.answers_sent),
            "devices_sockets": len(self.watchers),
            "metrics_listener": self.metrics_listener_status.as_json(),
        }

    def stop(self) -> None:
        if self.metrics_listener is not None:
            self.metrics_listener.stop()
        self.culler.stop()
        self.watchers.close_all()
        self.sampler.stop()
        if self.export_metrics:
            set_touch(None)
            gauges().clear()
