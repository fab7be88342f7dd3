"""The jupyter_server extension: REST endpoints under ``/jupyter-gpumem/api/`` and gauges on
``/metrics``, and on a listener of their own where ``GpuMem.metrics_port`` asks for one.
Configured through ``c.GpuMem.*`` (see ``config.GpuMem`` and docs/server.md).
"""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_gpumem.server.config import GpuMem

__all__ = ["GpuMem"]

_SETTINGS_KEY = "jupyter_gpumem"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "jupyter_gpumem.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jupyter_gpumem.server.handlers import handlers
    from jupyter_gpumem.server.hub_scrape import hub_scrape_route
    from jupyter_gpumem.server.kernels import untrack_usage_messages
    from jupyter_gpumem.server.metrics import gauges
    from jupyter_gpumem.server.metrics_listener import start_listener
    from jupyter_gpumem.server.push import route
    from jupyter_gpumem.server.service import GpuMemService

    config = GpuMem(parent=serverapp)
    untrack_usage_messages(serverapp.kernel_manager)  # the pid question is not the user's activity
    service = GpuMemService(config, serverapp.kernel_manager, getattr(serverapp, "session_manager", None))
    web_app = serverapp.web_app
    web_app.settings[_SETTINGS_KEY] = service
    service.culler.log = serverapp.log
    service.culler.start()
    base_url = web_app.settings["base_url"]
    through_hub = hub_scrape_route(base_url, config.hub_metrics_scope)
    web_app.add_handlers(".*$", [*handlers(base_url), route(base_url), *through_hub])
    if through_hub:
        serverapp.log.info(
            "jupyter-gpumem: metrics through the hub's proxy at %sjupyter-gpumem/metrics, for tokens with %s",
            base_url,
            config.hub_metrics_scope,
        )
    # jupyter_server's /metrics names kernels and notebooks only to a scrape that logged in.
    gauges().kernel_names = bool(web_app.settings.get("authenticate_prometheus", True))
    service.metrics_listener, service.metrics_listener_status = start_listener(
        config.metrics_ip, config.metrics_port, config.metrics_kernel_names, serverapp.log
    )
    _stop_with(serverapp)
    serverapp.log.info(
        "jupyter-gpumem: serving %s every %gs at %sjupyter-gpumem/api/",
        f"replay of {config.replay}" if config.replay else "NVML",
        config.poll_interval,
        base_url,
    )


def _stop_with(serverapp: Any) -> None:
    """Stop the extension when the server shuts down: its sockets get 1001 (going away) while
    the IOLoop still runs to send it, and the reader stops. jupyter_server calls no hook of a
    module extension at shutdown (ExtensionManager.stop_all_extensions stops ExtensionApps
    only, jupyter_server/extension/manager.py, 2.21.1), so the extension joins the
    ``cleanup_extensions`` step that ``ServerApp._cleanup`` awaits first (serverapp.py)."""
    if getattr(serverapp, "_jupyter_gpumem_stops", False):
        return
    cleanup_extensions = serverapp.cleanup_extensions

    async def stop_then_cleanup_extensions() -> None:
        _unload_jupyter_server_extension(serverapp)
        await asyncio.sleep(0.1)  # the close frames leave while the IOLoop runs
        await cleanup_extensions()

    serverapp.cleanup_extensions = stop_then_cleanup_extensions
    serverapp._jupyter_gpumem_stops = True


def _unload_jupyter_server_extension(serverapp: Any) -> None:
    service = serverapp.web_app.settings.pop(_SETTINGS_KEY, None)
    if service is not None:
        service.stop()
