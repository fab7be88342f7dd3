"""Run the example notebooks as a user gets them: from the built wheel, installed outside the
repository, in a folder that is not the repository.

    python tests/wheel_notebooks.py --out DIR

1. builds the wheel (``pip wheel --no-deps``);
2. makes a virtual environment in a temporary folder and installs the wheel there, with no
   dependencies; the dependencies come from the running environment's site-packages, added as
   a plain path (its ``.pth`` files are not run, so an editable install of this repository is
   not seen); the kernel checks it imports jupyter_gpumem from the wheel;
3. copies ``notebooks/*.ipynb`` to another temporary folder and executes each there (nbclient),
   in a kernel of that environment;
4. writes each executed notebook to ``DIR`` with small outputs: no widget state (a widget's
   output says so in text), no timings, an error's last line only, and what it ran from under
   ``metadata.jupyter_gpumem_run``. ``--out notebooks`` refreshes the committed outputs.

Exits 1 when a cell that is not tagged ``raises-exception`` fails, naming the notebook and cell.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL = "gpumem-wheel"
WIDGET = "application/vnd.jupyter.widget-view+json"
# Where a run notes what it ran from: metadata.jupyter_gpumem holds the notebook's allocator
# settings, which the panel reads and applies at each kernel start (docs/panel.md).
RUN_NOTES_KEY = "jupyter_gpumem_run"
WIDGET_TEXT = "(an interactive widget: its state is not saved in this copy; run the notebook to see it)"
# Variables JAX or TensorFlow read: a kernel starts from JAX's defaults whatever the shell had.
# Variables JAX or TensorFlow read: a kernel must start from JAX's defaults whatever the shell had.
_ALLOCATOR_VARS = re.compile(r"^(XLA_|JAX_|TF_)")


def kernel_env() -> dict[str, str]:
    """This process's environment for a notebook's kernel, without the allocator variables a
    caller may have set (the notebooks set their own) and with TensorFlow's C++ logs quiet."""
    env = {k: v for k, v in os.environ.items() if not _ALLOCATOR_VARS.match(k)}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def build_wheel(into: pathlib.Path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), str(ROOT)], check=True)
    (wheel,) = into.glob("jupyter_gpumem-*.whl")
    return wheel


def make_environment(home: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
    """A venv at ``home`` with the wheel installed and this environment's packages beside it;
    answers its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    python = home / "bin" / "python"
    site = pathlib.Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # A plain path line: the dependencies, without running their .pth files (the editable install's).
    (site / "_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True
    )
    where = subprocess.run(
        [str(python), "-c", "import jupyter_gpumem; print(jupyter_gpumem.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=home,
    ).stdout.strip()
    if not where.startswith(str(site)):
        raise SystemExit(f"the environment imports jupyter_gpumem from {where}, not from the wheel in {site}")
    spec = home / "share" / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "jupyter-gpumem from its wheel",
                "language": "python",
            }
        )
    )
    return python


def execute(path: pathlib.Path, home: pathlib.Path) -> tuple[nbformat.NotebookNode, str | None]:
    """The notebook at ``path`` run top to bottom in the wheel's kernel, in its own folder, and
    the failure that stopped it (None when every cell ran as tagged)."""
    nb = nbformat.read(path, as_version=4)
    env = kernel_env()
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    specs = KernelSpecManager(kernel_dirs=[str(home / "share" / "jupyter" / "kernels")])
    # IPC sockets: TCP port picking races with other processes on a busy machine.
    km = KernelManager(
        kernel_name=KERNEL,
        kernel_spec_manager=specs,
        transport="ipc",
        ip=str(pathlib.Path(tempfile.mkdtemp(prefix="gpumem-ipc-")) / "kernel"),
    )
    client = NotebookClient(
        nb,
        km=km,
        timeout=180,
        startup_timeout=90,
        record_timing=False,
        store_widget_state=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute(env=env)
    except CellExecutionError as err:
        return nb, f"{err.ename}: {err.evalue}\n{err}"
    return nb, None


def trimmed(nb: nbformat.NotebookNode, ran_on: dict) -> nbformat.NotebookNode:
    """Outputs a page can show and a diff can read: a widget's output becomes a line saying so,
    an error keeps its last line (the frames name this machine's folders)."""
    nb.metadata.pop("widgets", None)
    nb.metadata[RUN_NOTES_KEY] = ran_on
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if "outputs" in cell:
            cell.outputs = _streams_joined(cell.outputs)
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET in data:
                out["data"] = {"text/plain": WIDGET_TEXT}
            if out.get("output_type") == "error":
                out["traceback"] = out["traceback"][-1:]
    return nb


def _streams_joined(outputs: list) -> list:
    """Adjacent writes to one stream as one output: how the kernel split them is timing."""
    joined: list = []
    for out in outputs:
        last = joined[-1] if joined else None
        if (
            out["output_type"] == "stream"
            and last is not None
            and last["output_type"] == "stream"
            and last["name"] == out["name"]
        ):
            last["text"] += out["text"]
        else:
            joined.append(out)
    return joined


def where_it_ran(python: pathlib.Path, wheel: pathlib.Path) -> dict:
    probe = (
        "import json, jax, jupyter_gpumem; from jupyter_gpumem.sources.nvml import NvmlSource; "
        "from jupyter_gpumem.core.readings import NotAvailable; gpus = NvmlSource().read(); "
        "from jupyter_gpumem.sources.jax_backend import cuda_plugin_installed; plugin = cuda_plugin_installed(); "
        "print(json.dumps({'jax': jax.__version__, 'gpu': plugin and not isinstance(gpus, NotAvailable)}))"
    )
    seen = json.loads(subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout)
    return {
        "executed_from": wheel.name,
        "jax": seen["jax"],
        "gpu": bool(seen["gpu"]),
        "note": (
            "outputs from a run on a GPU"
            if seen["gpu"]
            else "outputs from a run without a GPU: JAX on the CPU, replays of synthetic demo traces"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", required=True, help="folder for the executed notebooks (notebooks: the committed ones)"
    )
    parser.add_argument("names", nargs="*", help="notebook names without .ipynb (default: all)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.names:
        sources = [p for p in sources if p.stem in args.names]
    work = pathlib.Path(tempfile.mkdtemp(prefix="gpumem-wheel-"))
    try:
        wheel = build_wheel(work / "wheel")
        python = make_environment(work / "env", wheel)
        ran_on = where_it_ran(python, wheel)
        folder = work / "notebooks"
        folder.mkdir()
        failures = []
        for source in sources:
            copy = folder / source.name
            shutil.copyfile(source, copy)
            nb, failure = execute(copy, work / "env")
            print(f"{source.name}: {'FAILED: ' + failure if failure else 'ran'}", flush=True)
            if failure:
                failures.append(source.name)
            else:
                nbformat.write(trimmed(nb, ran_on), out / source.name)
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
