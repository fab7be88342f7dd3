"""The kernel's allocator settings, published as a small JSON file for the Jupyter server.

The server sees a kernel's GPU memory in NVML, but not ``%gpumem preallocate off`` run inside
it; this file tells it. It lies next to the kernel's connection file (the server's runtime
directory, private to the user), named by the kernel's pid (``settings/published.py``), and
carries the kernel id from the connection file's name. It is written at load and after each
cell where what it says changed (a setting, JAX imported, JAX's backend started), atomically
and only then; it is removed at unload and when the process exits. Failing to write or remove
it changes nothing for the kernel: the callers run these inside their quiet guards.

Settings are read with ``allocator_shim`` only once jax or the settings code is imported:
loading the extension and cells without JAX stay light (tests/settings/test_settings.py), and before
that the file says that JAX has not started and the settings are not read yet.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

from jupyter_gpumem.core.files import replaced_on_success
from jupyter_gpumem.settings.published import GPU_PLATFORMS, PublishedSettings, file_name, kernel_id_of

_state: dict[str, Any] = {"path": None, "written": None, "atexit": False}


def _connection_file() -> str | None:
    """This kernel's connection file (ipykernel's IPKernelApp), or None outside a kernel."""
    kernelapp = sys.modules.get("ipykernel.kernelapp")
    app_class = getattr(kernelapp, "IPKernelApp", None)
    if app_class is None or not app_class.initialized():
        return None
    app = app_class.instance()
    name = getattr(app, "abs_connection_file", None) or getattr(app, "connection_file", None)
    if not isinstance(name, str) or not name:
        return None
    if not os.path.isabs(name):
        name = os.path.join(getattr(app, "connection_dir", "") or "", name)
    return name


def published_path() -> str | None:
    """Where this process publishes its settings: beside its connection file; None outside a
    kernel (a terminal IPython has no server to read it)."""
    connection = _connection_file()
    if connection is None:
        return None
    return os.path.join(os.path.dirname(connection), file_name(os.getpid()))


def current() -> PublishedSettings:
    """This process's settings as they stand, read without starting JAX."""
    connection = _connection_file()
    kernel_id = kernel_id_of(connection) if connection else None
    pid = os.getpid()
    if "jax" not in sys.modules and "jupyter_gpumem.settings.apply" not in sys.modules:
        return PublishedSettings(pid=pid, kernel_id=kernel_id, backend_started=False)
    from jupyter_gpumem.settings.apply import settings_in_effect
    from jupyter_gpumem.settings.effective import unified_memory
    from jupyter_gpumem.settings.started_with import start_read
    from jupyter_gpumem.sources.jax_backend import backend_platform, backend_started, gpu_pool_taken

    states = {s.name: s for s in settings_in_effect()}
    read = start_read()
    started = backend_started()
    jax = sys.modules.get("jax")
    values = {name: states[name].value for name in ("preallocate", "fraction", "allocator") if name in states}
    platform = backend_platform() if started else None
    return PublishedSettings(
        pid=pid,
        kernel_id=kernel_id,
        backend_started=started,
        platform=platform,
        jax_version=getattr(jax, "__version__", None),
        preallocate=values.get("preallocate") if isinstance(values.get("preallocate"), bool) else None,
        fraction=values.get("fraction") if isinstance(values.get("fraction"), float) else None,
        allocator=values.get("allocator") if isinstance(values.get("allocator"), str) else None,
        sources={name: states[name].source for name in values},
        pool_taken=gpu_pool_taken() if platform in GPU_PLATFORMS else None,
        unified_memory=unified_memory(read.present() if read is not None else os.environ),
        changed_after_start={
            name: {k: late[k] for k in ("variable", "now", "cell")}
            for name in values
            if (late := states[name].changed_after_start)
        },
    )


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path``, readable by the user only, as a reader sees the old file or the
    new one, never half of one."""
    with replaced_on_success(path, mode=0o600, encoding="utf-8") as handle:
        handle.write(text)


def publish() -> bool:
    """Write the file when what it says changed since the last write; True when written.

    Raises OSError when the file cannot be written (the caller's guard keeps it quiet).
    """
    path = published_path()
    if path is None:
        return False
    settings = current().to_json()
    if path == _state["path"] and settings == _state["written"]:
        return False
    _write_atomically(path, json.dumps(settings))
    _state["path"], _state["written"] = path, settings
    if not _state["atexit"]:
        atexit.register(withdraw)
        _state["atexit"] = True
    return True


def publish_quietly() -> None:
    """``publish``, a file that cannot be written left unwritten (after a settings change made
    outside a cell's hooks: the panel's silent settings cell at kernel start)."""
    try:
        publish()
    except OSError:
        pass


def withdraw() -> None:
    """Remove the published file, if any; quiet when it is already gone or cannot be removed."""
    path = _state["path"]
    _state["path"], _state["written"] = None, None
    if path is None:
        return
    try:
        os.unlink(path)
    except OSError:
        pass
