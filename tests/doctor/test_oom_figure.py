"""The OOM report's picture: where the failing jitted call is found in the traceback, its program
is drawn under the report as ``%gpumem peak`` draws one (bytes live over its order by source
line, the peak marked); where no call is found, the report stands alone. Real out-of-memory
errors on CPU JAX (a 256 TiB output) in an IPython shell in a fresh interpreter."""

from __future__ import annotations

import pytest
from ipython_script import run_script

from jupyter_gpumem.doctor.peak_figure import PLOTLY_MIME

SESSION = r"""
from IPython.utils.capture import capture_output
cell('''import jax, jax.numpy as jnp


def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return jnp.zeros((2**46,), jnp.float32) + (x ** 2).sum()


step = jax.jit(loss)
params = [jnp.eye(64) for _ in range(3)]
batch = jnp.ones((32, 64))''')
for name, code in [
    ("jitted", "out = step(params, batch).block_until_ready()"),  # CPU dispatches it: the error comes here
    ("no_call", "raise RuntimeError('RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1024 bytes.')"),
]:
    with capture_output() as shown:
        ip.run_cell(code, store_history=True)
    out[name] = [dict(o.data) for o in shown.outputs]
import jax
from jupyter_gpumem.doctor import oom_peak
out["loss_lines"] = oom_peak._lowered_lines(ip.user_ns["step"], (ip.user_ns["params"], ip.user_ns["batch"]), {})
oom_peak.FIGURE_MAX_LINES = out["loss_lines"] - 1  # one line more than allowed
with capture_output() as shown:
    ip.run_cell("out = step(params, batch).block_until_ready()", store_history=True)
out["too_long"] = [dict(o.data) for o in shown.outputs]
"""


@pytest.fixture(scope="module")
def session() -> dict:
    return run_script(SESSION)


def test_the_failing_calls_program_is_drawn_under_the_report(session):
    report, picture = session["jitted"]
    assert "JAX ran out of memory" in report["text/plain"]
    assert set(picture) == {PLOTLY_MIME, "text/plain"}
    assert "the failing call's program" in picture["text/plain"]
    figure = picture[PLOTLY_MIME]
    assert figure["layout"]["title"]["text"].startswith("the failing call loss (cell [2] line 1)")


def test_the_drawn_peak_holds_the_value_that_could_not_fit_on_its_line(session):
    figure = session["jitted"][1][PLOTLY_MIME]
    bands = [d for d in figure["data"] if d.get("stackgroup")]
    (blow,) = [b for b in bands if b["name"] == "cell [1] line 7 in loss"]
    assert max(blow["y"]) == 2**18 and figure["layout"]["yaxis"]["title"]["text"] == "live (GiB)"  # 256 TiB
    (point,) = [d for d in figure["data"] if d["name"] == "peak"]
    assert point["hovertemplate"].startswith("<b>peak 256.00 TiB at step ")


def test_a_program_longer_than_the_limit_is_not_compiled_again_for_a_picture(session):
    """The picture's compile runs unasked after the error: a failing program whose lowered
    module is longer than ``FIGURE_MAX_LINES`` gets the report alone."""
    assert session["loss_lines"] > 10
    (report,) = session["too_long"]
    assert "JAX ran out of memory" in report["text/plain"] and PLOTLY_MIME not in report


def test_without_a_failing_call_found_the_report_stands_alone(session):
    (report,) = session["no_call"]
    assert "JAX ran out of memory" in report["text/plain"] and PLOTLY_MIME not in report
