"""track() and the per-cell line (%gpumem cells on) on GPU-like allocator readings.

CPU JAX keeps no allocator statistics, so these tests script what a GPU's BFC allocator would
report. Every reading here is synthetic: made up for the test, worked out by hand below.
"""

from __future__ import annotations

import pytest

from jupyter_gpumem import doctor
from jupyter_gpumem.core.readings import JaxDeviceReading, normalise_stats
from jupyter_gpumem.doctor.session import SESSION
from jupyter_gpumem.sampling import sampler
from jupyter_gpumem.settings import apply as allocator_shim

from doubles import FakeShell, StubSampler

MiB = 2**20


def gpu(jax_id: int, in_use: int, peak: int, pool: int) -> JaxDeviceReading:
    """A synthetic BFC reading of one GPU, in MiB."""
    raw = {
        "bytes_in_use": in_use * MiB,
        "peak_bytes_in_use": peak * MiB,
        "pool_bytes": pool * MiB,
        "peak_pool_bytes": pool * MiB,
        "bytes_limit": 80_000 * MiB,
        "largest_free_block_bytes": (pool - in_use) * MiB,
        "num_allocs": 10,
    }
    return JaxDeviceReading(jax_id, "gpu", "NVIDIA H100 80GB HBM3", jax_id, normalise_stats(raw, "bfc", "gpu"))


class ScriptedReadings:
    """Stands in for allocator_shim.read_jax_devices: answers each call with the next reading."""

    def __init__(self, *readings: tuple):
        self.readings = list(readings)
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return self.readings.pop(0)


@pytest.fixture
def stub(monkeypatch) -> StubSampler:
    s = StubSampler()
    monkeypatch.setattr(sampler, "get_sampler", lambda: s)
    return s


def script(monkeypatch, *readings: tuple) -> ScriptedReadings:
    scripted = ScriptedReadings(*readings)
    monkeypatch.setattr(allocator_shim, "read_jax_devices", scripted)
    return scripted


# One GPU, a cell that sets a new peak and grows the pool (synthetic):
#   start  in use 1000 MiB, peak 3000 MiB (an earlier cell's), pool 4096 MiB
#   during 2500, 3500, 1800 MiB in use
#   end    in use 1200 MiB, peak 3500 MiB, pool 5120 MiB
#   => delta +200 MiB, peak rise +500 MiB, sampled max 3500 MiB, pool growth +1024 MiB, peak 3500 MiB
NEW_PEAK_START = (gpu(0, 1000, 3000, 4096),)
NEW_PEAK_DURING = [(gpu(0, 2500, 3000, 4096),), (gpu(0, 3500, 3500, 5120),), (gpu(0, 1800, 3500, 5120),)]
NEW_PEAK_END = (gpu(0, 1200, 3500, 5120),)


def test_track_reports_change_peak_rise_sampled_max_and_pool_growth(monkeypatch, stub):
    script(monkeypatch, NEW_PEAK_START, NEW_PEAK_END)
    with doctor.track() as t:
        for jax in NEW_PEAK_DURING:
            stub.push_jax(*jax)
    assert t.to_json() | {"seconds": None} == {
        "measure": "allocator",
        "before": 1000 * MiB,
        "after": 1200 * MiB,
        "delta": 200 * MiB,
        "peak": 3500 * MiB,
        "peak_rise": 500 * MiB,
        "sampled_max": 3500 * MiB,
        "pool_growth": 1024 * MiB,
        "seconds": None,
    }


def test_cells_on_prints_the_hand_worked_line_after_a_cell(monkeypatch, stub, capsys):
    script(monkeypatch, NEW_PEAK_START, NEW_PEAK_END)
    shell = FakeShell()
    monkeypatch.setattr(SESSION, "cells", True)
    monkeypatch.setattr(SESSION, "shell", None)
    doctor.install(shell)
    try:
        shell.run_cell(7, lambda: [stub.push_jax(*jax) for jax in NEW_PEAK_DURING])
    finally:
        doctor.uninstall(shell)
    assert capsys.readouterr().out == (
        "gpumem: cell 7: in use +200.00 MiB (now 1.17 GiB); peak_bytes_in_use +500.00 MiB; "
        "sampled max 3.42 GiB; pool +1.00 GiB\n"
    )


# One GPU, a cell below an earlier cell's peak (synthetic):
#   start  in use 1000 MiB, peak 6000 MiB, pool 8192 MiB
#   during 2000, 4000 MiB in use
#   end    in use 1000 MiB, peak 6000 MiB, pool 8192 MiB
#   => delta 0, peak rise 0, sampled max 4000 MiB, pool growth 0, peak 4000 MiB (not the old 6000)
def test_a_block_below_an_earlier_peak_reports_its_sampled_peak(monkeypatch, stub):
    script(monkeypatch, (gpu(0, 1000, 6000, 8192),), (gpu(0, 1000, 6000, 8192),))
    with doctor.track() as t:
        stub.push_jax(gpu(0, 2000, 6000, 8192))
        stub.push_jax(gpu(0, 4000, 6000, 8192))
    assert (t.delta, t.peak_rise, t.sampled_max, t.pool_growth, t.peak) == (0, 0, 4000 * MiB, 0, 4000 * MiB)


# Two GPUs; GPU 0's peak is from before the block, GPU 1 sets a new one (synthetic):
#   start  GPU 0: in use 1000, peak 5000, pool 6000   GPU 1: in use 500, peak 500, pool 1000 (MiB)
#   during GPU 0: 2000 + GPU 1: 1500 = 3500; then GPU 0: 1000 + GPU 1: 2500 = 3500
#   end    GPU 0: in use 1000, peak 5000, pool 6000   GPU 1: in use 800, peak 2500, pool 3000
#   => delta +300 MiB (1500 -> 1800), peak rise +2000 MiB (5500 -> 7500), sampled max 3500 MiB,
#      pool growth +2000 MiB (7000 -> 9000). Peak: GPU 0 at most 2000 during the block (its 5000
#      is older), GPU 1 2500: 4500 MiB, not the 7500 that summing lifetime peaks gives.
def test_two_gpus_peak_leaves_out_a_peak_from_before_the_block(monkeypatch, stub):
    script(
        monkeypatch,
        (gpu(0, 1000, 5000, 6000), gpu(1, 500, 500, 1000)),
        (gpu(0, 1000, 5000, 6000), gpu(1, 800, 2500, 3000)),
    )
    with doctor.track() as t:
        stub.push_jax(gpu(0, 2000, 5000, 6000), gpu(1, 1500, 1500, 2000))
        stub.push_jax(gpu(0, 1000, 5000, 6000), gpu(1, 2500, 2500, 3000))
    assert (t.delta, t.peak_rise, t.sampled_max, t.pool_growth) == (300 * MiB, 2000 * MiB, 3500 * MiB, 2000 * MiB)
    assert t.peak == 4500 * MiB


def test_track_reads_the_allocator_once_at_each_end(monkeypatch, stub):
    scripted = script(monkeypatch, NEW_PEAK_START, NEW_PEAK_END)
    with doctor.track():
        stub.push_jax(*NEW_PEAK_DURING[0])
    assert scripted.calls == 2 and stub.callbacks == []
