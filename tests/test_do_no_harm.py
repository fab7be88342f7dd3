"""The extension never aborts, hangs or slows a user's kernel, and never changes what the user's
code sees: each case runs in a fresh IPython process twice, with ``%load_ext jupyter_gpumem`` and
without it (tests/kernel_session.py), and the two are compared.

Where the cases come from:
- The async out-of-memory error: a jitted call whose output cannot be allocated returns an
  array at dispatch and fails later (JAX 0.10.2, CPU: ``is_ready()`` and ``is_deleted()``
  answer, ``block_until_ready()`` raises). Reading that array's buffer pointer is a fatal check
  in XLA (xla/python/pjrt_ifrt/raw_buffer.h, ``Check failed: buffer_.IsConcrete()``): SIGABRT.
- The hang: ``unsafe_buffer_pointer()`` on a pending array waits with the GIL held, while JAX's
  worker thread needs the GIL to run a ``jax.debug.print`` callback (jax/_src/debugging.py
  runs the callback in Python).
- Shard views: ``Array.addressable_shards`` caches per-shard arrays on the array
  (jax/_src/array.py, 0.10.2), which ``jax.live_arrays()`` then lists.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from child_env import pythonpath

HERE = Path(__file__).parent
SESSION = HERE / "kernel_session.py"

SETUP = textwrap.dedent("""\
    import jax, jax.numpy as jnp
    x = jnp.ones((1000,))
    f = jax.jit(lambda x: jnp.zeros((2**46,), jnp.float32) + x.sum())  # output cannot be allocated
    x.block_until_ready()""")


def run_session(
    tmp_path: Path,
    cells: list[str],
    ext: bool,
    env: dict | None = None,
    timeout: float = 120,
    settle: bool = False,
    plain_tracebacks: bool = False,
) -> list[dict]:
    """Each cell's record; fails the test with the process's output if it died or hung.
    ``settle``: each cell starts once the earlier ones' computations are done, for a cell that
    must raise a real out-of-memory error (kernel_session.settle); left off elsewhere, where
    cells meet computations still pending on purpose. ``plain_tracebacks``: errors shown as
    ``%xmode Plain`` shows them (kernel_session.PLAIN_TRACEBACKS); IPython's default mode
    elsewhere."""
    path = tmp_path / ("cells-ext.json" if ext else "cells-plain.json")
    path.write_text(json.dumps(cells))
    # PYTHONPATH: this checkout's package, not whichever one the environment installed
    full_env = {
        "JAX_PLATFORMS": "cpu",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": pythonpath(),
        **(env or {}),
    }
    flags = [
        flag for flag, on in (("--ext", ext), ("--settle", settle), ("--plain-tracebacks", plain_tracebacks)) if on
    ]
    args = [sys.executable, str(SESSION), str(path), *flags]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=tmp_path)
    except subprocess.TimeoutExpired as err:
        pytest.fail(
            f"{'with' if ext else 'without'} the extension, the session hung for {timeout} s; "
            f"progress: {(err.stderr or b'')[-2000:]!r}"
        )
    line = next((l for l in proc.stdout.splitlines() if l.startswith("JSON")), None)
    assert proc.returncode == 0 and line is not None, (
        f"{'with' if ext else 'without'} the extension the process ended with code {proc.returncode}\n"
        + proc.stdout[-3000:]
        + proc.stderr[-3000:]
    )
    return json.loads(line[4:])


def compare(
    tmp_path: Path, cells: list[str], env: dict | None = None, timeout: float = 120, plain_tracebacks: bool = False
) -> tuple[list[dict], list[dict]]:
    """(plain, with extension): the same cells, the same outcome for each."""
    plain = run_session(tmp_path, cells, ext=False, env=env, timeout=timeout, plain_tracebacks=plain_tracebacks)
    loaded = run_session(tmp_path, cells, ext=True, env=env, timeout=timeout, plain_tracebacks=plain_tracebacks)
    assert [(c["ok"], c["error"]) for c in loaded] == [(c["ok"], c["error"]) for c in plain], (plain, loaded)
    return plain, loaded


ASYNC_OOM_CASES = {
    "assigned": ["y = f(x)", "1 + 1"],
    "handled": ["try:\n    y = f(x); y.block_until_ready()\nexcept Exception:\n    pass", "1 + 1"],
    "in a function": ["def run(x):\n    y = f(x)\n    return float(y.sum())", "run(x)", "1 + 1"],
    "in a list": [
        "losses = []\nfor i in range(2):\n    losses.append(f(x))",
        "len(losses)",
        "try:\n    float(losses[0].sum())\nexcept Exception as err:\n    print(type(err).__name__)",
    ],
}


DOCTOR_OFF = "get_ipython().run_line_magic('gpumem', 'doctor off') if 'gpumem' in get_ipython().magics_manager.magics['line'] else None"


@pytest.mark.jax_versions
@pytest.mark.parametrize("doctor", ["on", "off"])
def test_an_array_whose_allocation_failed_does_not_abort_the_kernel(tmp_path, doctor):
    """Every cell ends as it does without the extension, the process lives, the next cell runs.
    The four cases run one after another in one process (each later one beside the failed arrays
    of those before it), where each had a process of its own: 4 sessions for 16."""
    cells = [SETUP, DOCTOR_OFF if doctor == "off" else "pass"]
    ends = []
    for case in ASYNC_OOM_CASES.values():
        cells += case
        ends.append(len(cells) - 1)
    # The errors are shown as %xmode Plain shows them, the default display is kept for the tests
    # below (kernel_session.PLAIN_TRACEBACKS).
    plain, loaded = compare(tmp_path, cells, plain_tracebacks=True)
    assert [loaded[i]["ok"] for i in ends] == [True] * len(ASYNC_OOM_CASES), loaded


@pytest.mark.jax_versions
def test_the_oom_report_lists_arrays_whose_allocation_failed(tmp_path):
    """The case the report exists for: a function allocates, the result is used, it fails."""
    cells = [SETUP, "def run(x):\n    y = f(x)\n    return float(y.sum())", "pending = f(x)", "run(x)", "1 + 1"]
    _, loaded = compare(tmp_path, cells)
    assert not loaded[3]["ok"] and "JAX ran out of memory (jupyter-gpumem doctor)" in loaded[3]["out"]
    assert "Largest live arrays:" in loaded[3]["out"]


@pytest.mark.jax_versions
def test_typed_commands_survive_failed_arrays(tmp_path):
    """%gpumem arrays, free and cells read only metadata of a failed array."""
    cells = [SETUP, "y = f(x)", "%gpumem cells on", "z = f(x)", "%gpumem arrays", "%gpumem free", "1 + 1"]
    loaded = run_session(tmp_path, cells, ext=True)
    assert all(c["ok"] for c in loaded), loaded
    assert "live JAX arrays" in loaded[4]["out"] and "float32[70368744177664]" in loaded[4]["out"]
    assert "Freed" in loaded[5]["out"]


def test_an_array_whose_computation_failed_is_not_listed_as_held_memory(tmp_path):
    """The 256 TiB output of a failed computation was never allocated: %gpumem arrays leaves it
    out of the live arrays and their bytes, and names it, sized from shape and dtype only."""
    cells = [
        SETUP,
        "y = f(x)",
        "try:\n    y.block_until_ready()\nexcept Exception as err:\n    print(type(err).__name__)",
        "%gpumem arrays",
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert "RESOURCE_EXHAUSTED" in loaded[2]["out"] or "Error" in loaded[2]["out"], loaded[2]
    shown = loaded[3]["out"]
    assert shown.startswith("1 live JAX arrays, 3.91 KiB in host memory (CPU devices)"), shown
    table = shown.splitlines()[1:]
    assert not [row for row in table if "float32[70368744177664]" in row]
    assert (
        "Left out: 1 array whose computation failed, holding no memory: float32[70368744177664] "
        "(256.00 TiB asked for) held by y."
    ) in shown


@pytest.mark.jax_versions
def test_a_debug_print_training_loop_does_not_hang(tmp_path):
    """Plain JAX returns at once; a hook that waited on the pending buffer would deadlock."""
    cells = [
        "import jax, jax.numpy as jnp\n"
        "@jax.jit\n"
        "def init(x):\n    return {'w': x * 2.0}\n"
        "@jax.jit\n"
        "def train_step(p):\n    jax.debug.print('loss {l}', l=p['w'].sum())\n    return {'w': p['w'] * 0.9}\n"
        "x = jnp.ones((256,))",
        "params = init(x)\nfor i in range(3):\n    params = train_step(params)",
        "float(params['w'].sum())",
    ]
    plain, loaded = compare(tmp_path, cells, timeout=60)
    assert loaded[1]["seconds"] < 5, loaded


SLOW = textwrap.dedent("""\
    import time, jax, jax.numpy as jnp
    @jax.jit
    def slow(a):
        return jax.lax.fori_loop(0, 150, lambda i, a: jnp.tanh(a @ a) * 0.5, a)
    x = jnp.full((384, 384), 0.01)
    slow(x).block_until_ready()  # compile
    t0 = time.perf_counter(); slow(x).block_until_ready(); full = time.perf_counter() - t0
    print(f"{full:.3f}")""")


def test_a_chain_of_pending_computations_ends_its_cell_as_without_the_extension(tmp_path):
    """Async dispatch: the cell returns while two slow calls are pending, with and without us."""
    cells = [SLOW, "y = slow(x)\ny2 = slow(y)", "float(y2.sum())"]
    plain, loaded = compare(tmp_path, cells)
    full = float(plain[0]["out"])
    assert plain[1]["seconds"] < full / 2, f"plain JAX did not dispatch asynchronously here ({full} s a call)"
    assert loaded[1]["seconds"] < full / 2, (full, loaded[1])
    assert loaded[2]["ok"]


SHARDED = textwrap.dedent("""\
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("d",))
    arrays = [jax.device_put(jnp.arange(100.0), NamedSharding(mesh, P("d"))) for _ in range(5)]
    [a.block_until_ready() for a in arrays]
    del _""")
FOUR_CPUS = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}


@pytest.mark.jax_versions
def test_sharded_arrays_are_not_multiplied_by_the_extension(tmp_path):
    """jax.live_arrays() shows the user's five arrays after a cell, with and without us."""
    cells = [SHARDED, "n = len(jax.live_arrays())", "%gpumem arrays", "print(len(jax.live_arrays()))"]
    plain = run_session(tmp_path, [SHARDED, "print(len(jax.live_arrays()))"], ext=False, env=FOUR_CPUS)
    loaded = run_session(tmp_path, cells, ext=True, env=FOUR_CPUS)
    assert plain[1]["out"].strip() == loaded[3]["out"].strip() == "5"
    assert loaded[2]["out"].startswith("5 live JAX arrays, 1.95 KiB in host memory (CPU devices)"), loaded[2]["out"]


@pytest.mark.jax_versions
def test_shard_views_the_user_made_are_not_listed_as_arrays(tmp_path):
    """After ``addressable_shards``, JAX lists the per-shard views too; they are not new memory."""
    cells = [
        SHARDED,
        "views = [s.data for s in arrays[0].addressable_shards]\nprint(len(jax.live_arrays()))",
        "%gpumem arrays",
    ]
    loaded = run_session(tmp_path, cells, ext=True, env=FOUR_CPUS)
    assert loaded[1]["out"].strip() == "9"
    assert loaded[2]["out"].startswith("5 live JAX arrays, 1.95 KiB in host memory (CPU devices)"), loaded[2]["out"]


@pytest.mark.jax_versions
def test_the_cell_hooks_add_no_array_the_user_would_see(tmp_path):
    """With ``cells on`` the doctor registers each cell's new arrays; on the CPU of JAX 0.7.2 to 0.9.2
    asking an array for its buffer address (``unsafe_buffer_pointer()``) adds an Array to
    ``jax.live_arrays()``, so the registry must not ask there (0.10.2 adds none)."""
    cells = ["import jax, jax.numpy as jnp", CELLS_ON, "x = jnp.ones((1024,))", "print(len(jax.live_arrays()))"]
    plain, loaded = compare(tmp_path, cells)
    assert plain[3]["out"].strip() == "1"
    assert loaded[3]["out"].strip().splitlines()[0] == "1"


COUNT_LISTINGS = textwrap.dedent("""\
    import threading, jax, jax.numpy as jnp
    listings, _live_arrays = [], jax.live_arrays
    def counted():  # the hooks run on the main thread; a sampler thread would not count
        if threading.current_thread() is threading.main_thread():
            listings.append(1)
        return _live_arrays()
    jax.live_arrays = counted
    x = jnp.ones((4,))""")


@pytest.mark.jax_versions
def test_the_default_hooks_never_list_jax_arrays(tmp_path):
    """``jax.live_arrays()`` costs about 8 ms a call at 50,000 arrays; the default hooks read
    which cell made an array from its traceback when asked, so cells that make arrays, and a
    failing one, list nothing. Before: one listing after every cell."""
    cells = [
        COUNT_LISTINGS,
        "ys = [jnp.ones((3,)) for _ in range(5)]",
        "z = x + 1",
        "try:\n    jnp.zeros((2**46,), jnp.float32)\nexcept Exception:\n    pass",
        "print(len(listings))",
    ]
    plain, loaded = compare(tmp_path, cells)
    assert plain[4]["out"].strip() == loaded[4]["out"].strip() == "0", loaded


GROW = "for i in range(2):\n    xs.append(jnp.ones((4,)))"
CELLS_ON = (
    "get_ipython().run_line_magic('gpumem', 'cells on') "
    "if 'gpumem' in get_ipython().magics_manager.magics['line'] else None"
)


@pytest.mark.jax_versions
def test_cells_on_following_a_growing_list_adds_no_array_and_changes_no_result(tmp_path):
    """``cells on`` lists the arrays and reads their tracebacks after each cell; the user's
    listing and values are the same as without the extension."""
    cells = [
        "import jax, jax.numpy as jnp\nxs = []",
        CELLS_ON,
        GROW,
        GROW,
        "print(len(jax.live_arrays()), float(sum(a.sum() for a in xs)))",
    ]
    plain, loaded = compare(tmp_path, cells)
    assert plain[4]["out"].strip() == loaded[4]["out"].strip().splitlines()[0] == "4 16.0", (plain, loaded)
    assert "growing: cell [4] line 2 keeps arrays from 2 runs" in loaded[3]["out"], loaded[3]


def test_an_array_shown_on_the_cpu_is_counted_once(tmp_path):
    """Showing a CPU array makes JAX keep a second Array of the same buffer as its numpy view's
    owner (JAX 0.10.2, jax/_src/array.py ``ArrayImpl._value``): jax.live_arrays() lists 3 arrays
    for 2 buffers. The listing and the running total count each buffer once."""
    cells = [
        "import jax, jax.numpy as jnp\nbatch = jnp.ones((512, 1024))",
        "batch * 2",
        "print(len(jax.live_arrays()))",
        "%gpumem arrays",
        "from jupyter_gpumem.doctor import array_cells\nprint(array_cells.device_bytes())",
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert loaded[2]["out"].strip() == "3"
    assert loaded[3]["out"].startswith("2 live JAX arrays, 4.00 MiB in host memory (CPU devices)"), loaded[3]["out"]
    assert "(no name)" not in loaded[3]["out"]
    assert loaded[4]["out"].strip() == str(2 * 512 * 1024 * 4)


def test_arrays_are_sized_per_device_from_the_sharding(tmp_path):
    cells = [
        SHARDED,
        "from jupyter_gpumem import doctor\n"
        "r = next(r for r in doctor.live_arrays() if 'arrays[0]' in r.names)\n"
        "print(sorted(r.bytes_per_device.items()), r.nbytes)",
    ]
    loaded = run_session(tmp_path, cells, ext=True, env=FOUR_CPUS)
    assert loaded[1]["out"].strip() == "[(0, 100), (1, 100), (2, 100), (3, 100)] 400"


ODD_OBJECTS = textwrap.dedent("""\
    import shelve, collections.abc
    shelf = shelve.open("shelf")
    shelf["k"] = 1
    shelf.close()
    class BadMapping(collections.abc.Mapping):
        def __getitem__(self, k): raise KeyError(k)
        def __len__(self): return 1
        def __iter__(self): raise RuntimeError("iteration fails")
    bad_mapping = BadMapping()
    class BadAttr:
        def __getattr__(self, name): raise RuntimeError("no attributes here")
    bad_attr = BadAttr()
    class BadDict:
        @property
        def __dict__(self): raise ValueError("no dict")
    bad_dict = BadDict()
    class Slotted:
        __slots__ = "v"  # one slot may be named by a bare string
    slotted = Slotted()
    slotted.v = jnp.ones((60,))
    class BadKey:
        def __repr__(self): raise RuntimeError("no repr")
    keyed = {BadKey(): jnp.ones((70,))}
    w = jnp.ones((50,))""")


def test_odd_objects_in_the_namespace_are_skipped_and_counted(tmp_path):
    cells = [SETUP, ODD_OBJECTS, "%gpumem arrays", "%gpumem free", "jnp.zeros((2**46,), jnp.float32)", "1 + 1"]
    loaded = run_session(tmp_path, cells, ext=True, settle=True)
    assert [c["ok"] for c in loaded] == [True, True, True, True, False, True], loaded
    arrays = loaded[2]["out"]
    assert "could not be read and were skipped" in arrays, arrays
    rows = {line.split()[0]: line.split() for line in arrays.splitlines()[2:]}
    assert "w" in rows["float32[50]"] and "slotted.v" in rows["float32[60]"], arrays
    assert "Traceback" not in loaded[3]["out"] and "FAILED" not in loaded[3]["out"], loaded[3]["out"]
    assert "JAX ran out of memory (jupyter-gpumem doctor)" in loaded[4]["out"]


def test_a_long_list_of_arrays_is_walked_whole(tmp_path):
    """20,000 arrays in one list are each named by their index, not 'held elsewhere'."""
    cells = [
        SETUP,
        "xs = [jnp.full((), i) for i in range(20_000)]",
        "from jupyter_gpumem import doctor\n"
        "recs = doctor.live_arrays()\n"
        "print(sum(1 for r in recs if any(n.startswith('xs[') for n in r.names)))",
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert loaded[2]["out"].strip() == "20000"


@pytest.mark.jax_versions
def test_an_array_reusing_a_donated_buffer_belongs_to_the_cell_that_made_it(tmp_path):
    cells = [
        "import jax, jax.numpy as jnp\nx = jnp.ones((1000,))",
        "g = jax.jit(lambda a: a * 2, donate_argnums=0)\nx = g(x)",
        "from jupyter_gpumem import doctor\nprint([r.cell for r in doctor.live_arrays() if 'x' in r.names])",
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert loaded[2]["out"].strip() == "[2]"  # the second cell made today's x


MEMORY_KINDS = [
    SETUP,
    "kinds = [m.kind for m in jax.devices()[0].addressable_memories()]\nprint(jax.devices()[0].default_memory().kind, 'pinned_host' in kinds)",
    "from jupyter_gpumem import doctor\n"
    "r = next(r for r in doctor.live_arrays() if 'x' in r.names)\n"
    "print(r.device_bytes, r.host_bytes, r.memory_kind)",
    "from jax.sharding import SingleDeviceSharding\n"
    "if 'pinned_host' in kinds:\n"
    "    h = jax.device_put(jnp.ones((1000,)), SingleDeviceSharding(jax.devices()[0], memory_kind='pinned_host'))",
    "r = next((r for r in doctor.live_arrays() if 'h' in r.names), None)\n"
    "print(r and (r.device_bytes, r.host_bytes, r.memory_kind))",
    "%gpumem arrays --top 3",
]


@pytest.fixture(scope="module")
def memory_kinds(tmp_path_factory) -> list[dict]:
    return run_session(tmp_path_factory.mktemp("kinds"), MEMORY_KINDS, ext=True)


@pytest.mark.jax_versions
def test_an_array_in_its_device_s_own_memory_is_device_bytes(memory_kinds):
    """A CPU device's own memory is ``device`` from jax 0.7 on and ``unpinned_host`` (its only
    memory) up to 0.6.2 (``Device.default_memory()``); either way the array is device bytes."""
    default_kind = memory_kinds[1]["out"].split()[0]
    assert memory_kinds[2]["out"].split() == ["4000", "0", default_kind], memory_kinds[2]["out"]


@pytest.mark.jax_versions
def test_host_memory_arrays_are_not_device_bytes(memory_kinds):
    """A pinned_host array holds no device memory (CPU JAX offers that memory kind from 0.7 on;
    before, its CPU device has none, which the first cell reads)."""
    if memory_kinds[1]["out"].split()[1] != "True":
        pytest.skip("this JAX's CPU device has no pinned_host memory")
    assert memory_kinds[4]["out"].strip() == "(0, 4000, 'pinned_host')"
    assert (
        "host (pinned_host): 3.91 KiB" in memory_kinds[5]["out"]
        and "and 3.91 KiB in host memory" in memory_kinds[5]["out"]
    )


@pytest.mark.jax_versions
def test_jax_lists_live_arrays_newest_first(tmp_path):
    """The per-cell bookkeeping stops at the first array it knows; that needs this order
    (jaxlib py_array.cc links each new array at the head of the client's list)."""
    cells = [
        "import jax, jax.numpy as jnp\na = jnp.ones(3); b = jnp.ones(4); c = jnp.ones(5)\n"
        "print([x.shape[0] for x in jax.live_arrays()])"
    ]
    plain = run_session(tmp_path, cells, ext=False)
    assert plain[0]["out"].strip() == "[5, 4, 3]"


# A live monitor, as far as the kernel is concerned: a subscription to the sampler thread, here at
# 10 ms so it reads often; in the run without the extension it is absent. ``read`` keeps the
# live-array reading of each sample; ``wait_ticks()`` waits for three more (at once without it),
# ``wait_reading(check)`` for a reading that passes ``check`` (a reading is reused for 20 times
# as long as it took, so a given tick may carry an older one).
LIVE_MONITOR = textwrap.dedent("""\
    import threading
    tick, read = threading.Condition(), []
    def wait_ticks(n=3):
        with tick:
            start = len(read)
            return tick.wait_for(lambda: len(read) >= start + n or not monitor_on, timeout=30)
    def wait_reading(check):
        with tick:
            return tick.wait_for(lambda: read and read[-1] is not None and check(read[-1]), timeout=30)
    monitor_on = 'gpumem' in get_ipython().magics_manager.magics['line']
    if monitor_on:
        from jupyter_gpumem.sampling.sampler import get_sampler
        def on_sample(sample):
            with tick:
                read.append(sample.cpu_arrays)
                tick.notify_all()
        monitor_feed = get_sampler().subscribe(on_sample, interval=0.01, cpu_arrays=True)""")
AFTER_TICKS = "assert wait_ticks()"


@pytest.mark.jax_versions
def test_a_live_monitor_adds_no_array_the_user_would_see(tmp_path):
    """The sampler lists JAX's live arrays at each tick while a monitor is live; the user's
    ``jax.live_arrays()`` lists what it lists without the extension, before and after a delete."""
    cells = [
        "import jax, jax.numpy as jnp\nx = jnp.ones((1024,))\nys = [jnp.zeros((i + 1,)) for i in range(50)]",
        LIVE_MONITOR,
        AFTER_TICKS,
        "print(len(jax.live_arrays()))",
        "del ys\n" + AFTER_TICKS,
        "print(len(jax.live_arrays()))",
    ]
    plain, loaded = compare(tmp_path, cells)
    assert [c["out"].strip() for c in plain[3::2]] == ["51", "1"]
    assert [c["out"].strip() for c in loaded[3::2]] == ["51", "1"]


@pytest.mark.jax_versions
def test_a_live_monitor_reads_the_bytes_of_the_user_s_cpu_arrays(tmp_path):
    """The bytes drawn are the arrays' own sizes (``nbytes``), and follow a delete."""
    cells = [
        "import jax, jax.numpy as jnp\nx = jnp.ones((1024,))\nys = [jnp.zeros((i + 1,), jnp.int8) for i in range(50)]",
        LIVE_MONITOR,
        "assert wait_reading(lambda r: r.arrays == 51)\n"
        "print(read[-1].bytes, sum(a.nbytes for a in jax.live_arrays()))",
        "del ys\nassert wait_reading(lambda r: r.arrays == 1)\nprint(read[-1].bytes)",
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert loaded[2]["out"].split() == [str(4096 + 1275), str(4096 + 1275)], loaded
    assert loaded[3]["out"].split() == ["4096"], loaded


@pytest.mark.jax_versions
def test_a_live_monitor_does_not_start_jax(tmp_path):
    """With jax imported and no computation yet, the sampler's ticks leave the backend unstarted."""
    cells = [
        "import jax",
        LIVE_MONITOR,
        AFTER_TICKS + "\nfrom jax._src import xla_bridge\nprint(xla_bridge.backends_are_initialized())",
    ]
    plain, loaded = compare(tmp_path, cells)
    assert plain[2]["out"].strip() == loaded[2]["out"].strip() == "False"
    assert loaded[2]["ok"]


def test_a_live_monitor_beside_a_failed_allocation_and_a_debug_print_loop_harms_nothing(tmp_path):
    """The ticks read only shapes: an array whose allocation failed is listed and sized, never
    touched (no abort), and a training loop whose callbacks need the GIL runs as without us."""
    cells = [
        SETUP,
        LIVE_MONITOR,
        "y = f(x)\n" + AFTER_TICKS,
        "@jax.jit\ndef train_step(p):\n    jax.debug.print('loss {l}', l=p.sum())\n    return p * 0.9\n"
        "p = x\nfor i in range(3):\n    p = train_step(p)\nfloat(p.sum())",
        AFTER_TICKS + "\n1 + 1",
    ]
    plain, loaded = compare(tmp_path, cells, timeout=60)
    assert loaded[3]["seconds"] < 5 and loaded[4]["ok"], loaded


TRAP = textwrap.dedent("""\
    class Trap:  # an interrupt that lands while the extension reads this object
        @property
        def __dict__(self):
            raise KeyboardInterrupt
    trap = Trap()""")


def test_an_interrupt_during_a_command_ends_it_in_one_line(tmp_path):
    cells = [SETUP, TRAP, "%gpumem arrays", "1 + 1"]
    loaded = run_session(tmp_path, cells, ext=True)
    assert not loaded[2]["ok"] and loaded[2]["error"] == "UsageError"
    assert "%gpumem arrays: interrupted" in loaded[2]["out"]
    assert "Traceback" not in loaded[2]["out"] and "jupyter_gpumem" not in loaded[2]["out"].replace("%gpumem", "")
    assert loaded[3]["ok"]


def test_an_interrupt_during_a_hook_is_one_line_and_the_next_cell_runs(tmp_path):
    cells = [SETUP, TRAP, "jnp.zeros((2**46,), jnp.float32)", "1 + 1"]
    loaded = run_session(tmp_path, cells, ext=True, settle=True)
    out = loaded[2]["out"]
    assert "gpumem: interrupted while reporting on the cell" in out
    assert "Error in callback" not in out and "doctor_hooks" not in out
    assert loaded[3]["ok"]


def test_free_interrupted_says_what_was_done(tmp_path):
    """An interrupt in the first step (the history walk) leaves the others undone, and says so."""
    cells = [SETUP, "jnp.ones(3)", TRAP + "\nOut[99] = trap", "%gpumem free"]
    loaded = run_session(tmp_path, cells, ext=True)
    out = loaded[3]["out"]
    assert "Interrupted: not done: output history, compiled-program caches, garbage." in out, out


def test_a_recording_stops_at_unload_without_a_last_bogus_sample(tmp_path):
    count = "print(len(open('rec.jsonl').read().splitlines()))"
    cells = [
        SETUP,
        "%gpumem record rec.jsonl --interval 0.05",
        "import time; time.sleep(0.3)",
        "%unload_ext jupyter_gpumem",
        count,
        "time.sleep(0.3)",
        count,
    ]
    loaded = run_session(tmp_path, cells, ext=True)
    assert all(c["ok"] for c in loaded), loaded
    assert int(loaded[4]["out"]) >= 5 and loaded[4]["out"] == loaded[6]["out"]
    samples = [json.loads(l) for l in (tmp_path / "rec.jsonl").read_text().splitlines() if '"sample"' in l]
    assert not any("not_started" in json.dumps(s.get("jax")) for s in samples)


def test_a_recording_left_running_ends_at_exit_without_a_not_started_sample(tmp_path):
    cells = [SETUP, "%gpumem record rec.jsonl --interval 0.02", "import time; time.sleep(0.3)"]
    run_session(tmp_path, cells, ext=True)
    samples = [json.loads(l) for l in (tmp_path / "rec.jsonl").read_text().splitlines() if '"sample"' in l]
    assert len(samples) >= 3
    assert not any("not_started" in json.dumps(s.get("jax")) for s in samples), samples[-1]


def test_the_walk_stops_at_its_time_budget_and_says_so():
    """No JAX needed: 10,000 containers, no time at all; the walk stops and the note says why."""
    from jupyter_gpumem import doctor

    walk = doctor.names_by_array({"many": [{"k": [i]} for i in range(10_000)]}, seconds=0.0)
    assert walk.unfinished and walk.names == {}
    assert walk.note().startswith("Names: the walk of your variables stopped after")


def test_the_walk_counts_what_it_skips():
    from jupyter_gpumem import doctor

    class Raises:
        @property
        def __dict__(self):
            raise OSError("gone")

    walk = doctor.names_by_array({"a": Raises(), "b": [Raises(), 1]})
    assert (walk.skipped, walk.unfinished) == (2, False)
    assert walk.note() == "Names: 2 objects in your variables could not be read and were skipped."


def test_the_oom_reports_peak_section_compiles_nothing(monkeypatch):
    """The peak by line in the OOM report comes from the error's text only: with every compile of
    ours made to fail, a text with XLA's peak buffers (synthetic, XLA's layout) still gives it."""
    from jupyter_gpumem import doctor
    from jupyter_gpumem.core.readings import NotAvailable, Sample
    from jupyter_gpumem.sources import jax_arrays

    class JaxRuntimeError(RuntimeError):
        """The name JAX's runtime errors carry (jaxlib 0.10.2)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the OOM report compiled a program")

    monkeypatch.setattr(jax_arrays, "compile_with_dump", refuse)
    monkeypatch.setattr(jax_arrays, "_compiled", refuse)
    sample = Sample(
        t=0.0, pid=1, devices=NotAvailable("no_nvml", "synthetic"), jax=NotAvailable("not_started", "synthetic")
    )
    text = (HERE / "data" / "peak_buffers" / "synthetic_cell_oom.txt").read_text()
    report = doctor.oom_report(JaxRuntimeError(text), sample=sample, live=[], synthetic=True)
    assert report.peak_rows and report.peak_rows[0].split()[:3] == ["3.00", "GiB", "75%"]
