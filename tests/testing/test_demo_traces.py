"""The demo traces that ship inside the package: found by a bare name, each one synthetic, and
drawn by ``%gpumem monitor --replay NAME`` wherever the package is installed."""

from __future__ import annotations

import pytest

from jupyter_gpumem import demo_traces
from jupyter_gpumem.core.errors import GpumemError
from jupyter_gpumem.core.magic_args import MagicUsageError
from jupyter_gpumem.core.tracefile import read_trace
from jupyter_gpumem.kernel.magics import parse_line, run_command
from jupyter_gpumem.monitor.widget import Monitor

SHIPPED = [
    "synthetic_bfc_defragment",
    "synthetic_bfc_growth_fragmenting",
    "synthetic_bfc_prealloc",
    "synthetic_cuda_async",
    "synthetic_two_kernels",
]


def test_the_package_ships_the_five_demo_traces():
    assert demo_traces.names() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_trace_says_it_is_synthetic_and_has_samples(name):
    trace = read_trace(demo_traces.path(name), strict=True)
    assert trace.synthetic and trace.samples


@pytest.mark.parametrize("given", ["synthetic_cuda_async", "synthetic_cuda_async.jsonl"])
def test_a_bare_name_resolves_to_the_shipped_file(given):
    assert demo_traces.resolve(given) == str(demo_traces.FOLDER / "synthetic_cuda_async.jsonl")


def test_a_file_of_that_name_in_the_working_folder_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "synthetic_cuda_async.jsonl").write_text("")
    assert demo_traces.resolve("synthetic_cuda_async.jsonl") == "synthetic_cuda_async.jsonl"


def test_a_path_with_a_folder_is_never_taken_for_a_name():
    assert demo_traces.resolve("elsewhere/synthetic_cuda_async.jsonl") == "elsewhere/synthetic_cuda_async.jsonl"


def test_an_unknown_name_is_refused_with_the_nearest_and_every_shipped_name():
    with pytest.raises(GpumemError) as err:
        demo_traces.path("synthetic_cuda_asnyc")
    assert str(err.value) == (
        "no demo trace named 'synthetic_cuda_asnyc' (did you mean 'synthetic_cuda_async'?); "
        "the package ships: " + ", ".join(SHIPPED)
    )


def test_the_monitor_replays_a_shipped_trace_by_its_bare_name():
    monitor = Monitor(replay="synthetic_bfc_growth_fragmenting")
    try:
        assert monitor.labels == ["replay", "synthetic"]
        assert monitor.replay_path == "synthetic_bfc_growth_fragmenting"
    finally:
        monitor.close()


def test_replay_of_an_unknown_name_names_the_shipped_traces():
    with pytest.raises(MagicUsageError) as err:
        run_command(parse_line("monitor --replay no_such_trace"))
    assert str(err.value).endswith("or the name of one the package ships: " + ", ".join(SHIPPED))
