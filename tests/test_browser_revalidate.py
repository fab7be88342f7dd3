"""Whether a browser revalidates the panel's /devices fetch with the ETag and gets 304s.

labextension/src/api.ts fetches with ``cache: "no-cache"``: the browser may keep the answer but
must ask the server before using it, sending the stored ETag in ``If-None-Match`` (Fetch
standard, "no-cache" mode; RFC 9111 5.2.2.4). The server's ``Cache-Control: no-cache, private``
lets it keep the answer at all (``no-store`` did not). Checked in headless Chromium (Debian's,
as the browser tests use) with the ui-tests' Playwright; skipped when either is missing
(``make test`` installs both).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from awaiting import WITHIN
from ports import free_ports

ROOT = Path(__file__).resolve().parent.parent
PLAYWRIGHT = ROOT / "ui-tests" / "node_modules" / "playwright"
CHROMIUM = os.environ.get("GPUMEM_CHROMIUM", "/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not (PLAYWRIGHT.is_dir() and os.access(CHROMIUM, os.X_OK) and shutil.which("node")),
    reason="needs chromium, node and ui-tests/node_modules (make test installs them)",
)


def test_the_panels_fetch_is_answered_304_while_the_values_stay(tmp_path):
    from jupyter_gpumem.testing import DROPIN_DIR, ENV_VAR

    token = "revalidate-" + os.urandom(8).hex()
    (port,) = free_ports(1)
    (tmp_path / "config").mkdir()
    config = {
        "ServerApp": {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,
            "open_browser": False,
            "allow_root": True,
            "root_dir": str(tmp_path),
            "jpserver_extensions": {"jupyter_gpumem": True, "jupyterlab": False},
        },
        "IdentityProvider": {"token": token},
        "GpuMem": {"poll_interval": 60},
    }  # one reading for the whole test: the values stay
    (tmp_path / "config" / "jupyter_server_config.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(DROPIN_DIR), str(ROOT)]),
        **{ENV_VAR: "three_gpus"},
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    log = tmp_path / "server.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server"], env=env, cwd=tmp_path, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}/"

    def api(path: str) -> dict:
        request = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(request, timeout=WITHIN) as response:
            return json.loads(response.read())

    try:
        deadline = time.monotonic() + WITHIN
        while True:
            try:
                api("api/status")
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
        browser = subprocess.run(
            ["node", str(ROOT / "tests" / "browser_revalidate.js"), base, token],
            capture_output=True,
            text=True,
            timeout=WITHIN,
            env=dict(os.environ, GPUMEM_PLAYWRIGHT=str(PLAYWRIGHT), GPUMEM_CHROMIUM=CHROMIUM),
        )
        assert browser.returncode == 0, browser.stderr[-3000:]
        # The page sees three full answers; the server sent one body and two 304s.
        assert json.loads(browser.stdout) == [[200, 3], [200, 3], [200, 3]]
        assert api("jupyter-gpumem/api/config")["devices_answers"] == {"full": 1, "not_modified": 2}
    finally:
        server.terminate()
        server.wait(10)
