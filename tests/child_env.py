"""What a test gives the fresh Python processes it starts: their PYTHONPATH, and the run's IPYTHONDIR.

This checkout comes first (its package, not whichever one the environment installed), then
whatever this process was itself given: the GPU proof puts the wheels it carries (IPython and
its needs) on PYTHONPATH (bench/gpu_proof.py, ``install``), and a child that lost them could not
import IPython there.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pythonpath(*first: str | os.PathLike) -> str:
    """``first`` (a drop-in folder, say), this checkout, then this process's own PYTHONPATH."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    parts = [str(p) for p in first] + [str(ROOT)]
    return os.pathsep.join(dict.fromkeys(parts + inherited))


def ipython_dir() -> dict[str, str]:
    """``{"IPYTHONDIR": ...}`` as this run has it (conftest.py gives the run a folder of its own,
    history in memory), for a child given an environment of its own without HOME: without it,
    the child's IPython would use the user's ~/.ipython."""
    folder = os.environ.get("IPYTHONDIR")
    return {"IPYTHONDIR": folder} if folder else {}
