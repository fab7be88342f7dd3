"""The public names of ``jupyter_gpumem.kernel.magics``, as ``jupyter_gpumem.magics`` where users and docs name them.

The ``%gpumem`` magic: which command a line is (``parse_line``, pure) and a thin IPython
"""

from jupyter_gpumem.kernel.magics import (
    DELEGATES,
    HELP,
    SETTINGS,
    Command,
    GpumemMagics,
    load,
    parse_line,
    run_command,
    unload,
)

__all__ = [
    "HELP",
    "DELEGATES",
    "SETTINGS",
    "Command",
    "parse_line",
    "run_command",
    "GpumemMagics",
    "load",
    "unload",
]
