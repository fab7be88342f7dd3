"""The jupyter_server extension: REST endpoints under ``/jupyter-gpumem/api/`` and gauges on
``/metrics``. Configured through ``c.GpuMem.*`` (see ``config.GpuMem`` and docs/server.md).
"""

from __future__ import annotations

from typing import Any

from jupyter_gpumem.server.config import GpuMem

__all__ = ["GpuMem"]

_SETTINGS_KEY = "jupyter_gpumem"


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    return [{"module": "jupyter_gpumem.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from jupyter_gpumem.server.handlers import handlers
    from jupyter_gpumem.server.push import route
    from jupyter_gpumem.server.service import GpuMemService

    config = GpuMem(parent=serverapp)
    service = GpuMemService(config, serverapp.kernel_manager, getattr(serverapp, "session_manager", None))
    web_app = serverapp.web_app
    web_app.settings[_SETTINGS_KEY] = service
    service.culler.log = serverapp.log
    service.culler.start()
    web_app.add_handlers(".*$", [*handlers(web_app.settings["base_url"]), route(web_app.settings["base_url"])])
    serverapp.log.info(
        "jupyter-gpumem: serving %s every %gs at %sjupyter-gpumem/api/",
        f"replay of {config.replay}" if config.replay else "NVML",
        config.poll_interval,
        web_app.settings["base_url"],
    )


def _unload_jupyter_server_extension(serverapp: Any) -> None:
    service = serverapp.web_app.settings.pop(_SETTINGS_KEY, None)
    if service is not None:
        service.stop()
