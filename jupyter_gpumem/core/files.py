"""Files the package writes or reads at a path someone else may share (a group folder, the
runtime folder), opened so that a planted link, FIFO or device cannot redirect or block them.

- ``replaced_on_success`` writes a new file whole or not at all: into a temporary file with an
  unpredictable name, created exclusively and without following links, moved into place only
  when the writing succeeded (exports, snapshots, the kernel's published settings).
- ``open_for_appending_lines`` opens a file to write as it goes (a recording): created or
  truncated, a regular file only.
- ``open_regular_for_reading`` opens a file to read (a trace, a settings file): a regular file
  only, never blocking, no larger than a cap.

Each refuses with ``UnsafePathError`` (an OSError that says what was found and what to do),
and a refusal changes nothing on disk.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from typing import IO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(OSError):
    """A path that is not a regular file of its own (a link, a FIFO, a device, a folder), or a
    file over a size cap; the message names the path, what was found, and what is accepted."""

    def __str__(self) -> str:
        return str(self.strerror)  # the sentence alone, without "[Errno 22]"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _refusal(path: str, mode: int, doing: str) -> UnsafePathError:
    found = _kind(mode)
    if stat.S_ISLNK(mode):
        with contextlib.suppress(OSError):
            found += f" (to {os.readlink(path)!r})"
    return UnsafePathError(
        errno.EINVAL,
        f"{path!r} is {found}; refusing to {doing} it, so nothing is written or read through it. "
        "Only a regular file (or a new name) is accepted: remove it or choose another name",
    )


def _existing_mode(path: str) -> int | None:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def check_writable_name(path: str | os.PathLike) -> str:
    """The absolute path, when what is there now is nothing or a regular file; raises
    UnsafePathError for a link, FIFO, device, socket or folder there."""
    full = os.path.abspath(os.fspath(path))
    mode = _existing_mode(full)
    if mode is not None and not stat.S_ISREG(mode):
        raise _refusal(full, mode, "replace")
    return full


def _create_exclusive(folder: str, name: str, mode: int) -> tuple[int, str]:
    """A new file beside the target, opened for writing: a random name, created only if nothing
    is there (O_EXCL) and never through a link (O_NOFOLLOW), with ``mode`` from the first byte."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(100):
        temporary = os.path.join(folder, f".{name}.{secrets.token_hex(8)}.part")
        try:
            return os.open(temporary, flags, mode), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name in {folder!r}")


@contextlib.contextmanager
def replaced_on_success(
    path: str | os.PathLike, *, mode: int | None = None, encoding: str | None = None, newline: str | None = None
) -> Iterator[IO]:
    """Yield a file open for writing; its content replaces ``path`` only if the block succeeds.

    The file is binary, or text with ``encoding``. It is a new temporary file beside ``path``
    with an unpredictable name, created exclusively without following links, so nothing planted
    in the folder can receive the bytes. A block that fails midway leaves no partial file and
    any earlier file untouched; its error goes on. With ``mode`` the file has those permissions
    from the first byte (``0o600``: readable by the user only); without, the usual ones (0666
    less the umask). A link, FIFO, device or folder at ``path`` is refused (UnsafePathError)
    before anything is written: the move would not follow a link, but a file the user named
    must not silently become something other than what the name pointed to.
    """
    full = check_writable_name(path)
    folder, name = os.path.split(full)
    fd, temporary = _create_exclusive(folder, name, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "w" if encoding else "wb", encoding=encoding, newline=newline) as handle:
            yield handle
        check_writable_name(full)  # what is there may have changed while the block ran
        os.replace(temporary, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def _open_regular(path: str, flags: int, doing: str, follow_links: bool = False) -> int:
    """An fd on ``path`` opened without blocking on a FIFO (and without following a link unless
    ``follow_links``), and checked (fstat, on what was actually opened) to be a regular file."""
    try:
        mode = (os.stat if follow_links else os.lstat)(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise _refusal(path, mode, doing)  # a device is never opened: opening one can act
    try:
        fd = os.open(path, flags | (0 if follow_links else _NOFOLLOW) | _NONBLOCK | _CLOEXEC, 0o666)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO):  # swapped in since the lstat: a link, a FIFO
            raise _refusal(path, _existing_mode(path) or stat.S_IFLNK, doing) from None
        raise
    found = os.fstat(fd).st_mode
    if not stat.S_ISREG(found):
        os.close(fd)
        raise _refusal(path, found, doing)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    return fd


def open_for_appending_lines(path: str | os.PathLike, encoding: str = "utf-8") -> IO[str]:
    """``path`` opened to write text from its start (created, or emptied), line-buffered by the
    caller; a link, FIFO, device or folder there is refused (UnsafePathError) and left as is."""
    full = os.path.abspath(os.fspath(path))
    fd = _open_regular(full, os.O_WRONLY | os.O_CREAT, "write to")
    try:
        os.ftruncate(fd, 0)  # only once it is known to be a regular file
        return os.fdopen(fd, "w", encoding=encoding)
    except BaseException:
        os.close(fd)
        raise


def open_regular_for_reading(
    path: str | os.PathLike, max_bytes: int | None = None, *, follow_links: bool = False
) -> IO[bytes]:
    """``path`` opened to read bytes; a FIFO, device or folder is refused, and so is a link
    (unless ``follow_links``: then what it points to must be a regular file) and a file larger
    than ``max_bytes`` (by its size, before any of it is read)."""
    full = os.path.abspath(os.fspath(path))
    fd = _open_regular(full, os.O_RDONLY, "read", follow_links)
    size = os.fstat(fd).st_size
    if max_bytes is not None and size > max_bytes:
        os.close(fd)
        raise UnsafePathError(
            errno.EFBIG, f"{full!r} is {size:,} bytes, over the limit of {max_bytes:,} bytes; nothing was read"
        )
    return os.fdopen(fd, "rb")
