"""What users type: the `farm` command (`main`), `farm cluster` (`cluster`) and
`farm bench` (`bench`)."""

from farm.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
