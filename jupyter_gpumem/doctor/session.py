"""The doctor's switches and the shell its hooks serve, as one typed object.

``%gpumem doctor|cells on|off`` set the switches, installing the hooks sets the shell; the work
after a cell and the walks over the user's namespace read them. Imports nothing of the doctor, so
each of its modules may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Switch = Literal["doctor", "cells"]


@dataclass
class DoctorSession:
    """``doctor``: a failing cell's out-of-memory error is followed by a report (on by default).
    ``cells``: one line of memory use after each cell (off by default). ``shell``: the IPython
    shell the hooks were installed in, None before."""

    doctor: bool = True
    cells: bool = False
    shell: Any = None

    def is_on(self, switch: Switch) -> bool:
        return bool(getattr(self, switch))

    def turn(self, switch: Switch, on: bool) -> None:
        setattr(self, switch, on)


# One per kernel: the hooks, the switches and the namespace walks all serve the same shell.
SESSION = DoctorSession()
