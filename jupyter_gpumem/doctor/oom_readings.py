"""The numbers an out-of-memory error is judged by, read at failure: the request, the device,
the allocator's statistics, the other processes, the settings, the live arrays and the failing
program, with what follows from them (``OomReadings``, ``OtherProcess``), and one ranked fix
(``Fix``, of a kind in ``FIX_KINDS``). Pure: the OOM report fills it, ``oom_rules`` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyter_gpumem.core import metrics, sites
from jupyter_gpumem.core.layout import ShardingSaving
from jupyter_gpumem.core.readings import AllocatorStats, CudaPoolReading
from jupyter_gpumem.doctor.program_budget import ProgramBudget

__all__ = ["OtherProcess", "OomReadings", "FIX_KINDS", "Fix"]


@dataclass(frozen=True)
class OtherProcess:
    """Another process holding memory on the failing device (from NVML).

    ``here`` False: NVML's pid is not a process in this PID namespace (inside a container NVML
    lists the host's pids, NVIDIA/nvidia-docker#1483; or the process ended), so no fix names it.
    """

    pid: int
    used_bytes: int | None  # None: the driver hides it (MIG)
    label: str = "process"  # "Jupyter kernel", "process", ...
    here: bool = True


@dataclass(frozen=True)
class OomReadings:
    """Numbers read at the failure, the input to ``advise``. Any may be None (not known).

    - ``device_total``: the device's total memory (NVML, or host RAM for the CPU)
    - ``device_free``: what the driver says is free now (NVML); on the CPU, the host's available
      memory (``MemAvailable``)
    - ``bytes_in_use``, ``pool_bytes``, ``bytes_limit``, ``largest_free_block``: the allocator's
      stats for the failing device (None on CPU and allocators without stats)
    - ``cuda_pool``: under cuda_async, the driver's reading of its default pool, which is JAX's
      pool there
    - ``own_process_bytes``: NVML's bytes for this process on the device
    - ``others``: the other processes on the device
    - ``host_pid_processes``: processes NVML lists by pids that are not processes here, when it
      cannot tell which of them is this kernel (``attribution.CANNOT_TELL``: containers)
    - ``preallocate``, ``fraction``, ``remat``: the settings in effect; ``allocator``: the
      failing device's allocator ("bfc", "cuda_async", ...), else the setting
    - ``live_bytes``: bytes of live JAX arrays on the device (deduplicated); None where not
      known (JAX not started, or a replayed trace, which records the allocator, not the arrays)
    - ``history_bytes``: of those, bytes reachable only through Out/_ history
    - ``growing``: lines whose live arrays come from several runs of one cell statement
      (``sites.growing``), largest first
    - ``error_form``: the message form (``OomError.form``): "host" is the GPU client's pinned
      host memory pool, "cubin" a compiled kernel that could not be loaded onto the device,
      "command_buffer" a CUDA graph the driver could not instantiate
    - ``host_array_bytes``: bytes of live arrays in a host memory kind (``pinned_host``)
    - ``program``: the failing jitted call's own budget (``program_budget``), where found
    - ``replicated``: where the error names its device among several, the replicated arrays on
      it that could be sharded, with what that would take off it (``oom_mesh.replicated_on``);
      ``failing_label``: that device (``cpu 3``)

    The derived numbers below are ``model``'s metrics of these readings.
    """

    requested: int | None
    device_total: int | None = None
    device_free: int | None = None
    bytes_in_use: int | None = None
    pool_bytes: int | None = None
    bytes_limit: int | None = None
    largest_free_block: int | None = None
    own_process_bytes: int | None = None
    others: tuple[OtherProcess, ...] = ()
    host_pid_processes: tuple[OtherProcess, ...] = ()
    preallocate: bool | None = None
    fraction: float | None = None
    allocator: str | None = None
    remat: bool | None = None
    live_bytes: int | None = None
    history_bytes: int = 0
    growing: tuple[sites.Growth, ...] = ()
    platform: str = "gpu"
    synthetic: bool = False
    cuda_pool: CudaPoolReading | None = None
    # JAX on the CPU while NVML lists GPUs (cpu_fallback.py): how many, how many hold no
    # process, and the line that puts JAX on them
    visible_gpus: int = 0
    idle_gpus: int | None = None
    gpu_fix: str | None = None
    error_form: str = ""
    autotuning: bool = False  # the compiler's autotuner ran out while it tried kernels (OomError.autotuning)
    host_array_bytes: int | None = None
    program: ProgramBudget | None = None  # the failing jitted call, where it was found
    replicated: tuple[ShardingSaving, ...] = ()
    failing_label: str = ""

    # derived, each from core/metrics.py ---------------------------------------------------------

    @property
    def stats(self) -> AllocatorStats:
        """The allocator's statistics as ``model`` reads them."""
        return AllocatorStats(
            allocator=self.allocator or "unknown",
            bytes_in_use=self.bytes_in_use,
            bytes_limit=self.bytes_limit,
            pool_bytes=self.pool_bytes,
            largest_free_block_bytes=self.largest_free_block,
        )

    @property
    def driver_pool(self) -> bool:
        """True under cuda_async: the pool is the CUDA driver's default pool, and no fraction caps it."""
        return metrics.uses_driver_pool(self.stats, self.cuda_pool)

    @property
    def pool(self) -> int | None:
        return metrics.pool_bytes(self.stats, self.cuda_pool)

    @property
    def pool_free(self) -> int | None:
        return metrics.unused_pool_bytes(self.stats, self.cuda_pool)

    @property
    def total_free(self) -> int | None:
        """Free bytes in the pool plus what it may still grow by: the most that could be had."""
        return metrics.available_bytes(self.stats, self.cuda_pool, device_free=self.device_free)

    @property
    def largest_request(self) -> int | None:
        """The largest single allocation that could succeed: a free block, or growth."""
        return metrics.largest_likely_request(self.stats, self.cuda_pool, device_free=self.device_free)

    @property
    def fragmentation(self) -> float | None:
        return metrics.fragmentation(self.stats, self.cuda_pool)

    @property
    def outside_pool(self) -> int | None:
        """This process's bytes outside JAX's pool (NVML's count minus the pool)."""
        return metrics.outside_allocator_bytes(self.own_process_bytes, self.stats, self.cuda_pool)

    @property
    def others_bytes(self) -> int:
        return sum(p.used_bytes or 0 for p in self.others)

    @property
    def host_pid_others_bytes(self) -> int:
        """The most that processes other than this kernel hold among ``host_pid_processes``:
        their bytes less this kernel's pool, which is one of them."""
        held = sum(p.used_bytes or 0 for p in self.host_pid_processes)
        return max(0, held - (metrics.held_bytes(self.stats, self.cuda_pool) or 0)) if held else 0


FIX_KINDS = (
    "cpu_beside_gpus",
    "too_large",
    "other_process",
    "history",
    "growing",
    "fragmentation",
    "fraction_cap",
    "compiled_programs",
    "remat",
    "kernel_load",
    "command_buffer",
    "autotune",
    "host_memory",
    "program",
    "donation",
    "replicated",
)


@dataclass(frozen=True)
class Fix:
    """One ranked fix: what to run or do, why (with the numbers), and the bytes it may win."""

    kind: str
    title: str
    action: str  # the exact %gpumem line or Python to run, or the action to take
    why: str
    gain_bytes: int | None = None  # bytes it would make available, where it can be estimated
    enough: bool | None = None  # whether that covers the shortfall (None: unknown)
    extra_actions: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "title": self.title,
            "action": self.action,
            "extra_actions": list(self.extra_actions),
            "why": self.why,
            "gain_bytes": self.gain_bytes,
            "enough": self.enough,
        }
