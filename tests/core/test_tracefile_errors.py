"""Trace files that do not fit the format: each error read whole, naming the line and the field.

A person reading a trace from someone else sees these sentences; each test reads one whole, so a
changed word, field or line number fails it. The format is docs/trace-format.md.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from jupyter_gpumem.core import readings as model
from jupyter_gpumem.core import tracefile
from jupyter_gpumem.core.readings import (
    CpuArraysReading,
    CudaPoolReading,
    DeviceReading,
    DeviceUnreadable,
    JaxDeviceReading,
    NotAvailable,
    ProcessReading,
    Sample,
)
from jupyter_gpumem.core.tracefile import Trace, TraceError, TraceWriter, read_trace, read_trace_bytes, sample_from_json

HEADER = {"kind": "header", "format": 1, "synthetic": True}
SAMPLE = {"kind": "sample", "t": 1.0, "pid": 7, "devices": [], "jax": []}
DEVICE = {"index": 0, "total_bytes": 8, "used_bytes": 3, "free_bytes": 5}


def _bytes(*lines: Any) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def _error(*lines: Any) -> str:
    """The whole error of reading these lines (a str line is written as it is), with its line."""
    error = read_trace_bytes(_bytes(*lines)).error
    assert error is not None
    return str(error)


def _sample_error(**fields: Any) -> str:
    return _error(HEADER, {**SAMPLE, **fields})


# --- the header --------------------------------------------------------------------------------


def test_a_header_that_is_not_an_object_names_what_it_is():
    assert _error([HEADER]) == "line 1: header must be an object, got a list"


def test_a_first_line_of_another_kind_says_the_header_comes_first():
    assert _error(SAMPLE) == 'line 1: the first line must be the header, {"kind": "header", ...}'


@pytest.mark.parametrize(("fmt", "shown"), [(2, "2"), (True, "True"), (None, "None"), ("1", "'1'")])
def test_a_header_of_another_format_names_the_format_it_knows(fmt, shown):
    assert _error({**HEADER, "format": fmt}) == (
        f"line 1: format must be 1, got {shown}: this reader knows format 1 only"
    )


def test_a_header_without_format_says_it_got_none():
    header = {"kind": "header", "synthetic": True}
    assert _error(header) == "line 1: format must be 1, got None: this reader knows format 1 only"


@pytest.mark.parametrize("synthetic", [None, 1, "true"])
def test_a_header_must_say_whether_it_is_synthetic_as_a_boolean(synthetic):
    assert _error({**HEADER, "synthetic": synthetic}) == "line 1: header.synthetic must be true or false"


def test_a_header_without_synthetic_is_refused():
    assert _error({"kind": "header", "format": 1}) == "line 1: header.synthetic must be true or false"


@pytest.mark.parametrize("key", ["host", "created", "tool"])
def test_a_header_text_field_of_another_type_is_named(key):
    assert _error({**HEADER, key: 5}) == f"line 1: header.{key} must be a string, got the number 5"


def test_header_text_fields_may_be_null_or_text():
    header = {**HEADER, "host": None, "created": "2026-01-01T00:00:00+00:00", "tool": None, "jax_version": "0.7.2"}
    trace = read_trace_bytes(_bytes(header, SAMPLE))
    assert (trace.error, trace.header, len(trace.samples)) == (None, header, 1)


def test_a_jax_version_that_is_not_text_is_named():
    assert (
        _error({**HEADER, "jax_version": 7}) == "line 1: header.jax_version must be a string or null, got the number 7"
    )


def test_a_jax_version_of_null_is_read():
    assert read_trace_bytes(_bytes({**HEADER, "jax_version": None})).error is None


def test_header_settings_that_are_not_an_object_are_named():
    assert _error({**HEADER, "settings": []}) == "line 1: header.settings must be an object, got a list"


@pytest.mark.parametrize(
    ("pid", "message"),
    [
        ("7", "header.pid must be an integer, got a string"),
        (-1, "header.pid must be an integer from 0 to 2**63-1, got the number -1"),
    ],
)
def test_a_header_pid_that_is_not_a_count_is_named(pid, message):
    assert _error({**HEADER, "pid": pid}) == f"line 1: {message}"


def test_header_devices_that_are_not_a_list_are_named():
    assert _error({**HEADER, "devices": {}}) == "line 1: header.devices must be a list, got an object"


HEADER_DEVICE = {"index": 0, "name": "H100", "uuid": "GPU-0", "total_bytes": 8}


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (5, "header.devices[1] must be an object, got the number 5"),
        ({**HEADER_DEVICE, "index": "0"}, "header.devices[1].index must be an integer, got a string"),
        ({k: v for k, v in HEADER_DEVICE.items() if k != "name"}, "header.devices[1].name is missing"),
        ({**HEADER_DEVICE, "uuid": None}, "header.devices[1].uuid must be a string, got null"),
        (
            {**HEADER_DEVICE, "total_bytes": -8},
            "header.devices[1].total_bytes must be an integer from 0 to 2**63-1, got the number -8",
        ),
    ],
)
def test_a_bad_header_device_is_named_by_its_place_and_field(device, message):
    assert _error({**HEADER, "devices": [HEADER_DEVICE, device]}) == f"line 1: {message}"


def test_a_header_with_its_devices_reads_whole():
    header = {**HEADER, "devices": [HEADER_DEVICE], "settings": {"preallocate": False}, "pid": 7}
    assert read_trace_bytes(_bytes(header)).header == header


def test_the_header_line_opens_with_its_kind_and_format_whatever_fields_are_given(tmp_path):
    """A reader can tell a trace, and its format, from the first bytes of the file."""
    path = tmp_path / "t.jsonl"
    TraceWriter(path, {"description": "x", "format": 7, "synthetic": True, "kind": "sample"}).close()
    assert path.read_text().startswith('{"kind":"header","format":1,"synthetic":true,')


def test_the_writer_refuses_a_bad_header_field_naming_it_and_writes_nothing(tmp_path):
    path = tmp_path / "t.jsonl"
    with pytest.raises(ValueError) as err:
        TraceWriter(path, {"synthetic": True, "host": 5})
    assert str(err.value) == "bad header: header.host must be a string, got the number 5"
    assert not path.exists()


# --- lines -------------------------------------------------------------------------------------


def test_an_empty_first_line_says_the_header_is_missing():
    assert _error("", HEADER) == "line 1: the first line must be the header, found an empty line"


def test_blank_lines_after_the_header_are_skipped():
    trace = read_trace_bytes(_bytes(HEADER, "", "   ", SAMPLE))
    assert (trace.error, len(trace.samples)) == (None, 1)


def test_a_line_that_is_not_utf8_is_named():
    assert str(read_trace_bytes(_bytes(HEADER) + b"\xff\xfe\n").error) == "line 2: not UTF-8 text"


def test_a_line_that_is_not_json_says_where_it_stops():
    assert (
        _error(HEADER, "{") == "line 2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"
    )


def test_a_line_nested_too_deeply_is_refused():
    assert _error(HEADER, "[" * 100_000) == "line 2: nested too deeply"


def test_an_integer_too_long_to_parse_is_named_as_not_json():
    message = _error(HEADER, "9" * 5000)
    assert message.startswith("line 2: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_constant_json_does_not_allow_is_named(constant):
    assert _error(HEADER, '{"kind":"event","t":' + constant + ',"name":"m"}') == (
        f"line 2: {constant} is not a number JSON allows"
    )


def test_a_line_that_is_not_an_object_is_named():
    assert _error(HEADER, [SAMPLE]) == "line 2: line must be an object, got a list"


@pytest.mark.parametrize(("kind", "shown"), [("samples", "'samples'"), (None, "None")])
def test_a_line_of_an_unknown_kind_names_the_kinds_there_are(kind, shown):
    assert _error(HEADER, {**SAMPLE, "kind": kind}) == f'line 2: "kind" must be "sample" or "event", got {shown}'


def test_a_line_without_a_kind_is_refused():
    line = {k: v for k, v in SAMPLE.items() if k != "kind"}
    assert _error(HEADER, line) == 'line 2: "kind" must be "sample" or "event", got None'


def test_a_second_header_is_refused():
    assert _error(HEADER, SAMPLE, HEADER) == "line 3: a second header: only line 1 may be a header"


def test_the_first_sample_may_have_any_time():
    trace = read_trace_bytes(_bytes(HEADER, {**SAMPLE, "t": -5.0}, {**SAMPLE, "t": -5.0}))
    assert (trace.error, [s.t for s in trace.samples]) == (None, [-5.0, -5.0])


def test_a_sample_is_compared_in_time_with_the_one_just_before_it():
    times = [1.0, 2.0, 3.0, 2.5]
    trace = read_trace_bytes(_bytes(HEADER, *({**SAMPLE, "t": t} for t in times)))
    assert [s.t for s in trace.samples] == [1.0, 2.0, 3.0]
    assert str(trace.error) == (
        "line 5: sample.t is 2.5, earlier than the sample before it (3.0): samples must be in time order "
        "(was the clock set back?); the trace is read up to here"
    )


# --- reading a whole file ----------------------------------------------------------------------


def test_an_empty_file_says_a_trace_starts_with_a_header():
    error = read_trace_bytes(b"").error
    assert (error.line, str(error)) == (1, "line 1: the file is empty: a trace starts with a header line")


def test_a_file_of_blanks_without_a_newline_is_empty():
    error = read_trace_bytes(b"  \t ").error
    assert (error.line, error.message) == (1, "the file is empty: a trace starts with a header line")


def test_blanks_after_the_last_newline_are_not_a_line():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE) + b"   ")
    assert (trace.error, trace.truncated, len(trace.samples)) == (None, False, 1)


def test_a_header_alone_reads_with_no_error():
    trace = read_trace_bytes(_bytes(HEADER))
    assert (trace.error, trace.truncated, trace.header, trace.samples, trace.events) == (None, False, HEADER, [], [])


def test_a_header_cut_mid_write_is_truncated_not_an_error():
    trace = read_trace_bytes(json.dumps(HEADER).encode()[:20])
    assert (trace.error, trace.truncated, trace.header) == (None, True, {})


def test_a_last_line_cut_mid_write_keeps_the_lines_before_it():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE) + json.dumps(SAMPLE).encode()[:30], strict=True)
    assert (trace.error, trace.truncated, len(trace.samples)) == (None, True, 1)


def test_a_last_line_without_its_newline_that_reads_is_kept():
    trace = read_trace_bytes(_bytes(HEADER) + json.dumps(SAMPLE).encode(), strict=True)
    assert (trace.error, trace.truncated, len(trace.samples)) == (None, False, 1)


def test_reading_stops_at_the_first_bad_line():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE, "x", {**SAMPLE, "t": 2.0}, "y"))
    assert (str(trace.error), len(trace.samples), trace.truncated) == (
        "line 3: not valid JSON (Expecting value at column 1)",
        1,
        False,
    )


def test_a_bad_line_error_holds_the_trace_read_before_it():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE, "x"))
    assert trace.error.partial is trace
    assert (trace.error.line, trace.error.message) == (3, "not valid JSON (Expecting value at column 1)")


def test_strict_reading_raises_the_error_of_an_empty_file():
    with pytest.raises(TraceError) as info:
        read_trace_bytes(b"", strict=True)
    assert (info.value.line, info.value.message, info.value.partial.header) == (
        1,
        "the file is empty: a trace starts with a header line",
        {},
    )


def test_a_trace_without_a_readable_header_is_not_called_synthetic():
    assert Trace(header={}).synthetic is False


class _CountingReader:
    """The opened trace, counting the bytes its lines hand over."""

    def __init__(self, fh: Any):
        self.fh, self.bytes_read = fh, 0

    def readline(self, size: int = -1) -> bytes:
        line = self.fh.readline(size)
        self.bytes_read += len(line)
        return line

    def __enter__(self) -> _CountingReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.fh.close()


def _grows_once_opened(monkeypatch: pytest.MonkeyPatch, path: Any, more: bytes) -> list[_CountingReader]:
    """Makes read_trace's open append ``more`` to ``path`` just after the size was checked, as a
    recording still writing does; returns the readers opened, to count what they read."""
    real_open = tracefile.open_regular_for_reading
    opened: list[_CountingReader] = []

    def open_then_grow(*args: Any, **kwargs: Any) -> _CountingReader:
        reader = _CountingReader(real_open(*args, **kwargs))
        with open(path, "ab") as fh:
            fh.write(more)
        opened.append(reader)
        return reader

    monkeypatch.setattr(tracefile, "open_regular_for_reading", open_then_grow)
    return opened


def test_a_file_that_grows_past_the_limit_while_read_stops_there_with_an_error(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_bytes(HEADER, SAMPLE))
    limit = path.stat().st_size
    _grows_once_opened(monkeypatch, path, _bytes({**SAMPLE, "t": 2.0}))
    trace = read_trace(path, max_bytes=limit)
    assert (len(trace.samples), trace.error.partial) == (1, trace)
    assert str(trace.error) == f"line 3: the file grew past the limit of {limit:,} bytes while it was read"


def test_a_file_that_grows_while_read_is_read_no_further_than_one_byte_past_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_bytes(HEADER, SAMPLE))
    limit = path.stat().st_size
    opened = _grows_once_opened(monkeypatch, path, _bytes({**SAMPLE, "t": 2.0}) * 100)
    read_trace(path, max_bytes=limit)
    assert opened[0].bytes_read == limit + 1


def test_a_file_that_grows_by_one_byte_while_read_is_stopped_at_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_bytes(HEADER, SAMPLE))
    limit = path.stat().st_size
    _grows_once_opened(monkeypatch, path, b" ")
    trace = read_trace(path, max_bytes=limit)
    assert (trace.error.line, len(trace.samples)) == (3, 1)


def test_a_trace_named_by_a_symbolic_link_is_read_from_the_file_it_names(tmp_path):
    (tmp_path / "t.jsonl").write_bytes(_bytes(HEADER, SAMPLE))
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "t.jsonl")
    trace = read_trace(tmp_path / "link.jsonl", strict=True)
    assert (trace.header, len(trace.samples)) == (HEADER, 1)


def test_a_writer_given_an_open_file_writes_there_and_creates_nothing_at_its_path(tmp_path):
    out = io.StringIO()
    writer = TraceWriter(tmp_path / "named.jsonl", {"synthetic": True}, file=out)
    assert json.loads(out.getvalue()) == writer.header
    assert not (tmp_path / "named.jsonl").exists()


def test_a_file_exactly_at_the_limit_is_read_whole(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(_bytes(HEADER, SAMPLE))
    trace = read_trace(path, max_bytes=path.stat().st_size, strict=True)
    assert (trace.error, len(trace.samples)) == (None, 1)


def test_a_bad_last_line_with_its_newline_is_an_error_not_a_cut():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE, {**SAMPLE, "pid": "7"}))
    assert (str(trace.error), trace.truncated) == ("line 3: sample.pid must be an integer, got a string", False)


def test_a_bad_line_cut_mid_write_is_truncated_not_an_error():
    trace = read_trace_bytes(_bytes(HEADER, SAMPLE) + b'{"kind": "sample", "t": 2.0, "pid": "7"}')
    assert (trace.error, trace.truncated, len(trace.samples)) == (None, True, 1)


# --- samples -----------------------------------------------------------------------------------


def test_a_sample_that_is_not_an_object_is_named():
    with pytest.raises(TraceError) as info:
        sample_from_json([])
    assert (info.value.line, info.value.message) == (0, "sample must be an object, got a list")


def test_a_sample_given_as_a_python_value_of_another_type_names_that_type():
    with pytest.raises(TraceError) as info:
        sample_from_json(("sample", 1.0))
    assert info.value.message == "sample must be an object, got tuple"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"t": None}, "sample.t must be a number, got null"),
        ({"t": True}, "sample.t must be a number, got a boolean"),
        ({"t": 2**63}, "sample.t must be a finite number of seconds, got a huge number"),
        ({"t": -(2**63)}, "sample.t must be a finite number of seconds, got a huge number"),
        ({"pid": -1}, "sample.pid must be an integer from 0 to 2**63-1, got the number -1"),
        ({"pid": 2**63}, "sample.pid must be an integer from 0 to 2**63-1, got the number 9223372036854775808"),
        ({"devices": {"na": "no_driver"}}, 'sample.devices must be {"na": code, "reason": text} with two strings'),
        ({"devices": 5}, "sample.devices must be a list, got the number 5"),
        ({"devices": [DEVICE, 5]}, "devices[1] must be an object, got the number 5"),
        ({"jax": {"na": "not_started"}}, 'sample.jax must be {"na": code, "reason": text} with two strings'),
        ({"jax": "gpu"}, "sample.jax must be a list, got a string"),
        ({"jax": [{"id": 0, "platform": "gpu"}, 5]}, "jax[1] must be an object, got the number 5"),
        ({"pids_not_here": 5}, "sample.pids_not_here must be a list, got the number 5"),
        ({"pids_not_here": [3, "4"]}, "sample.pids_not_here[1] must be an integer, got a string"),
        ({"cpu_arrays": []}, "sample.cpu_arrays must be an object, got a list"),
        (
            {"cpu_arrays": {"na": "error", "reason": 5}},
            'sample.cpu_arrays must be {"na": code, "reason": text} with two strings',
        ),
        ({"cpu_arrays": {"arrays": 2}}, "sample.cpu_arrays.bytes is missing"),
        ({"cpu_arrays": {"bytes": 5}}, "sample.cpu_arrays.arrays is missing"),
    ],
)
def test_a_bad_sample_field_is_named_with_what_it_got(fields, message):
    assert _sample_error(**fields) == f"line 2: {message}"


def test_a_time_of_infinity_written_as_a_long_exponent_is_refused():
    assert _error(HEADER, '{"kind":"event","t":1e999,"name":"m"}') == "line 2: event.t must be a finite number, got inf"


def test_the_largest_time_and_pid_are_read():
    trace = read_trace_bytes(_bytes(HEADER, {**SAMPLE, "t": 2**63 - 1, "pid": 2**63 - 1}), strict=True)
    assert (trace.samples[0].t, trace.samples[0].pid) == (float(2**63 - 1), 2**63 - 1)


@pytest.mark.parametrize("missing", ["devices", "jax"])
def test_a_sample_without_devices_or_jax_says_both_are_required(missing):
    line = {k: v for k, v in SAMPLE.items() if k != missing}
    assert _error(HEADER, line) == "line 2: sample.devices and sample.jax are both required"


def test_a_sample_without_its_readings_reads_them_as_not_available():
    line = {
        **SAMPLE,
        "devices": {"na": "no_driver", "reason": "synthetic"},
        "jax": {"na": "not_started", "reason": "synthetic"},
    }
    sample = sample_from_json(line)
    assert (sample.devices, sample.jax) == (
        NotAvailable("no_driver", "synthetic"),
        NotAvailable("not_started", "synthetic"),
    )


def test_pids_not_here_and_live_arrays_read_back():
    sample = sample_from_json({**SAMPLE, "pids_not_here": [9, 3, 9], "cpu_arrays": {"bytes": 64, "arrays": 2}})
    assert (sample.pids_not_here, sample.cpu_arrays) == (frozenset({3, 9}), CpuArraysReading(64, 2))


def test_a_sample_without_pids_not_here_matches_pids_as_they_are():
    assert sample_from_json(SAMPLE) == Sample(1.0, 7, (), (), pids_not_here=None, cpu_arrays=None)


# --- devices -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ({"total_bytes": 8}, "devices[0].index is missing"),
        ({**DEVICE, "index": True}, "devices[0].index must be an integer, got a boolean"),
        ({**DEVICE, "index": -1}, "devices[0].index must be an integer from 0 to 2**63-1, got the number -1"),
        ({**DEVICE, "uuid": 1}, "devices[0].uuid must be a string, got the number 1"),
        ({**DEVICE, "unreadable": "lost"}, "devices[0].unreadable must be a not-available value"),
        (
            {**DEVICE, "unreadable": {"na": "gpu_lost"}},
            'devices[0].unreadable must be {"na": code, "reason": text} with two strings',
        ),
        ({"index": 0, "used_bytes": 3, "free_bytes": 5}, "devices[0].total_bytes is missing"),
        ({"index": 0, "total_bytes": 8, "free_bytes": 5}, "devices[0].used_bytes is missing"),
        ({"index": 0, "total_bytes": 8, "used_bytes": 3}, "devices[0].free_bytes is missing"),
        ({**DEVICE, "processes": [{"used_bytes": 1}]}, "devices[0].processes[0].pid is missing"),
        (
            {**DEVICE, "processes": [{"pid": 1}, {"pid": -1}]},
            "devices[0].processes[1].pid must be an integer from 0 to 2**63-1, got the number -1",
        ),
        (
            {**DEVICE, "processes": [{"pid": 1, "user": 0}]},
            "devices[0].processes[0].user must be a string, got the number 0",
        ),
        ({**DEVICE, "reserved_bytes": "1"}, "devices[0].reserved_bytes must be an integer, got a string"),
        (
            {**DEVICE, "reserved_bytes": {"na": 1, "reason": "x"}},
            'devices[0].reserved_bytes must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**DEVICE, "utilization_percent": 1.5},
            "devices[0].utilization_percent must be an integer, got the number 1.5",
        ),
        (
            {**DEVICE, "display_active": 1},
            "devices[0].display_active must be true, false or a not-available value, got the number 1",
        ),
        (
            {**DEVICE, "mig_mode": {"na": "not_supported", "reason": None}},
            'devices[0].mig_mode must be {"na": code, "reason": text} with two strings',
        ),
        (
            {**DEVICE, "mig_mode": "off"},
            "devices[0].mig_mode must be true, false or a not-available value, got a string",
        ),
    ],
)
def test_a_bad_device_field_is_named_with_what_it_got(device, message):
    assert _sample_error(devices=[device]) == f"line 2: {message}"


def test_an_unreadable_device_reads_with_its_name_uuid_and_why():
    device = {"index": 2, "name": "A100", "uuid": "GPU-2", "unreadable": {"na": "gpu_lost", "reason": "synthetic"}}
    assert sample_from_json({**SAMPLE, "devices": [device]}).devices == (
        DeviceUnreadable(2, NotAvailable("gpu_lost", "synthetic"), name="A100", uuid="GPU-2"),
    )


def test_an_unreadable_device_without_name_or_uuid_reads_with_empty_ones():
    device = {"index": 2, "unreadable": {"na": "gpu_lost", "reason": "synthetic"}}
    assert sample_from_json({**SAMPLE, "devices": [device]}).devices == (
        DeviceUnreadable(2, NotAvailable("gpu_lost", "synthetic"), name="", uuid=""),
    )


def test_a_device_reads_back_every_field_as_written():
    device = {
        **DEVICE,
        "reserved_bytes": 1,
        "utilization_percent": 40,
        "display_active": True,
        "mig_mode": {"na": "not_supported", "reason": "synthetic"},
        "processes": [
            {"pid": 4, "used_bytes": {"na": "pids_hidden", "reason": "synthetic"}, "name": None, "user": "ana"},
            {"pid": 5, "used_bytes": 2, "name": "python", "user": None},
        ],
    }
    assert sample_from_json({**SAMPLE, "devices": [device]}).devices == (
        DeviceReading(
            0,
            "",
            "",
            8,
            3,
            5,
            reserved_bytes=1,
            utilization_percent=40,
            display_active=True,
            mig_mode=NotAvailable("not_supported", "synthetic"),
            processes=(
                ProcessReading(4, NotAvailable("pids_hidden", "synthetic"), name=None, user="ana"),
                ProcessReading(5, 2, name="python", user=None),
            ),
        ),
    )


def test_a_device_without_optional_fields_reads_with_the_readings_defaults():
    device = sample_from_json({**SAMPLE, "devices": [DEVICE]}).devices[0]
    defaults = DeviceReading(0, "", "", 0, 0, 0)
    assert (device.reserved_bytes, device.utilization_percent, device.display_active, device.mig_mode) == (
        defaults.reserved_bytes,
        defaults.utilization_percent,
        defaults.display_active,
        defaults.mig_mode,
    )


def test_a_process_without_its_bytes_reads_them_as_not_recorded():
    device = {**DEVICE, "processes": [{"pid": 4}]}
    assert sample_from_json({**SAMPLE, "devices": [device]}).devices[0].processes == (
        ProcessReading(4, NotAvailable(model.NOT_SUPPORTED, "not recorded"), name=None, user=None),
    )


# --- JAX devices -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ({"platform": "gpu"}, "jax[0].id is missing"),
        ({"id": 0}, "jax[0].platform is missing"),
        ({"id": -1, "platform": "gpu"}, "jax[0].id must be an integer from 0 to 2**63-1, got the number -1"),
        ({"id": 0, "platform": "gpu", "kind": 5}, "jax[0].kind must be a string, got the number 5"),
        ({"id": 0, "platform": "gpu", "nvml_index": "0"}, "jax[0].nvml_index must be an integer, got a string"),
        (
            {"id": 0, "platform": "gpu", "memory_stats": {"bytes_in_use": -(2**63)}},
            f"jax[0].memory_stats['bytes_in_use'] must be a number no larger than 2**63-1, got the number {-(2**63)}",
        ),
        (
            {"id": 0, "platform": "gpu", "memory_stats": {"x": [1]}},
            "jax[0].memory_stats['x'] must be a number no larger than 2**63-1, got a list",
        ),
        (
            {"id": 0, "platform": "gpu", "cuda_pool": {"reserved_bytes": 1}},
            "jax[0].cuda_pool.reserved_high_bytes is missing",
        ),
        (
            {"id": 0, "platform": "gpu", "cuda_pool": {"reserved_bytes": 1, "reserved_high_bytes": 2}},
            "jax[0].cuda_pool.used_bytes is missing",
        ),
        (
            {"id": 0, "platform": "gpu", "cuda_pool": {"reserved_bytes": 1, "reserved_high_bytes": 2, "used_bytes": 3}},
            "jax[0].cuda_pool.used_high_bytes is missing",
        ),
    ],
)
def test_a_bad_jax_device_field_is_named_with_what_it_got(device, message):
    assert _sample_error(jax=[device]) == f"line 2: {message}"


def test_memory_stats_holding_infinity_written_as_a_long_exponent_are_refused():
    line = '{"kind":"sample","t":1,"pid":7,"devices":[],"jax":[{"id":0,"platform":"gpu","memory_stats":{"x":1e999}}]}'
    assert _error(HEADER, line) == (
        "line 2: jax[0].memory_stats['x'] must be a number no larger than 2**63-1, got the number inf"
    )


@pytest.mark.parametrize("good", [True, None, "bfc", 5, 0.5], ids=["flag", "null", "text", "count", "fraction"])
def test_memory_stats_are_each_checked_after_a_good_one(good):
    device = {"id": 0, "platform": "gpu", "memory_stats": {"good": good, "bad": 2**63}}
    assert _sample_error(jax=[device]) == (
        "line 2: jax[0].memory_stats['bad'] must be a number no larger than 2**63-1, got the number 9223372036854775808"
    )


def test_a_jax_device_with_only_its_id_and_platform_reads_with_defaults():
    device = sample_from_json({**SAMPLE, "jax": [{"id": 3, "platform": "cpu"}]}).jax[0]
    assert device == JaxDeviceReading(3, "cpu", "", None, model.normalise_stats(None, "unknown", "cpu"), None)


def test_a_jax_device_reads_back_every_field_as_written():
    stats = {"bytes_in_use": 5, "bytes_limit": 10, "flag": True, "rate": 0.5, "low": -(2**63) + 1}
    device = {
        "id": 1,
        "platform": "gpu",
        "kind": "H100",
        "nvml_index": None,
        "allocator": "cuda_async",
        "memory_stats": stats,
        "stats_na": None,
        "cuda_pool": {"reserved_bytes": 1, "reserved_high_bytes": 2, "used_bytes": 3, "used_high_bytes": 4},
    }
    assert sample_from_json({**SAMPLE, "jax": [device]}).jax[0] == JaxDeviceReading(
        1,
        "gpu",
        "H100",
        None,
        model.normalise_stats(stats, "cuda_async", "gpu"),
        CudaPoolReading(1, 2, 3, 4),
    )


def test_a_jax_device_with_its_gpu_index_reads_it():
    device = {"id": 1, "platform": "gpu", "nvml_index": 2, "cuda_pool": None}
    assert sample_from_json({**SAMPLE, "jax": [device]}).jax[0].nvml_index == 2
