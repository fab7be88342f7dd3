"""Write the synthetic demo traces the package ships, in jupyter_gpumem/demo_traces/ (deterministic:
same bytes every run).

    .venv/bin/python tests/data/make_synthetic_traces.py

Every trace says ``"synthetic": true`` in its header: the numbers are made up, but they keep
the relationships real readings have (see docs/trace-format.md and
shared/reference/jax-memory-facts.md):

- BFC chunk sizes, and so ``bytes_in_use``, are multiples of 256 bytes;
- ``bytes_in_use <= pool_bytes <= bytes_limit``; ``peak_*`` never falls;
- ``bytes_limit`` is 75% of the card's total memory by default, even with preallocation off;
- NVML's used bytes are at least the sum of the processes' used bytes, and used + free = total;
- a JAX process holds its pool plus a CUDA context outside it;
- cuda_async reports exact request sizes, ``largest_free_block_bytes`` 0 and no ``pool_bytes``;
  its pool's reserved and used bytes come from the CUDA driver.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from jupyter_gpumem.core.readings import (  # noqa: E402
    NOT_STARTED,
    AllocatorStats,
    CudaPoolReading,
    DeviceReading,
    Event,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
)
from jupyter_gpumem.core.tracefile import TraceWriter  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parents[2] / "jupyter_gpumem" / "demo_traces"

GiB = 1 << 30
MiB = 1 << 20
H100_TOTAL = 85_520_809_984  # what NVML reports for an H100 80GB HBM3 (81559 MiB)
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_UUID = "GPU-00000000-5e17-4e7c-0000-000000000001"  # made up
DRIVER_RESERVED = 527 * MiB  # the driver's own share, counted in NVML's used bytes
CONTEXT = 518 * MiB  # a CUDA context plus loaded kernels, outside JAX's pool
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
PID = 41_000  # the recording kernel
OTHER_PID = 41_234  # another process on the same card
STEP = 0.5  # seconds between samples


def limit_75(total: int) -> int:
    return int(total * 0.75)


def round256(n: int) -> int:
    """BFC rounds every request up to a multiple of 256 bytes."""
    return -(-n // 256) * 256


def header(name: str, settings: dict, total: int = H100_TOTAL) -> dict:
    return {
        "synthetic": True,
        "host": "synthetic-host",
        "jax_version": "0.11.2",
        "settings": settings,
        "devices": [{"index": 0, "name": H100_NAME, "uuid": H100_UUID, "total_bytes": total}],
        "created": "2026-01-01T00:00:00+00:00",
        "pid": PID,
        "tool": "jupyter-gpumem tests/data/make_synthetic_traces.py",
        "description": name,
    }


def nvml(processes: list[tuple[int, int]], util: int, total: int = H100_TOTAL) -> tuple[DeviceReading, ...]:
    procs = tuple(ProcessReading(pid=pid, used_bytes=used) for pid, used in processes if used > 0)
    used = DRIVER_RESERVED + sum(p.used_bytes for p in procs)
    return (
        DeviceReading(
            index=0,
            name=H100_NAME,
            uuid=H100_UUID,
            total_bytes=total,
            used_bytes=used,
            free_bytes=total - used,
            reserved_bytes=DRIVER_RESERVED,
            utilization_percent=util,
            display_active=False,
            mig_mode=False,
            processes=procs,
        ),
    )


def not_started() -> tuple[JaxDeviceReading, ...]:
    why = NotAvailable(NOT_STARTED, "JAX's backend has not started yet")
    return (JaxDeviceReading(jax_id=0, platform="gpu", kind=H100_NAME, nvml_index=0, stats=why),)


class Bfc:
    """A toy BFC allocator: enough bookkeeping to give consistent memory_stats().

    Each region has a free tail and a list of holes left by chunks freed in its middle.
    Requests take the smallest hole that fits, then a tail, then a new region. Regions never
    coalesce, which is how preallocation-off pools fragment.
    """

    def __init__(self, limit: int, preallocate: bool):
        self.limit = limit
        self.preallocate = preallocate
        self.regions: list[int] = []
        self.tails: list[int] = []
        self.holes: list[list[int]] = []
        self.chunks: dict[str, tuple[int, int]] = {}  # name -> (region, size)
        self.peak_in_use = 0
        self.largest_alloc = 0
        self.num_allocs = 0

    @property
    def pool(self) -> int:
        return sum(self.regions)

    @property
    def in_use(self) -> int:
        return sum(size for _, size in self.chunks.values())

    def largest_free(self) -> int:
        return max([0] + self.tails + [h for holes in self.holes for h in holes])

    def add_region(self, size: int) -> None:
        self.regions.append(size)
        self.tails.append(size)
        self.holes.append([])

    def start(self, first_region: int | None = None) -> None:
        if first_region is not None:
            self.add_region(first_region)
        else:
            self.add_region(self.limit if self.preallocate else min(self.limit, 2 * MiB))

    def alloc(self, name: str, nbytes: int) -> None:
        size = round256(nbytes)
        fits = [(h, i, j) for i, holes in enumerate(self.holes) for j, h in enumerate(holes) if h >= size]
        if fits:
            h, i, j = min(fits)
            self.holes[i][j] = h - size
        else:
            for i, tail in enumerate(self.tails):
                if tail >= size:
                    self.tails[i] -= size
                    break
            else:
                if self.preallocate:
                    raise MemoryError(name)
                # Extend: double the last region until the request fits, capped by the limit.
                grow = self.regions[-1] * 2
                while grow < size:
                    grow *= 2
                grow = min(grow, self.limit - self.pool)
                if grow < size:
                    raise MemoryError(name)
                self.add_region(grow)
                i = len(self.regions) - 1
                self.tails[i] -= size
        self.chunks[name] = (i, size)
        self.num_allocs += 1
        self.largest_alloc = max(self.largest_alloc, size)
        self.peak_in_use = max(self.peak_in_use, self.in_use)

    def free(self, name: str, leaves_hole: bool = False) -> None:
        """Free a chunk: into a hole in the middle of its region, or back onto the tail."""
        region, size = self.chunks.pop(name)
        if leaves_hole:
            self.holes[region].append(size)
        else:
            self.tails[region] += size
        if not any(r == region for r, _ in self.chunks.values()):
            # An empty region is one free block again.
            self.tails[region], self.holes[region] = self.regions[region], []

    def stats(self) -> dict:
        pool = self.pool
        return {
            "num_allocs": self.num_allocs,
            "bytes_in_use": self.in_use,
            "peak_bytes_in_use": self.peak_in_use,
            "largest_alloc_size": self.largest_alloc,
            "bytes_limit": self.limit,
            "bytes_reserved": 0,
            "peak_bytes_reserved": 0,
            "largest_free_block_bytes": self.largest_free(),
            "pool_bytes": pool,
            "peak_pool_bytes": pool,
        }

    def reading(self) -> tuple[JaxDeviceReading, ...]:
        stats = AllocatorStats(allocator="bfc", raw=self.stats())
        return (JaxDeviceReading(jax_id=0, platform="gpu", kind=H100_NAME, nvml_index=0, stats=stats),)


class BfcChunks:
    """A preallocated BFC pool kept chunk by chunk, in address order, as bfc_allocator.cc does.

    A request takes the smallest free chunk that fits (the lowest address among equals) and is
    split off its start; a freed chunk merges with free neighbours. Unlike ``Bfc``, this is
    enough to follow a defragment: where each array lands after everything was freed.
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.chunks: list[list] = [[None, limit]]  # [owner or None, size], in address order
        self.peak_in_use = 0
        self.largest_alloc = 0
        self.num_allocs = 0

    @property
    def in_use(self) -> int:
        return sum(size for owner, size in self.chunks if owner is not None)

    def largest_free(self) -> int:
        return max([0] + [size for owner, size in self.chunks if owner is None])

    def alloc(self, name: str, nbytes: int) -> None:
        size = round256(nbytes)
        fits = [(c[1], i) for i, c in enumerate(self.chunks) if c[0] is None and c[1] >= size]
        if not fits:
            raise MemoryError(name)
        _, i = min(fits)
        rest = self.chunks[i][1] - size
        self.chunks[i] = [name, size]
        if rest:
            self.chunks.insert(i + 1, [None, rest])
        self.num_allocs += 1
        self.largest_alloc = max(self.largest_alloc, size)
        self.peak_in_use = max(self.peak_in_use, self.in_use)

    def free(self, name: str) -> None:
        (i,) = [i for i, c in enumerate(self.chunks) if c[0] == name]
        self.chunks[i][0] = None
        for j in (i + 1, i):  # merge with the next chunk, then the previous one into this
            if 0 < j < len(self.chunks) and self.chunks[j - 1][0] is None and self.chunks[j][0] is None:
                self.chunks[j - 1][1] += self.chunks.pop(j)[1]

    def stats(self) -> dict:
        return {
            "num_allocs": self.num_allocs,
            "bytes_in_use": self.in_use,
            "peak_bytes_in_use": self.peak_in_use,
            "largest_alloc_size": self.largest_alloc,
            "bytes_limit": self.limit,
            "bytes_reserved": 0,
            "peak_bytes_reserved": 0,
            "largest_free_block_bytes": self.largest_free(),
            "pool_bytes": self.limit,
            "peak_pool_bytes": self.limit,
        }

    def reading(self) -> tuple[JaxDeviceReading, ...]:
        stats = AllocatorStats(allocator="bfc", raw=self.stats())
        return (JaxDeviceReading(jax_id=0, platform="gpu", kind=H100_NAME, nvml_index=0, stats=stats),)


class Recording:
    """Collects samples and events at STEP-second ticks and writes them in time order."""

    def __init__(self, path: pathlib.Path, head: dict):
        self.writer = TraceWriter(path, head)
        self.t = T0
        self.cell = 0
        self.events_in_gap = 0  # events between two samples are 10 ms apart, in order

    def sample(self, devices, jax, ticks: int = 1) -> None:
        for _ in range(ticks):
            self.writer.write_sample(Sample(t=round(self.t, 3), pid=PID, devices=devices, jax=jax))
            self.t += STEP
        self.events_in_gap = 0

    def event(self, name: str, /, **data) -> None:  # positional: a marker's data has a "name"
        t = self.t - STEP / 2 + 0.01 * self.events_in_gap
        self.events_in_gap += 1
        self.writer.write_event(Event(t=round(t, 3), name=name, data=data))

    def cell_start(self) -> None:
        self.cell += 1
        self.event("cell_start", execution_count=self.cell)

    def cell_end(self, success: bool = True) -> None:
        self.event("cell_end", execution_count=self.cell, success=success)

    def marker(self, label: str, **data) -> None:
        """A "marker" event, as ``jupyter_gpumem.record.mark(label, **data)`` writes it."""
        self.event("marker", name=label, **data)

    def close(self) -> None:
        self.writer.close()


def bfc_prealloc() -> None:
    rec = Recording(
        OUT / "synthetic_bfc_prealloc.jsonl", header("BFC, default 75% preallocation, a second process", {"env": {}})
    )
    bfc = Bfc(limit_75(H100_TOTAL), preallocate=True)
    other = 0

    def devices(util: int):
        jax_used = CONTEXT + bfc.pool if bfc.regions else 0
        return nvml([(PID, jax_used), (OTHER_PID, other)], util)

    rec.sample(devices(0), not_started(), ticks=6)
    rec.cell_start()  # x = jnp.ones((1024, 1024, 1024)): the backend starts, the pool is taken
    bfc.start()
    bfc.alloc("x", 4 * GiB)
    rec.cell_end()
    rec.sample(devices(35), bfc.reading(), ticks=8)
    for i in range(6):  # a loop of cells, each making a 2 GiB and a 1.5 GiB array
        rec.cell_start()
        bfc.alloc(f"a{i}", 2 * GiB + 1000)
        bfc.alloc(f"b{i}", 3 * GiB // 2 + 77)
        rec.sample(devices(80), bfc.reading(), ticks=4)
        bfc.free(f"b{i}", leaves_hole=True)
        rec.cell_end()
        rec.sample(devices(10), bfc.reading(), ticks=4)
    other = 2 * GiB + 300 * MiB  # another user's process lands on the card
    rec.sample(devices(10), bfc.reading(), ticks=10)
    rec.cell_start()  # del x and the a's
    for name in ["x"] + [f"a{i}" for i in range(6)]:
        bfc.free(name)
    rec.cell_end()
    rec.sample(devices(0), bfc.reading(), ticks=12)
    rec.close()


def bfc_growth_fragmenting() -> None:
    settings = {"env": {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
    rec = Recording(
        OUT / "synthetic_bfc_growth_fragmenting.jsonl",
        header("BFC, preallocation off: pool grows, fragments", settings),
    )
    bfc = Bfc(limit_75(H100_TOTAL), preallocate=False)

    def devices(util: int):
        return nvml([(PID, CONTEXT + bfc.pool if bfc.regions else 0)], util)

    rec.sample(devices(0), not_started(), ticks=4)
    rec.cell_start()
    bfc.start()
    bfc.alloc("w0", 1 * MiB)
    rec.cell_end()
    rec.sample(devices(5), bfc.reading(), ticks=4)
    size = 64 * MiB
    n = 0
    for step in range(9):  # each cell allocates bigger arrays, then frees every other one
        rec.cell_start()
        for _ in range(4):
            bfc.alloc(f"t{n}", size + 12_345)
            n += 1
            rec.sample(devices(60), bfc.reading(), ticks=2)
        for k in range(n - 4, n, 2):
            bfc.free(f"t{k}", leaves_hole=True)
        rec.cell_end()
        rec.sample(devices(15), bfc.reading(), ticks=3)
        size = int(size * 1.6)
    rec.sample(devices(0), bfc.reading(), ticks=6)
    rec.close()


def cuda_async() -> None:
    settings = {"env": {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}}
    rec = Recording(
        OUT / "synthetic_cuda_async.jsonl", header("cuda_async, preallocation off: the CUDA pool grows", settings)
    )
    live: dict[str, int] = {}
    state = {"reserved": 0, "reserved_high": 0, "used_high": 0, "peak": 0, "allocs": 0, "largest": 0}
    chunk = 32 * MiB  # the driver's pool grows in whole chunks

    def reading():
        in_use = sum(live.values())
        # The pool's used bytes round each request up to its 512-byte granule.
        used = sum(-(-v // 512) * 512 for v in live.values())
        # Release threshold 0 (preallocation off): freed chunks go back to the driver.
        state["reserved"] = -(-used // chunk) * chunk
        state["reserved_high"] = max(state["reserved_high"], state["reserved"])
        state["used_high"] = max(state["used_high"], used)
        state["peak"] = max(state["peak"], in_use)
        raw = {
            "num_allocs": state["allocs"],
            "bytes_in_use": in_use,
            "peak_bytes_in_use": state["peak"],
            "largest_alloc_size": state["largest"],
            "bytes_limit": 0,
            "bytes_reserved": 0,
            "peak_bytes_reserved": 0,
            "largest_free_block_bytes": 0,
        }
        pool = CudaPoolReading(
            reserved_bytes=state["reserved"],
            reserved_high_bytes=state["reserved_high"],
            used_bytes=used,
            used_high_bytes=state["used_high"],
        )
        stats = AllocatorStats(allocator="cuda_async", raw=raw)
        jax = (JaxDeviceReading(jax_id=0, platform="gpu", kind=H100_NAME, nvml_index=0, stats=stats, cuda_pool=pool),)
        return nvml([(PID, CONTEXT + state["reserved"])], 40), jax

    def alloc(name: str, nbytes: int) -> None:
        live[name] = nbytes
        state["allocs"] += 1
        state["largest"] = max(state["largest"], nbytes)

    rec.sample(nvml([], 0), not_started(), ticks=4)
    rec.cell_start()
    alloc("w", 3_000_001)
    rec.cell_end()
    rec.sample(*reading(), ticks=4)
    for i in range(10):
        rec.cell_start()
        alloc(f"x{i}", (i + 1) * 700 * MiB + 4_321)
        rec.sample(*reading(), ticks=3)
        if i % 3 == 2:
            del live[f"x{i - 1}"]
        rec.cell_end()
        rec.sample(*reading(), ticks=3)
    rec.sample(*reading(), ticks=6)
    rec.close()


def two_kernels() -> None:
    rec = Recording(
        OUT / "synthetic_two_kernels.jsonl", header("two kernels on one card, each preallocating 75%", {"env": {}})
    )
    limit = limit_75(H100_TOTAL)
    first_holds = CONTEXT + limit  # the other kernel started first and took its 75%

    def devices(mine: int, util: int):
        return nvml([(OTHER_PID, first_holds), (PID, mine)], util)

    rec.sample(devices(0, 20), not_started(), ticks=6)
    rec.cell_start()
    # This kernel's BFC asks CUDA for its whole limit, and backs off x0.9 until a region fits.
    free = H100_TOTAL - DRIVER_RESERVED - first_holds - CONTEXT
    region = limit
    while region > free:
        region = round256(int(region * 0.9))
    bfc = Bfc(limit, preallocate=True)
    bfc.start(first_region=region)
    bfc.alloc("x", 1 * GiB)
    rec.cell_end()
    rec.sample(devices(CONTEXT + region, 20), bfc.reading(), ticks=8)
    rec.cell_start()  # y = jnp.zeros((6, 1024**3), jnp.float32): 24 GiB does not fit
    request = 24 * GiB
    rec.sample(devices(CONTEXT + region, 20), bfc.reading(), ticks=2)
    rec.event(
        "oom",
        message=f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {request / GiB:.2f}GiB.",
        requested_bytes=request,
        execution_count=rec.cell,
    )
    rec.cell_end(success=False)
    rec.sample(devices(CONTEXT + region, 20), bfc.reading(), ticks=10)
    rec.close()


def bfc_defragment() -> None:
    """A fragmented preallocated pool, then ``defragment(params)``: same bytes in use, bigger
    largest free block, lower fragmentation, and (since BFC promises no adjacency) one hole left.

    Worked out by hand, with L = bytes_limit = pool = 64,140,607,488 bytes (59.736 GiB):

    - Cell [1] makes 8 params of 4 GiB with a 1.5 GiB temporary after each, and after the 4th
      temporary a 1 GiB table kept outside the tree:
      ``p0 t0 p1 t1 p2 t2 p3 t3 table p4 t4 p5 t5 p6 t6 p7 t7 | free tail``, 45 GiB used.
    - Cell [2] deletes the temporaries. t0..t6 become seven 1.5 GiB holes between live arrays;
      t7 merges with the tail: L - 43.5 GiB = 16.236 GiB. In use 33 GiB, free L - 33 GiB =
      26.736 GiB, so fragmentation = (26.736 - 16.236) / 26.736 = 39.3%.
    - Cell [3] marks "defragment" and moves params through the host. With all 8 deleted, the
      free chunks are 22 GiB before the table and L - 23 GiB = 36.736 GiB after it. Best fit
      puts p0..p4 (20 GiB) in the 22 GiB chunk, leaving a 2 GiB hole before the table, and
      p5..p7 after it: largest free block L - 35 GiB = 24.736 GiB, free still 26.736 GiB, so
      fragmentation = 2 / 26.736 = 7.5%. In use is 33 GiB again.
    """
    rec = Recording(
        OUT / "synthetic_bfc_defragment.jsonl",
        header("BFC, default 75% preallocation: defragment(params) on a fragmented pool", {"env": {}}),
    )
    limit = limit_75(H100_TOTAL)
    bfc = BfcChunks(limit)
    params = [f"params/w{i}" for i in range(8)]

    def devices(util: int):
        return nvml([(PID, CONTEXT + limit)], util)  # preallocated: the whole pool from the start

    rec.sample(nvml([], 0), not_started(), ticks=4)
    rec.cell_start()  # the backend starts and takes its 75%; params and temporaries in turn
    for i, name in enumerate(params):
        bfc.alloc(name, 4 * GiB)
        bfc.alloc(f"t{i}", 3 * GiB // 2)
        if i == 3:
            bfc.alloc("table", 1 * GiB)
        if i % 2:
            rec.sample(devices(70), bfc.reading())
    rec.cell_end()
    rec.sample(devices(10), bfc.reading(), ticks=3)
    rec.cell_start()  # del the temporaries
    for i in range(8):
        bfc.free(f"t{i}")
    rec.cell_end()
    assert (bfc.in_use, bfc.largest_free()) == (33 * GiB, limit - 87 * GiB // 2)
    rec.sample(devices(0), bfc.reading(), ticks=10)
    rec.cell_start()
    rec.marker("defragment", tree="params")  # jupyter_gpumem.record.mark("defragment", tree="params")
    rec.sample(devices(30), bfc.reading(), ticks=3)  # device_get: copies to the host, nothing freed yet
    for name in params:
        bfc.free(name)
    assert sorted(size for owner, size in bfc.chunks if owner is None) == [22 * GiB, limit - 23 * GiB]
    rec.sample(devices(0), bfc.reading(), ticks=2)  # all of params on the host
    for name in params:
        bfc.alloc(name, 4 * GiB)
    rec.cell_end()
    assert (bfc.in_use, bfc.largest_free()) == (33 * GiB, limit - 35 * GiB)
    assert [size for owner, size in bfc.chunks if owner is None] == [2 * GiB, limit - 35 * GiB]
    rec.sample(devices(0), bfc.reading(), ticks=20)  # over 15 s in all: tests window a replay to its last 15 s
    rec.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    bfc_prealloc()
    bfc_growth_fragmenting()
    cuda_async()
    two_kernels()
    bfc_defragment()
    for path in sorted(OUT.glob("synthetic_*.jsonl")):
        print(f"{path.name}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
