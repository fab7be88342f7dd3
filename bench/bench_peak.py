"""``%gpumem peak CALL`` on a 100-layer model: how long the command takes in a real IPython
shell, JAX on CPU, beside compiling the same call without XLA's dump (what ``estimate`` does);
and, from one dump, what its picture costs (bytes live over the program's order by line:
``doctor.peak_timeline`` and ``doctor.peak_figure``) beside what its text report costs.

The model: the gradient of a 100-layer MLP (width 256, batch 128, unrolled in Python), jitted;
each run compiles anew (the dump folder is new each time, so nothing is reused).
"""

from __future__ import annotations

import os
import statistics
import time

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

LAYERS = 100
REPEATS = 3

MODEL = f"""\
import jax, jax.numpy as jnp
def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x ** 2).sum()
step = jax.jit(jax.grad(loss))
params = [jnp.eye(256) * 0.5 for _ in range({LAYERS})]
batch = jnp.ones((128, 256))
"""


def run() -> list[dict]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpumem")
    shell.run_cell(MODEL)
    import jax

    ns = shell.user_ns
    whole, compiles, plain = [], [], []
    report = None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        report = shell.run_line_magic("gpumem", "peak step(params, batch)")
        whole.append(time.perf_counter() - t0)
        from jupyter_gpumem.doctor.peak_report import magic_peak

        report = magic_peak(["step(params, batch)"], shell)
        compiles.append(report.seconds)
        jax.clear_caches()
        t0 = time.perf_counter()
        ns["step"].lower(ns["params"], ns["batch"]).compile()
        plain.append(time.perf_counter() - t0)
        jax.clear_caches()
    ms = lambda s: round(statistics.median(s) * 1e3, 1)  # noqa: E731
    note = f"grad of a {LAYERS}-layer MLP (256 wide, batch 128), JAX on CPU; median of {REPEATS}"
    top = report.lines_by_source[0] if report is not None and report.lines_by_source else None
    return [
        *_picture_beside_text(ns, note.replace(f"median of {REPEATS}", f"one dump, median of {PICTURE_REPEATS}")),
        {"name": "%gpumem peak, whole command", "value": ms(whole), "unit": "ms", "note": note},
        {
            "name": "%gpumem peak, its lower and compile with the dump",
            "value": ms(compiles),
            "unit": "ms",
            "note": note,
        },
        {"name": "the same call compiled without the dump", "value": ms(plain), "unit": "ms", "note": note},
        {
            "name": "peak bytes found",
            "value": report.peak.peak_bytes if report else None,
            "unit": "B",
            "note": f"top line {top.where}, {top.size} B" if top else "no line",
        },
    ]


PICTURE_REPEATS = 9


def _picture_beside_text(ns: dict, note: str) -> list[dict]:
    """From one dump of the model: the text report's reading and words, beside the picture's
    timeline and figure (and its JSON's size, what goes to the browser)."""
    import json

    from jupyter_gpumem.doctor import peak_buffers, peak_figure, peak_timeline
    from jupyter_gpumem.sources import jax_arrays

    dump = jax_arrays.compile_with_dump(ns["step"], (ns["params"], ns["batch"]), {})
    ba, hlo = dump.buffer_assignment, dump.hlo

    def median_ms(fn) -> float:
        times = []
        for _ in range(PICTURE_REPEATS):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return round(statistics.median(times) * 1e3, 1)

    def text() -> str:
        peak = peak_buffers.parse_dump(ba, hlo)
        return "\n".join(x.where for x in peak_buffers.peak_by_line(peak))

    timeline = peak_timeline.peak_timeline(ba, hlo)
    figure = json.dumps(peak_figure.peak_figure(timeline, "step(params, batch)"))
    steps = f"{timeline.length} steps, {len(timeline.steps)} drawn, {len(timeline.lines)} bands"
    return [
        {
            "name": "%gpumem peak, the text's reading of the dump (by line)",
            "value": median_ms(text),
            "unit": "ms",
            "note": note,
        },
        {
            "name": "%gpumem peak, the picture's timeline",
            "value": median_ms(lambda: peak_timeline.peak_timeline(ba, hlo)),
            "unit": "ms",
            "note": f"{note}; {steps}",
        },
        {
            "name": "%gpumem peak, the picture's figure as JSON",
            "value": median_ms(lambda: json.dumps(peak_figure.peak_figure(timeline, "s"))),
            "unit": "ms",
            "note": note,
        },
        {
            "name": "%gpumem peak, the picture's size",
            "value": len(figure),
            "unit": "B",
            "note": "plotly JSON sent to the browser (no plotly.js)",
        },
    ]


if __name__ == "__main__":
    print_rows(run())
