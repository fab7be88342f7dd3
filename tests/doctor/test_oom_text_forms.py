"""XLA's sizes in human units read back at their edges, and the range of a size written with a space.

The texts are those of tests/data/oom_texts (see that folder's README for where each comes from).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_gpumem.doctor.oom_text import recognise_text, xla_human_bytes

TEXTS = Path(__file__).parents[1] / "data" / "oom_texts"


def text(name: str) -> str:
    return (TEXTS / name).read_text().strip()


@pytest.mark.parametrize(
    "printed, low, high",
    [
        # 1 MiB - 1 byte: under 1024 * 1024, so no division; 1048575 / 1024 = 1023.999 -> "1024.0KiB".
        # Counts from 1023.95 * 1024 = 1048524.8 print the same.
        ("1024.0KiB", 1_048_525, 1_048_575),
        # 1 GiB - 1 byte: one division leaves 1048575 KiB -> "1024.00MiB"; from 1023.995 * 1024 =
        # 1048570.88 KiB on, times 1 KiB, plus a remainder under 1 KiB.
        ("1024.00MiB", 1_048_571 * 1024, 1_048_576 * 1024 - 1),
    ],
)
def test_a_size_printed_as_1024_of_a_unit_reads_back_only_to_counts_below_the_next_unit(printed, low, high):
    """tsl::strings::HumanReadableNumBytes (xla/tsl/platform/numbers.cc; the format "%s%.*f%ciB" is
    in jaxlib 0.10.2 and jax-cuda12-pjrt 0.10.2) divides by 1024 only while the count is at least
    1024 * 1024, so a count it prints in a unit is below 1024 * 1024 of the unit before; rounding
    to the printed decimals can still make it "1024.0". A count of 1024 * 1024 would have been
    printed in the next unit ("1.0MiB", "1.00GiB"), so it is not in the range."""
    assert xla_human_bytes(printed) == (low, high)


def test_a_size_with_a_space_before_the_unit_has_the_rounding_range_of_xlas_form():
    """XLA writes no space ("21.88GiB": HumanReadableNumBytes, xla/tsl/platform/numbers.cc, in
    tests/data/oom_texts/gpu_bfc_human.txt); a text retyped as "21.88 GiB" is read too, and its
    size then stands for the same bytes as XLA's form: MiB counts m with m / 1024 printed "21.88",
    21.875 * 1024 = 22400 (half to even) to 22410, times 1 MiB, plus up to 1 MiB - 1."""
    retyped = text("gpu_bfc_human.txt").replace("21.88GiB", "21.88 GiB")
    assert retyped != text("gpu_bfc_human.txt")
    found = recognise_text(retyped)
    assert (found.requested_bytes, found.requested_range) == (23_493_471_109, (22400 * 2**20, 22411 * 2**20 - 1))
