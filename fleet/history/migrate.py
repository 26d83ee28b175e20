"""Schema migrations (alembic), driven from Python with the History's own engine.

Why not an `alembic.ini`: the scripts ship inside the package and must work from any working
directory, for SQLite files and server URLs alike. Upgrades run inside one write transaction
(BEGIN IMMEDIATE on SQLite, an advisory lock on PostgreSQL), so several processes opening a fresh
database at once migrate it exactly once.
"""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, text
from sqlmodel import SQLModel

import fleet.history.models  # noqa: F401  (fills SQLModel.metadata)
from fleet.errors import CouldNotComplete
from fleet.history.engine import History, translate_errors

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
    """Run pending migrations under the write lock; True when the revision changed."""
    with translate_errors(history), history.engine.begin() as conn:
        if history.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        before = MigrationContext.configure(conn).get_current_revision()
        _check_known(before)
        try:
            command.upgrade(alembic_config(conn), target)
        except CommandError as e:
            raise CouldNotComplete(f"history migration failed: {e}") from e
        after = MigrationContext.configure(conn).get_current_revision()
    return before != after


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

    from fleet.history.engine import open_history

    with tempfile.TemporaryDirectory() as tmp, open_history(f"{tmp}/head.db") as h, \
            h.engine.begin() as conn:
        command.revision(alembic_config(conn), message=message, autogenerate=True,
                         rev_id=rev_id)
