"""Cost at 8 GPUs: what a sample, a monitor tick and ``%gpumem arrays`` cost on eight devices
against one.

1. One sample's NVML read (``NvmlSource.read``, what the sampler takes each tick) and one live
   monitor tick (``Sampler.sample_once(cpu_arrays=True)`` and the monitor drawing it) on the fake
   NVML world (synthetic): ``single_h100`` (1 GPU) against ``dgx_h100`` (8 GPUs, jobs over
   several). Both worlds are served side by side and timed in alternating blocks, so machine
   drift cancels in the ratio. JAX runs on one CPU device here.
2. ``%gpumem arrays`` in a real IPython shell with 10,000 live arrays sharded over 8 CPU devices
   (``P('x')`` on a mesh of 8) against 10,000 arrays of the same shape on one device. It runs in
   a child interpreter started with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``, which
   JAX reads when its backend starts; the two worlds alternate round by round (only one is live
   at a time, since the listing shows every live array).

``--rounds N`` sets the rounds of part 2 (default 3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _common import print_rows

os.environ.setdefault("JAX_PLATFORMS", "cpu")

WORLDS = ("single_h100", "dgx_h100")  # 1 and 8 GPUs
BLOCKS = 9
NVML_CALLS = 200
TICKS = 10
ARRAYS = 10_000
DEVICES = 8
ROUNDS = 3
LISTINGS = 3  # %gpumem arrays per world per round
_MARK = "@@mesh-arrays@@"


def _nvml_and_ticks() -> dict[str, dict[str, float]]:
    """Per world: median thread CPU of one NVML read, and median wall and thread CPU of one
    monitor tick, in seconds."""
    import jax.numpy as jnp

    from jupyter_gpumem.monitor.widget import Monitor
    from jupyter_gpumem.sampling.sampler import Sampler, Subscription
    from jupyter_gpumem.settings.apply import read_jax_devices
    from jupyter_gpumem.sources.nvml import NvmlSource
    from jupyter_gpumem.testing import make_pynvml_module, scenario

    class TickSampler(Sampler):
        """The shared sampler without its thread: ``tick()`` is one pass of the thread's loop."""

        callback = None

        def subscribe(self, callback, interval=None, *, cpu_arrays=False):
            self.callback = callback
            return Subscription(self, callback, interval, cpu_arrays)

        def tick(self) -> None:
            self.callback(self.sample_once(cpu_arrays=True))

    jnp.ones(4).block_until_ready()  # start the backend
    sources = {w: NvmlSource(pynvml=make_pynvml_module(scenario(w))) for w in WORLDS}
    samplers = {w: TickSampler(sources[w].read, read_jax_devices) for w in WORLDS}
    monitors = {w: Monitor(sampler=samplers[w]) for w in WORLDS}
    for w in WORLDS:
        samplers[w].tick()  # the first tick builds the views
        expected = 1 if w == "single_h100" else 8
        assert len(monitors[w].drawn_gpus) == expected and monitors[w].updates == 1, (w, monitors[w].drawn_gpus)

    nvml: dict[str, list[float]] = {w: [] for w in WORLDS}
    tick_wall: dict[str, list[float]] = {w: [] for w in WORLDS}
    tick_cpu: dict[str, list[float]] = {w: [] for w in WORLDS}
    for _ in range(BLOCKS):
        for w in WORLDS:
            read = sources[w].read
            start = time.thread_time()
            for _ in range(NVML_CALLS):
                read()
            nvml[w].append((time.thread_time() - start) / NVML_CALLS)
            for _ in range(TICKS):
                c, t = time.thread_time(), time.perf_counter()
                samplers[w].tick()
                tick_wall[w].append(time.perf_counter() - t)
                tick_cpu[w].append(time.thread_time() - c)
    for w in WORLDS:
        assert monitors[w].updates == 1 + BLOCKS * TICKS, (w, monitors[w].updates)  # every tick was drawn
        monitors[w].close()
    return {
        w: {
            "nvml": statistics.median(nvml[w]),
            "tick_wall": statistics.median(tick_wall[w]),
            "tick_cpu": statistics.median(tick_cpu[w]),
        }
        for w in WORLDS
    }


def _arrays_child(rounds: int) -> None:
    """In a child with 8 CPU devices: medians of ``%gpumem arrays`` over sharded and
    single-device arrays, printed as one JSON line."""
    from IPython.core.interactiveshell import InteractiveShell

    from bench_doctor import _cell_seconds as seconds

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpumem")
    seconds(
        shell,
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax.sharding import NamedSharding, PartitionSpec as P\n"
        f"assert len(jax.devices()) == {DEVICES}, jax.devices()\n"
        f"mesh = jax.make_mesh(({DEVICES},), ('x',))\n"
        "sharded = NamedSharding(mesh, P('x'))\n"
        "one = jax.devices()[0]\n"
        f"block = np.ones(({DEVICES}, 4), np.float32)",
    )
    made = {
        "sharded": f"held = [jax.device_put(block, sharded) for _ in range({ARRAYS})]",
        "one device": f"held = [jax.device_put(block, one) for _ in range({ARRAYS})]",
    }
    times: dict[str, list[float]] = {k: [] for k in made}
    make_s: dict[str, list[float]] = {k: [] for k in made}
    for _ in range(rounds):
        for kind, cell in made.items():
            make_s[kind].append(seconds(shell, cell))
            shards = shell.user_ns["held"][0].addressable_shards
            assert len(shards) == (DEVICES if kind == "sharded" else 1), (kind, len(shards))
            for _ in range(LISTINGS):
                times[kind].append(seconds(shell, "%gpumem arrays"))
            seconds(shell, "del held")
    out = {k: statistics.median(v) for k, v in times.items()}
    out.update({f"make {k}": statistics.median(v) for k, v in make_s.items()})
    print(_MARK + json.dumps(out))


def _arrays_on_a_mesh(rounds: int) -> dict[str, float]:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}", JAX_PLATFORMS="cpu")
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, os.path.join(here, "bench_mesh.py"), "--arrays-child", "--rounds", str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK) :])
    raise RuntimeError(f"the child with {DEVICES} devices failed: {done.stderr.strip()[-2000:]}")


def run(rounds: int = ROUNDS) -> list[dict]:
    per_world = _nvml_and_ticks()
    one, eight = (per_world[w] for w in WORLDS)
    arrays = _arrays_on_a_mesh(rounds)
    blocks = f"synthetic fake NVML; median of {BLOCKS} blocks"
    ticks = f"synthetic fake NVML, JAX on 1 CPU device; median of {BLOCKS * TICKS} ticks"
    listing = f"{ARRAYS:,} live arrays, JAX on {DEVICES} CPU devices; median of {rounds * LISTINGS}"
    us = lambda s: round(s * 1e6, 1)  # noqa: E731
    ms = lambda s: round(s * 1e3, 2)  # noqa: E731
    return [
        {"name": "NVML read, 1 GPU (single_h100)", "value": us(one["nvml"]), "unit": "us", "note": blocks},
        {"name": "NVML read, 8 GPUs (dgx_h100)", "value": us(eight["nvml"]), "unit": "us", "note": blocks},
        {"name": "NVML read, 8 GPUs / 1", "value": round(eight["nvml"] / one["nvml"], 2), "unit": "x", "note": ""},
        {"name": "monitor tick, 1 GPU", "value": ms(one["tick_wall"]), "unit": "ms", "note": ticks},
        {"name": "monitor tick, 8 GPUs", "value": ms(eight["tick_wall"]), "unit": "ms", "note": ticks},
        {
            "name": "monitor tick, 8 GPUs / 1",
            "value": round(eight["tick_wall"] / one["tick_wall"], 2),
            "unit": "x",
            "note": f"thread CPU {ms(one['tick_cpu'])} -> {ms(eight['tick_cpu'])} ms",
        },
        {"name": "%gpumem arrays, one device each", "value": ms(arrays["one device"]), "unit": "ms", "note": listing},
        {
            "name": f"%gpumem arrays, sharded over {DEVICES}",
            "value": ms(arrays["sharded"]),
            "unit": "ms",
            "note": listing + "; P('x') on a mesh of 8",
        },
        {
            "name": f"%gpumem arrays, sharded over {DEVICES} / one device",
            "value": round(arrays["sharded"] / arrays["one device"], 2),
            "unit": "x",
            "note": f"making the arrays: {arrays['make one device']:.2f} s one device, {arrays['make sharded']:.2f} s sharded",
        },
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the %%gpumem arrays part")
    parser.add_argument("--arrays-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arrays_child:
        _arrays_child(args.rounds)
    else:
        print_rows(run(args.rounds))
