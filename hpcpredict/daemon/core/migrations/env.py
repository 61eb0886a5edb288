"""Alembic environment of the daemon's store.

Run by `Store.upgrade`, which hands over an open connection in ``config.attributes``; a URL in
the config's ``sqlalchemy.url`` works too (a developer's ad-hoc run), and ``--sql`` (offline)
writes the SQL for a DBA instead of running it.

Why these options (after PrefectHQ/prefect's migrations environment):

* ``render_as_batch`` on SQLite only: SQLite's ALTER TABLE cannot change or drop most things, so
  Alembic's batch mode recreates the table; PostgreSQL alters in place.
* ``transaction_per_migration``: each revision commits on its own, so a failure leaves the
  database at the last revision that succeeded, not half-way through one.
* ``compare_type``: a column whose type changed in the models is drift too.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from hpcpredict.daemon.core.store import Base

TARGET_METADATA = Base.metadata


def _run_with(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=TARGET_METADATA,
        render_as_batch=connection.dialect.name == "sqlite",
        transaction_per_migration=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("no connection in config.attributes and no sqlalchemy.url to open one")
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as connection:
            _run_with(connection)
            connection.commit()
    finally:
        engine.dispose()


def run_offline() -> None:
    context.configure(
        url=context.config.get_main_option("sqlalchemy.url"),
        target_metadata=TARGET_METADATA,
        literal_binds=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
