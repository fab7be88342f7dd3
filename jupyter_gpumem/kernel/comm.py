"""The kernel side of the ``jupyter_gpumem`` comm: the sidebar panel asks, the kernel answers,
and the kernel tells the panel when its state may have changed.

``register(shell)`` (called by ``%load_ext jupyter_gpumem``) registers the comm target, adds a
``post_run_cell`` hook, and opens a comm to the front end that says the extension is loaded.
The panel sends ``{"request": "snapshot"}``, in the open message or later; the kernel replies
with the allocator settings in effect, the backend state and each JAX device's allocator
statistics. After each cell the kernel pushes ``{"type": "event", "event": "cell_end"}`` (or
``"jax_started"`` when JAX's backend started in that cell) on every open comm, so the panel asks
only when something may have changed (message shapes in docs/server.md). A push reads nothing
but the backend-started probe: it never waits on JAX. Importing this module does not import
jax, and nothing here raises into the kernel: a failure becomes a reply that says what went
wrong, or a push that is dropped.
"""

from __future__ import annotations

import logging
import reprlib
import sys
import time
from collections.abc import Callable
from typing import Any

from jupyter_gpumem.sampling.cell_hooks import CellHooks
from jupyter_gpumem.settings import publish as settings_file

TARGET = "jupyter_gpumem"
REQUESTS = ("snapshot",)
EVENTS = ("loaded", "cell_end", "jax_started")

log = logging.getLogger(__name__)

_hooks = CellHooks()
_comms: list[Any] = []  # the comms pushes go to: the panels' and the one opened at load
# A page reload leaves its comm open here (front ends close none on unload): keep the newest.
_MAX_COMMS = 8
# An unknown request is named in the error, shortened: whatever the sender put in it
# (megabytes included) is not sent back whole on iopub.
_ECHO = reprlib.Repr()
_ECHO.maxstring = _ECHO.maxother = 80
_ECHO.maxlevel, _ECHO.maxdict, _ECHO.maxlist, _ECHO.maxtuple, _ECHO.maxset = 2, 4, 4, 4, 4
_started_before_cell = False


def _comm_manager(shell: Any) -> Any:
    kernel = getattr(shell, "kernel", None)
    if kernel is None:  # a terminal IPython: no front end to talk to
        return None
    manager = getattr(kernel, "comm_manager", None)
    if manager is not None:
        return manager
    from comm import get_comm_manager

    return get_comm_manager()


def register(shell: Any) -> bool:
    """Register the ``jupyter_gpumem`` comm target and the after-cell push on ``shell``'s
    kernel, and tell the front end the extension is loaded. True when done.

    Outside a kernel (a terminal IPython) there is no comm manager: nothing happens.
    """
    manager = _comm_manager(shell)
    if manager is None:
        return False
    manager.register_target(TARGET, _on_open)
    if shell not in _hooks:
        _hooks.add(shell, _pre_run_cell, _post_run_cell)
    _quietly("announcing the load", _announce)
    _quietly("publishing the settings for the server", settings_file.publish)
    return True


def unregister(shell: Any) -> None:
    _hooks.remove(shell)
    settings_file.withdraw()
    manager = _comm_manager(shell)
    if manager is None:
        return
    try:
        manager.unregister_target(TARGET, _on_open)
    except KeyError:  # never registered, or already gone
        pass


def _create_comm(**kwargs: Any) -> Any:
    """A comm this kernel opens to the front end (comm.create_comm; ipykernel's Comm in a kernel)."""
    from comm import create_comm

    return create_comm(**kwargs)


def backend_started() -> bool:
    """JAX's backend-started probe (sources.jax_backend), imported only once jax is: loading the
    extension and cells without JAX import nothing heavy (tests/settings/test_settings.py)."""
    if "jax" not in sys.modules:
        return False
    from jupyter_gpumem.sources.jax_backend import backend_started as probe

    return probe()


# What the panel reads of each setting (labextension/src/types.ts, AllocatorSetting).
_SETTING_FIELDS = ("name", "value", "shown", "source", "changed_after_start")


def event(name: str) -> dict:
    """A push: ``{"type": "event", "event": name, "backend_started": ..., "t": unix seconds}``."""
    return {"type": "event", "event": name, "backend_started": backend_started(), "t": time.time()}


def _announce() -> None:
    # A front end without the target closes this comm at once (JupyterLab's
    # KernelConnection._handleCommOpen, @jupyterlab/services 7.6); the panel keeps it.
    _serve(_create_comm(target_name=TARGET, data=event("loaded")))


def _pre_run_cell(info: Any = None) -> None:
    _quietly("reading whether JAX has started", _note_backend_before_cell)


def _note_backend_before_cell() -> None:
    global _started_before_cell
    _started_before_cell = backend_started()


def _post_run_cell(result: Any = None) -> None:
    """After each cell (not silent executions, which IPython runs without cell events): tell
    the open comms, and the server's settings file when what it says changed. Costs one probe
    and one small message per open comm, and a settings read (no write when unchanged)."""
    if _comms:
        _quietly("a push to the panel", _push_after_cell)
    _quietly("publishing the settings for the server", settings_file.publish)


def _push_after_cell() -> None:
    push = event("cell_end")
    if push["backend_started"] and not _started_before_cell:
        push["event"] = "jax_started"
    for comm in list(_comms):
        _quietly("a push to the panel", lambda comm=comm: comm.send(push), on_failure=lambda comm=comm: _forget(comm))


def _quietly(what: str, action: Callable[[], None], on_failure: Callable[[], None] | None = None) -> None:
    """Run ``action``; a failure is logged, never raised into the kernel (cell hooks that raise
    print a traceback under the user's cell)."""
    try:
        action()
    except Exception:  # pushes are a nicety: the panel still asks when it is opened
        log.debug("jupyter-gpumem: %s failed", what, exc_info=True)
        if on_failure is not None:
            on_failure()


def _serve(comm: Any) -> None:
    """Answer requests on ``comm`` and push to it until it closes (or until _MAX_COMMS newer
    ones are open)."""
    comm.on_msg(lambda msg: _answer(comm, _data(msg)))
    _comms.append(comm)
    for old in _comms[:-_MAX_COMMS]:
        # Closing releases it in the comm manager too (comm's BaseComm.close, comm 0.2.3):
        # dropping it from this list alone kept every comm a page ever opened.
        close = getattr(old, "close", None)
        if callable(close):
            _quietly("closing an old comm", close)
    del _comms[:-_MAX_COMMS]
    on_close = getattr(comm, "on_close", None)
    if callable(on_close):
        on_close(lambda msg: _forget(comm))


def _forget(comm: Any) -> None:
    if comm in _comms:
        _comms.remove(comm)


# The comm manager calls these two and logs what they raise (comm's CommManager.comm_open and
# comm_msg), so a failed send never reaches the user's cells; reply() answers every failure
# of ours in the message itself.
def _on_open(comm: Any, open_msg: dict) -> None:
    _serve(comm)
    data = _data(open_msg)
    if data:
        _answer(comm, data)


def _data(msg: Any) -> Any:
    """The ``data`` of a comm message (a Jupyter protocol dict), or None."""
    content = msg.get("content") if isinstance(msg, dict) else None
    return content.get("data") if isinstance(content, dict) else None


def _answer(comm: Any, data: Any) -> None:
    comm.send(reply(data))


def reply(data: Any) -> dict:
    """The reply to one message from the panel; never raises."""
    request = data.get("request") if isinstance(data, dict) else None
    if request != "snapshot":
        return {
            "type": "error",
            "error": f"unknown request {_ECHO.repr(request)}; valid requests: {', '.join(REQUESTS)}",
        }
    try:
        return _json_safe(snapshot())
    except Exception as exc:  # the comm handler's one catch-all: the panel shows this, the kernel carries on
        log.debug("jupyter-gpumem: snapshot failed", exc_info=True)
        return {
            "type": "snapshot",
            "backend_started": False,
            "platform": None,
            "settings": [],
            "warnings": [f"jupyter-gpumem could not read the kernel's state: {type(exc).__name__}: {exc}"],
            "devices": [],
            "reason": f"reading the kernel's state failed: {exc}",
        }


# The AllocatorStats fields each device row of a snapshot carries, in the panel's order.
_STATS_FIELDS = (
    "allocator",
    "bytes_in_use",
    "pool_bytes",
    "bytes_limit",
    "peak_bytes_in_use",
    "largest_free_block_bytes",
)


def snapshot() -> dict:
    """Settings in effect, backend state, warnings and per-device allocator statistics."""
    # Imported on the first request: registering the target at %load_ext stays cheap.
    from jupyter_gpumem.core.metrics import fragmentation, pool_bytes, unused_pool_bytes
    from jupyter_gpumem.core.readings import NotAvailable
    from jupyter_gpumem.settings.apply import accepted_allocators, read_jax_devices, setting_variables
    from jupyter_gpumem.settings.status import status

    # NVML is read by the server; reading it here too would only slow the kernel down. (status()
    # still asks NVML how many GPUs there are when JAX runs on the CPU, to say so loudly.)
    report = status(nvml_readings=NotAvailable("not_read", "NVML is read by the server"))
    readings = read_jax_devices()

    devices = []
    warnings = list(report.warnings)
    reason = None
    if isinstance(readings, NotAvailable):
        reason = readings.reason
    else:
        for dev in readings:
            stats = dev.stats
            if isinstance(stats, NotAvailable):
                row = dict.fromkeys((*_STATS_FIELDS, "fragmentation", "unused_pool_bytes"))
                row["stats_reason"] = stats.reason
            else:
                row = {
                    "allocator": stats.allocator,
                    "bytes_in_use": stats.bytes_in_use,
                    # Under cuda_async the pool is the CUDA driver's default pool (model.pool_bytes).
                    "pool_bytes": pool_bytes(stats, dev.cuda_pool),
                    "bytes_limit": stats.bytes_limit,
                    "peak_bytes_in_use": stats.peak_bytes_in_use,
                    "largest_free_block_bytes": stats.largest_free_block_bytes,
                    "fragmentation": fragmentation(stats, dev.cuda_pool),
                    "unused_pool_bytes": unused_pool_bytes(stats, dev.cuda_pool),
                }
            where = {"jax_id": dev.jax_id, "nvml_index": dev.nvml_index, "nvml_unmatched": dev.nvml_unmatched}
            devices.append({**where, **row})
            if dev.nvml_unmatched:
                warnings.append(f"JAX device {dev.jax_id} is not matched to an NVIDIA GPU: {dev.nvml_unmatched}.")

    return {
        "type": "snapshot",
        "backend_started": report.backend.started,
        "platform": report.backend.platform,
        # ``shown`` is the value as %gpumem status prints it ("off", "not set").
        "settings": [{k: getattr(s, k) for k in _SETTING_FIELDS} for s in report.settings],
        "warnings": warnings,
        "devices": devices,
        "reason": reason,
        # JAX on the CPU while NVML sees GPUs: the status bar's warning (the sentence is warnings[0]).
        "cpu_fallback": _fallback_json(report.cpu_fallback),
        # The panel's settings form offers what the installed JAX accepts, and names the variable
        # each setting is written to; it keeps no list of its own.
        "allocator_choices": list(accepted_allocators()) or None,
        "settings_table": [{"name": name, "env_var": var} for name, var in setting_variables()],
    }


def _fallback_json(fallback: Any) -> dict | None:
    if fallback is None:
        return None
    return {"gpus": fallback.gpus, "headline": fallback.headline(), "sentence": fallback.sentence()}


def _json_safe(value: Any) -> Any:
    """The value in plain JSON types: NaN and infinities become None, unknown types strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)
