"""The %gpumem grammar and the dispatcher, without JAX."""

from __future__ import annotations

import importlib

import pytest

from jupyter_gpumem.core.magic_args import Grammar, MagicUsageError
from jupyter_gpumem.core.readings import AllocatorSettings
from jupyter_gpumem.kernel import magics
from jupyter_gpumem.kernel.magics import DELEGATES, HELP, SETTINGS, Command, parse_line, run_command
from jupyter_gpumem.settings.apply import GpumemError, SettingsError

from doubles import FakeShell


@pytest.mark.parametrize("line", ["", "   ", "status"])
def test_no_words_and_status_mean_status(line):
    assert parse_line(line) == Command("status")


@pytest.mark.parametrize("line", ["--help", "-h", "help"])
def test_help_words_mean_help(line):
    assert parse_line(line).action == "help"


def test_several_settings_on_one_line():
    command = parse_line("preallocate off fraction .4")
    assert command == Command("settings", AllocatorSettings(preallocate=False, fraction=0.4))


@pytest.mark.parametrize("word", [".5", "0.5", "50%"])
def test_fraction_accepts_its_three_spellings(word):
    assert parse_line(f"fraction {word}").settings.fraction == 0.5


@pytest.mark.parametrize("word, expected", [("all", -1), ("2GiB", 2 * 2**30), ("512MiB", 512 * 2**20), ("4096", 4096)])
def test_async_prealloc_takes_bytes_or_all(word, expected):
    assert parse_line(f"async-prealloc {word}").settings.async_prealloc == expected


def test_cuda_malloc_async_is_read_as_cuda_async_with_a_note():
    command = parse_line("allocator cuda_malloc_async")
    assert command.settings.allocator == "cuda_async"
    assert [n for n in command.notes if "TF_GPU_ALLOCATOR" in n][0].startswith(
        "note: cuda_malloc_async is TensorFlow's name"
    )


def test_remat_is_a_switch():
    assert parse_line("remat off").settings == AllocatorSettings(remat=False)


def test_setting_words_are_read_in_any_case_and_with_either_spelling():
    assert parse_line("PREALLOCATE off async_prealloc all").settings == AllocatorSettings(
        preallocate=False, async_prealloc=-1
    )


def test_unknown_word_names_every_valid_word():
    with pytest.raises(GpumemError) as err:
        parse_line("fractoin .5")
    for word in (
        "preallocate",
        "fraction",
        "allocator",
        "async-prealloc",
        "remat",
        "status",
        "reset",
        "monitor",
        "estimate",
    ):
        assert word in str(err.value)


def test_bad_switch_value_names_on_and_off():
    with pytest.raises(SettingsError, match="on or off"):
        parse_line("preallocate maybe")


def test_bad_fraction_names_the_accepted_spellings():
    with pytest.raises(SettingsError, match=r"\.5, 0\.5 or 50%"):
        parse_line("preallocate off fraction 2")


def test_a_setting_without_a_value_says_what_it_takes():
    with pytest.raises(GpumemError, match="on or off"):
        parse_line("preallocate")


def test_a_setting_given_twice_is_refused():
    with pytest.raises(GpumemError, match="twice"):
        parse_line("fraction .3 fraction .4")


def test_status_takes_no_arguments():
    with pytest.raises(GpumemError, match="no arguments"):
        parse_line("status now")


def test_delegated_subcommands_keep_their_arguments():
    assert parse_line("monitor --interval 0.5 --device all") == Command(
        "monitor", argv=("--interval", "0.5", "--device", "all")
    )
    assert parse_line("record stop") == Command("record", argv=("stop",))


def test_estimate_keeps_the_expression_whole():
    assert parse_line("estimate f(x, name='a b')").argv == ("f(x, name='a b')",)


def test_estimate_without_an_expression_is_refused_by_its_parser_naming_the_usage():
    assert parse_line("estimate") == Command("estimate")
    with pytest.raises(MagicUsageError, match="^%gpumem estimate: EXPR is required"):
        run_command(parse_line("estimate"))


def test_help_covers_every_subcommand_and_setting():
    for word in ("preallocate", "fraction", "allocator", "async-prealloc", "remat", "status", "reset", *DELEGATES):
        assert f"%gpumem {word}" in HELP
    for option in ("--interval", "--window", "--device", "--replay", "--top", "--by", "--history", "--caches", "--gc"):
        assert option in HELP


def _grammar_of(word: str) -> Grammar:
    module = importlib.import_module(DELEGATES[word][0])
    found = [g for g in vars(module).values() if isinstance(g, Grammar) and g.prog == f"%gpumem {word}"]
    found += [
        g
        for d in vars(module).values()
        if isinstance(d, dict)
        for g in d.values()
        if isinstance(g, Grammar) and g.prog == f"%gpumem {word}"
    ]
    assert len(found) == 1, f"{DELEGATES[word][0]} should declare one grammar for %gpumem {word}"
    return found[0]


@pytest.mark.parametrize("word", sorted(DELEGATES))
def test_help_shows_each_subcommand_as_its_parser_declares_it(word):
    assert f"  {_grammar_of(word).usage()}" in HELP


@pytest.mark.parametrize("option", SETTINGS.options, ids=lambda o: o.name)
def test_help_shows_each_setting_as_its_parser_declares_it(option):
    assert f"  %gpumem {option.name} {option.shown} " in HELP


def test_a_bad_subcommand_argument_is_one_usage_error_that_names_the_command_once():
    with pytest.raises(MagicUsageError) as err:
        run_command(parse_line("arrays --by colour"))
    assert str(err.value) == "%gpumem arrays: --by takes one of shape, dtype, cell, name, line, device, got 'colour'"


@pytest.mark.parametrize(
    "line, message",
    [
        ("doctor maybe", "%gpumem doctor takes on or off, got 'maybe'"),
        ("cells of", "%gpumem cells takes on or off, got 'of' (did you mean 'off'?)"),
        ("estimate a", "%gpumem estimate takes a call such as train_step(params, batch), got 'a'"),
        ("estimate f(", "%gpumem estimate: 'f(' is not a Python expression ('(' was never closed)"),
        # a typo in a subcommand's argument gets the nearest valid word
        (
            "free --hisotry",
            "%gpumem free: unknown argument '--hisotry'; valid: --history, --caches, --gc "
            "(did you mean '--history'?). Usage: %gpumem free [--history] [--caches] [--gc]",
        ),
        ("doctor onn", "%gpumem doctor takes on or off, got 'onn' (did you mean 'on'?)"),
    ],
)
def test_a_subcommand_error_names_the_command_once_and_the_nearest_word(line, message):
    with pytest.raises(MagicUsageError) as err:
        run_command(parse_line(line))
    assert str(err.value) == message


@pytest.mark.parametrize(
    "line, nearest",
    [
        ("prealocate off", "preallocate"),
        ("monitr", "monitor"),
        ("stauts", "status"),
        ("preallocate of", "off"),
        ("remat onn", "on"),
    ],
)
def test_a_mistyped_word_or_value_gets_the_nearest_valid_one(line, nearest):
    with pytest.raises(GpumemError) as err:
        parse_line(line)
    assert f"(did you mean {nearest!r}?)" in str(err.value)


def test_a_word_near_nothing_gets_no_guess():
    with pytest.raises(GpumemError) as err:
        parse_line("xyzzy")
    assert "did you mean" not in str(err.value)


def test_the_magic_docstring_is_the_help_text():
    assert magics.GpumemMagics.gpumem.__doc__ == HELP


def test_a_delegated_subcommand_reaches_its_module_function(monkeypatch):
    from jupyter_gpumem.doctor import arrays

    calls = []
    monkeypatch.setattr(arrays, "magic_arrays", lambda argv, shell: calls.append((argv, shell)))
    shell = object()
    run_command(parse_line("arrays --top 5 --by dtype"), shell)
    assert calls == [(["--top", "5", "--by", "dtype"], shell)]


@pytest.mark.parametrize("raised", ["arrays: no such row", "%gpumem arrays: no such row", "no such row"])
def test_a_subcommand_error_that_already_names_the_command_is_not_prefixed_twice(monkeypatch, raised):
    from jupyter_gpumem.doctor import arrays

    def refuse(argv, shell):
        raise ValueError(raised)

    monkeypatch.setattr(arrays, "magic_arrays", refuse)
    with pytest.raises(MagicUsageError) as err:
        run_command(parse_line("arrays"))
    assert str(err.value) == "%gpumem arrays: no such row"


@pytest.mark.parametrize("word", sorted(DELEGATES))
def test_every_delegated_word_names_a_function_that_exists(word):
    module_name, function_name = DELEGATES[word]
    assert callable(getattr(importlib.import_module(module_name), function_name))


def test_load_registers_the_magic_and_the_cell_events(monkeypatch):
    from jupyter_gpumem.sampling import sampler

    seen = []
    monkeypatch.setattr(sampler, "register_cell_events", seen.append)
    shell = FakeShell()
    magics.load(shell)
    assert shell.registered == [magics.GpumemMagics] and seen == [shell]


def test_a_failing_cell_event_hook_does_not_break_loading(monkeypatch):
    from jupyter_gpumem.sampling import sampler

    def broken(shell):
        raise RuntimeError("no events here")

    monkeypatch.setattr(sampler, "register_cell_events", broken)
    shell = FakeShell()
    with pytest.warns(UserWarning, match="cell events are off"):
        magics.load(shell)
    assert shell.registered == [magics.GpumemMagics]
