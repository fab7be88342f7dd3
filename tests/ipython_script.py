"""A script run in a fresh interpreter with an IPython shell and the extension loaded, that
reports what it saw as one JSON line: for test files whose tests each check one part of one
session (module fixtures).

The script's body is given ``ip`` (the shell), ``out`` (a dict, printed as JSON at the end),
``cell(code)`` (runs a cell into the history, returns what it printed) and ``usage(line)``
(a ``%gpumem`` line's UsageError text, None where it raised none).
"""

from __future__ import annotations

import json
import subprocess
import sys

from child_env import ipython_dir, pythonpath

PREAMBLE = r"""
import io, json, sys, contextlib
from IPython.testing.globalipapp import start_ipython
from IPython.core.error import UsageError
ip = start_ipython()
ip.run_line_magic("load_ext", "jupyter_gpumem")
out = {}

def cell(code):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ip.run_cell(code, store_history=True)
    return buf.getvalue()

def usage(line):
    try:
        ip.run_line_magic("gpumem", line)
    except UsageError as err:
        return str(err)
    return None
"""

ENDING = '\nprint("JSON" + json.dumps(out))\n'


def run_script(body: str, *args: str, env: dict | None = None, timeout: float = 240) -> dict:
    """``out`` of ``body`` run after the preamble on CPU JAX in a fresh interpreter, with this
    checkout's package first; ``args`` become its ``sys.argv[1:]``, ``env`` adds variables."""
    proc = subprocess.run(
        [sys.executable, "-c", PREAMBLE + body + ENDING, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            "JAX_PLATFORMS": "cpu",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": pythonpath(),
            **ipython_dir(),
            **(env or {}),
        },
    )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert line is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(line[4:])
