"""Bytes and fractions as people write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jupyter_gpumem.core.units import format_bytes, parse_bytes, parse_fraction, printable


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1024", 1024),
        ("0", 0),
        ("512MiB", 512 * 2**20),
        ("2GiB", 2 * 2**30),
        ("1.5GB", 1_500_000_000),
        ("500M", 500 * 2**20),
        ("3 KB", 3000),
        (".5GiB", 2**29),
        ("1.50 GiB", 3 * 2**29),
        ("64kib", 64 * 1024),
        ("7B", 7),
    ],
)
def test_parse_bytes_reads_the_forms_people_write(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "-1", "1iB", "5XB", "2 GiBs", "1e9", "0x10", "12 34"])
def test_parse_bytes_rejects_garbage_naming_the_accepted_forms(text):
    with pytest.raises(ValueError, match="512MiB|iB"):
        parse_bytes(text)


@pytest.mark.parametrize("value", [True, 1.5, None, b"1GiB"])
def test_parse_bytes_of_something_not_a_count_says_what_to_write(value):
    with pytest.raises(ValueError) as err:
        parse_bytes(value)
    assert str(err.value) == f"expected a byte count such as 512MiB or 2GiB, got {value!r}"


def test_a_decimal_count_too_large_for_a_float_is_refused():
    with pytest.raises(ValueError) as err:
        parse_bytes("9" * 400 + ".5PiB")
    assert str(err.value).endswith("is too large")


def test_parse_bytes_rejects_a_negative_int():
    with pytest.raises(ValueError, match="negative"):
        parse_bytes(-5)


@pytest.mark.parametrize(
    "text, expected", [(".5", 0.5), ("0.5", 0.5), ("50%", 0.5), ("1", 1.0), ("100%", 1.0), ("2.5%", 0.025)]
)
def test_parse_fraction_reads_decimals_and_percentages(text, expected):
    assert parse_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["0", "0%", "1.01", "101%", "-0.5", "abc", "", ".", "nan", "inf"])
def test_parse_fraction_rejects_values_outside_zero_to_one(text):
    with pytest.raises(ValueError, match=r"\.5, 0\.5 or 50%"):
        parse_fraction(text)


@pytest.mark.parametrize("text, expected", [("5E-1", 0.5), ("5e-1", 0.5), ("2.5E1%", 0.25)])
def test_parse_fraction_reads_exponents_in_either_case(text, expected):
    assert parse_fraction(text) == pytest.approx(expected)


@pytest.mark.parametrize("value", [True, None, [0.5]])
def test_a_fraction_of_the_wrong_type_says_what_to_write(value):
    with pytest.raises(ValueError) as err:
        parse_fraction(value)
    assert str(err.value) == f"expected a fraction, got {value!r}; write a fraction in (0, 1] such as .5, 0.5 or 50%"


def test_a_number_out_of_range_is_shown_as_given():
    with pytest.raises(ValueError) as err:
        parse_fraction(1.5)
    assert str(err.value) == "1.5 is outside (0, 1]; write a fraction such as .5, 0.5 or 50%"


def test_text_that_is_not_a_fraction_is_quoted_in_the_error():
    with pytest.raises(ValueError) as err:
        parse_fraction(" half ")
    assert str(err.value) == "' half ' is not a fraction; write a fraction in (0, 1] such as .5, 0.5 or 50%"


def test_a_fraction_out_of_range_names_the_range_once():
    with pytest.raises(ValueError) as err:
        parse_fraction("2")
    assert str(err.value) == "'2' is outside (0, 1]; write a fraction such as .5, 0.5 or 50%"


@pytest.mark.parametrize(
    "n, expected",
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (3 * 2**29, "1.50 GiB"),
        (2**20 - 1, "1.00 MiB"),
        (-2048, "-2.00 KiB"),
        # 1023.6 MiB stays in MiB; 1023.996 MiB would print as 1024.00 MiB, so it moves up a unit
        (int(1023.6 * 2**20), "1023.60 MiB"),
        (int(1023.996 * 2**20), "1.00 GiB"),
        (5 * 2**30, "5.00 GiB"),
        (3 * 2**39, "1.50 TiB"),
        (2048 * 2**40, "2048.00 TiB"),
        (1.5 * 2**30, "1.50 GiB"),
    ],
)
def test_format_bytes_uses_binary_units_with_two_decimals(n, expected):
    assert format_bytes(n) == expected


@pytest.mark.parametrize("value", [True, "1024", None, float("inf"), float("nan")])
def test_format_bytes_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(ValueError) as err:
        format_bytes(value)
    assert str(err.value) == f"expected a number of bytes, got {value!r}"


@given(st.integers(min_value=0, max_value=2**60))
def test_plain_integers_parse_to_themselves(n):
    assert parse_bytes(str(n)) == n


@given(
    st.integers(min_value=0, max_value=2**20),
    st.sampled_from([("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("KB", 10**3), ("GB", 10**9), ("M", 2**20)]),
)
def test_a_whole_count_with_a_unit_scales_exactly(k, unit):
    suffix, scale = unit
    assert parse_bytes(f"{k}{suffix}") == k * scale


@given(st.integers(min_value=1024, max_value=2**50))
def test_format_bytes_parses_back_within_its_rounding(n):
    back = parse_bytes(format_bytes(n))
    assert abs(back - n) <= 0.005 * n


@given(st.integers(min_value=1, max_value=100))
def test_a_percentage_is_a_hundredth(p):
    assert parse_fraction(f"{p}%") == pytest.approx(p / 100)


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not (0 < x <= 1)))
def test_no_fraction_outside_zero_to_one_is_accepted(x):
    with pytest.raises(ValueError):
        parse_fraction(x)


@given(st.floats(min_value=0, max_value=1, exclude_min=True))
def test_every_fraction_in_range_reads_back_as_written(x):
    assert parse_fraction(repr(x)) == x


@pytest.mark.parametrize(
    "text, shown",
    [
        ("python train.py", "python train.py"),
        ("日本語 é ü", "日本語 é ü"),  # other scripts are kept
        ("a\x1b[2Jb", "a\\x1b[2Jb"),  # an ANSI escape
        ("one\ntwo\rthree\tfour", "one\\ntwo\\rthree\\tfour"),
        ("x\x85y\u2028z", "x\\x85y\\u2028z"),  # C1 next-line, Unicode line separator
        ("p\u2029q", "p\\u2029q"),  # Unicode paragraph separator
        ("abc\u202edef", "abc\\u202edef"),  # a right-to-left override
        ("bad\udcffbyte", "bad\\udcffbyte"),  # an undecodable byte (surrogateescape)
        ("C:\\jobs\x1b", "C:\\jobs\\x1b"),  # its own backslash kept single beside an escape
        ("no\xa0break\u3000wide\n", "no\xa0break\u3000wide\\n"),  # spaces of other scripts kept
    ],
)
def test_printable_shows_control_characters_escaped_and_keeps_the_rest(text, shown):
    assert printable(text) == shown
