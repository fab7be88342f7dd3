"""Monitor widget costs: bytes to the front end per update, kernel CPU per update, figure size.

``python bench/bench_widget.py`` prints a table; ``run()`` returns the rows
(``name``, ``value``, ``unit``, ``note``). Numbers come from synthetic samples (a BFC pool that
grows and frees in a saw-tooth), fed to a Monitor through a sampler without a thread, with
every comm message the widgets send measured (JSON body + binary buffers).

A 1-hour window at 10 Hz is compared every point against decimated (what the monitor draws):
by the size of the figure the kernel sends, and by the time headless Chromium takes in ``Plotly.newPlot``
for it. The page loads plotly.js from the installed plotly package (no network), times
``JSON.parse`` and ``Plotly.newPlot`` with ``performance.now()``, and writes the times into the
DOM, which ``chromium --headless --dump-dom`` prints. Each figure is drawn in several fresh
browsers, interleaved; medians are reported. Without Chromium those rows say so.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jupyter_gpumem.core.readings import (  # noqa: E402
    DeviceReading,
    JaxDeviceReading,
    ProcessReading,
    Sample,
    Timeline,
    normalise_stats,
)

GiB = 1 << 30
PID = 4242
BROWSER_RUNS = 5  # fresh browsers per figure
BROWSER_TIMEOUT = 180.0
CHROMIUM = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")


def synthetic_sample(t: float, i: int) -> Sample:
    """A saw-tooth of JAX arrays inside a growing BFC pool on an 80 GiB GPU (synthetic)."""
    in_use = int((2 + 6 * (i % 200) / 200 + math.sin(i / 7)) * GiB)
    pool = (8 if i < 1000 else 16) * GiB
    mine = pool + GiB // 2
    other = 10 * GiB
    dev = DeviceReading(
        0,
        "synthetic GPU",
        "GPU-synthetic",
        80 * GiB,
        mine + other,
        80 * GiB - mine - other,
        processes=(ProcessReading(PID, mine), ProcessReading(1, other)),
    )
    raw = {
        "bytes_in_use": in_use,
        "peak_bytes_in_use": 9 * GiB,
        "bytes_limit": 60 * GiB,
        "pool_bytes": pool,
        "peak_pool_bytes": pool,
        "largest_free_block_bytes": max(0, pool - in_use) // 2,
    }
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

    def subscribe(self, callback, interval=None, cpu_arrays=False):
        self.sub = _Sub(callback)
        return self.sub

    def push(self, sample: Sample) -> None:
        self.timeline.append(sample)
        if self.sub and self.sub.callback:
            self.sub.callback(sample)


def _live_updates(minutes: float = 10.0, hz: float = 2.0, window_min: float = 10.0) -> dict:
    from comm_bytes import measure_comm_bytes

    from jupyter_gpumem.monitor.widget import Monitor

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
        before_ask = sum(sizes)
        library = next(iter(monitor._views.values())).fig.library
        library._handle_custom_msg({"ask": "plotly_js"}, [])  # as the first plot's browser side does
        library_bytes = sum(sizes) - before_ask
        for i in range(1, ticks):
            before = len(sizes)
            cpu = time.process_time()
            sampler.push(synthetic_sample(t0 + i / hz, i))
            per_tick_cpu.append(time.process_time() - cpu)
            per_tick_bytes.append(sum(sizes[before:]))
    still_ms = []
    for _ in range(21):  # the still drawn after a cell, from the full window
        cpu = time.process_time()
        monitor._still.bundle()
        still_ms.append((time.process_time() - cpu) * 1000)
    monitor.close()
    steady = per_tick_bytes[len(per_tick_bytes) // 2 :]  # after the window has filled halfway
    return {
        "setup": setup_bytes,
        "first": first_bytes,
        "library": library_bytes,
        "still_ms": statistics.median(still_ms),
        "mean": statistics.fmean(steady),
        "median": statistics.median(steady),
        "max": max(steady),
        "cpu_mean": statistics.fmean(per_tick_cpu[len(per_tick_cpu) // 2 :]),
        "cpu_p95": sorted(per_tick_cpu)[int(len(per_tick_cpu) * 0.95)],
        "ticks": ticks,
        "hz": hz,
    }


def _plotly_json(figure: dict) -> str:
    """A monitor figure (what the kernel sends) as plotly JSON, traced as ``monitor_plot.js``
    traces it: one trace per series, the bands stacked, a date axis."""
    xs = [t * 1000 for t in figure["t"]]
    traces = []
    for spec in figure["series"]:
        trace = {"type": "scatter", "mode": "lines", "x": xs, "y": figure["y"][spec["name"]], "name": spec["label"]}
        if spec["kind"] == "band":
            trace.update(stackgroup="bands", line={"width": 0.5})
        else:
            trace.update(yaxis=spec["axis"], line={"width": 1.5})
        traces.append(trace)
    lower = figure["lower"]
    layout = {
        "height": 560 if lower else 440,
        "xaxis": {"type": "date", "tickformat": "%H:%M:%S", "anchor": "y2" if lower else "y"},
        "yaxis": {"domain": [0.42, 1] if lower else [0, 1], "rangemode": "tozero"},
        "yaxis2": {"domain": [0, 0.3], "rangemode": "tozero", "visible": lower},
        "yaxis3": {"overlaying": "y2", "side": "right", "range": [0, 100], "visible": lower},
        "legend": {"orientation": "h", "y": -0.08, "yanchor": "top"},
    }
    return json.dumps({"data": traces, "layout": layout})


def _hour_at_10hz() -> dict:
    """A 1-hour window at 10 Hz: every point, and what the monitor draws (its figure, decimated)."""
    from jupyter_gpumem.monitor.widget import Monitor

    t0 = 1_800_000_000.0
    samples = [synthetic_sample(t0 + i / 10, i) for i in range(36_000)]
    timeline = Timeline(max_samples=36_000)
    timeline.extend(samples)
    sampler = _ThreadlessSampler(timeline)
    # The monitor loads the last hour of the timeline: make "now" the end of the samples.
    import jupyter_gpumem.monitor.widget as widget_module

    real_time = widget_module.time.time
    widget_module.time.time = lambda: samples[-1].t + 0.1
    try:
        monitor = Monitor(sampler=sampler, window=60)
    finally:
        widget_module.time.time = real_time
    view = monitor._views[0]
    figure = view.figure()
    # Every point: the same figure with all 36,000 rows.
    from jupyter_gpumem.monitor.series import row_for

    rows = [row_for(s, 0) for s in samples]
    every = dict(figure, t=[round(s.t, 3) for s in samples], y=view._columns(rows))
    started = time.perf_counter()
    drawn_json = _plotly_json(figure)
    drawn_s = time.perf_counter() - started
    started = time.perf_counter()
    raw_json = _plotly_json(every)
    raw_s = time.perf_counter() - started
    monitor.close()
    return {
        "raw_json": raw_json,
        "drawn_json": drawn_json,
        "raw_bytes": len(json.dumps(every)),
        "drawn_bytes": len(json.dumps(figure)),
        "raw_points": len(samples),
        "drawn_points": len(figure["t"]),
        "traces": len(figure["series"]),
        "raw_s": raw_s,
        "drawn_s": drawn_s,
    }


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><script src="{plotly}"></script></head>
<body>
<div id="plot" style="width:1000px"></div>
<script id="figure" type="application/json">{figure}</script>
<script>
(function () {{
  var out;
  try {{
    var text = document.getElementById("figure").textContent;
    var t0 = performance.now();
    var fig = JSON.parse(text);
    var t1 = performance.now();
    var div = document.getElementById("plot");
    Plotly.newPlot(div, fig.data, fig.layout);
    div.getBoundingClientRect();  // make layout happen inside the timed span
    var t2 = performance.now();
    out = {{parse_ms: t1 - t0, newplot_ms: t2 - t1, traces: fig.data.length,
           paths: div.querySelectorAll("path").length}};
    Plotly.purge(div);  // keep the dumped DOM small
  }} catch (e) {{
    out = {{error: String(e)}};
  }}
  document.getElementById("figure").remove();
  var pre = document.createElement("pre");
  pre.id = "draw-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}})();
</script>
</body></html>
"""


def _chromium() -> str | None:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    return None


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def _draw_once(browser: str, page: Path, profile: Path) -> dict:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--allow-file-access-from-files",
        f"--user-data-dir={profile}",
        "--dump-dom",
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT)
    found = re.search(r'<pre id="draw-result">(.*?)</pre>', proc.stdout, re.S)
    if not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the page wrote no timing (exit {proc.returncode}): {last}")
    result = json.loads(html.unescape(found.group(1)))
    if "error" in result:
        raise RuntimeError(f"plotly.js failed in the page: {result['error']}")
    return result


def _browser_draw(figures: dict[str, str], runs: int = BROWSER_RUNS) -> dict | str:
    """Median Plotly.newPlot and JSON.parse times per figure in headless Chromium, or why not."""
    browser = _chromium()
    if browser is None:
        return "Chromium not found (looked for " + ", ".join(CHROMIUM) + "): browser draw time not measured"
    plotly_js = _plotly_js()
    if not plotly_js.is_file():
        return f"{plotly_js} is missing from the plotly package: browser draw time not measured"
    times: dict[str, list[dict]] = {name: [] for name in figures}
    with tempfile.TemporaryDirectory(prefix="gpumem-bench-draw-") as tmp:
        pages = {}
        for name, figure in figures.items():
            pages[name] = Path(tmp) / f"{name}.html"
            # "</" inside a script element would end it; JSON allows "<\/" for "</".
            pages[name].write_text(
                _PAGE.format(plotly=plotly_js.as_uri(), figure=figure.replace("</", "<\\/")), encoding="utf-8"
            )
        _draw_once(browser, pages[next(iter(pages))], Path(tmp) / "profile-warm")  # warm the file cache
        for i in range(runs):
            order = list(figures) if i % 2 == 0 else list(reversed(figures))
            for name in order:
                times[name].append(_draw_once(browser, pages[name], Path(tmp) / f"profile-{name}-{i}"))
    return {
        name: {
            "newplot_ms": statistics.median(r["newplot_ms"] for r in rs),
            "parse_ms": statistics.median(r["parse_ms"] for r in rs),
            "paths": rs[0]["paths"],
            "runs": len(rs),
        }
        for name, rs in times.items()
    }


def run() -> list[dict]:
    live = _live_updates()
    hour = _hour_at_10hz()
    rows = [
        dict(
            name="widget: bytes per update (mean, steady state)",
            value=round(live["mean"]),
            unit="B",
            note=f"2 Hz, 10-min window, {live['ticks']} ticks; median {live['median']:.0f} B, max {live['max']} B",
        ),
        dict(
            name="widget: bytes per minute at 2 Hz",
            value=round(live["mean"] * 120),
            unit="B",
            note="mean bytes per update x 120",
        ),
        dict(
            name="widget: bytes for the first figure",
            value=live["first"],
            unit="B",
            note="the plot's small ESM and its figure, as nbconvert runs it; where the front end names its cells, plotly.min.js goes with it (next row)",
        ),
        dict(
            name="widget: bytes of plotly.min.js, once per kernel",
            value=live["library"],
            unit="B",
            note="with the first plot where the front end names its cells; elsewhere when a browser asks (nbconvert never does)",
        ),
        dict(
            name="widget: kernel CPU to draw the still after a cell (median)",
            value=round(live["still_ms"], 2),
            unit="ms",
            note="SVG and text of the full 10-min window, one GPU (monitor/still.py)",
        ),
        dict(
            name="widget: kernel CPU per update (mean)",
            value=round(live["cpu_mean"] * 1000, 2),
            unit="ms",
            note=f"p95 {live['cpu_p95'] * 1000:.2f} ms; process CPU on the calling thread, shared 2-core machine",
        ),
        dict(
            name="widget: 1 h at 10 Hz, figure JSON, every point",
            value=hour["raw_bytes"],
            unit="B",
            note=f"{hour['raw_points']} points per series, the figure the kernel sends",
        ),
        dict(
            name="widget: 1 h at 10 Hz, figure JSON, decimated",
            value=hour["drawn_bytes"],
            unit="B",
            note=f"{hour['drawn_points']} points per series in {hour['traces']} series (what the monitor sends)",
        ),
    ]
    layout_only = json.dumps({"data": [], "layout": json.loads(hour["drawn_json"])["layout"]})
    try:
        drawn = _browser_draw(
            {"every_point": hour["raw_json"], "decimated": hour["drawn_json"], "layout_only": layout_only}
        )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        drawn = f"browser draw failed: {exc}"
    if isinstance(drawn, str):
        rows.append(dict(name="widget: 1 h at 10 Hz, browser draw", value=None, unit="ms", note=drawn))
        return rows
    full, dec, bare = drawn["every_point"], drawn["decimated"], drawn["layout_only"]
    how = f"headless Chromium, median of {full['runs']} fresh browsers, interleaved; Plotly.newPlot, performance.now()"
    rows += [
        dict(
            name="widget: 1 h at 10 Hz, browser draw, every point",
            value=round(full["newplot_ms"], 1),
            unit="ms",
            note=f"{how}; JSON.parse {full['parse_ms']:.0f} ms more",
        ),
        dict(
            name="widget: 1 h at 10 Hz, browser draw, decimated",
            value=round(dec["newplot_ms"], 1),
            unit="ms",
            note=f"{how}; {hour['traces']} traces (one per series); JSON.parse {dec['parse_ms']:.0f} ms more",
        ),
        dict(
            name="widget: browser draw, layout only (no data)",
            value=round(bare["newplot_ms"], 1),
            unit="ms",
            note="the same page and layout without traces: plotly.js's fixed cost per figure",
        ),
        dict(
            name="widget: 1 h at 10 Hz, browser draw, ratio",
            value=round(full["newplot_ms"] / dec["newplot_ms"], 1),
            unit="x",
            note="every point / decimated, Plotly.newPlot medians",
        ),
    ]
    return rows


if __name__ == "__main__":
    from _common import print_rows

    print_rows(run())
    print(json.dumps({"synthetic": True}))
