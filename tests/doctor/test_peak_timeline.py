"""``%gpumem peak``'s picture: bytes live over a program's order, stacked by source line, the
peak marked. Real CPU programs, compiled with XLA's dump on in a fresh interpreter (one with 8
CPU devices for the mesh), never run; the drawing is checked against the text report's own
reading of the same dump, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from child_env import ipython_dir, pythonpath

from jupyter_gpumem.doctor import peak_timeline as timeline_module
from jupyter_gpumem.doctor.peak_buffers import parse_dump, peak_by_line
from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME, peak_figure
from jupyter_gpumem.doctor.peak_timeline import peak_timeline

PROGRAMS = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from jupyter_gpumem.sources import jax_arrays

    def layer(h, w):
        return jnp.tanh(h @ w), None

    def scan_loss(w, x):
        h, _ = jax.lax.scan(layer, x, w)
        return (h ** 2).sum()

    def mlp(params, x):
        for w in params:
            x = jnp.tanh(x @ w)
        return (x ** 2).sum()

    out = {}
    if len(jax.devices()) == 8:  # a mesh: the batch split over 8 devices, the weights replicated
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        mesh = Mesh(jax.devices(), ("data",))
        x = jax.device_put(jnp.ones((128, 256)), NamedSharding(mesh, P("data")))
        params = [jax.device_put(jnp.eye(256), NamedSharding(mesh, P())) for _ in range(4)]
        programs = {"mesh_mlp_grad": (jax.jit(jax.grad(mlp)), (params, x))}
    else:
        programs = {
            "scan_grad": (jax.grad(scan_loss), (jnp.ones((16, 256, 256)), jnp.ones((128, 256)))),
            "mlp_grad": (jax.jit(jax.grad(mlp)), ([jnp.eye(256) for _ in range(6)], jnp.ones((128, 256)))),
        }
    for name, (f, args) in programs.items():
        dump = jax_arrays.compile_with_dump(f, args, {})
        out[name] = {"ba": dump.buffer_assignment, "hlo": dump.hlo, "devices": dump.memory.devices}
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jupyter_gpumem")
    shell.user_ns.update(step=programs[name][0], args=programs[name][1])
    with capture_output() as shown:
        shell.run_line_magic("gpumem", "peak step(*args)")
    out["shown"] = [dict(o.data) for o in shown.outputs]
    json.dump(out, sys.stdout)
    """
)


def _compiled(devices: int) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=pythonpath(), **ipython_dir())
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    done = subprocess.run(
        [sys.executable, "-c", PROGRAMS], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def one_device() -> dict:
    return _compiled(1)


@pytest.fixture(scope="module")
def mesh() -> dict:
    return _compiled(8)


def _at_peak(t) -> dict[str, int]:
    j = t.steps.index(t.peak_step)
    return {line: t.live[i][j] for i, line in enumerate(t.lines) if t.live[i][j]}


@pytest.mark.parametrize("name", ["scan_grad", "mlp_grad"])
def test_the_drawn_peak_is_the_reports_peak_byte_for_byte(one_device, name):
    dump = one_device[name]
    t = peak_timeline(dump["ba"], dump["hlo"])
    assert t.peak_bytes == parse_dump(dump["ba"], dump["hlo"]).peak_bytes
    assert max(t.totals()) == t.peak_bytes == t.totals()[t.steps.index(t.peak_step)]


@pytest.mark.parametrize("name", ["scan_grad", "mlp_grad"])
def test_each_line_at_the_drawn_peak_holds_what_the_report_lists_for_it(one_device, name):
    dump = one_device[name]
    t = peak_timeline(dump["ba"], dump["hlo"])
    listed = {x.where: x.size for x in peak_by_line(parse_dump(dump["ba"], dump["hlo"]))}
    assert _at_peak(t) == listed


def test_the_bands_rise_to_the_peak_and_fall_after_it(one_device):
    # The gradient of an unrolled MLP keeps each layer's activations for the backward pass.
    t = peak_timeline(one_device["mlp_grad"]["ba"], one_device["mlp_grad"]["hlo"])
    totals = t.totals()
    assert totals[0] < t.peak_bytes and totals[-1] < t.peak_bytes
    assert 0 < t.peak_step < t.length - 1 and len(t.steps) > 10


def test_the_figure_stacks_a_band_per_line_marks_the_peak_and_names_the_values(one_device):
    dump = one_device["mlp_grad"]
    t = peak_timeline(dump["ba"], dump["hlo"])
    figure = peak_figure(t, "step(params, x)")
    bands = [d for d in figure["data"] if d.get("stackgroup")]
    assert [b["name"] for b in bands] == list(t.lines)
    assert all(b["line"]["shape"] == "hv" and b["x"] == list(t.steps) for b in bands)
    (marker,) = figure["layout"]["shapes"]
    assert marker["x0"] == marker["x1"] == t.peak_step
    (point,) = [d for d in figure["data"] if d["name"] == "peak"]
    assert point["x"] == [t.peak_step]
    # The values live at the peak, with shape and dtype, what made them and where.
    assert "f32[128,256]" in point["hovertemplate"] and "in mlp" in point["hovertemplate"]
    mlp_band = next(b for b in bands if "in mlp" in b["name"])
    assert "f32[128,256]" in mlp_band["hovertemplate"] and "%{y:.3f}" in mlp_band["hovertemplate"]


def test_many_steps_are_thinned_and_the_peak_step_stays(one_device, monkeypatch):
    dump = one_device["scan_grad"]
    whole = peak_timeline(dump["ba"], dump["hlo"])
    monkeypatch.setattr(timeline_module, "MAX_STEPS", 12)
    thin = peak_timeline(dump["ba"], dump["hlo"])
    assert len(thin.steps) <= 12 < len(whole.steps)
    assert thin.peak_step in thin.steps and max(thin.totals()) == whole.peak_bytes


def test_a_dump_without_live_ranges_draws_nothing(one_device):
    text = one_device["mlp_grad"]["ba"]
    kept, inside = [], False
    for line in text.splitlines():
        inside = line.strip() == "BufferLiveRange:" or (inside and ":" in line and line.startswith(" "))
        if not inside:
            kept.append(line)
    assert "BufferLiveRange:" in text and "BufferLiveRange:" not in "\n".join(kept)
    assert peak_timeline("\n".join(kept)) is None


def test_on_a_mesh_the_picture_is_one_devices_program(mesh):
    dump = mesh["mesh_mlp_grad"]
    assert dump["devices"] == 8
    t = peak_timeline(dump["ba"], dump["hlo"])
    assert t.peak_bytes == parse_dump(dump["ba"], dump["hlo"]).peak_bytes
    values = [v for vs in t.at_peak.values() for v in vs]
    assert any(v.shape == "f32[16,256]" for v in values)  # a batch of 128 split 8 ways
    assert not any(v.shape == "f32[128,256]" for v in values)
    figure = mesh["shown"][0][PLOTLY_MIME]
    assert "each of 8 devices runs the same program" in figure["layout"]["title"]["text"]


def test_the_command_shows_the_picture_then_the_report_in_words(one_device):
    first, second = one_device["shown"]
    assert set(first) == {PLOTLY_MIME, "text/plain"}
    assert "bytes live over the program" in first["text/plain"]
    assert second["text/plain"].startswith("step(*args): peak ")
    assert "Live at the peak, by source line" in second["text/plain"]
    names = [d["name"] for d in first[PLOTLY_MIME]["data"]]
    assert names[-1] == "peak" and len(names) >= 3  # the bands, then the peak's point
