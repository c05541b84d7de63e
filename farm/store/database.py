"""The store: an engine plus what it was opened for, and `open_store`, the one entry
point: it builds the engine (farm.store.engine) and, unless read-only, runs the Alembic
migrations (farm.store.migrate) to head the first time a process opens a URL.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sqlalchemy import Engine, inspect

from farm.store.engine import create_store_engine, database_url, farm_home, mask_url
from farm.store.migrate import refuse_foreign, upgrade
from farm.store.retry import retry_window_s

__all__ = ["ReadOnlyStoreError", "Store", "database_url", "farm_home", "open_existing", "open_store"]

_migrated: set[str] = set()
_migrated_lock = threading.Lock()


class ReadOnlyStoreError(PermissionError):
    """A write was attempted through a store opened with read_only=True."""


@dataclass(frozen=True)
class Store:
    """An engine plus what it was opened for. Repository functions take a Store."""

    engine: Engine
    url: str = field(repr=False)  # may hold a password: show `safe_url`
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
        """The URL with its password masked (farm.store.engine.mask_url)."""
        return mask_url(self.url)


def open_store(url: str | None = None, read_only: bool = False) -> Store:
    """Open the farm database at `database_url(url)`.

    Writable stores are migrated to the newest Alembic revision the first time this
    process opens the URL (safe when several processes start at once: see
    `farm.store.migrate`). Read-only stores never migrate and refuse writes, both in the
    repository functions and in the database session itself.
    """
    retry_window_s()  # a bad $FARM_DB_RETRY_S is refused before anything is opened
    resolved = database_url(url)
    engine = create_store_engine(resolved, read_only=read_only)
    store = Store(engine=engine, url=resolved, read_only=read_only)
    if not read_only:
        with _migrated_lock:
            if resolved not in _migrated:
                upgrade(store.url, engine=engine)
                _migrated.add(resolved)
    return store


def open_existing(url: str | None = None) -> Store | None:
    """The read-only store for commands that only read (`farm winners`, `export`): None when
    there is no farm database yet (no SQLite file, or a database without tables);
    ValueError for another program's database. Creates nothing, not even a directory."""
    try:
        store = open_store(url, read_only=True)
    except FileNotFoundError:
        return None
    if store.has_schema():
        return store
    tables = sorted(inspect(store.engine).get_table_names())
    store.engine.dispose()
    refuse_foreign(tables, store.url)
    return None
