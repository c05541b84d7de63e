"""How every write reaches the database: one short transaction, retried when the database
says "try again" (SQLite busy/locked past the busy timeout, PostgreSQL deadlock or
serialization failure), and refused outright on a read-only store."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from farm.store.database import Store

WRITE_ATTEMPTS = 8
FIRST_BACKOFF_S = 0.05
_SQLITE_RETRY_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_PG_RETRY_STATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure

P = ParamSpec("P")
R = TypeVar("R")


def is_transient(exc: DBAPIError) -> bool:
    """True for errors that a retry of the same transaction can clear."""
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _SQLITE_RETRY_CODES
    return getattr(orig, "sqlstate", None) in _PG_RETRY_STATES


def write_transaction(fn: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[Store, P], R]:
    """Decorate a repository write: refuse read-only stores, retry transient lock errors.

    The decorated function must do all its work in one `store.engine.begin()` block so a
    retry repeats the whole transaction.
    """

    @functools.wraps(fn)
    def wrapper(store: Store, *args: P.args, **kwargs: P.kwargs) -> R:
        store.require_writable()
        delay = FIRST_BACKOFF_S
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                return fn(store, *args, **kwargs)
            except DBAPIError as exc:
                if attempt == WRITE_ATTEMPTS or not is_transient(exc):
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    return wrapper


def dialect_insert(store: Store, table: Table) -> Any:
    """An INSERT that supports ON CONFLICT for the store's dialect (SQLite or PostgreSQL)."""
    module = postgresql if store.dialect == "postgresql" else sqlite
    return module.insert(table)
