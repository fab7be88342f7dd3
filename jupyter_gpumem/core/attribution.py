"""Which of the processes NVML lists on a GPU is this process: by its pid, by elimination, or
it cannot tell (and why).

NVML ignores PID namespaces: inside a container it lists the host's pids, each with its memory
(NVIDIA/nvidia-docker#1483: "you will always get the host pids, not the container pids"). A
process there finds no entry with its own pid. The evidence for that case is read by the caller:
pids NVML lists that are not processes here (``pid_in_namespace``). Outside a container
such a pid is a process that has just ended; either way nobody here can be named by it.

One pid NVML lists that is a known process here (this process's, a kernel's), on any GPU of the
machine, proves NVML and this process share a PID namespace: then every listed pid that is not a
process here has ended, and none of them can be this process (``shares_pid_namespace``).

Pure: no I/O. The monitor (``series.py``), the OOM report (``doctor/report.py``) and the
server's ``/devices`` (``server/device_report.py``) all decide with ``attribute``.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.metrics import held_bytes
from jupyter_gpumem.core.readings import (
    NO_STATS,
    PIDS_HIDDEN,
    AllocatorStats,
    DeviceReading,
    Maybe,
    NotAvailable,
    ProcessReading,
    Sample,
)

__all__ = [
    "BY_PID",
    "BY_ELIMINATION",
    "NOT_LISTED",
    "CANNOT_TELL",
    "HIDDEN",
    "Attribution",
    "attribute",
    "attribute_in_sample",
    "jax_pool_on",
    "listed_pids",
    "shares_pid_namespace",
    "pid_in_namespace",
]

# How this process was found among NVML's processes on one GPU.
BY_PID = "pid"  # NVML lists this process's own pid
BY_ELIMINATION = "elimination"  # the one listed pid that is not a process here, and JAX runs there
NOT_LISTED = "not_listed"  # NVML does not list this process there: it holds nothing NVML counts
CANNOT_TELL = "cannot_tell"  # pids that are not processes here, and no way to tell which is this one
HIDDEN = "hidden"  # NVML does not list processes at all (MIG and the like)


@dataclass(frozen=True)
class Attribution:
    """Who is who among the processes NVML lists on one GPU, seen from one process.

    - ``own``: NVML's entries for this process (by its pid, or the one found by elimination)
    - ``others``: entries of other processes, each a process here as far as is known
    - ``gone``: entries of other processes whose pids are not processes here (ended, or the
      host's pids seen from a container): nobody here can be named by them
    - ``unknown``: with ``CANNOT_TELL``, the entries among which this process may be
    - ``reason``: a sentence for people; empty when nothing needs saying
    """

    how: str
    reason: str = ""
    own: tuple[ProcessReading, ...] = ()
    others: tuple[ProcessReading, ...] = ()
    gone: tuple[ProcessReading, ...] = ()
    unknown: tuple[ProcessReading, ...] = ()

    @property
    def own_bytes(self) -> Maybe:
        """Bytes NVML counts for this process (0 when it is not listed); NotAvailable when that
        cannot be known."""
        if self.how in (CANNOT_TELL, HIDDEN):
            return NotAvailable(PIDS_HIDDEN, self.reason)
        total = 0
        for proc in self.own:
            if isinstance(proc.used_bytes, NotAvailable):
                return proc.used_bytes
            total += proc.used_bytes
        return total

    @property
    def own_pid(self) -> int | None:
        """The pid NVML lists this process under (a host pid when found by elimination)."""
        return self.own[0].pid if self.own else None


def _known_bytes(procs: tuple[ProcessReading, ...]) -> int:
    return sum(p.used_bytes for p in procs if not isinstance(p.used_bytes, NotAvailable))


def _pid_list(pids: list[int]) -> str:
    return ", ".join(str(p) for p in pids[:5]) + (f" and {len(pids) - 5} more" if len(pids) > 5 else "")


def listed_pids(devices: Any) -> set[int]:
    """Every pid NVML lists on any readable device of ``devices`` (a reading's tuple, or a
    NotAvailable: none)."""
    if isinstance(devices, NotAvailable):
        return set()
    return {
        proc.pid
        for dev in devices
        if isinstance(dev, DeviceReading) and not isinstance(dev.processes, NotAvailable)
        for proc in dev.processes
    }


def shares_pid_namespace(devices: Any, known_pids: Collection[int]) -> bool:
    """Whether NVML lists, on any GPU of ``devices``, one of ``known_pids`` (processes known to
    run here: this process, this server's kernels). NVML reports pids of the namespace it runs
    in (NVIDIA/nvidia-docker#1483), so such a match shows that namespace is this one."""
    return not listed_pids(devices).isdisjoint(set(known_pids))


def attribute(
    device: DeviceReading,
    pid: int,
    pids_not_here: Collection[int] | None,
    jax_pool: int | None = None,
    shared_namespace: bool = False,
) -> Attribution:
    """Which of ``device``'s NVML processes is process ``pid``.

    ``pids_not_here``: the pids NVML listed that were not processes in this PID namespace when
    it was read; None when nobody looked (an old trace, a replay), which keeps to matching pids.
    ``jax_pool``: bytes JAX's allocator holds on this GPU in process ``pid``, 0 where it runs
    there with no pool reading; None when JAX is not known to run on this GPU.
    ``shared_namespace``: a pid match on some GPU showed NVML's pids are this namespace's
    (``shares_pid_namespace``): the pids not here then ended, and are never this process.

    By elimination only when that is unambiguous: this pid is not listed, exactly one listed pid
    is not a process here, and JAX runs on this GPU (so this process holds a CUDA context there
    and NVML lists it) in no more memory than that entry holds.
    """
    if isinstance(device.processes, NotAvailable):
        return Attribution(HIDDEN, device.processes.reason)
    procs = device.processes
    own = tuple(p for p in procs if p.pid == pid)
    not_here = set(pids_not_here) if pids_not_here is not None else set()
    elsewhere = tuple(p for p in procs if p.pid != pid and p.pid in not_here)
    here = tuple(p for p in procs if p.pid != pid and p.pid not in not_here)
    if own:
        return Attribution(BY_PID, own=own, others=here, gone=elsewhere)
    if shared_namespace:
        return Attribution(NOT_LISTED, others=here, gone=elsewhere)
    if not elsewhere:
        return Attribution(NOT_LISTED, others=here)

    return _by_elimination(elsewhere, here, jax_pool)


def _by_elimination(
    elsewhere: tuple[ProcessReading, ...], here: tuple[ProcessReading, ...], jax_pool: int | None
) -> Attribution:
    """This process is the one listed pid that is not a process here, where that is unambiguous:
    one such pid, JAX runs on the GPU, in no more memory than that entry holds."""
    foreign = sorted({p.pid for p in elsewhere})
    listed = _pid_list(foreign)
    if jax_pool is None:
        return Attribution(
            CANNOT_TELL,
            (
                f"NVML lists pid{'s' if len(foreign) > 1 else ''} {listed}, not a process here (a container's view "
                "of the host's pids, or a process that ended); JAX does not run on this GPU in this process, "
                "so it cannot tell whether this process is among them"
            ),
            others=here,
            unknown=elsewhere,
        )
    if len(foreign) > 1:
        return Attribution(
            CANNOT_TELL,
            (
                f"NVML lists pids {listed}, none a process here (a container sees the host's pids): "
                "it cannot tell which of them is this process"
            ),
            others=here,
            unknown=elsewhere,
        )
    candidate_bytes = _known_bytes(elsewhere)
    if all(not isinstance(p.used_bytes, NotAvailable) for p in elsewhere) and candidate_bytes < jax_pool:
        return Attribution(
            CANNOT_TELL,
            (
                f"NVML lists pid {listed}, not a process here, with less memory than JAX's pool in this process: "
                "it cannot tell which process is this one"
            ),
            others=here,
            unknown=elsewhere,
        )
    return Attribution(
        BY_ELIMINATION,
        (
            f"NVML lists this process as pid {listed}: the only pid on this GPU that is not a process here "
            "(a container sees the host's pids), and JAX runs on this GPU"
        ),
        own=elsewhere,
        others=here,
    )


def jax_pool_on(sample: Sample, index: int) -> int | None:
    """Bytes JAX's pool holds on NVML device ``index`` in the sampled process: 0 when JAX runs
    there but reports no pool; None when JAX is not known to run there."""
    jdev = sample.jax_for(index)
    if jdev is None or jdev.platform == "cpu":
        return None
    if isinstance(jdev.stats, AllocatorStats):
        return held_bytes(jdev.stats, jdev.cuda_pool) or 0  # a NotAvailable pool reading counts as none
    return 0 if jdev.stats.code == NO_STATS else None  # no stats from a started backend: it runs there


def attribute_in_sample(sample: Sample, index: int) -> Attribution | None:
    """``attribute`` for the sampled process on NVML device ``index``; None when that device
    has no reading."""
    dev = sample.device(index)
    if not isinstance(dev, DeviceReading):
        return None
    shared = shares_pid_namespace(sample.devices, (sample.pid,))
    return attribute(dev, sample.pid, sample.pids_not_here, jax_pool_on(sample, index), shared)


def pid_in_namespace(pid: int) -> bool:
    """Whether ``pid`` is a process in this PID namespace, asked of the kernel (``kill(pid, 0)``),
    not of /proc: with /proc mounted ``hidepid=2`` another user's process has no /proc entry
    (psutil.pid_exists then says False) but ``kill`` answers EPERM for it, ESRCH only for a pid
    no process here has (kill(2); Linux Documentation/filesystems/proc.rst, "hidepid")."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except OSError:
        return False
    return True
