"""The server extension's settings, read from ``c.GpuMem.*`` in jupyter_server's config."""

from __future__ import annotations

from traitlets import Bool, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable


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
            "In replay, map a trace process whose pid is a placeholder (-1, -2, ...) to this "
            "server's 1st, 2nd, ... running kernel, for demos. Such processes are labelled "
            "'replay_kernel_placeholder' in the JSON."
        ),
    ).tag(config=True)

    show_other_users = Bool(
        False,
        help="Show the command line and user of GPU processes owned by other users.",
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

    @validate("poll_interval")
    def _check_poll_interval(self, proposal):
        value = proposal["value"]
        if not 0.1 <= value <= 3600:
            raise TraitError(f"GpuMem.poll_interval must be between 0.1 and 3600 seconds, got {value}")
        return value

    @validate("idle_intervals")
    def _check_idle_intervals(self, proposal):
        value = proposal["value"]
        if not 1 <= value <= 10000:
            raise TraitError(f"GpuMem.idle_intervals must be between 1 and 10000, got {value}")
        return value

    @validate("replay_speed")
    def _check_replay_speed(self, proposal):
        value = proposal["value"]
        if not 0 < value <= 1000:
            raise TraitError(f"GpuMem.replay_speed must be above 0 and at most 1000, got {value}")
        return value

    @validate("preallocated_fraction")
    def _check_preallocated_fraction(self, proposal):
        value = proposal["value"]
        if not 0 < value <= 1:
            raise TraitError(f"GpuMem.preallocated_fraction must be above 0 and at most 1, got {value}")
        return value

    @validate("kernel_pid_timeout")
    def _check_kernel_pid_timeout(self, proposal):
        value = proposal["value"]
        if not 0 < value <= 60:
            raise TraitError(f"GpuMem.kernel_pid_timeout must be above 0 and at most 60 seconds, got {value}")
        return value
