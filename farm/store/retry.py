"""When the database says "not now": which errors a retry clears, and for how long to retry.

Two kinds of error are transient. A lock conflict: SQLite busy or locked past its busy
timeout, a PostgreSQL deadlock or serialization failure. A lost connection: PostgreSQL
restarting or shutting down (SQLSTATE 57P01-57P03), a connection refused, reset or closed
(class 08, or a connect failure without a SQLSTATE), or any error on which SQLAlchemy
invalidated the connection (`DBAPIError.connection_invalidated`; the pool reconnects on
the next checkout). Everything else (a constraint, a bad statement, a wrong password, a
missing database) is permanent and raised at once.

`retrying` runs a function again after each transient error, with a doubling backoff, for
at most `retry_window_s()` seconds from the first failure: `$FARM_DB_RETRY_S`, default 60,
0 to not retry. Only idempotent units go through it: a whole write transaction
(farm.store.transactions.write_transaction), a read, or a larger idempotent step made of
them (a recorder's flush): inside one, the inner calls do not retry on their own, so the
outer one repeats the whole step within one window. While it waits it says so once on
stderr, and once more when the database answers again. `no_retry()` turns it off for a
block (the runtime, a library whose calls must not stall, reads and queues once).
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError

from farm.store.engine import describe_error

ENV = "FARM_DB_RETRY_S"
DEFAULT_RETRY_S = 60.0
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0
_SQLITE_LOCK_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_PG_CONFLICT_STATES = {"40P01", "40001"}  # deadlock_detected, serialization_failure
# admin_shutdown, crash_shutdown, cannot_connect_now ("the database system is starting up / shutting down")
_PG_SHUTDOWN_STATES = {"57P01", "57P02", "57P03"}

_inside = threading.local()  # .depth: call_retrying frames running on this thread
_outage: dict[str, float] = {}  # "since": when this process first found the database unreachable
_outage_lock = threading.Lock()

P = ParamSpec("P")
R = TypeVar("R")


def retry_window_s() -> float:
    """`$FARM_DB_RETRY_S` (seconds, >= 0; default 60); ValueError naming a bad value."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{ENV} must be a number of seconds >= 0, got {raw!r}")
    return value


def is_lock_conflict(exc: BaseException) -> bool:
    """SQLite busy/locked, PostgreSQL deadlock or serialization failure."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _SQLITE_LOCK_CODES
    return getattr(orig, "sqlstate", None) in _PG_CONFLICT_STATES


def is_disconnect(exc: BaseException) -> bool:
    """The connection to a PostgreSQL server was lost or could not be made (a restart, a shutdown,
    a refused or reset connection)."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    if getattr(orig, "sqlite_errorcode", None) is not None or type(orig).__name__ != "OperationalError":
        return False
    state = getattr(orig, "sqlstate", None)
    return state is None or state.startswith("08") or state in _PG_SHUTDOWN_STATES


def is_transient(exc: BaseException) -> bool:
    """True for errors that the same transaction, run again a little later, can get past."""
    return isinstance(exc, DBAPIError) and (is_lock_conflict(exc) or is_disconnect(exc))


@contextmanager
def no_retry() -> Iterator[None]:
    """Store calls in the block run once (a library call that must not stall: the runtime's
    reads of the winners fall back to defaults at once)."""
    depth = getattr(_inside, "depth", 0)
    _inside.depth = depth + 1
    try:
        yield
    finally:
        _inside.depth = depth


def call_retrying(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)`, run again after each transient error for up to retry_window_s()
    (once, with no retry, inside another call_retrying: the outer one retries)."""
    if getattr(_inside, "depth", 0):
        return fn(*args, **kwargs)
    _inside.depth = 1
    try:
        return _retry(fn, *args, **kwargs)
    finally:
        _inside.depth = 0


def _retry(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    window = retry_window_s()
    deadline = None
    delay = FIRST_BACKOFF_S
    said = False
    while True:
        try:
            result = fn(*args, **kwargs)
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline, started = now + window, now
            if now + delay > deadline:
                raise
            if is_disconnect(exc) and not said:
                said = True
                with _outage_lock:  # one line per outage, however many threads wait on it
                    if "since" not in _outage:
                        _outage["since"] = started
                        print(f"farm: database unreachable ({describe_error(exc)}); retrying for up to "
                              f"{window:g} s (${ENV})", file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)
            continue
        if _outage:  # this call got through: the outage, if one was announced, is over
            with _outage_lock:
                since = _outage.pop("since", None)
            if since is not None:
                print(f"farm: database reachable again after {time.monotonic() - since:.1f} s", file=sys.stderr,
                      flush=True)  # fmt: skip
        return result


def retrying(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate an idempotent store call (a read, or one whole transaction) with call_retrying."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return call_retrying(fn, *args, **kwargs)

    return wrapper
