"""How every write reaches the database: one short transaction, retried while the database
says "not now" (a lock conflict or a lost connection: farm.store.retry), and refused
outright on a read-only store."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import String, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from farm.store.database import Store
from farm.store.retry import call_retrying

P = ParamSpec("P")
R = TypeVar("R")


def write_transaction(fn: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[Store, P], R]:
    """Decorate a repository write: refuse read-only stores, retry transient errors (lock
    conflicts, lost connections) for up to farm.store.retry.retry_window_s().

    The decorated function must do all its work in one `store.engine.begin()` block so a
    retry repeats the whole transaction (a transaction cut off by a lost connection was
    rolled back by the server).
    """

    @functools.wraps(fn)
    def wrapper(store: Store, *args: P.args, **kwargs: P.kwargs) -> R:
        store.require_writable()
        return call_retrying(fn, store, *args, **kwargs)

    return wrapper


def dialect_insert(store: Store, table: Table) -> Any:
    """An INSERT that supports ON CONFLICT for the store's dialect (SQLite or PostgreSQL)."""
    module = postgresql if store.dialect == "postgresql" else sqlite
    return module.insert(table)


def bind_processors(table: Table, columns: Sequence[str], dialect: Dialect) -> list[tuple[int, Callable]]:
    """(index in `columns`, bind processor) for the columns whose type has one on `dialect`
    (a TypeDecorator's process_bind_param, SQLite's DateTime string): what SQLAlchemy applies
    to each value, for statements that go to the driver as they are (insert_ignoring_sql)."""
    key = (table.name, tuple(columns), dialect.name)
    if key not in _PROCESSORS:
        found = [(i, table.c[c].type.dialect_impl(dialect).bind_processor(dialect)) for i, c in enumerate(columns)]
        _PROCESSORS[key] = [(i, process) for i, process in found if process is not None]
    return _PROCESSORS[key]


def insert_ignoring_sql(
    table: Table, columns: Sequence[str], key: Sequence[str], dialect: Dialect, rows: Sequence[tuple]
) -> tuple[str, tuple]:
    """Driver SQL and parameters inserting `rows` (tuples in `columns` order, already bound:
    bind_processors) ON CONFLICT (`key`) DO NOTHING RETURNING `key`, one row per row inserted.

    SQLite: one multi-row VALUES (rows * columns must stay under its 32766 binds).
    PostgreSQL: INSERT .. SELECT * FROM unnest(one array per column), a short statement that
    psycopg parses once and the server prepares once, where a VALUES list of thousands of
    placeholders was split by psycopg on every call; unnest keeps the arrays' order, so rows
    are inserted (and their keys locked) in `rows`' order. The arrays go in binary (`%b`):
    psycopg dumps a column array in text about 7x slower, most of a flush's client time.
    Strings go as text[]: a cast to varchar(n)[] would truncate where the column's own
    check raises."""
    conflict = f" ON CONFLICT ({', '.join(key)}) DO NOTHING RETURNING {', '.join(key)}"
    head = f"INSERT INTO {table.name} ({', '.join(columns)}) "
    if dialect.name == "postgresql":
        types = ["text" if isinstance(table.c[c].type, String) else table.c[c].type.compile(dialect) for c in columns]
        sql = head + "SELECT * FROM unnest(" + ", ".join(f"%b::{t}[]" for t in types) + ")" + conflict
        return sql, tuple(list(column) for column in zip(*rows, strict=True))
    values = ", ".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(rows))
    return head + "VALUES " + values + conflict, tuple(v for row in rows for v in row)


_PROCESSORS: dict[tuple, list] = {}
