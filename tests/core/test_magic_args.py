"""The one parser behind every %gpumem subcommand, and the one check of a sampling interval."""

from __future__ import annotations

import math

import pytest

from jupyter_gpumem.core.errors import GpumemError
from jupyter_gpumem.core.magic_args import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    Grammar,
    MagicUsageError,
    Option,
    check_interval,
)


def _count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"--count takes a whole number, got {text!r}")
    return int(text)


SHOW = Grammar(
    "%gpumem show",
    options=(
        Option("--count", "N", read=_count, default=3),
        Option("--by", choices=("shape", "dtype", "cell")),
        Option("--all"),
    ),
    positionals=(Option("show", choices=("on", "off")),),
)


# --- what a grammar answers -------------------------------------------------------------------


def test_nothing_given_answers_every_default_and_false_for_flags():
    assert SHOW.parse([]) == {"count": 3, "by": None, "all": False, "show": None}


def test_options_take_a_separate_or_an_inline_value():
    assert SHOW.parse(["--count", "5", "--by=dtype", "--all", "on"]) == {
        "count": 5,
        "by": "dtype",
        "all": True,
        "show": "on",
    }


def test_choices_are_matched_in_any_case_and_answered_as_declared():
    assert SHOW.parse(["--by", "DType", "OFF"])["by"] == "dtype"
    assert SHOW.parse(["OFF"])["show"] == "off"


def test_option_names_are_matched_in_any_case():
    assert SHOW.parse(["--COUNT", "2"])["count"] == 2


def test_bare_word_options_and_aliases_read_like_the_settings():
    settings = Grammar("%gpumem", options=(Option("async-prealloc", "SIZE", aliases=("async_prealloc",)),))
    assert settings.parse(["async_prealloc", "2GiB"]) == {"async_prealloc": "2GiB"}


def test_the_usage_line_shows_positionals_then_options():
    assert SHOW.usage() == "%gpumem show [on|off] [--count N] [--by shape|dtype|cell] [--all]"


def test_a_required_positional_shows_without_brackets():
    assert (
        Grammar("%gpumem estimate", positionals=(Option("expression", "EXPR", required=True),)).usage()
        == "%gpumem estimate EXPR"
    )


def test_describe_gives_each_word_and_its_help_in_aligned_columns():
    grammar = Grammar(
        "%gpumem record",
        options=(Option("--interval", "S", help="seconds between samples"), Option("--gc")),
        positionals=(Option("path", "PATH.jsonl", help="where the samples go"), Option("mode", choices=("on", "off"))),
    )
    assert grammar.describe() == [
        "  PATH.jsonl    where the samples go",
        "  on|off",
        "  --interval S  seconds between samples",
        "  --gc",
    ]


def test_describe_shows_a_flag_by_its_name_alone():
    assert Grammar("%gpumem free", options=(Option("--gc", help="collect first"),)).describe() == [
        "  --gc  collect first"
    ]


def test_describe_of_a_command_that_takes_nothing_is_empty():
    assert Grammar("%gpumem stop").describe() == []


# --- what a grammar refuses, and how it says so --------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--colour"],
            "%gpumem show: unknown argument '--colour'; valid: --count, --by, --all. Usage: " + SHOW.usage(),
        ),
        (["on", "off"], "%gpumem show: unexpected 'off'. Usage: " + SHOW.usage()),
        (["--count"], "%gpumem show: --count needs a value: N. Usage: " + SHOW.usage()),
        (["--all=yes"], "%gpumem show: --all takes no value"),
        (["--all", "--all"], "%gpumem show: --all is given twice"),
        (["--by", "colour"], "%gpumem show: --by takes one of shape, dtype, cell, got 'colour'"),
        (["maybe"], "%gpumem show takes on or off, got 'maybe'"),  # the command named once
        (
            ["--cont", "2"],
            "%gpumem show: unknown argument '--cont'; valid: --count, --by, --all "
            "(did you mean '--count'?). Usage: " + SHOW.usage(),
        ),
        (["--by", "dtpye"], "%gpumem show: --by takes one of shape, dtype, cell, got 'dtpye' (did you mean 'dtype'?)"),
        (["--count", "many"], "%gpumem show: --count takes a whole number, got 'many'"),
    ],
)
def test_a_bad_argument_says_what_is_valid(argv, message):
    with pytest.raises(MagicUsageError) as err:
        SHOW.parse(argv)
    assert str(err.value) == message


ONLY_OPTIONS = Grammar("%gpumem show", options=(Option("--interval", "S"),))
NOTHING = Grammar("%gpumem stop")


@pytest.mark.parametrize(
    "grammar, argv, message",
    [
        (
            ONLY_OPTIONS,
            ["foo"],
            "%gpumem show: unknown argument 'foo'; valid: --interval. Usage: %gpumem show [--interval S]",
        ),
        (
            ONLY_OPTIONS,
            ["--intervl=0.25s"],
            "%gpumem show: unknown argument '--intervl=0.25s'; valid: --interval (did you mean '--interval'?). "
            "Usage: %gpumem show [--interval S]",
        ),
        (NOTHING, ["foo"], "%gpumem stop: unexpected 'foo'. Usage: %gpumem stop"),
        (NOTHING, ["--x"], "%gpumem stop: unknown argument '--x'. Usage: %gpumem stop"),
    ],
    ids=["bare word, options only", "misspelt inline option", "bare word, takes nothing", "option, takes nothing"],
)
def test_an_unknown_word_is_named_with_what_the_command_takes(grammar, argv, message):
    with pytest.raises(MagicUsageError) as err:
        grammar.parse(argv)
    assert str(err.value) == message


def test_a_bare_word_option_takes_no_inline_value():
    fraction = Grammar("%gpumem", options=(Option("fraction", "F"),))
    with pytest.raises(MagicUsageError) as err:
        fraction.parse(["fraction=0.5"])
    assert str(err.value) == (
        "%gpumem: unknown argument 'fraction=0.5'; valid: fraction (did you mean 'fraction'?). Usage: %gpumem [fraction F]"
    )


def test_an_error_that_starts_with_the_commands_last_word_names_the_command_once():
    track = Grammar("%gpumem doctor track", positionals=(Option("track", choices=("on", "off")),))
    with pytest.raises(MagicUsageError) as err:
        track.parse(["maybe"])
    assert str(err.value) == "%gpumem doctor track takes on or off, got 'maybe'"


def test_a_missing_required_positional_is_named_with_the_usage():
    grammar = Grammar("%gpumem estimate", positionals=(Option("expression", "EXPR", required=True),))
    with pytest.raises(MagicUsageError, match=r"^%gpumem estimate: EXPR is required\. Usage: %gpumem estimate EXPR$"):
        grammar.parse([])


def test_an_error_of_our_own_from_a_reader_passes_as_it_is():
    class SettingLike(GpumemError, ValueError):
        pass

    def refuse(text: str) -> None:
        raise SettingLike("fraction: 2 is not in 0 < F <= 1")

    with pytest.raises(SettingLike, match="^fraction: 2 is not"):
        Grammar("%gpumem", options=(Option("fraction", "F", read=refuse),)).parse(["fraction", "2"])


# --- the sampling interval ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, seconds", [(MIN_INTERVAL_S, 0.01), (MAX_INTERVAL_S, 3600.0), (1, 1.0), ("0.5", 0.5), (" 2 ", 2.0)]
)
def test_an_interval_in_range_is_taken_as_seconds(value, seconds):
    assert check_interval(value) == seconds


@pytest.mark.parametrize("value", [0, 0.001, 3601, -1, 10**400, "fast", "", None, True, math.nan, math.inf, [1]])
def test_an_interval_out_of_range_names_the_range(value):
    with pytest.raises(
        MagicUsageError, match=r"^interval must be a number of seconds from 0\.01 to 3600 \(e\.g\. 0\.5\), got "
    ):
        check_interval(value)


def test_an_interval_option_error_names_its_command():
    grammar = Grammar("%gpumem monitor", options=(Option("--interval", "S", read=check_interval),))
    with pytest.raises(MagicUsageError, match="^%gpumem monitor: interval must be .* got '0'$"):
        grammar.parse(["--interval", "0"])
