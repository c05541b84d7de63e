"""Where the database is and how to connect: SQLite (WAL, busy timeout) or PostgreSQL (psycopg 3).

`open_store` is the one entry point: it builds the engine, and (unless read-only) runs
the Alembic migrations to head the first time a process opens a URL.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, make_url

SQLITE_BUSY_TIMEOUT_MS = 30_000

_migrated: set[str] = set()
_migrated_lock = threading.Lock()


class ReadOnlyStoreError(PermissionError):
    """A write was attempted through a store opened with read_only=True."""


@dataclass(frozen=True)
class Store:
    """An engine plus what it was opened for. Repository functions take a Store."""

    engine: Engine
    url: str
    read_only: bool = False

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def has_schema(self) -> bool:
        """True once the migrations have created the tables (an empty new file has none)."""
        return inspect(self.engine).has_table("trials")

    def require_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(f"store {self.safe_url} is read-only; open it with read_only=False to write")

    @property
    def safe_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)


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


def open_store(url: str | None = None, read_only: bool = False) -> Store:
    """Open the farm database at `database_url(url)`.

    Writable stores are migrated to the newest Alembic revision the first time this
    process opens the URL (safe when several processes start at once: see
    `farm.store.migrate`). Read-only stores never migrate and refuse writes, both in the
    repository functions and in the database session itself.
    """
    resolved = database_url(url)
    engine = create_store_engine(resolved, read_only=read_only)
    store = Store(engine=engine, url=resolved, read_only=read_only)
    if not read_only:
        with _migrated_lock:
            if resolved not in _migrated:
                from farm.store.migrate import upgrade

                upgrade(store.url, engine=engine)
                _migrated.add(resolved)
    return store
