"""The kernel side of the ``jupyter_gpumem`` comm: the sidebar panel asks, the kernel answers.

``register(shell)`` (called by ``%load_ext jupyter_gpumem``) registers the comm target. The
panel sends ``{"request": "snapshot"}``, in the open message or later; the kernel replies with
the allocator settings in effect, the backend state and each JAX device's allocator statistics
(message shape in docs/server.md). Importing this module does not import jax, and nothing here
raises into the kernel: a failure becomes a reply that says what went wrong.
"""

from __future__ import annotations

import logging
from typing import Any

TARGET = "jupyter_gpumem"
REQUESTS = ("snapshot",)

log = logging.getLogger(__name__)


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
    """Register the ``jupyter_gpumem`` comm target on ``shell``'s kernel. True when done.

    Outside a kernel (a terminal IPython) there is no comm manager: nothing happens.
    """
    try:
        manager = _comm_manager(shell)
        if manager is None:
            return False
        manager.register_target(TARGET, _on_open)
        return True
    except Exception:
        log.debug("jupyter-gpumem: no comm manager to register with", exc_info=True)
        return False


def unregister(shell: Any) -> None:
    try:
        manager = _comm_manager(shell)
        if manager is not None:
            manager.unregister_target(TARGET, _on_open)
    except Exception:
        pass


def _on_open(comm: Any, open_msg: dict) -> None:
    def on_msg(msg: dict) -> None:
        _answer(comm, _data(msg))

    try:
        comm.on_msg(on_msg)
        data = _data(open_msg)
        if data:
            _answer(comm, data)
    except Exception:
        log.exception("jupyter-gpumem: comm open failed")


def _data(msg: Any) -> Any:
    try:
        return msg["content"]["data"]
    except Exception:
        return None


def _answer(comm: Any, data: Any) -> None:
    try:
        comm.send(reply(data))
    except Exception:
        log.exception("jupyter-gpumem: comm reply failed")


def reply(data: Any) -> dict:
    """The reply to one message from the panel; never raises."""
    request = data.get("request") if isinstance(data, dict) else None
    if request != "snapshot":
        return {
            "type": "error",
            "error": f"unknown request {request!r}; valid requests: {', '.join(REQUESTS)}",
        }
    try:
        return _json_safe(snapshot())
    except Exception as exc:  # the panel shows this; the kernel carries on
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
_STATS_FIELDS = ("allocator", "bytes_in_use", "pool_bytes", "bytes_limit", "peak_bytes_in_use", "largest_free_block_bytes")


def snapshot() -> dict:
    """Settings in effect, backend state, warnings and per-device allocator statistics."""
    from jupyter_gpumem.model import ERROR, NotAvailable, fragmentation

    try:
        from jupyter_gpumem.status_report import status

        # NVML is read by the server; reading it here too would only slow the kernel down.
        report = status(nvml_readings=NotAvailable("not_read", "NVML is read by the server"))
    except Exception as exc:
        report = None
        status_error = f"status failed: {type(exc).__name__}: {exc}"
    else:
        status_error = None

    backend = getattr(report, "backend", None) or {}
    started = bool(backend.get("started")) if isinstance(backend, dict) else False
    platform = backend.get("platform") if isinstance(backend, dict) else None
    settings = []
    for item in getattr(report, "settings", ()) or ():
        settings.append(
            {
                "name": getattr(item, "name", None),
                "value": getattr(item, "value", None),
                "source": getattr(item, "source", None),
            }
        )
    warnings = [str(w) for w in (getattr(report, "warnings", ()) or ())]
    if status_error:
        warnings.append(status_error)

    try:
        from jupyter_gpumem.allocator_shim import read_jax_devices

        readings: Any = read_jax_devices()
    except Exception as exc:
        readings = NotAvailable(ERROR, f"reading JAX's devices failed: {exc}")

    devices = []
    reason = None
    if isinstance(readings, NotAvailable):
        reason = readings.reason
    else:
        for dev in readings:
            stats = dev.stats
            if isinstance(stats, NotAvailable):
                row = dict.fromkeys((*_STATS_FIELDS, "fragmentation"))
                row["stats_reason"] = stats.reason
            else:
                row = {name: getattr(stats, name) for name in _STATS_FIELDS}
                row["fragmentation"] = fragmentation(stats)
            devices.append({"jax_id": dev.jax_id, "nvml_index": dev.nvml_index, **row})
    from jupyter_gpumem.allocator_shim import accepted_allocators, setting_variables

    return {
        "type": "snapshot",
        "backend_started": started,
        "platform": platform,
        "settings": settings,
        "warnings": warnings,
        "devices": devices,
        "reason": reason,
        # The panel's settings form offers what the installed JAX accepts, and names the variable
        # each setting is written to; it keeps no list of its own.
        "allocator_choices": list(accepted_allocators()) or None,
        "settings_table": [{"name": name, "env_var": var} for name, var in setting_variables()],
    }


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
