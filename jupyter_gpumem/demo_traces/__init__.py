"""Which demo traces ship with the package, and where each file is: the synthetic traces the
notebooks replay and ``%gpumem monitor --replay NAME`` finds by a bare name.

Every trace here is synthetic (made up by tests/data/make_synthetic_traces.py, its header says
so), none was recorded on a GPU. They ship inside the package so that a notebook copied out of
the repository, or run from an installed wheel, finds them.
"""

from __future__ import annotations

import os
import pathlib

from jupyter_gpumem.core.errors import GpumemError, did_you_mean

FOLDER = pathlib.Path(__file__).resolve().parent


def names() -> list[str]:
    """The shipped traces' names, without ``.jsonl``, sorted."""
    return sorted(p.stem for p in FOLDER.glob("*.jsonl"))


def path(name: str) -> pathlib.Path:
    """The file of the shipped trace ``name`` (with or without ``.jsonl``). An unknown name
    raises GpumemError naming the shipped ones."""
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    if stem in names():
        return FOLDER / f"{stem}.jsonl"
    raise GpumemError(
        f"no demo trace named {name!r}{did_you_mean(stem, names())}; the package ships: {', '.join(names())}"
    )


def resolve(given: str | os.PathLike) -> str:
    """``given`` as a trace file: a path that exists as it is, else a bare name of a shipped
    trace (no folder in it). Anything else comes back unchanged, for the caller to refuse."""
    text = os.fspath(given)
    if os.path.isfile(text) or os.path.dirname(text):
        return text
    stem = text[: -len(".jsonl")] if text.endswith(".jsonl") else text
    return str(FOLDER / f"{stem}.jsonl") if stem in names() else text
