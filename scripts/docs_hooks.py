"""MkDocs hook: the reference pages that describe code are rendered from that code at build
time, so they can't drift from it. A page holds a marker line and the hook replaces it:

- `<!-- generated: cli -->`: every `farm` command from `farm.cli.build_parser()` (usage,
  arguments with their help, choices and defaults);
- `<!-- generated: schema -->`: every table of `farm.store.models` (columns, types, keys,
  defaults, the comments beside them in the source, indexes and unique constraints);
- `<!-- generated: parquet -->`: the columns of the Parquet trial files (`farm.store.parquet`).

Nothing here touches the network or a GPU: the parser and the models import neither wgpu nor Ray.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)
USAGE_WIDTH = "88"  # argparse wraps usage at $COLUMNS


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: GENERATORS[m.group(1)](), markdown)


# -- the farm command ----------------------------------------------------------------------


def cli_markdown() -> str:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from farm.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = USAGE_WIDTH
    try:
        return "\n".join(_commands(build_parser(), "farm", None))
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def _commands(parser: argparse.ArgumentParser, name: str, summary: str | None) -> list[str]:
    """One section per command, parents before their subcommands, in the parser's order."""
    lines = [f"## `{name}`", ""]
    if summary:
        lines += [_sentence(summary), ""]
    elif parser.description:
        lines += [parser.description, ""]
    lines += ["```text", _usage(parser), "```", ""]
    rows = [_argument_row(parser, action) for action in parser._actions if _documented(action)]
    if rows:
        lines += ["| argument | what it does | default |", "| --- | --- | --- |", *rows, ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for sub_name, sub_parser in action.choices.items():
                lines += _commands(sub_parser, f"{name} {sub_name}", helps.get(sub_name))
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    """argparse's usage without its "usage: " prefix, continuation lines shifted left to match."""
    prefix = "usage: "
    first, *rest = parser.format_usage().strip().removeprefix(prefix).splitlines()
    return "\n".join([first, *(line.removeprefix(" " * len(prefix)) for line in rest)])


def _documented(action: argparse.Action) -> bool:
    return not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and (
        action.help is not argparse.SUPPRESS
    )


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            names += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    else:
        names = formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
    what = formatter._expand_help(action) if action.help else ""
    if action.choices and action.metavar is not None and not isinstance(action.choices, dict):  # else in the name
        what = f"{what} (one of {', '.join(f'`{c}`' for c in action.choices)})".strip()
    return f"| `{_cell(names)}` | {_cell(what)} | {_default(action)} |"


def _default(action: argparse.Action) -> str:
    value = action.default
    if action.nargs == 0 or value is None or value == [] or value is argparse.SUPPRESS:
        return ""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"`{_cell(str(value))}`"
    return ""  # a sentinel: the help says what happens without the flag


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", ")")) else ".")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- the database schema ---------------------------------------------------------------------


def schema_markdown() -> str:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from sqlalchemy.dialects import postgresql

    from farm.store.models import Base

    classes = {mapper.local_table.name: mapper.class_ for mapper in Base.registry.mappers}
    dialect = postgresql.dialect()
    lines: list[str] = []
    for table in Base.metadata.tables.values():  # the models' order
        cls = classes.get(table.name)
        notes = _column_notes(cls) if cls is not None else {}
        lines += [f"## `{table.name}`", ""]
        if cls is not None and cls.__doc__:
            lines += [inspect.cleandoc(cls.__doc__), ""]
        lines += ["| column | type | null | key | default | note |", "| --- | --- | --- | --- | --- | --- |"]
        for column in table.columns:
            key = "primary key" if column.primary_key else ""
            for fk in column.foreign_keys:
                on_delete = f", on delete {fk.ondelete.lower()}" if fk.ondelete else ""
                key = f"→ `{fk.target_fullname}`{on_delete}"
            null = "yes" if column.nullable and not column.primary_key else "no"
            row = (f"`{column.name}`", f"`{_type(column.type, dialect)}`", null, key, _column_default(column))
            lines.append("| " + " | ".join(row) + f" | {_cell(notes.get(column.name, ''))} |")
        lines.append("")
        extras = [
            f"- unique ({', '.join(c.name for c in constraint.columns)})"
            for constraint in table.constraints
            if constraint.__class__.__name__ == "UniqueConstraint"
        ]
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            where = index.dialect_options["postgresql"].get("where")
            kind = "unique index" if index.unique else "index"
            condition = f" where `{where}`" if where is not None else ""
            extras.append(f"- {kind} `{index.name}` ({', '.join(c.name for c in index.columns)}){condition}")
        if extras:
            lines += ["Constraints and indexes:", "", *extras, ""]
    return "\n".join(lines)


def _type(column_type, dialect) -> str:
    try:
        name = column_type.compile(dialect=dialect)
    except Exception:  # a type PostgreSQL can't name: its SQLAlchemy class
        return type(column_type).__name__
    return name.replace("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ")


def _column_default(column) -> str:
    default = column.default
    if default is None:
        return ""
    arg = default.arg
    if callable(arg):
        name = getattr(getattr(arg, "__wrapped__", arg), "__name__", "")
        return "" if name in ("", "<lambda>") else f"`{name}()`"
    return f"`{arg!r}`"


def _column_notes(cls) -> dict[str, str]:
    """The comment beside each column in the model's source, or on the lines just above it."""
    try:
        source = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    notes: dict[str, str] = {}
    pending: list[str] = []
    for line in source:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"(\w+):\s*Mapped\[.*?#\s*(.*)$", stripped) or re.match(r"(\w+):\s*Mapped\[", stripped)
        if match:
            inline = match.group(2) if match.lastindex and match.lastindex >= 2 else ""
            notes[match.group(1)] = " ".join([*pending, inline]).strip()
        pending = []
    return {name: note for name, note in notes.items() if note}


def parquet_markdown() -> str:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from farm.store.parquet import PARTITIONS, TRIAL_SCHEMA

    rows = [f"| `{field.name}` | `{field.type}` | partition (from the path) |" for field in PARTITIONS]
    rows += [f"| `{field.name}` | `{field.type}` | |" for field in TRIAL_SCHEMA]
    return "\n".join(["| column | Arrow type | |", "| --- | --- | --- |", *rows, ""])


GENERATORS = {"cli": cli_markdown, "schema": schema_markdown, "parquet": parquet_markdown}
