"""`farm --help` and every subcommand's help teach: each option says what it does and its
default, the top level ends with where to start, `farm tune --help` names the kernels, and
a mistyped kernel gets the close match."""

from __future__ import annotations

import argparse

import pytest

from farm import catalog
from farm.cli.helptext import BUILTIN_KERNELS, FarmHelpFormatter
from farm.cli.main import build_parser, main

SWITCHES = (argparse._StoreTrueAction, argparse._HelpAction, argparse._VersionAction)


def _parsers(parser: argparse.ArgumentParser, name: str = "farm"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def _options():
    for command, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
                yield command, parser, action


def test_every_option_of_every_command_has_help_and_says_its_default():
    missing, no_default = [], []
    for command, parser, action in _options():
        name = f"{command} {'/'.join(action.option_strings) or action.dest}"
        if not (action.help or "").strip():
            missing.append(name)
            continue
        shown = parser._get_formatter()._expand_help(action) if action.help else ""
        if not isinstance(action, SWITCHES) and not action.required and "default" not in shown:
            no_default.append(name)
    assert missing == [], "options without help text"
    assert no_default == [], "options whose help doesn't say their default"


def test_every_command_uses_the_formatter_that_shows_defaults():
    for command, parser in _parsers(build_parser()):
        assert parser.formatter_class is FarmHelpFormatter, command
        assert parser.description, f"{command} --help says what the command does"


def test_farm_help_ends_with_where_to_start(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    start = out.index("start here:")
    assert all(f"farm {command}" in out[start:] for command in ("adapters", "tune gemv", "winners", "dashboard"))


def test_tune_help_lists_the_kernels_and_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"kernels: {', '.join(BUILTIN_KERNELS)}" in out
    assert "(default: model)" in out and "(default: 10)" in out and "(default: 2)" in out and "(default: 0)" in out


def test_the_help_lists_every_builtin_kernel():
    assert set(BUILTIN_KERNELS) == set(catalog.KERNEL_MODULES) <= set(catalog.names())


@pytest.mark.parametrize(
    "argv, close",
    [
        (["tune", "gemvv", "--allow-cpu"], "gemv"),
        (["certify", "gemmm"], "gemm"),
        (["winners", "--kernel", "fftt"], "fft"),
    ],
)
def test_a_mistyped_kernel_gets_the_close_match_in_one_line(argv, close, capsys, farm_home):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("farm: error: unknown kernel")
    assert f"did you mean {close!r}? known: " in err


def test_a_name_like_no_kernel_gets_only_the_list(capsys):
    with pytest.raises(ValueError, match=r"unknown kernel 'zzzzzz'; known: ") as raised:
        catalog.get("zzzzzz")
    assert "did you mean" not in str(raised.value)
