"""Alembic, driven from code: the same migrations from a checkout (db/migrations) and an
installed package (farm.migrations), with no alembic.ini needed.

Upgrades are serialized between processes that start at once: a PostgreSQL
transaction-level advisory lock, or an exclusive `flock` on `<db file>.migrate-lock`
for SQLite, which its holder removes when it is done (whether the migration worked or
not), so no lock file stays beside the database. The loser waits, then finds the schema
already at head and does nothing.
"""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from farm.store.engine import create_store_engine, database_url, mask_url, normalize_url, sqlite_path

# Any fixed 64-bit number works; it only has to be the same in every farm process.
PG_MIGRATION_LOCK_KEY = 0x6661726D_6D696772  # "farmmigr"


def migrations_dir() -> Path:
    """The directory holding env.py and versions/: the installed `farm.migrations` package, or
    db/migrations when farm runs from a source tree that was never installed (PYTHONPATH=.)."""
    try:
        import farm.migrations
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "db" / "migrations"
    return Path(farm.migrations.__file__).resolve().parent


def alembic_config(url: str | None = None) -> Config:
    """An Alembic Config built in code, pointing at the packaged migrations and `database_url(url)`."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("sqlalchemy.url", database_url(url).replace("%", "%%"))
    return config


def head_revision() -> str:
    heads = ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads ({heads}); merge them into one")
    return heads[0]


def upgrade(url: str | None = None, revision: str = "head", engine: Engine | None = None) -> None:
    """Migrate the database at `url` up to `revision` (default: the newest). A database that
    holds tables but no migration history is another program's: ValueError, nothing added."""

    def action(config: Config) -> None:
        _refuse_foreign(config.attributes["connection"], database_url(url))
        command.upgrade(config, revision)

    check_revision(revision)
    _run_locked(url, engine, action)


def check_revision(revision: str) -> None:
    """Alembic's CommandError for a revision the migrations don't have, before any database
    (or its directory, or its lock file) is created. Only a plain id or name is checked here:
    relative targets (+1, -1, head-1, 0003_x+1), branch (x@head) and range (a:b) forms are
    left to Alembic, which resolves them against the database."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", revision):
        return
    ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision)


def _refuse_foreign(connection: Connection, url: str) -> None:
    refuse_foreign(sorted(inspect(connection).get_table_names()), url)


def refuse_foreign(tables: list[str], url: str) -> None:
    """ValueError when `tables` (a database's) hold no farm migration history but something else."""
    if tables and "alembic_version" not in tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise ValueError(
            f"the database {mask_url(url)} is not a farm database: it holds tables ({shown}) but no farm "
            "migration history; use a new database file or URL"
        )


def downgrade(url: str | None = None, revision: str = "-1", engine: Engine | None = None) -> None:
    """Migrate the database at `url` down to `revision` ("base" drops every farm table)."""
    check_revision(revision)
    _run_locked(url, engine, lambda config: command.downgrade(config, revision))


def current(url: str | None = None, engine: Engine | None = None) -> str | None:
    """The revision the database is at, or None when it was never migrated. Opens the
    database read-only (FileNotFoundError for a missing SQLite file: nothing is created)."""
    own = engine is None
    if engine is None:
        resolved = database_url(url)
        parsed = normalize_url(resolved)
        in_memory = parsed.get_backend_name() == "sqlite" and sqlite_path(parsed) is None  # can't be read-only
        engine = create_store_engine(resolved, read_only=not in_memory)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        if own:
            engine.dispose()


def _run_locked(url: str | None, engine: Engine | None, action: Callable[[Config], None]) -> None:
    resolved = database_url(url)
    own = engine is None
    engine = engine or create_store_engine(resolved)
    try:
        with _migration_lock(resolved), engine.begin() as connection:
            _lock_postgres(connection)
            config = alembic_config(resolved)
            config.attributes["connection"] = connection
            action(config)
    finally:
        if own:
            engine.dispose()


def _lock_postgres(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_MIGRATION_LOCK_KEY})


@contextmanager
def _migration_lock(url: str) -> Iterator[None]:
    """An exclusive file lock beside a SQLite database file, removed by its holder at the end;
    nothing for other databases."""
    path = sqlite_path(normalize_url(url))
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".migrate-lock")
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(lock).st_ino
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder before us removed that file: lock the one there now
    try:
        yield
    finally:
        try:
            lock.unlink()  # while locked: whoever waits on this inode retries on a new file
        except FileNotFoundError:
            pass
        os.close(fd)
