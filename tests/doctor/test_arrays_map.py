"""``%gpumem arrays --map``: live device memory by cell, line and name, as a plotly icicle. Real
arrays made by cells of an IPython shell on CPU JAX in a fresh interpreter; the sums checked
against ``%gpumem arrays``' own records. The caps on each level are checked on records built by
hand, with sizes worked out by hand."""

from __future__ import annotations

import pytest
from ipython_script import run_script

from jupyter_gpumem.doctor import arrays_map
from jupyter_gpumem.doctor.arrays import ArrayRecord
from jupyter_gpumem.doctor.arrays_map import NO_NAME, map_nodes
from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME

SESSION = r"""
from IPython.utils.capture import capture_output
from jupyter_gpumem.doctor.arrays import census
cell("import jax, jax.numpy as jnp")
cell("params = {'w': jnp.ones((256, 256)), 'b': jnp.ones((256,))}")
cell('''def make(n):
    return [jnp.zeros((64,)) + i for i in range(n)]
batch = make(300)
keep = jnp.ones((1024, 128))''')
with capture_output() as shown:
    ip.run_cell("%gpumem arrays --map --top 3", store_history=True)
out["shown"] = [dict(o.data) for o in shown.outputs]
out["records"] = [r.to_json() for r in census(ip).records]
out["bad"] = [usage("arrays --map=yes"), usage("arrays --map 3")]
with capture_output() as plain:
    ip.run_cell("%gpumem arrays --top 3", store_history=True)
out["plain"] = [dict(o.data) for o in plain.outputs]
"""


@pytest.fixture(scope="module")
def session() -> dict:
    return run_script(SESSION)


def _boxes(figure: dict) -> dict[str, tuple[str, int]]:
    (trace,) = figure["data"]
    return {i: (p, v) for i, p, v in zip(trace["ids"], trace["parents"], trace["values"], strict=True)}


def test_the_command_shows_the_map_then_the_report_in_words(session):
    first, second = session["shown"]
    assert set(first) == {PLOTLY_MIME, "text/plain"}
    assert "live device memory by cell, line and name" in first["text/plain"]
    assert first[PLOTLY_MIME]["data"][0]["type"] == "icicle"
    assert "live JAX arrays" in second["text/plain"] and "text/html" in second


def test_without_map_only_the_words_are_shown(session):
    (only,) = session["plain"]
    assert PLOTLY_MIME not in only and "live JAX arrays" in only["text/plain"]


def test_the_root_holds_every_byte_the_arrays_hold_on_devices(session):
    boxes = _boxes(session["shown"][0][PLOTLY_MIME])
    total = sum(sum(r["bytes_per_device"].values()) for r in session["records"])
    assert boxes["live"] == ("", total)
    # Each box holds exactly what its children hold (plotly's branchvalues="total").
    for box, (_, size) in boxes.items():
        children = [v for p, v in boxes.values() if p == box]
        assert not children or sum(children) == size


def test_boxes_go_cell_then_line_then_the_name_that_holds_them(session):
    boxes = _boxes(session["shown"][0][PLOTLY_MIME])
    params = next(i for i in boxes if i.endswith("/params"))
    cell, line = params.split("/")[1:3]
    assert cell == "cell [2]" and line.startswith("cell [2] line 1")
    assert boxes[params][1] == 256 * 256 * 4 + 256 * 4
    batch = next(i for i in boxes if i.endswith("/batch"))
    assert batch.split("/")[1] == "cell [3]" and "in make" in batch.split("/")[2]
    assert boxes[batch][1] == 300 * 64 * 4


def test_a_holders_hover_names_its_arrays_and_counts_them(session):
    (trace,) = session["shown"][0][PLOTLY_MIME]["data"]
    i = next(k for k, box in enumerate(trace["ids"]) if box.endswith("/batch"))
    hover = trace["customdata"][i][1]
    assert "300 arrays" in hover and "held as batch[299], batch[298], batch[297], ..." in hover  # the newest first
    assert trace["labels"][i] == "batch"
    assert "line 2 in make" in trace["labels"][trace["ids"].index(trace["parents"][i])]


def test_a_flag_given_a_value_is_refused_with_the_usage(session):
    taken_value, stray = session["bad"]
    assert "--map takes no value" in taken_value
    assert stray is not None and "%gpumem arrays" in stray


def _record(size: int, names: tuple[str, ...], site: str, cell: int | None, host: int = 0) -> ArrayRecord:
    return ArrayRecord.of(
        (size // 4,), "float32", {0: size} if size else {}, names=names, cell=cell, site=site, host_bytes=host
    )


def test_names_past_the_cap_are_summed_into_one_box(monkeypatch):
    monkeypatch.setattr(arrays_map, "HOLDERS", 2)
    records = [_record(400, (f"x{k}",), "cell [1] line 1", 1) for k in range(4)]
    records += [_record(4000, ("big",), "cell [1] line 1", 1)]
    nodes = {n.id: n for n in map_nodes(records)}
    line = "live/cell [1]/cell [1] line 1"
    assert nodes[line].label == "line 1" and nodes[line].nbytes == 5600 and nodes[line].arrays == 5
    assert nodes[f"{line}/big"].nbytes == 4000
    assert nodes[f"{line}/(more)"].label == "3 more names"
    assert (nodes[f"{line}/(more)"].nbytes, nodes[f"{line}/(more)"].arrays) == (1200, 3)


def test_arrays_in_host_memory_take_no_box_and_unnamed_arrays_have_one(monkeypatch):
    records = [
        _record(0, ("on_host",), "f.py:3 in g", None, host=1 << 20),
        _record(64, (), "f.py:3 in g", None),
    ]
    nodes = map_nodes(records)
    assert [n.label for n in nodes] == ["all live arrays", "outside the cells", "f.py:3 in g", NO_NAME]
    assert all(n.nbytes == 64 for n in nodes)


def test_no_device_memory_draws_nothing():
    assert map_nodes([]) == []
    assert map_nodes([_record(0, ("h",), "f.py:1", None, host=8)]) == []
