"""Memory on a mesh: ``%gpumem arrays`` and the OOM report with arrays replicated, sharded and
partly replicated over 8 CPU devices (``--xla_force_host_platform_device_count=8``).

One fresh interpreter runs an IPython shell through the session below and reports what it saw
as JSON; each test checks one behaviour of it. The OOM is the H100's recorded BFC text
(tests/data/oom_texts/h100_jax_0.11.2_oom_fill_1MiB.txt) with the allocator and ordinal of the
error the user saw on device 3 (``GPU_3_bfc on device 3``): CPU JAX names no device in its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ipython_script import run_script

from jupyter_gpumem.core.layout import device_span, per_device_summary

pytestmark = pytest.mark.jax_versions

MiB = 1024**2
TEXT = Path(__file__).parents[1] / "data" / "oom_texts" / "h100_jax_0.11.2_oom_fill_1MiB.txt"

SESSION = r"""
from jupyter_gpumem import doctor
from jupyter_gpumem.doctor.oom_text import recognise_text

cell('''import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("d",))
grid = Mesh(np.array(jax.devices()).reshape(4, 2), ("a", "b"))
w_repl = jax.device_put(jnp.zeros((2048, 2048), jnp.float32), NamedSharding(mesh, P()))
w_shard = jax.device_put(jnp.zeros((4096, 2048), jnp.float32), NamedSharding(mesh, P("d")))
w_part = jax.device_put(jnp.zeros((64, 32), jnp.float32), NamedSharding(grid, P("a")))
odd = jax.device_put(jnp.zeros((7, 5), jnp.float32), NamedSharding(mesh, P()))
local = jax.device_put(jnp.zeros((1024,), jnp.float32), jax.devices()[3])''')
out["arrays"] = cell("%gpumem arrays")
out["records"] = [r.to_json() for r in doctor.live_arrays(ip)]
out["by_device"] = cell("%gpumem arrays --by device --top 3")
before = [r.to_json() for r in doctor.live_arrays(ip)]
out["usage"] = usage("arrays --by devices")
out["unchanged"] = before == [r.to_json() for r in doctor.live_arrays(ip)]
text = open(sys.argv[1]).read().replace("GPU_0_bfc on device 0", "GPU_3_bfc on device 3")
report = doctor.oom_report(recognise_text(text), ip)
out["oom"] = str(report)
out["fixes"] = [f.to_json() for f in report.fixes]
cell(report.fixes[0].action)
out["after_fix"] = [r.to_json() for r in doctor.live_arrays(ip) if r.names == ("w_repl",)]
"""


@pytest.fixture(scope="module")
def session() -> dict:
    return run_script(SESSION, str(TEXT), env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"})


def row(text: str, name: str) -> list[str]:
    """The cells of the row held by ``name`` in a ``%gpumem arrays`` table (split on the column gaps)."""
    line = next(l for l in text.splitlines() if f"  {name}  " in l)
    return [c.strip() for c in line.strip().split("  ") if c.strip()]


def layout(session: dict, name: str) -> dict:
    return next(r["layout"] for r in session["records"] if r["names"] == [name])


def test_a_replicated_array_says_its_copies_and_what_sharding_it_would_save(session):
    assert row(session["arrays"], "w_repl")[:4] == [
        "float32[2048, 2048]",
        "128.00 MiB",
        "8 × 16.00 MiB (0-7)",
        "replicated: 8 copies; sharded as P('d'): 112.00 MiB less",
    ]
    assert layout(session, "w_repl") == {
        "words": "replicated: 8 copies",
        "devices": 8,
        "copies": 8,
        "sharding_saves": 112 * MiB,
    }


def test_a_sharded_array_names_the_mesh_axis_it_is_cut_along(session):
    assert row(session["arrays"], "w_shard")[2:4] == [
        "8 × 4.00 MiB (0-7)",
        "sharded 8 ways along dim 0 (mesh axis 'd')",
    ]


def test_a_partly_replicated_array_says_its_cuts_its_copies_and_the_axis_to_add(session):
    assert row(session["arrays"], "w_part")[3] == (
        "sharded 4 ways along dim 0 (mesh axis 'a'), 2 copies (partly replicated); sharded as P(('a', 'b')): 8.00 KiB less"
    )


def test_no_saving_is_claimed_where_no_dimension_divides_by_the_copies(session):
    assert row(session["arrays"], "odd")[3] == "replicated: 8 copies; no dimension divides by 8"
    assert layout(session, "odd")["sharding_saves"] == 0


def test_an_array_on_one_device_says_which_and_its_bytes(session):
    assert row(session["arrays"], "local")[2:4] == ["3: 4.00 KiB", "one device"]


def test_the_summary_says_host_memory_on_cpu_devices_and_what_sharding_would_free(session):
    summary = session["arrays"].splitlines()[0]
    assert summary.startswith("5 live JAX arrays, 160.02 MiB in host memory (CPU devices); 5 shown, largest first.")
    assert "Copies of replicated arrays take 112.01 MiB; sharding them would free 112.01 MiB" in summary


def test_by_device_lists_the_most_loaded_devices_and_calls_out_the_one_that_holds_most(session):
    lines = session["by_device"].splitlines()
    assert (
        "cpu 3 holds the most, 20.01 MiB, 4.00 KiB more than any other; the other 7 (0-2, 4-7) hold 20.00 MiB each."
        in (lines[0])
    )
    assert [l.split() for l in lines[1:]] == [
        ["device", "arrays", "bytes", "replicated", "sharding", "would", "save"],
        ["cpu", "3", "5", "20.01", "MiB", "16.00", "MiB", "14.00", "MiB"],
        ["cpu", "0", "4", "20.00", "MiB", "16.00", "MiB", "14.00", "MiB"],
        ["cpu", "1", "4", "20.00", "MiB", "16.00", "MiB", "14.00", "MiB"],
    ]


def test_a_bad_grouping_names_the_choices_and_changes_nothing(session):
    assert session["usage"] == (
        "%gpumem arrays: --by takes one of shape, dtype, cell, name, line, device, got 'devices' "
        "(did you mean 'device'?)"
    )
    assert session["unchanged"] is True


def test_an_oom_on_device_3_ranks_the_arrays_by_what_device_3_holds(session):
    text = session["oom"]
    part = text[text.index("Largest live arrays") : text.index("What to do")].strip().splitlines()
    assert part[0] == "Largest live arrays on cpu 3 (their bytes there):"
    assert [l.split()[:3] for l in part[1:4]] == [
        ["16.00", "MiB", "float32[2048,"],
        ["4.00", "MiB", "float32[4096,"],
        ["4.00", "KiB", "float32[1024]"],
    ]


def test_an_oom_on_device_3_says_the_other_devices_in_one_line(session):
    text = session["oom"]
    states = text[text.index("Device state at failure:") : text.index("Other processes")].strip().splitlines()
    assert len(states) == 3
    assert states[1].startswith("  cpu 3")
    assert states[2].startswith("  the other 7 (0-2, 4-7): the same: ")


def test_an_oom_on_device_3_offers_sharding_the_replicated_array_with_its_saving_there(session):
    fix = session["fixes"][0]
    assert (fix["kind"], fix["gain_bytes"]) == (
        "replicated",
        14 * MiB + 1024,
    )  # w_repl, and w_part's second copy of 1 KiB
    assert (
        fix["title"]
        == "Shard w_repl over the 8 devices: 14.00 MiB less on cpu 3 (and 1 more replicated, 14.00 MiB in all)"
    )
    assert fix["action"] == (
        "w_repl = jax.device_put(w_repl, jax.sharding.NamedSharding(w_repl.sharding.mesh, jax.sharding.PartitionSpec('d')))"
    )
    assert "No fix stands out" not in session["oom"]


def test_the_offered_line_takes_off_device_3_what_the_fix_said(session):
    (after,) = session["after_fix"]
    assert after["bytes_per_device"]["3"] == 16 * MiB - 14 * MiB
    assert after["layout"]["words"] == "sharded 8 ways along dim 0 (mesh axis 'd')"


@pytest.mark.parametrize(
    ("per_device", "shown"),
    [
        ({0: 1024}, "0: 1.00 KiB"),
        ({0: 2048, 1: 2048, 2: 1024, 3: 2048}, "3 × 2.00 KiB, 1 × 1.00 KiB (0-3)"),
        ({0: 1, 1: 2, 2: 3, 4: 4}, "4 devices, 1 B to 4 B (0-2, 4)"),
    ],
    ids=["one device", "up to three sizes", "more sizes: the range"],
)
def test_the_per_device_column_is_short_whatever_the_sizes(per_device, shown):
    assert per_device_summary(per_device) == shown


def test_device_ids_are_said_in_runs():
    assert device_span([7, 0, 1, 2, 4, 5]) == "0-2, 4-5, 7"
