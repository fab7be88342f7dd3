"""How a file is written so that a reader sees the old one or the new one, never half of one:
``replaced_on_success`` writes beside the target and moves the result into place only when the
writing succeeded (used by exports, snapshots and the kernel's published settings)."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator


@contextlib.contextmanager
def replaced_on_success(path: str, *, mode: int | None = None) -> Iterator[str]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only if the block succeeds.

    A block that fails midway leaves no partial file and any earlier file untouched; its error
    goes on. With ``mode`` the temporary file is created with those permissions before the block
    opens it (``0o600``: readable by the user only from the first byte).
    """
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        if mode is not None:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode))
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
