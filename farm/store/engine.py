"""Where the database is and how to connect: the URL (`database_url`: argument,
$FARM_DATABASE_URL, or SQLite under $FARM_HOME), its checks, and the engine for it:
SQLite (WAL, busy timeout) or PostgreSQL (psycopg 3). Migrations (farm.store.migrate)
and the store (farm.store.database) both build on this."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

SQLITE_BUSY_TIMEOUT_MS = 30_000


def farm_home() -> Path:
    return Path(os.environ.get("FARM_HOME") or Path.home() / ".farm")


def database_url(url: str | None = None) -> str:
    """`url` if given, else `$FARM_DATABASE_URL`, else `sqlite:///$FARM_HOME/farm.db` (FARM_HOME: ~/.farm)."""
    if url:
        return url
    env = os.environ.get("FARM_DATABASE_URL")
    if env:
        return env
    return f"sqlite:///{farm_home() / 'farm.db'}"


def normalize_url(url: str) -> URL:
    """Parse and check a database URL; plain `postgresql://` means psycopg 3."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with little context
        raise ValueError(f"not a database URL: {url!r} ({exc})") from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"unsupported database {parsed.get_backend_name()!r} in {url!r}: use sqlite or postgresql")
    return parsed


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for an in-memory database."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def create_store_engine(url: str, read_only: bool = False) -> Engine:
    """An engine for `url`; SQLite gets WAL + busy timeout (or mode=ro), PostgreSQL read-only sessions."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "postgresql":
        connect_args = {"options": "-c default_transaction_read_only=on"} if read_only else {}
        return create_engine(parsed, connect_args=connect_args, pool_pre_ping=True)
    return _sqlite_engine(parsed, read_only)


def _sqlite_engine(parsed: URL, read_only: bool) -> Engine:
    path = sqlite_path(parsed)
    if path is None:
        if read_only:
            raise ValueError(f"read-only store needs a database file, got {parsed}")
        return create_engine(parsed)
    if read_only:
        if not path.exists():
            raise FileNotFoundError(f"no database at {path}: run `farm tune` (or `farm db upgrade`) first")
        ro = URL.create("sqlite", database=f"file:{path.resolve()}?mode=ro", query={"uri": "true"})
        engine = create_engine(ro, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        if not read_only:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    return engine
