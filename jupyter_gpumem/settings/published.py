"""What a kernel publishes about its allocator settings for the server: the file's name and its
JSON, read back strictly, and what the settings say about JAX's preallocation on a GPU.

The kernel writes the file (``jupyter_gpumem/settings/publish.py``) next to its connection file,
in the Jupyter runtime directory; the server reads it for its kernels' pids
(``server/kernel_settings.py``). Pure: importing it imports nothing of ours but this.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

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
    ``sources`` names where each came from, as ``%gpumem status`` does.
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

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "pid": self.pid,
            "kernel_id": self.kernel_id,
            "backend_started": self.backend_started,
            "platform": self.platform,
            "jax_version": self.jax_version,
            "settings": {name: {"value": getattr(self, name), "source": self.sources.get(name)} for name in SETTINGS},
        }

    def settings_json(self) -> dict:
        """What /devices shows of it: the three settings and whether JAX has started."""
        return {
            "preallocate": self.preallocate,
            "fraction": self.fraction,
            "allocator": self.allocator,
            "backend_started": self.backend_started,
            "sources": dict(self.sources),
        }


def _text(value: Any, limit: int = 64) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


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
    for name in SETTINGS:
        entry = settings.get(name)
        if not isinstance(entry, dict):
            return None
        values[name] = entry.get("value")
        source = _text(entry.get("source"))
        if source is not None:
            sources[name] = source
    preallocate = values["preallocate"] if isinstance(values["preallocate"], bool) else None
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
    )


# JAX 0.10.1 and 0.10.2 silently give BFC for XLA_PYTHON_CLIENT_ALLOCATOR=platform (jax#39145).
_PLATFORM_IS_BFC = re.compile(r"^0\.10\.[12](?!\d)")


def preallocates(s: PublishedSettings) -> bool | None:
    """Whether JAX took its pool on a GPU when its backend started, by the settings; None when
    they cannot say (JAX has not started, a setting is not known, or an allocator whose
    behaviour is not known here: vmm, address).

    The rules are docs/settings.md's: BFC (``default``) with preallocation on takes
    fraction × total at start; ``cuda_async`` with preallocation on reserves its whole pool as
    well (unverified on a GPU); ``platform`` keeps no pool, except on JAX 0.10.1 and 0.10.2
    where it is BFC (jax#39145).
    """
    if not s.backend_started:
        return None
    if s.platform is not None and s.platform not in GPU_PLATFORMS:
        return False  # JAX runs on the CPU (or elsewhere): no pool on a GPU
    if s.preallocate is None or s.allocator is None:
        return None
    allocator = s.allocator.lower()
    if allocator == "platform" and s.jax_version and _PLATFORM_IS_BFC.match(s.jax_version):
        allocator = "bfc"
    if allocator in ("default", "bfc", "cuda_async"):
        return s.preallocate
    if allocator == "platform":
        return False
    return None


def reserved_bytes(s: PublishedSettings, total: int | None) -> int | None:
    """The bytes the settings reserved on a GPU of ``total`` bytes: fraction × total where JAX
    preallocated (a fraction above 1 is taken as the whole card), else None."""
    if not total or preallocates(s) is not True or s.fraction is None:
        return None
    return int(min(s.fraction, 1.0) * total)
