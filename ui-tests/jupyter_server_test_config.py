"""JupyterLab server for the browser tests.

Environment:
- GPUMEM_UI_PORT: the port (galata's helper fixes 8888).
- GPUMEM_UI_REPLAY: "" for the live state of this machine; "demo" for the server's synthetic
  demo trace (placeholder pids mapped to this server's running kernels); or a trace path.
- JUPYTER_GPUMEM_FAKE_NVML (the "world" server, with the drop-in pynvml first on PYTHONPATH): a
  scenario name is written to a JSON world file first, and the variable pointed at it, for the
  server and every kernel it starts. That server also culls idle kernels that hold 16 GiB or more. A spec changes the world from a kernel (a kernel puts its
  own pid on a fake GPU) by saving that file; the drop-in re-reads it (docs/fake-gpu.md).
"""

import os
import tempfile

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821 (c is given by traitlets)

c.ServerApp.port = int(os.environ.get("GPUMEM_UI_PORT", "8888"))  # noqa: F821
c.ServerApp.allow_root = True  # noqa: F821
c.ServerApp.jpserver_extensions = {"jupyter_gpumem": True}  # noqa: F821
# Poll fast so tests wait less.
c.GpuMem.poll_interval = 0.5  # noqa: F821

_replay = os.environ.get("GPUMEM_UI_REPLAY", "")
if _replay == "demo":
    from jupyter_gpumem.testing.demo_trace import write_demo_trace

    _replay = write_demo_trace(os.path.join(tempfile.mkdtemp(prefix="gpumem-ui-"), "demo.jsonl"))
if _replay:
    c.GpuMem.replay = os.path.abspath(_replay)  # noqa: F821

_world = os.environ.get("JUPYTER_GPUMEM_FAKE_NVML", "")
if _world:
    # The world server culls idle kernels holding 16 GiB or more, 30 s after their last activity,
    # warning from the first idle second: only notebooks/world_cull.ipynb takes that much (the
    # other world notebooks take 6 GiB, and are never culled).
    c.GpuMem.cull_idle_after = 30  # noqa: F821
    c.GpuMem.cull_min_bytes = 16 * 1024**3  # noqa: F821
if _world and not os.path.exists(_world):
    from jupyter_gpumem.testing import scenario

    _path = os.path.join(tempfile.mkdtemp(prefix="gpumem-world-"), f"{_world}.json")
    scenario(_world).save(_path)
    os.environ["JUPYTER_GPUMEM_FAKE_NVML"] = _path
