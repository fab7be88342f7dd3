"""The allocator settings this server's kernels published (``jupyter_gpumem/settings/publish.py``
writes them beside each kernel's connection file), read for the kernels' pids.

A file is read again only when its size or modification time changed. A kernel that was killed
(SIGKILL, the OOM killer) cannot remove its own file: ``remove_stale_files`` does, for files of
our name whose process is gone. Anything that is not a
kernel's own file is ignored, calmly: a file of another user, a link or something that is not
a plain file, one too large, one that does not parse (``settings.published.parse``), or one
that names another pid or kernel.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from typing import Any

from jupyter_gpumem.core.files import open_regular_for_reading
from jupyter_gpumem.settings.published import MAX_BYTES, PREFIX, PublishedSettings, file_name, parse

# A file younger than this is kept whatever its pid says: its kernel may still be starting.
STALE_AFTER_S = 60.0
# The published file, and the temporary one a kernel killed mid-write leaves (files.py).
_LEFTOVER = re.compile(
    rf"^(?:{re.escape(PREFIX)}(?P<pid>[0-9]{{1,10}})\.json|\.{re.escape(PREFIX)}(?P<part_pid>[0-9]{{1,10}})\.json\.[0-9a-f]{{16}}\.part)$"
)


def _foreign(info: os.stat_result) -> bool:
    return hasattr(os, "getuid") and info.st_uid != os.getuid()


def connection_dir(km: Any) -> str | None:
    """The directory of a kernel's connection file (jupyter_client's ``KernelManager.connection_file``),
    where the kernel publishes its settings; None when it has none."""
    name = getattr(km, "connection_file", None)
    if not isinstance(name, str) or not name:
        return None
    return os.path.dirname(os.path.abspath(name))


class PublishedSettingsReader:
    """Reads published settings files, each parsed once per change."""

    def __init__(self) -> None:
        # path -> ((mtime_ns, size, pid, kernel id), what it said)
        self._cache: dict[str, tuple[tuple, PublishedSettings | None]] = {}
        self.reads = 0  # files parsed so far (tests)

    def read(self, directory: str | None, pid: int | None, kernel_id: str | None = None) -> PublishedSettings | None:
        """The settings kernel process ``pid`` published in ``directory``, or None."""
        if directory is None or pid is None:
            return None
        path = os.path.join(directory, file_name(pid))
        try:
            info = os.lstat(path)
        except OSError:  # none published (the extension is not loaded), or gone
            self._cache.pop(path, None)
            return None
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        if _foreign(info):
            return None  # another user's file: never trusted
        key = (info.st_mtime_ns, info.st_size, pid, kernel_id)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            # Opened without following a link or waiting on a FIFO swapped in since the lstat,
            # and checked again on what was opened.
            with open_regular_for_reading(path, MAX_BYTES) as handle:
                if _foreign(os.fstat(handle.fileno())):
                    return None
                text = handle.read(MAX_BYTES + 1)
        except OSError:
            return None
        self.reads += 1
        settings = parse(text, pid, kernel_id) if len(text) <= MAX_BYTES else None
        self._cache[path] = (key, settings)
        return settings

    def forget_except(self, directories_and_pids: set[tuple[str | None, int | None]]) -> None:
        """Drop cached files of kernels no longer listed."""
        keep = {os.path.join(d, file_name(p)) for d, p in directories_and_pids if d is not None and p is not None}
        for path in set(self._cache) - keep:
            self._cache.pop(path, None)


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0 checks without sending; another user's
    process answers EPERM, and exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):  # not a pid this system can have
        return False
    return True


def stale_files(
    directory: str,
    kernel_pids: Iterable[int],
    now: float,
    alive: Callable[[int], bool] = process_alive,
    older_than: float = STALE_AFTER_S,
) -> list[str]:
    """The settings files in ``directory`` whose kernel is gone: our name pattern only
    (``jupyter-gpumem-kernel-<pid>.json`` and its temporaries), a regular file of this user,
    not modified for ``older_than`` seconds, its pid none of ``kernel_pids`` and not alive."""
    keep = set(kernel_pids)
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        match = _LEFTOVER.match(name)
        if match is None:
            continue
        pid = int(match.group("pid") or match.group("part_pid"))
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or _foreign(info) or now - info.st_mtime < older_than:
            continue
        if pid in keep or alive(pid):
            continue
        found.append(path)
    return found


def remove_stale_files(directories: Iterable[str], kernel_pids: Iterable[int], now: float | None = None) -> list[str]:
    """Remove what ``stale_files`` finds in each directory; returns the paths removed."""
    now = time.time() if now is None else now
    pids = set(kernel_pids)
    removed = []
    for directory in set(directories):
        for path in stale_files(directory, pids, now):
            try:
                os.unlink(path)
            except OSError:  # gone meanwhile, or not ours to remove
                continue
            removed.append(path)
    return removed
