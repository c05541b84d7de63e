"""How every write reaches the database: one short transaction, retried while the database
says "not now" (a lock conflict or a lost connection: farm.store.retry), and refused
outright on a read-only store."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import BigInteger, Connection, DateTime, Float, Integer, String, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import TypeEngine

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


def dialect_insert(store: Store | str, table: Table) -> Any:
    """An INSERT that supports ON CONFLICT for the store's dialect, or that dialect's name
    (SQLite or PostgreSQL)."""
    dialect = store if isinstance(store, str) else store.dialect
    return (postgresql if dialect == "postgresql" else sqlite).insert(table)


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
    table: Table, columns: Sequence[str], key: Sequence[str], rows: Sequence[tuple]
) -> tuple[str, tuple]:
    """SQLite driver SQL and parameters inserting `rows` (tuples in `columns` order, already
    bound: bind_processors) ON CONFLICT (`key`) DO NOTHING RETURNING `key`, one row per row
    inserted: one multi-row VALUES (rows * columns must stay under SQLite's 32766 binds)."""
    values = ", ".join(["(" + ", ".join("?" * len(columns)) + ")"] * len(rows))
    return (
        f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES {values}"
        f" ON CONFLICT ({', '.join(key)}) DO NOTHING RETURNING {', '.join(key)}",
        tuple(v for row in rows for v in row),
    )


def copy_insert_ignoring(
    conn: Connection, table: Table, columns: Sequence[str], key: Sequence[str], rows: Iterable[tuple]
) -> list[tuple]:
    """PostgreSQL: insert `rows` (tuples in `columns` order, already bound) ON CONFLICT (`key`)
    DO NOTHING, in `key` order; the keys of the rows inserted.

    The rows go by binary COPY into a temporary table of the session, emptied at each commit,
    then one INSERT .. SELECT .. ORDER BY `key` moves them: COPY formats each value in C,
    where binding one array per column went through psycopg's Python loop for every value
    (most of a driver's recording CPU). Key order keeps two writers from deadlocking on each
    other's keys. Strings go as text: a varchar(n) column's own check raises on a longer one."""
    stage, names = f"{table.name}_incoming", ", ".join(columns)
    keys = ", ".join(key)
    statement = f"COPY {stage} ({names}) FROM STDIN (FORMAT BINARY)"
    dbapi, raw = conn.dialect.loaded_dbapi, conn.connection.dbapi_connection
    try:
        with raw.cursor() as cursor:
            cursor.execute(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS"
                f" AS SELECT {names} FROM {table.name} WITH NO DATA"
            )
            with cursor.copy(statement) as copy:
                copy.set_types([_copy_type(table.c[c].type) for c in columns])
                for row in rows:
                    copy.write_row(row)
            statement = (
                f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {stage} ORDER BY {keys}"
                f" ON CONFLICT ({keys}) DO NOTHING RETURNING {keys}"
            )
            cursor.execute(statement)
            return cursor.fetchall()
    except dbapi.Error as exc:  # as SQLAlchemy raises it: the retries (farm.store.retry) read that
        lost = conn.dialect.is_disconnect(exc, raw, None)
        if lost:
            conn.invalidate(exc)
        raise DBAPIError.instance(
            statement, None, exc, dbapi.Error, connection_invalidated=lost, dialect=conn.dialect
        ) from exc


def _copy_type(column_type: TypeEngine) -> str:
    """The PostgreSQL type a binary COPY sends a column's values as."""
    impl = getattr(column_type, "impl", column_type)  # a TypeDecorator's stored type
    for kind, name in _COPY_TYPES:
        if isinstance(impl, kind):
            return "timestamptz" if name == "timestamp" and impl.timezone else name
    raise TypeError(f"no COPY type for column type {column_type!r}")


# Subclasses first: BigInteger is an Integer, Text a String.
_COPY_TYPES = ((BigInteger, "int8"), (Integer, "int4"), (Float, "float8"), (String, "text"), (DateTime, "timestamp"))

_PROCESSORS: dict[tuple, list] = {}
