"""Migrations run with SQLite's foreign keys off and check them after (issue 32, finding 9).

Most ALTERs on SQLite rebuild the table (copy, DROP, rename): with foreign keys on, a migration
that rebuilds `hosts` would cascade its DROP into every snapshot, sample, finding and
quarantine. The tests add a migration of their own after the shipped ones (a copy of the
migrations folder) and run `upgrade` on a history holding a snapshot."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from fleet.errors import CouldNotComplete
from fleet.history import add_snapshot, open_history
from fleet.history import migrate as M

SHIPPED = Path(M.__file__).parent / "migrations"

REBUILD_HOSTS = '''
import sqlalchemy as sa
from alembic import op

revision = "9001"
down_revision = {head!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hosts", recreate="always") as b:
        b.add_column(sa.Column("rack", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts", recreate="always") as b:
        b.drop_column("rack")
'''

DANGLING = '''
from alembic import op

revision = "9001"
down_revision = {head!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE snapshots SET host_id = 424242")


def downgrade() -> None:
    pass
'''


def with_extra_migration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    head = M.head_revision()
    folder = tmp_path / "migrations"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "versions" / "9001_test.py").write_text(body.format(head=head))
    monkeypatch.setattr(M, "SCRIPT_LOCATION", str(folder))


def count(history: object, table: str) -> int:
    with history.engine.connect() as c:  # type: ignore[attr-defined]
        return int(c.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def foreign_keys_on(history: object) -> bool:
    with history.engine.connect() as c:  # type: ignore[attr-defined]
        return bool(c.exec_driver_sql("PRAGMA foreign_keys").scalar_one())


def test_a_migration_that_rebuilds_hosts_keeps_every_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        add_snapshot(h, "gpu-01", taken_at=datetime.now(UTC), source="none", reachable=True,
                     facts={}, pool="h100")
        with_extra_migration(tmp_path, monkeypatch, REBUILD_HOSTS)
        assert M.upgrade(h) is True
        assert M.current_revision(h) == "9001"
        assert count(h, "snapshots") == 1 and count(h, "hosts") == 1
        assert foreign_keys_on(h)  # set back on the pooled connection


def test_a_migration_that_leaves_a_dangling_reference_is_rolled_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        add_snapshot(h, "gpu-01", taken_at=datetime.now(UTC), source="none", reachable=True,
                     facts={}, pool="h100")
        head = M.current_revision(h)
        with_extra_migration(tmp_path, monkeypatch, DANGLING)
        with pytest.raises(CouldNotComplete, match=r"snapshots -> hosts.*rolled back"):
            M.upgrade(h)
        assert M.current_revision(h) == head
        with h.engine.connect() as c:
            assert c.execute(text("SELECT host_id FROM snapshots")).scalar_one() != 424242
        assert foreign_keys_on(h)
