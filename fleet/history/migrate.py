"""Schema migrations (alembic), driven from Python with the History's own engine.

Why not an `alembic.ini`: the scripts ship inside the package and must work from any working
directory, for SQLite files and server URLs alike. Upgrades run inside one write transaction
(BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL), so several processes opening a fresh
database at once migrate it exactly once.

On SQLite they run with foreign keys off: most ALTERs there rebuild the table (copy, DROP,
rename), and with foreign keys on, the DROP of `hosts` would cascade into every snapshot, sample,
finding and quarantine. The pragma only takes effect outside a transaction, so it is set on the
connection before BEGIN and set back after; `PRAGMA foreign_key_check` then runs inside the
transaction, and a migration that left a dangling reference is rolled back whole.
"""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, create_engine, text
from sqlmodel import SQLModel

import fleet.history.models  # noqa: F401  (fills SQLModel.metadata)
from fleet.errors import CouldNotComplete
from fleet.history.connection import History, translate_errors

SCRIPT_LOCATION = "fleet.history:migrations"
_PG_LOCK_KEY = 0x666C656574  # "fleet": serialises concurrent upgrades on one server


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(history: History) -> str | None:
    with translate_errors(history), history.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade_if_needed(history: History) -> bool:
    """Upgrade to head when behind; True when something ran. Cheap when already at head."""
    head = head_revision()
    current = current_revision(history)
    if current == head:
        return False
    _check_known(current)
    return upgrade(history)


def upgrade(history: History, target: str = "head") -> bool:
    """Run pending migrations under the write lock; True when the revision changed. On SQLite
    with foreign keys off, and their integrity checked before the commit."""
    sqlite = history.dialect == "sqlite"
    with translate_errors(history), history.engine.connect() as conn:
        if sqlite:
            _foreign_keys(conn, on=False)  # before BEGIN: inside a transaction it is a no-op
        try:
            with conn.begin():
                if history.dialect == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
                before = MigrationContext.configure(conn).get_current_revision()
                _check_known(before)
                try:
                    command.upgrade(alembic_config(conn), target)
                except CommandError as e:
                    raise CouldNotComplete(f"history migration failed: {e}") from e
                after = MigrationContext.configure(conn).get_current_revision()
                if sqlite:
                    _check_references(conn, before, after)
        finally:
            if sqlite:
                _foreign_keys(conn, on=True)  # the pooled connection goes back as it came
    return before != after


def _foreign_keys(conn: Connection, *, on: bool) -> None:
    """Set SQLite's foreign-key enforcement on the DBAPI connection itself: through
    SQLAlchemy the statement would first open a transaction, where SQLite ignores it."""
    raw = conn.connection.driver_connection
    assert raw is not None
    raw.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
    (state,) = raw.execute("PRAGMA foreign_keys").fetchone()
    if bool(state) is not on:
        raise CouldNotComplete("history migration: SQLite did not turn foreign keys "
                               f"{'on' if on else 'off'} (is a transaction open?)")


def _check_references(conn: Connection, before: str | None, after: str | None) -> None:
    """Every foreign key still points at a row; else the migration is rolled back."""
    rows = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
    if rows:
        tables = sorted({f"{r[0]} -> {r[2]}" for r in rows})
        raise CouldNotComplete(
            f"history migration {before or 'base'} -> {after}: {len(rows)} row(s) would "
            f"reference rows that do not exist ({', '.join(tables)}); rolled back, the "
            "database is unchanged")


def schema_diff(history: History) -> list[Any]:
    """What autogenerate would change: empty when the database matches the models."""
    with translate_errors(history), history.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, SQLModel.metadata))


def _check_known(revision: str | None) -> None:
    if revision is None:
        return
    script = ScriptDirectory.from_config(alembic_config())
    try:
        script.get_revision(revision)
    except CommandError:
        raise CouldNotComplete(
            f"the history database is at schema revision {revision!r}, which this version of "
            "fleet does not know: it was written by a newer fleet; upgrade fleet"
        ) from None


def new_revision(message: str, rev_id: str) -> None:
    """Developer tool: autogenerate the next migration from the models.

    Run `python -c 'from fleet.history.migrate import new_revision; new_revision("add x", "0002")'`
    from the repository root, then review the file (autogenerate misses triggers, server defaults
    for NOT NULL columns on tables with rows, and renames).
    """
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/head.db"
        engine = create_engine(url)
        try:
            history = History(engine=engine, url=engine.url)
            upgrade(history)
            with engine.begin() as conn:
                command.revision(alembic_config(conn), message=message, autogenerate=True,
                                 rev_id=rev_id)
        finally:
            engine.dispose()
