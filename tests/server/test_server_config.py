"""c.GpuMem.*: a number out of its range is refused with the range in words; the edges are allowed."""

from __future__ import annotations

import math

import pytest
from traitlets import TraitError

from jupyter_gpumem.server.config import GpuMem


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("poll_interval", 0.05, "GpuMem.poll_interval must be between 0.1 and 3600 seconds, got 0.05"),
        ("poll_interval", 3601, "GpuMem.poll_interval must be between 0.1 and 3600 seconds, got 3601.0"),
        ("idle_intervals", 0, "GpuMem.idle_intervals must be between 1 and 10000, got 0"),
        ("replay_speed", 0, "GpuMem.replay_speed must be above 0 and at most 1000, got 0.0"),
        ("preallocated_fraction", 1.5, "GpuMem.preallocated_fraction must be above 0 and at most 1, got 1.5"),
        ("kernel_pid_timeout", math.nan, "GpuMem.kernel_pid_timeout must be above 0 and at most 60 seconds, got nan"),
        ("idle_after", -1, "GpuMem.idle_after must be between 0 and 604800 seconds, got -1.0"),
        ("idle_after", math.inf, "GpuMem.idle_after must be between 0 and 604800 seconds, got inf"),
        ("metrics_port", 65536, "GpuMem.metrics_port must be between 0 and 65535, got 65536"),
        ("metrics_port", -1, "GpuMem.metrics_port must be between 0 and 65535, got -1"),
        (
            "cull_idle_after",
            -8,
            "GpuMem.cull_idle_after must be between 0 and 2592000 seconds (0 turns culling off), got -8.0",
        ),
        ("cull_min_bytes", 0, "GpuMem.cull_min_bytes must be between 1 and 1152921504606846976 bytes, got 0"),
        ("cull_min_bytes", -1, "GpuMem.cull_min_bytes must be between 1 and 1152921504606846976 bytes, got -1"),
        ("cull_warn_before", -300, "GpuMem.cull_warn_before must be between 0 and 2592000 seconds, got -300.0"),
    ],
)
def test_out_of_range_setting_is_refused_naming_its_range(name, value, message):
    with pytest.raises(TraitError) as err:
        GpuMem(**{name: value})
    assert str(err.value) == message


def test_idle_after_takes_zero_and_a_week():
    assert (GpuMem(idle_after=0).idle_after, GpuMem(idle_after=7 * 86400).idle_after) == (0, 604800)


def test_the_edges_of_each_range_are_allowed():
    c = GpuMem(
        poll_interval=0.1, idle_intervals=10000, replay_speed=1000, preallocated_fraction=1, kernel_pid_timeout=60
    )
    assert (c.poll_interval, c.idle_intervals, c.replay_speed, c.preallocated_fraction, c.kernel_pid_timeout) == (
        0.1,
        10000,
        1000,
        1,
        60,
    )


def test_culling_is_off_by_default_with_a_gib_floor_and_a_five_minute_warning():
    c = GpuMem()
    assert (c.cull_idle_after, c.cull_min_bytes, c.cull_warn_before) == (0, 2**30, 300)
