"""Monitor widget costs: bytes to the front end per update, kernel CPU per update, figure size.

``python bench/bench_widget.py`` prints a table; ``run()`` returns the rows
(``name``, ``value``, ``unit``, ``note``). Numbers come from synthetic samples (a BFC pool that
grows and frees in a saw-tooth), fed to a Monitor through a sampler without a thread, with
every comm message the widgets send measured (JSON body + binary buffers).

The browser's drawing time is not measured here: a 1-hour window at 10 Hz is compared by the
size of the plotly JSON the browser would have to draw, before and after decimation.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jupyter_gpumem.model import (  # noqa: E402
    DeviceReading,
    JaxDeviceReading,
    ProcessReading,
    Sample,
    Timeline,
    normalise_stats,
)

GiB = 1 << 30
PID = 4242


def synthetic_sample(t: float, i: int) -> Sample:
    """A saw-tooth of JAX arrays inside a growing BFC pool on an 80 GiB GPU (synthetic)."""
    in_use = int((2 + 6 * (i % 200) / 200 + math.sin(i / 7)) * GiB)
    pool = (8 if i < 1000 else 16) * GiB
    mine = pool + GiB // 2
    other = 10 * GiB
    dev = DeviceReading(0, "synthetic GPU", "GPU-synthetic", 80 * GiB, mine + other, 80 * GiB - mine - other,
                        processes=(ProcessReading(PID, mine), ProcessReading(1, other)))
    raw = {"bytes_in_use": in_use, "peak_bytes_in_use": 9 * GiB, "bytes_limit": 60 * GiB, "pool_bytes": pool,
           "peak_pool_bytes": pool, "largest_free_block_bytes": max(0, pool - in_use) // 2}
    return Sample(t, PID, (dev,), (JaxDeviceReading(0, "gpu", "synthetic", 0, normalise_stats(raw, "bfc")),))


class _Sub:
    def __init__(self, callback):
        self.callback = callback

    def close(self):
        self.callback = None


class _ThreadlessSampler:
    synthetic = True

    def __init__(self, timeline: Timeline | None = None):
        self.timeline = timeline or Timeline()
        self.sub = None

    def subscribe(self, callback, interval=None):
        self.sub = _Sub(callback)
        return self.sub

    def push(self, sample: Sample) -> None:
        self.timeline.append(sample)
        if self.sub and self.sub.callback:
            self.sub.callback(sample)


def _live_updates(minutes: float = 10.0, hz: float = 2.0, window_min: float = 10.0) -> dict:
    from jupyter_gpumem.widget import Monitor, measure_comm_bytes

    sampler = _ThreadlessSampler()
    t0 = 1_800_000_000.0
    ticks = int(minutes * 60 * hz)
    per_tick_bytes: list[int] = []
    per_tick_cpu: list[float] = []
    with measure_comm_bytes() as sizes:
        monitor = Monitor(sampler=sampler, interval=1 / hz, window=window_min)
        setup_bytes = sum(sizes)
        sampler.push(synthetic_sample(t0, 0))  # the first reading builds the figure
        first_bytes = sum(sizes) - setup_bytes
        for i in range(1, ticks):
            before = len(sizes)
            cpu = time.process_time()
            sampler.push(synthetic_sample(t0 + i / hz, i))
            per_tick_cpu.append(time.process_time() - cpu)
            per_tick_bytes.append(sum(sizes[before:]))
    monitor.close()
    steady = per_tick_bytes[len(per_tick_bytes) // 2:]  # after the window has filled halfway
    return {
        "setup": setup_bytes,
        "first": first_bytes,
        "mean": statistics.fmean(steady),
        "median": statistics.median(steady),
        "max": max(steady),
        "cpu_mean": statistics.fmean(per_tick_cpu[len(per_tick_cpu) // 2:]),
        "cpu_p95": sorted(per_tick_cpu)[int(len(per_tick_cpu) * 0.95)],
        "ticks": ticks,
        "hz": hz,
    }


def _hour_at_10hz() -> dict:
    """Plotly JSON for a 1-hour window at 10 Hz: every point, and what the monitor draws."""
    import plotly.graph_objects as go

    from jupyter_gpumem.series import SERIES_NAMES, row_for
    from jupyter_gpumem.widget import Monitor, _trace, _y

    t0 = 1_800_000_000.0
    samples = [synthetic_sample(t0 + i / 10, i) for i in range(36_000)]
    timeline = Timeline(max_samples=36_000)
    timeline.extend(samples)
    # Every point: one trace per series that has values, all 36,000 rows.
    rows = [row_for(s, 0) for s in samples]
    xs = [int(s.t * 1000) for s in samples]
    traces = []
    for col, name in enumerate(SERIES_NAMES):
        ys = [_y(name, r[col]) for r in rows]
        if any(v is not None for v in ys):
            traces.append(_trace(name, xs, ys, "all", True, "all"))
    started = time.perf_counter()
    raw_json = go.Figure(data=traces).to_json()
    raw_s = time.perf_counter() - started

    sampler = _ThreadlessSampler(timeline)
    sampler_clock = time.time
    # The monitor loads the last hour of the timeline: make "now" the end of the samples.
    import jupyter_gpumem.widget as widget_module

    real_time = widget_module.time.time
    widget_module.time.time = lambda: samples[-1].t + 0.1
    try:
        monitor = Monitor(sampler=sampler, window=60)
    finally:
        widget_module.time.time = real_time
    view = monitor._views[0]
    per_series: dict[str, int] = {}
    for tr in view.fig.data:
        if tr.meta != "cells":
            per_series[tr.legendgroup] = per_series.get(tr.legendgroup, 0) + len(tr.x)
    started = time.perf_counter()
    drawn_json = view.fig.to_json()
    drawn_s = time.perf_counter() - started
    monitor.close()
    del sampler_clock
    return {
        "raw_bytes": len(raw_json),
        "drawn_bytes": len(drawn_json),
        "raw_points": len(samples),
        "drawn_points": max(per_series.values()),
        "traces": len(view.fig.data),
        "raw_s": raw_s,
        "drawn_s": drawn_s,
    }


def run() -> list[dict]:
    live = _live_updates()
    hour = _hour_at_10hz()
    rows = [
        dict(name="widget: bytes per update (mean, steady state)", value=round(live["mean"]), unit="B",
             note=f"2 Hz, 10-min window, {live['ticks']} ticks; median {live['median']:.0f} B, max {live['max']} B (a span sealed)"),
        dict(name="widget: bytes per minute at 2 Hz", value=round(live["mean"] * 120), unit="B",
             note="mean bytes per update x 120"),
        dict(name="widget: bytes for the first figure", value=live["first"], unit="B",
             note="includes plotly's FigureWidget front-end code (anywidget ESM), sent once per figure"),
        dict(name="widget: kernel CPU per update (mean)", value=round(live["cpu_mean"] * 1000, 2), unit="ms",
             note=f"p95 {live['cpu_p95'] * 1000:.2f} ms; process CPU on the calling thread, shared 2-core machine"),
        dict(name="widget: 1 h at 10 Hz, plotly JSON, every point", value=hour["raw_bytes"], unit="B",
             note=f"{hour['raw_points']} points per series; serialised in {hour['raw_s'] * 1000:.0f} ms. Browser draw time not measured"),
        dict(name="widget: 1 h at 10 Hz, plotly JSON, decimated", value=hour["drawn_bytes"], unit="B",
             note=f"at most {hour['drawn_points']} points per series in {hour['traces']} traces; serialised in {hour['drawn_s'] * 1000:.0f} ms"),
    ]
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<52} {row['value']:>12} {row['unit']:<3} {row['note']}")
    print(json.dumps({"synthetic": True}))
