"""Helpers shared by the CLI error tests (no tests here): `farm ARGV` run in this process, and
whether it started Ray."""

from __future__ import annotations

import sys

from farm.cli.main import main


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """`farm ARGV` in this process: (exit status, stdout, stderr). An exception escaping
    main() is what a user would see as a traceback: it fails the test."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def ray_started() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()
