"""The allocator settings this server's kernels published (``jupyter_gpumem/settings/publish.py``
writes them beside each kernel's connection file), read for the kernels' pids.

A file is read again only when its size or modification time changed. Anything that is not a
kernel's own file is ignored, calmly: a file of another user, a link or something that is not
a plain file, one too large, one that does not parse (``settings.published.parse``), or one
that names another pid or kernel.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from jupyter_gpumem.settings.published import MAX_BYTES, PublishedSettings, file_name, parse


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
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            return None  # another user's file: never trusted
        key = (info.st_mtime_ns, info.st_size, pid, kernel_id)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            with open(path, "rb") as handle:
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
