"""What was live at a program's peak, read from XLA's texts (doctor/peak_buffers.py).

The OOM texts follow ``BufferAssignment::ToVerboseString`` (openxla/xla
xla/service/buffer_assignment.cc at bfbc776e6233f97b5fb13bbc6022834f61646b62): the stats, then
"Peak buffers:" with "\\n\\tBuffer N:\\n\\t\\tSize: ", "\\n\\t\\tOperator: " (``OpMetadataToString``),
"\\n\\t\\tXLA Label: ...\\n\\t\\tShape: ..." or, for an entry parameter, "Entry Parameter Subshape:",
and "==========================". A recorded excerpt (jax#13428) is in tests/data/peak_buffers;
the others here are synthetic and say so. Pastes of the same format: jax#13428, t5x#870 (a
buffer without an Operator line), alpa#759.
"""

from __future__ import annotations

import html
from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_gpumem import doctor
from jupyter_gpumem.core.readings import NotAvailable, Sample
from jupyter_gpumem.doctor import peak_buffers, peak_fixes
from jupyter_gpumem.doctor.oom_text import OomError, xla_human_bytes
from jupyter_gpumem.doctor.peak_buffers import (
    ARGUMENT,
    OUTPUT_OR_TEMPORARY,
    PeakBuffer,
    ProgramPeak,
    human_bytes,
    parse_oom_text,
    peak_by_line,
)

DATA = Path(__file__).parents[1] / "data" / "peak_buffers"
MiB = 1 << 20
CELL_FILE = "/tmp/ipykernel_4242/1234567890.py"  # ipykernel's hashed cell file name

# synthetic: written in XLA's exact layout (tabs), for a notebook cell's file (CELL_FILE)
SYNTHETIC_CELL_OOM = (DATA / "synthetic_cell_oom.txt").read_text()


def test_human_readable_sizes_read_as_xla_prints_them():
    # tsl::strings::HumanReadableNumBytes: "%.2f" with binary units, "B" under 1 KiB
    assert human_bytes("6.00MiB") == 6 * MiB
    assert human_bytes("384.0KiB") == 384 * 1024
    assert human_bytes("4B") == 4
    assert human_bytes("         0B") == 0
    assert human_bytes("no size") is None


@pytest.mark.parametrize("printed", ["1.5MiB", "1024B", "12GiB", "0.50GiB"])
def test_a_size_xla_never_prints_is_read_by_neither_reader(printed):
    """One reader of XLA's sizes (``oom_text.read_xla_size``) serves the report's request and the
    peak buffers: a size HumanReadableNumBytes never prints (one decimal for MiB, 1024 bytes as
    "B", no decimals, 0.50GiB for what it prints as 512.00MiB) is no size to either. Before, the
    peak buffers' own reader took each of these as a size."""
    assert human_bytes(f"Size: {printed}") is None
    assert xla_human_bytes(printed) is None


@pytest.mark.parametrize("printed", ["0B", "1023B", "1.5KiB", "14.16GiB", "1.12MiB", "1024.00MiB", "256.00TiB"])
def test_a_peak_buffers_size_is_the_printed_value_inside_the_interval_xla_rounds_into(printed):
    low, high = xla_human_bytes(printed)
    assert low <= human_bytes(f"\t\tSize: {printed}") <= high


def test_recorded_jax_13428_text_gives_stats_and_both_buffers():
    peak = parse_oom_text((DATA / "jax_13428_excerpt.txt").read_text())
    assert (peak.argument_bytes, peak.output_bytes, peak.temp_bytes, peak.peak_bytes) == (6 * MiB, 6 * MiB, 0, 12 * MiB)
    first, second = peak.buffers
    assert first == PeakBuffer(
        6 * MiB,
        OUTPUT_OR_TEMPORARY,
        "jit(concatenate)/jit(main)/concatenate[dimension=0]",
        "/media/gccrcv/Data/Opensources/multinerf/internal/models.py",
        689,
        "",
        "concatenate",
        "f32[4096,128,3]",
    )
    assert first.operation == "concatenate"
    assert second == PeakBuffer(384 * 1024, ARGUMENT, label="parameter", shape="f32[256,128,3]")


def test_recorded_jax_13428_text_by_line_names_the_file_line_and_share():
    peak = parse_oom_text((DATA / "jax_13428_excerpt.txt").read_text())
    lines = peak_by_line(peak)
    assert [(line.where, line.size) for line in lines] == [("models.py:689", 6 * MiB), ("(arguments)", 384 * 1024)]
    assert lines[0].share == 0.5  # of the 12 MiB total allocation
    assert lines[0].ops == "concatenate f32[4096,128,3]"


def test_text_without_the_debugging_section_gives_none():
    assert parse_oom_text("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.") is None


def test_buffer_without_an_operator_line_is_kept_with_its_label_and_shape():
    # synthetic; t5x#870 shows such a buffer (op_name empty: ToVerboseString prints no Operator line)
    peak = parse_oom_text(SYNTHETIC_CELL_OOM)
    last = peak.buffers[-1]
    assert (last.size, last.op_name, last.label, last.shape) == (256 * MiB, "", "fusion", "bf16[8192,16384]")
    assert peak_buffers.where_made(last, {}) == peak_buffers.NO_SOURCE


def test_a_cells_file_is_named_as_the_cell_and_its_buffers_are_summed():
    # synthetic: two buffers from line 4 of the cell run as [7]
    peak = parse_oom_text(SYNTHETIC_CELL_OOM)
    top = peak_by_line(peak, {CELL_FILE: 7})[0]
    assert (top.where, top.size, top.share) == ("cell [7] line 4", 3 << 30, 0.75)
    assert top.roles == "output or temporary 3.00 GiB"
    assert top.ops == "tanh f32[64,4096,2048]; dot_general f32[32,4096,2048]"


def test_entry_parameter_is_an_argument_and_others_cannot_be_told_apart():
    peak = parse_oom_text(SYNTHETIC_CELL_OOM)
    assert [b.role for b in peak.buffers] == [OUTPUT_OR_TEMPORARY, OUTPUT_OR_TEMPORARY, ARGUMENT, OUTPUT_OR_TEMPORARY]


class JaxRuntimeError(RuntimeError):
    """The name JAX's runtime errors carry (jaxlib 0.10.2's ``JaxRuntimeError``)."""


def test_oom_report_shows_the_peak_by_line_before_its_tables():
    sample = Sample(
        t=0.0,
        pid=1,
        devices=NotAvailable("no_nvml", "synthetic: no NVML"),
        jax=NotAvailable("not_started", "synthetic: JAX not started"),
    )
    # IPython's CachingCompiler keeps cell file -> execution count in ``_filename_map`` (IPython
    # 8.x core/compilerop.py), which sites.cell_numbers reads
    shell = SimpleNamespace(compile=SimpleNamespace(_filename_map={CELL_FILE: 7}))
    report = doctor.oom_report(JaxRuntimeError(SYNTHETIC_CELL_OOM), shell=shell, sample=sample, live=[], synthetic=True)
    text = str(report).splitlines()
    start = text.index(report.peak_title)
    assert start < text.index("Allocator settings in effect:")
    assert text[start + 1].split() == [
        "3.00",
        "GiB",
        "75%",
        "cell",
        "[7]",
        "line",
        "4:",
        "output",
        "or",
        "temporary",
        "3.00",
        "GiB;",
        "tanh",
        "f32[64,4096,2048];",
        "dot_general",
        "f32[32,4096,2048]",
    ]
    assert "arguments 512.00 MiB, outputs 512.00 MiB, temporaries 3.00 GiB" in report.peak_title
    assert html.escape(report.peak_title) in report._repr_html_()
    assert report.to_json()["peak"][0] == report.peak_title


def test_oom_report_of_a_text_without_peak_buffers_has_no_peak_section():
    sample = Sample(
        t=0.0,
        pid=1,
        devices=NotAvailable("no_nvml", "synthetic: no NVML"),
        jax=NotAvailable("not_started", "synthetic: JAX not started"),
    )
    error = OomError(
        "gpu_bytes",
        6291456,
        True,
        None,
        "JaxRuntimeError",
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 6291456 bytes.",
    )
    report = doctor.oom_report(error, sample=sample, live=[], synthetic=True)
    assert report.peak_rows == () and "Live at the peak" not in str(report)


def test_program_peak_total_counts_an_aliased_buffer_once():
    peak = ProgramPeak(4, 4, 8, 0, 4, 12, (), "compiled")
    assert peak.total_bytes == 12


def test_saved_values_of_a_scan_in_an_oom_text_are_sent_to_jax_checkpoint():
    # synthetic text above: the forward scan's (jvp, no transpose) values are 3 GiB of 4 GiB
    peak = parse_oom_text(SYNTHETIC_CELL_OOM)
    fixes = peak_fixes.peak_fixes(peak, {CELL_FILE: 7})
    assert [(f.kind, f.saves) for f in fixes] == [("checkpoint", 3 << 30)]
    assert fixes[0].text.startswith("wrap the function around cell [7] line 4 in jax.checkpoint")


def test_the_peak_section_names_the_failing_call_when_it_is_known():
    from jupyter_gpumem.doctor.oom_peak import peak_section
    from jupyter_gpumem.doctor.program_budget import ProgramBudget

    program = ProgramBudget("step (cell [7] line 9)", 512 * MiB, 512 * MiB, 3 << 30, 0, 0)  # synthetic
    error = OomError("gpu_bytes", 1 << 30, True, None, "JaxRuntimeError", SYNTHETIC_CELL_OOM)
    title, rows = peak_section(error, program, SimpleNamespace(compile=SimpleNamespace(_filename_map={CELL_FILE: 7})))
    assert title.startswith("Live at the peak of step (cell [7] line 9), by source line")
    assert rows[-1].startswith("  to lower it: wrap the function around cell [7] line 4 in jax.checkpoint")


def test_without_peak_buffers_a_known_call_is_pointed_to_gpumem_peak():
    from jupyter_gpumem.doctor.oom_peak import peak_section
    from jupyter_gpumem.doctor.program_budget import ProgramBudget

    program = ProgramBudget("blow (cell [2] line 1)", 32, 1 << 44, 4, 0, 0)  # synthetic
    error = OomError("cpu", 1 << 44, True, None, "JaxRuntimeError", "RESOURCE_EXHAUSTED: synthetic, no peak buffers")
    title, rows = peak_section(error, program, None)
    assert title == "Live at the peak of blow (cell [2] line 1):"
    assert "`%gpumem peak blow(...)`" in rows[0]


def test_the_peak_moment_counts_values_sharing_a_slot_once():
    """Worked by hand: slots ``(allocation, offset, size)``; a loop's state and the loop's result
    share one slot (steps 2-5 and 5-8), so step 5 holds 100 + 30 bytes, not 230; step 6 adds a
    40-byte value beside them: 170 bytes at step 6 is the peak."""
    state, result, scratch, other = (9, 0, 100), (9, 0, 100), (9, 100, 40), (9, 200, 30)
    spans = [(2, 5, state), (5, 8, result), (6, 6, scratch), (4, 7, other)]
    assert peak_buffers.peak_moment(spans) == (170, 6)


def test_the_peak_moment_of_nothing_is_zero_bytes():
    assert peak_buffers.peak_moment([]) == (0, 0)


def test_live_ranges_are_read_from_the_buffer_live_range_section():
    text = (
        "HloLiveRange (max 9):\n  InstructionSequence:\n    0:x.1\n  BufferLiveRange:\n"
        "    x.1{}:0-9\n    while.13{2}:4-8\n  Live ranges at 4 (peak):\n    x.1: 16 bytes\n"
    )  # synthetic, in HloLiveRange::ToString's layout
    assert peak_buffers.live_ranges(text) == {"x.1": (0, 9), "while.13{2}": (4, 8)}
