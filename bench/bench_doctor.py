"""What the extension adds to a cell in a real IPython shell with 50,000 live arrays, JAX on CPU.

Interleaved rounds of the same cell without the extension, with its default hooks, and with
``%gpumem cells on``, as added milliseconds and as a ratio to plain IPython; the default hooks
alone, timed by wrapping the callbacks the extension registered; ``%gpumem arrays``; and a
cell that dispatches a chain of slow calls, which must end as fast as without the extension
(async dispatch kept); and ``%gpumem arrays --map`` beside ``%gpumem arrays``, with the map alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import time

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ARRAYS = 50_000
ROUNDS = 5
CELLS_PER_ROUND = 40
CHAIN_CELLS = 45


def _cell_seconds(shell, source: str) -> float:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        shell.run_cell(source, store_history=True)
        return time.perf_counter() - t0


class Hooks:
    """The cell callbacks the extension registered on ``shell``: ``detached()`` takes them off
    for a cell (plain IPython, the same shell), ``timed()`` times each call of them."""

    def __init__(self, shell) -> None:
        self.shell = shell
        self.ours = {
            event: [
                h for h in shell.events.callbacks[event] if getattr(h, "__module__", "").startswith("jupyter_gpumem")
            ]
            for event in ("pre_run_cell", "post_run_cell")
        }
        self.seconds = 0.0

    @contextlib.contextmanager
    def detached(self):
        for event, hooks in self.ours.items():
            for hook in hooks:
                self.shell.events.callbacks[event].remove(hook)
        try:
            yield
        finally:
            for event, hooks in self.ours.items():
                self.shell.events.callbacks[event].extend(hooks)

    @contextlib.contextmanager
    def timed(self):
        """Yields; afterwards ``seconds`` holds the callbacks' time during the block."""
        self.seconds = 0.0
        swapped = []
        for event, hooks in self.ours.items():
            callbacks = self.shell.events.callbacks[event]
            for hook in hooks:
                i = callbacks.index(hook)
                callbacks[i] = self._timing(hook)
                swapped.append((callbacks, i, hook))
        try:
            yield self
        finally:
            for callbacks, i, hook in swapped:
                callbacks[i] = hook

    def _timing(self, hook):
        def timed(*args):
            t0 = time.perf_counter()
            try:
                return hook(*args)
            finally:
                self.seconds += time.perf_counter() - t0

        return timed


def run() -> list[dict]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    _cell_seconds(
        shell,
        "import jax, jax.numpy as jnp\n"
        "x = jnp.ones((4,))\n"
        "@jax.jit\n"
        "def slow(a):\n    return jax.lax.fori_loop(0, 60, lambda i, a: jnp.tanh(a @ a) * 0.5, a)\n"
        "m = jnp.full((384, 384), 0.01)\nslow(m).block_until_ready()",
    )
    cell = "y = x + 1"
    chain = "c1 = slow(m)\nc2 = slow(c1)"
    times: dict[str, list[float]] = {"plain": [], "default": [], "cells": [], "chain plain": [], "chain default": []}

    # A chain of pending calls, with a few live arrays: dispatch must stay asynchronous.
    # Each pair is interleaved cell by cell, in alternating order, so that drift cancels.
    for i in range(CHAIN_CELLS):
        for mode in ("plain", "default") if i % 2 else ("default", "plain"):
            if mode == "default":
                shell.run_line_magic("load_ext", "jupyter_gpumem")
                _cell_seconds(shell, "pass")  # the first cell after loading sets up once; time the next
            times["chain " + mode].append(_cell_seconds(shell, chain))
            _cell_seconds(shell, "c2.block_until_ready()")
            if mode == "default":
                shell.run_line_magic("unload_ext", "jupyter_gpumem")

    _cell_seconds(shell, f"held = list(jnp.arange({ARRAYS}.0).reshape({ARRAYS}, 1))")

    hooks_alone: list[float] = []

    def measure(mode: str) -> None:
        for _ in range(CELLS_PER_ROUND):
            times[mode].append(_cell_seconds(shell, cell))

    shell.run_line_magic("load_ext", "jupyter_gpumem")
    _cell_seconds(shell, "pass")  # the first cell after loading sets up once
    hooks = Hooks(shell)
    for r in range(ROUNDS):
        # plain (the extension's callbacks taken off) and default, cell by cell, in alternating order
        for i in range(CELLS_PER_ROUND):
            for mode in ("plain", "default") if (i + r) % 2 else ("default", "plain"):
                if mode == "plain":
                    with hooks.detached():
                        times[mode].append(_cell_seconds(shell, cell))
                else:
                    with hooks.timed():
                        times[mode].append(_cell_seconds(shell, cell))
                    hooks_alone.append(hooks.seconds)
        _cell_seconds(shell, "%gpumem cells on")
        _cell_seconds(shell, "pass")  # the first tracked cell registers the 50,000 arrays once
        measure("cells")
        _cell_seconds(shell, "%gpumem cells off")
    shell.run_line_magic("unload_ext", "jupyter_gpumem")

    shell.run_line_magic("load_ext", "jupyter_gpumem")
    arrays = [_cell_seconds(shell, "%gpumem arrays") for _ in range(5)]
    free = [_cell_seconds(shell, "%gpumem free --history") for _ in range(5)]
    mapped = _map_rows(shell, statistics.median(arrays))
    med = {k: statistics.median(v) for k, v in times.items()}
    ms = lambda s: round(s * 1e3, 2)  # noqa: E731
    note = f"{ARRAYS} live arrays held in one list, JAX on CPU; median of {ROUNDS * CELLS_PER_ROUND} cells"
    return [
        {"name": "cell, no extension", "value": ms(med["plain"]), "unit": "ms", "note": note},
        {
            "name": "cell added: default hooks",
            "value": round((med["default"] - med["plain"]) * 1e3, 3),
            "unit": "ms",
            "note": note + "; plain: the same shell with the extension's cell callbacks taken off, "
            "interleaved cell by cell; target < 0.5 ms",
        },
        {
            "name": "cell with default hooks, ratio to plain",
            "value": round(med["default"] / med["plain"], 3),
            "unit": "x",
            "note": f"{ms(med['default'])} ms against {ms(med['plain'])} ms",
        },
        {
            "name": "default hooks alone",
            "value": round(statistics.median(hooks_alone) * 1e3, 4),
            "unit": "ms",
            "note": "the extension's pre_run_cell and post_run_cell callbacks, timed around each call, per cell; "
            f"median of {len(hooks_alone)} cells",
        },
        {
            "name": "cell added: %gpumem cells on",
            "value": ms(med["cells"] - med["plain"]),
            "unit": "ms",
            "note": f"{ARRAYS} live arrays; median of {ROUNDS * CELLS_PER_ROUND} cells; target < 20 ms",
        },
        {
            "name": "%gpumem arrays",
            "value": ms(statistics.median(arrays)),
            "unit": "ms",
            "note": f"{ARRAYS} live arrays, named by the walk; median of 5; target < 300 ms",
        },
        *mapped,
        {
            "name": "%gpumem free --history",
            "value": ms(statistics.median(free)),
            "unit": "ms",
            "note": f"{ARRAYS} live arrays; median of 5",
        },
        {
            "name": "pending chain cell, ratio to plain",
            "value": round(med["chain default"] / med["chain plain"], 2),
            "unit": "x",
            "note": f"two slow calls dispatched, not waited on, a few live arrays: "
            f"{ms(med['chain default'])} ms against {ms(med['chain plain'])} ms; target within 1.1",
        },
    ]


def _map_rows(shell, listed: float) -> list[dict]:
    """``%gpumem arrays --map`` beside ``%gpumem arrays`` (``listed``), and the map alone from
    the census's records: its sums (``map_nodes``), and its figure as JSON (what goes to the browser)."""
    import json

    from jupyter_gpumem.doctor import arrays_map
    from jupyter_gpumem.doctor.arrays import census

    whole = statistics.median(_cell_seconds(shell, "%gpumem arrays --map") for _ in range(5))
    records = census(shell).records
    sums, drawn = [], []
    for _ in range(9):
        t0 = time.perf_counter()
        nodes = arrays_map.map_nodes(records)
        t1 = time.perf_counter()
        figure = json.dumps(arrays_map.arrays_map(nodes, "held"))
        drawn.append(time.perf_counter() - t1)
        sums.append(t1 - t0)
    note = f"{len(records)} live arrays; median of 9"
    return [
        {
            "name": "%gpumem arrays --map",
            "value": round(whole * 1e3, 2),
            "unit": "ms",
            "note": f"{ARRAYS} live arrays; median of 5; beside {listed * 1e3:.2f} ms without the map",
        },
        {"name": "--map: the map's sums", "value": round(statistics.median(sums) * 1e3, 2), "unit": "ms", "note": note},
        {
            "name": "--map: the map's figure as JSON",
            "value": round(statistics.median(drawn) * 1e3, 2),
            "unit": "ms",
            "note": f"{note}; {len(figure)} B, {len(nodes)} boxes",
        },
    ]


if __name__ == "__main__":
    print_rows(run())
