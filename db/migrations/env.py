"""Alembic environment for the farm database.

Run from code (`farm db upgrade`, `open_store`) with a connection in
`config.attributes["connection"]`, or from the alembic CLI with `sqlalchemy.url` /
`$FARM_DATABASE_URL`. SQLite gets batch mode so ALTERs work there too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from farm.store.database import create_store_engine, database_url
from farm.store.models import Base, UtcDateTime

config = context.config
target_metadata = Base.metadata


def _render_item(type_: str, obj, autogen_context) -> str | bool:
    """Render UtcDateTime as a plain DateTime so revisions don't import the models."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure(**kwargs) -> None:
    context.configure(target_metadata=target_metadata, compare_type=True, render_item=_render_item, **kwargs)


def run_migrations_offline() -> None:
    url = database_url(config.get_main_option("sqlalchemy.url"))
    _configure(url=url, literal_binds=True, render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def _run_with(connection: Connection) -> None:
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    engine = create_store_engine(database_url(config.get_main_option("sqlalchemy.url")))
    try:
        with engine.begin() as own_connection:
            _run_with(own_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
