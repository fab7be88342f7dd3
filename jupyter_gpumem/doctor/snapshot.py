"""What is in device memory, with the Python stack that allocated each array and program:
``%gpumem snapshot PATH`` writes JAX's device memory profile (pprof, gzip) for ``pprof``.

The path is checked before JAX is asked, and the file is written whole (a temporary file in the
same folder, then renamed), so a bad path or a failure leaves nothing behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from jupyter_gpumem.core.files import check_writable_name, replaced_on_success
from jupyter_gpumem.core.magic_args import Grammar, Option
from jupyter_gpumem.doctor.text import bytes_or_na, pretty_as_text
from jupyter_gpumem.sources import jax_arrays


@dataclass(frozen=True)
class Snapshot:
    """A profile written to ``path``: ``nbytes`` of gzipped pprof."""

    path: str
    nbytes: int

    def __str__(self) -> str:
        return (
            f"Wrote JAX's device memory profile ({bytes_or_na(self.nbytes)}, pprof, gzip) to {self.path}.\n"
            f"Open it with pprof: pprof -http=localhost:8080 {self.path}  "
            f"(or pprof -top -sample_index=space {self.path}); each sample is a live array or "
            f"program with the stack that allocated it."
        )

    _repr_pretty_ = pretty_as_text


def check_path(path: str) -> str:
    """The absolute path to write, or ValueError saying why it cannot be written there."""
    if not path.strip():
        raise ValueError("give a file to write, e.g. %gpumem snapshot memory.prof")
    full = os.path.abspath(os.path.expanduser(path))
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        raise ValueError(f"{path!r} is a folder; give a file name inside it, e.g. {os.path.join(path, 'memory.prof')}")
    if not os.path.isdir(folder):
        raise ValueError(f"the folder {folder!r} does not exist; nothing was written")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"the folder {folder!r} cannot be written to; nothing was written")
    try:
        check_writable_name(full)  # a link, FIFO or device planted at the name
    except OSError as err:
        raise ValueError(f"{err.strerror}; nothing was written") from None
    if os.path.exists(full) and not os.access(full, os.W_OK):
        raise ValueError(f"{path!r} exists and cannot be overwritten; nothing was written")
    return full


def write_snapshot(path: str) -> Snapshot:
    """Write the device memory profile to ``path``. Raises ValueError, writing nothing, for a
    bad path or before JAX's backend has started."""
    full = check_path(path)
    profile = jax_arrays.device_memory_profile()
    if profile is None:
        raise ValueError(
            "JAX's backend has not started: there is no device memory to profile yet "
            "(taking a profile would start it); nothing was written"
        )
    try:
        with replaced_on_success(full) as fh:
            fh.write(profile)
    except OSError as err:
        raise ValueError(f"could not write {path!r}: {err.strerror or err}; nothing was written") from None
    return Snapshot(full, len(profile))


SNAPSHOT_ARGS = Grammar(
    "%gpumem snapshot", positionals=(Option("path", "PATH", required=True, help="the file to write, e.g. memory.prof"),)
)


def magic_snapshot(argv: list[str], shell: Any) -> Snapshot:
    """``%gpumem snapshot PATH``."""
    return write_snapshot(SNAPSHOT_ARGS.parse(argv)["path"])
