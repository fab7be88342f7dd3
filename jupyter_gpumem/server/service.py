"""What the handlers ask: the devices report, the kernel list, the configuration.

One ``GpuMemService`` per server: it owns the shared sampler, the kernel directory and the
Prometheus gauges.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from jupyter_gpumem import __version__
from jupyter_gpumem.server.config import GpuMem
from jupyter_gpumem.server.device_report import build_devices_report
from jupyter_gpumem.server.kernels import KernelDirectory, KernelInfo
from jupyter_gpumem.server.metrics import gauges, set_touch
from jupyter_gpumem.server.shared_sampler import SharedSampler
from jupyter_gpumem.server.readings import Reading, make_source, process_facts

log = logging.getLogger(__name__)

# Kernel lists are shared by the requests of one short window: listing sessions is not free.
KERNEL_LIST_MAX_AGE = 0.5


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
            on_reading=self._after_reading if export_metrics else None,
        )
        self.export_metrics = export_metrics
        if export_metrics:
            set_touch(self.sampler.touch)
        self._kernels: list[KernelInfo] | None = None
        self._kernels_at = -1.0
        self._kernels_inflight: asyncio.Future | None = None

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

    async def _after_reading(self, reading: Reading) -> None:
        gauges().update(self.report(reading, await self.kernels()))

    def config_json(self) -> dict:
        c = self.config
        return {
            "poll_interval": c.poll_interval,
            "replay": c.replay or None,
            "show_other_users": c.show_other_users,
            "version": __version__,
            "source": self.source.label,
            "idle_intervals": c.idle_intervals,
            "replay_speed": c.replay_speed,
            "replay_loop": c.replay_loop,
            "replay_map_placeholder_pids": c.replay_map_placeholder_pids,
            "preallocated_fraction": c.preallocated_fraction,
            "sampler": {
                "running": self.sampler.running,
                "reads": self.sampler.reads,
                "nvml_calls": self.sampler.nvml_calls,
            },
        }

    def stop(self) -> None:
        self.sampler.stop()
        if self.export_metrics:
            set_touch(None)
            gauges().clear()
