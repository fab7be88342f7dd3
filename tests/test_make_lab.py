"""``make lab`` as the README gives it: JupyterLab serving the repository, the quickstart open,
and the URL it prints opening the quickstart.

The command is the Makefile's own ``LAB_COMMAND``, started here on a free port. jupyter_server
2.21 (serverapp.py): ``root_dir`` defaults to the folder of a file given on the command line
(``_default_root_dir``), which is why it is set; ``_resolve_file_to_run_and_root_dir`` takes a
file below ``root_dir``; the URL printed at start is ``display_url``, whose path is
``default_url`` (``_get_urlparts``), which JupyterLab's ``LabApp.default_url`` sets.
"""

from __future__ import annotations

import json
import os
import pathlib
import posixpath
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICKSTART = "notebooks/quickstart.ipynb"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lab_command(port: int) -> list[str]:
    """``make lab``'s command for this environment's jupyter and ``port``."""
    shown = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "--eval",
            "show-lab: ; @echo $(LAB_COMMAND)",
            "show-lab",
            f"LAB_PORT={port}",
            f"VENV={sys.prefix}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return shlex.split(shown)


@pytest.fixture(scope="module")
def lab():
    """The server ``make lab`` starts, and the URL it printed."""
    port = _free_port()
    home = pathlib.Path(tempfile.mkdtemp(prefix="gpumem-lab-"))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "HOME": str(home),
    }
    log = open(home / "log.txt", "w+")
    proc = subprocess.Popen(
        lab_command(port) + ["--ServerApp.ip=127.0.0.1"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        printed = None
        while printed is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            printed = re.search(rf"http://127\.0\.0\.1:{port}/\S+", (home / "log.txt").read_text())
        assert printed is not None, (home / "log.txt").read_text()[-3000:]
        yield printed.group(0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def _api(printed: str, path: str) -> str:
    parts = urllib.parse.urlsplit(printed)
    return f"{parts.scheme}://{parts.netloc}/api/contents/{urllib.parse.quote(path)}?{parts.query}"


def test_the_url_make_lab_prints_opens_the_quickstart(lab):
    assert urllib.parse.urlsplit(lab).path == f"/lab/tree/{QUICKSTART}"
    status, page = _get(lab)
    assert status == 200 and b"JupyterLab" in page


def test_make_lab_serves_the_repository_root(lab):
    status, body = _get(_api(lab, ""))
    assert status == 200
    assert {"README.md", "docs", "notebooks"} <= {item["name"] for item in json.loads(body)["content"]}


def test_every_relative_link_in_the_quickstart_resolves_on_the_server(lab):
    nb = nbformat.read(ROOT / QUICKSTART, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    links = [t for t in re.findall(r"\]\(([^)#\s]+)", text) if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("../docs/") for t in links)
    resolved = {t: posixpath.normpath(posixpath.join(posixpath.dirname(QUICKSTART), t)) for t in links}
    assert {t: _get(_api(lab, p))[0] for t, p in resolved.items()} == {t: 200 for t in links}
