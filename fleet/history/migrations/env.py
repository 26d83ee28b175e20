"""Alembic environment of the history store.

Run through `fleet.history.migrate`, which hands over an open connection (already inside a
transaction that holds the write lock) in `config.attributes["connection"]`. `render_as_batch`
lets SQLite alter tables by recreating them; it is a no-op on PostgreSQL.
"""

from alembic import context
from sqlalchemy import create_engine, pool
from sqlmodel import SQLModel

import fleet.history.models  # noqa: F401  (registers the tables on SQLModel.metadata)

config = context.config
target_metadata = SQLModel.metadata


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # plain `alembic` CLI use by a developer
        url = config.get_main_option("sqlalchemy.url") or ""
        engine = create_engine(url, poolclass=pool.NullPool)
        with engine.begin() as conn:
            _run(conn)
        return
    _run(connection)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
