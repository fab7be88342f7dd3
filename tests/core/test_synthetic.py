"""Which readings a trace header says are made up (``core.synthetic``, docs/trace-format.md)."""

from __future__ import annotations

import json

import pytest

from jupyter_gpumem.core.synthetic import SAMPLE_FIELDS, header_fields, made_up_fields, synthetic_fields_problem
from jupyter_gpumem.core.tracefile import TraceWriter, read_trace


def test_a_real_recording_makes_up_nothing():
    assert made_up_fields({"synthetic": False}) == frozenset()
    assert made_up_fields(None) == frozenset()


def test_a_synthetic_trace_that_lists_no_fields_made_up_every_reading():
    # Test data and the shipped demo traces: every number in them is made up.
    assert made_up_fields({"synthetic": True}) == frozenset(SAMPLE_FIELDS)


def test_the_fake_world_s_recording_made_up_nvml_s_readings_only():
    header = {"synthetic": True, "synthetic_fields": ["devices", "pids_not_here"]}
    assert made_up_fields(header) == {"devices", "pids_not_here"}
    assert "cpu_arrays" not in made_up_fields(header)


def test_a_writer_says_which_fields_it_made_up_in_the_order_of_a_sample_line():
    assert header_fields(()) == {"synthetic": False}
    assert header_fields(("pids_not_here", "devices")) == {
        "synthetic": True,
        "synthetic_fields": ["devices", "pids_not_here"],
    }


DISAGREES = "header.synthetic_fields lists the made-up fields: some when synthetic is true, none when false"


@pytest.mark.parametrize(
    "header, says",
    [
        ({"synthetic": True, "synthetic_fields": "devices"}, "must be a list of sample fields (devices, jax"),
        ({"synthetic": True, "synthetic_fields": ["gpus"]}, "got ['gpus']"),
        ({"synthetic": False, "synthetic_fields": ["devices"]}, DISAGREES),
        ({"synthetic": True, "synthetic_fields": []}, DISAGREES),
    ],
)
def test_a_bad_synthetic_fields_is_named_and_counts_everything_as_made_up(header, says):
    problem = synthetic_fields_problem(header)
    assert problem == says if says is DISAGREES else says in problem
    assert made_up_fields(header) == (frozenset(SAMPLE_FIELDS) if header["synthetic"] else frozenset())


def test_a_trace_with_a_bad_synthetic_fields_is_refused_at_its_header(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"kind": "header", "format": 1, "synthetic": True, "synthetic_fields": ["gpus"]}) + "\n")
    trace = read_trace(path)
    assert trace.error.line == 1 and "header.synthetic_fields must be a list of sample fields" in str(trace.error)
    with pytest.raises(ValueError, match="header.synthetic_fields"):
        TraceWriter(tmp_path / "w.jsonl", {"synthetic": False, "synthetic_fields": ["devices"]})
    assert not (tmp_path / "w.jsonl").exists()


def test_a_trace_that_says_which_fields_are_made_up_reads_back_with_it(tmp_path):
    path = tmp_path / "t.jsonl"
    TraceWriter(path, header_fields(("devices",))).close()
    assert read_trace(path, strict=True).header["synthetic_fields"] == ["devices"]
