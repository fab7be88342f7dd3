"""What a kernel publishes about its allocator settings for the server: the file's name and its
JSON, read back strictly, and what the settings say about JAX's preallocation on a GPU.

The kernel writes the file (``jupyter_gpumem/settings/publish.py``) next to its connection file,
in the Jupyter runtime directory; the server reads it for its kernels' pids
(``server/kernel_settings.py``). Pure: importing it imports nothing of ours but this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = "jupyter-gpumem-kernel-settings"
VERSION = 1
PREFIX = "jupyter-gpumem-kernel-"
MAX_BYTES = 4096  # a published file is a few hundred bytes; anything larger is not ours

# jupyter_client 8.10, MultiKernelManager.pre_start_kernel: a server's kernel gets the
# connection file "kernel-<kernel id>.json" in the server's connection directory.
_CONNECTION_FILE = re.compile(r"^kernel-(?P<id>[A-Za-z0-9_.-]{1,128})\.json$")
_KERNEL_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

GPU_PLATFORMS = ("cuda", "rocm", "gpu")
SETTINGS = ("preallocate", "fraction", "allocator")


def file_name(pid: int) -> str:
    """The published file's name for the kernel process ``pid``."""
    return f"{PREFIX}{pid}.json"


def kernel_id_of(connection_file: str) -> str | None:
    """The kernel id in a connection file's name (``kernel-<id>.json``), or None."""
    match = _CONNECTION_FILE.match(connection_file.replace("\\", "/").rsplit("/", 1)[-1])
    return match.group("id") if match else None


@dataclass(frozen=True)
class PublishedSettings:
    """One kernel's settings as it published them.

    ``preallocate``, ``fraction`` and ``allocator`` are None where not known: not read yet
    (neither JAX nor the settings code was imported in the kernel), or a value JAX rejects.
    ``sources`` names where each came from, as ``%gpumem status`` does. ``pool_taken``: whether
    JAX's allocator has taken GPU memory yet (BFC takes its pool at the first allocation, not
    when JAX starts); None where not known (not on a GPU, or a file without it).
    """

    pid: int
    kernel_id: str | None
    backend_started: bool
    platform: str | None = None  # the started backend's platform ("cuda", "cpu"); None before
    jax_version: str | None = None
    preallocate: bool | None = None
    fraction: float | None = None
    allocator: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    pool_taken: bool | None = None  # JAX's allocator took GPU memory yet (jax_backend.gpu_pool_taken)
    # Settings whose variable changed after JAX started (not in effect): name -> {"variable",
    # "now", "cell"} (settings.started_with.LateChange).
    changed_after_start: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # TF_FORCE_UNIFIED_MEMORY as XLA read it at the start (None: not known).
    unified_memory: bool | None = None

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "pid": self.pid,
            "kernel_id": self.kernel_id,
            "backend_started": self.backend_started,
            "platform": self.platform,
            "jax_version": self.jax_version,
            "pool_taken": self.pool_taken,
            "unified_memory": self.unified_memory,
            "settings": {
                name: {
                    "value": getattr(self, name),
                    "source": self.sources.get(name),
                    "changed_after_start": dict(self.changed_after_start[name])
                    if name in self.changed_after_start
                    else None,
                }
                for name in SETTINGS
            },
        }

    def settings_json(self) -> dict:
        """What /devices shows of it: the three settings and whether JAX has started."""
        return {
            "preallocate": self.preallocate,
            "fraction": self.fraction,
            "allocator": self.allocator,
            "backend_started": self.backend_started,
            "sources": dict(self.sources),
            "changed_after_start": {name: dict(late) for name, late in self.changed_after_start.items()},
        }


def _text(value: Any, limit: int = 64) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _late_change(entry: Any) -> dict[str, Any] | None:
    """A setting's ``changed_after_start`` as written, or None where it is absent or malformed."""
    if not isinstance(entry, dict):
        return None
    variable, now, cell = _text(entry.get("variable")), entry.get("now"), entry.get("cell")
    if variable is None or (now is not None and _text(now, 256) is None):
        return None
    if cell is not None and (isinstance(cell, bool) or not isinstance(cell, int) or cell < 0):
        return None
    return {"variable": variable, "now": now, "cell": cell}


def parse(text: str | bytes, pid: int, kernel_id: str | None = None) -> PublishedSettings | None:
    """The settings in a published file's text, or None when it is not one for ``pid`` (and,
    where both are known, for ``kernel_id``): not JSON, another format or version, another
    process, or fields of the wrong type."""
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("version") != VERSION:
        return None
    if raw.get("pid") != pid or isinstance(raw.get("pid"), bool):
        return None
    written_id = raw.get("kernel_id")
    if written_id is not None and (not isinstance(written_id, str) or not _KERNEL_ID.match(written_id)):
        return None
    if kernel_id is not None and written_id is not None and written_id != kernel_id:
        return None
    started = raw.get("backend_started")
    settings = raw.get("settings")
    if not isinstance(started, bool) or not isinstance(settings, dict):
        return None
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    late: dict[str, dict[str, Any]] = {}
    for name in SETTINGS:
        entry = settings.get(name)
        if not isinstance(entry, dict):
            return None
        values[name] = entry.get("value")
        source = _text(entry.get("source"))
        if source is not None:
            sources[name] = source
        change = _late_change(entry.get("changed_after_start"))
        if change is not None:
            late[name] = change
    preallocate = values["preallocate"] if isinstance(values["preallocate"], bool) else None
    pool_taken = raw.get("pool_taken")
    fraction = values["fraction"]
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 10:
        fraction = None
    return PublishedSettings(
        pid=pid,
        kernel_id=written_id,
        backend_started=started,
        platform=_text(raw.get("platform")),
        jax_version=_text(raw.get("jax_version")),
        preallocate=preallocate,
        fraction=None if fraction is None else float(fraction),
        allocator=_text(values["allocator"]),
        sources=sources,
        pool_taken=pool_taken if isinstance(pool_taken, bool) else None,
        changed_after_start=late,
        unified_memory=raw.get("unified_memory") if isinstance(raw.get("unified_memory"), bool) else None,
    )


# What each XLA_PYTHON_CLIENT_ALLOCATOR name gives, by JAX release, as read for docs/sources.md:
# - "platform" is XLA's synchronous passthrough (no pool; memory_stats() is None, because
#   StreamExecutorGpuDevice::GetAllocatorStats answers Unimplemented for an allocator that is
#   not a MultiDeviceAdapter; on an H100 with JAX 0.11.2 its OOM named the allocator
#   SE_0_space_0: "Out of memory while trying to allocate ... with allocator SE_0_space_0",
#   tests/data/oom_texts/h100_jax_0.11.2_*.txt), except on
#   0.10.1 and 0.10.2, where it is BFC (jax#39145: openxla/xla#41761 gave XLA's Backend a BFC
#   allocator, which the PJRT client falls back to), until openxla/xla#45668 (JAX 0.11.0).
# - "address" is that passthrough by name, accepted from JAX 0.11.0 (jax#38490); earlier
#   releases reject it, and JAX falls back to the CPU.
# Releases after NEWEST_READ have not been read: for them these names are "not known".
PLATFORM_IS_BFC = ((0, 10, 1), (0, 10, 2))
ADDRESS_ACCEPTED_FROM = (0, 11, 0)
NEWEST_READ = (0, 12)
PASSTHROUGH = "passthrough"
REJECTED = "rejected"


def release_of(version: str | None) -> tuple[int, int, int] | None:
    """``"0.10.2"`` (or ``"0.12.0.1"``, ``"0.11.0.dev20260101"``) as (0, 10, 2); None when it is
    not a release number."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def allocator_kind(allocator: str, jax_version: str | None) -> str | None:
    """What ``XLA_PYTHON_CLIENT_ALLOCATOR=allocator`` really gives on JAX ``jax_version``:
    "bfc", "cuda_async", "vmm", ``PASSTHROUGH`` (no pool, no statistics), ``REJECTED`` (the
    name is refused and JAX runs on the CPU), or None where that is not known here (the
    version is unknown or newer than ``NEWEST_READ``, for the names whose meaning changed)."""
    name = allocator.lower()
    if name in ("default", "bfc"):
        return "bfc"
    if name in ("cuda_async", "vmm"):
        return name
    release = release_of(jax_version)
    if name not in ("platform", "address") or release is None or release[:2] > NEWEST_READ:
        return None
    if name == "address":
        return PASSTHROUGH if release >= ADDRESS_ACCEPTED_FROM else REJECTED
    return "bfc" if release in PLATFORM_IS_BFC else PASSTHROUGH


def preallocates(s: PublishedSettings) -> bool | None:
    """Whether JAX took its pool on a GPU, by the settings; None when they cannot say (JAX has
    not started, a setting is not known, BFC has not taken its pool yet or the kernel did not
    say, or an allocator whose behaviour is not known here: vmm, or platform and address on a
    JAX release not read: ``allocator_kind``; or unified memory, under which XLA's BFC limit is
    total × max(1, fraction) of managed memory that the driver pages in on demand:
    ``CreateBFCAllocator``, xla/pjrt/gpu/gpu_helpers.cc, openxla/xla at 963f4888 and 001918b7).

    The rules are docs/settings.md's: BFC (``default``) with preallocation on takes
    fraction × total at its first allocation, not when JAX starts (``BFCAllocator::Extend``,
    openxla/xla xla/tsl/framework/bfc_allocator.cc at 80c095fc: the pool is empty until then),
    so it counts only once the kernel saw its pool taken; ``cuda_async`` with preallocation on
    reserves its whole pool when the client is created (``SetStreamAndPreallocateMemory``,
    xla/stream_executor/gpu/gpu_cudamallocasync_allocator.cc; unverified on a GPU);
    ``platform`` and ``address`` keep no pool, except ``platform`` on JAX 0.10.1 and 0.10.2,
    where it is BFC (jax#39145); an ``address`` that JAX refuses leaves it on the CPU.
    """
    if not s.backend_started:
        return None
    if s.platform is not None and s.platform not in GPU_PLATFORMS:
        return False  # JAX runs on the CPU (or elsewhere): no pool on a GPU
    if s.unified_memory:
        return None  # managed memory: the pool is pages that move on demand, not a reservation
    if s.preallocate is None or s.allocator is None:
        return None
    kind = allocator_kind(s.allocator, s.jax_version)
    if kind == "bfc":
        if not s.preallocate:
            return False
        return True if s.pool_taken else None  # not yet: at the first allocation
    if kind == "cuda_async":
        return s.preallocate
    if kind in (PASSTHROUGH, REJECTED):
        return False
    return None


def reserved_bytes(s: PublishedSettings, total: int | None) -> int | None:
    """The bytes the settings reserved on a GPU of ``total`` bytes: fraction × total where JAX
    preallocated (a fraction above 1 is taken as the whole card), else None."""
    if not total or preallocates(s) is not True or s.fraction is None:
        return None
    return int(min(s.fraction, 1.0) * total)
