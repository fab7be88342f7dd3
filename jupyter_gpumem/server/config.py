"""The server extension's settings, read from ``c.GpuMem.*`` in jupyter_server's config."""

from __future__ import annotations

import re

from traitlets import Bool, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

# A JupyterHub custom scope's name (jupyterhub/scopes.py, 6.1.1: _custom_scope_pattern).
CUSTOM_SCOPE = re.compile(r"custom:[a-z0-9][a-z0-9_\-\*:]+[a-z0-9_\*]")

# trait: (lowest, highest, lowest allowed itself, unit) of each numeric setting
_RANGES = {
    "poll_interval": (0.1, 3600, True, " seconds"),
    "idle_intervals": (1, 10000, True, ""),
    "replay_speed": (0, 1000, False, ""),
    "preallocated_fraction": (0, 1, False, ""),
    "kernel_pid_timeout": (0, 60, False, " seconds"),
    "idle_after": (0, 7 * 86400, True, " seconds"),
    "metrics_port": (0, 65535, True, ""),
    "cull_idle_after": (0, 30 * 86400, True, " seconds (0 turns culling off)"),
    "cull_min_bytes": (1, 2**60, True, " bytes"),
    "cull_warn_before": (0, 30 * 86400, True, " seconds"),
}


class GpuMem(Configurable):
    """Settings of the jupyter-gpumem server extension (``c.GpuMem.<name>``)."""

    poll_interval = Float(
        2.0,
        help="Seconds between NVML readings while a client is watching (0.1 to 3600).",
    ).tag(config=True)

    idle_intervals = Int(
        10,
        help="Stop reading NVML after this many poll intervals with no request (1 to 10000).",
    ).tag(config=True)

    replay = Unicode(
        None,
        allow_none=True,
        help="Path of a trace file (JSON Lines) to serve instead of live NVML readings.",
    ).tag(config=True)

    replay_speed = Float(1.0, help="Replay speed; 2.0 plays a trace twice as fast.").tag(config=True)

    replay_loop = Bool(True, help="Start a replayed trace again when it ends.").tag(config=True)

    replay_map_placeholder_pids = Bool(
        True,
        help=(
            "In replay, show the trace process with the i-th pid of the header's "
            "kernel_placeholder_pids as this server's i-th running kernel, for demos. Such "
            "processes carry 'replay_placeholder_pid' in the JSON."
        ),
    ).tag(config=True)

    show_other_users = Bool(
        False,
        help="Show the command line of GPU processes owned by other users (their user is always shown).",
    ).tag(config=True)

    preallocated_fraction = Float(
        0.7,
        help=(
            "A kernel holding at least this share of a GPU's total memory is taken to have "
            "preallocated (JAX preallocates 75% by default)."
        ),
    ).tag(config=True)

    kernel_pid_timeout = Float(
        2.0,
        help="Seconds to wait for a kernel's usage_reply (its pid) on the control channel.",
    ).tag(config=True)

    idle_after = Float(
        600.0,
        help=(
            "On /metrics, a kernel counts towards its GPU's idle-kernel bytes when jupyter_server "
            "says it is idle and it has had no activity for this many seconds (0 to 604800)."
        ),
    ).tag(config=True)

    metrics_port = Int(
        0,
        help=(
            "Serve the GPU gauges on a listener of their own at this port (0, the default: no "
            "listener). It answers GET and HEAD /metrics only, with no authentication: no token, no "
            "kernel or file access; at most 32 connections, 10 s for a request's headers, no request "
            "body. Make it reachable from Prometheus alone (metrics_ip, a network policy)."
        ),
    ).tag(config=True)

    metrics_ip = Unicode(
        "127.0.0.1",
        help=(
            "The address the metrics listener binds to; '' or 0.0.0.0 for every interface. Bind one "
            "that only Prometheus reaches."
        ),
    ).tag(config=True)

    metrics_kernel_names = Bool(
        False,
        help=(
            "On the metrics listener, also label each kernel with its kernel_id and notebook_path. "
            "Off: anyone who reaches the listener would read them."
        ),
    ).tag(config=True)

    hub_metrics_scope = Unicode(
        "custom:jupyter-gpumem:read-metrics",
        help=(
            "Under JupyterHub, serve the GPU gauges at {base_url}jupyter-gpumem/metrics, through the "
            "hub's proxy, to a bearer token the hub says holds this custom scope (or it filtered to "
            "this server or its user). '' turns the route off."
        ),
    ).tag(config=True)

    cull_idle_after = Float(
        0.0,
        help=(
            "Shut down a kernel that has been idle this many seconds while holding at least "
            "cull_min_bytes of GPU memory (0, the default, turns culling off; at most 2592000)."
        ),
    ).tag(config=True)

    cull_min_bytes = Int(
        2**30,
        help="GPU memory (bytes, summed over GPUs) a kernel must hold to be culled (1 to 2**60; default 1 GiB).",
    ).tag(config=True)

    cull_warn_before = Float(
        300.0,
        help=(
            "Seconds before a cull that the kernel's row in /devices says it is pending (0 to "
            "2592000). When not less than cull_idle_after, the warning stands as soon as the "
            "kernel is idle."
        ),
    ).tag(config=True)

    @validate("hub_metrics_scope")
    def _check_scope(self, proposal):
        value = proposal["value"]
        if value and not CUSTOM_SCOPE.fullmatch(value):
            raise TraitError(
                f"GpuMem.hub_metrics_scope must be a JupyterHub custom scope (custom:<letters, digits, -, _, :>), "
                f"or '' for no route; got {value!r}"
            )
        return value

    @validate(*_RANGES)
    def _check_range(self, proposal):
        name, value = proposal["trait"].name, proposal["value"]
        low, high, low_included, unit = _RANGES[name]
        if not ((low <= value) if low_included else (low < value)) or not value <= high:
            words = f"between {low} and {high}" if low_included else f"above {low} and at most {high}"
            raise TraitError(f"GpuMem.{name} must be {words}{unit}, got {value}")
        return value
