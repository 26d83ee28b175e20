"""Alembic: a fresh database lands on head, matches the models, and round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from fleet.errors import CouldNotComplete
from fleet.history import open_history, record_event
from fleet.history.migrate import (
    alembic_config,
    current_revision,
    head_revision,
    schema_diff,
    upgrade,
    upgrade_if_needed,
)

TABLES = {"hosts", "snapshots", "gpu_samples", "findings", "benchmark_runs", "benchmark_samples",
          "rollouts", "waves", "host_steps", "quarantines", "events", "alembic_version",
          "gpu_rollups"}


def test_one_linear_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert len(script.get_heads()) == 1
    assert script.get_base() == "0001"


def test_open_upgrades_to_head_and_matches_models(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        assert current_revision(h) == head_revision()
        assert set(inspect(h.engine).get_table_names()) == TABLES
        assert schema_diff(h) == []  # the `alembic check` equivalent
        assert upgrade_if_needed(h) is False  # second open: nothing to do


def test_open_without_migrate_leaves_db_empty(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "f.db"), migrate=False) as h:
        assert current_revision(h) is None
        assert schema_diff(h) != []
        assert upgrade(h) is True
        assert current_revision(h) == head_revision()


def test_downgrade_and_upgrade_round_trip(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        record_event(h, "t", "s", "m")
        with h.engine.begin() as conn:
            command.downgrade(alembic_config(conn), "base")
        assert set(inspect(h.engine).get_table_names()) == {"alembic_version"}
        assert upgrade(h) is True
        assert schema_diff(h) == []


def test_database_from_a_newer_fleet_is_refused(tmp_path: Path) -> None:
    db = str(tmp_path / "f.db")
    open_history(db).close()
    with open_history(db, migrate=False) as h, h.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(CouldNotComplete, match="newer fleet"):
        open_history(db)


def test_file_head_matches_alembic_and_skips_it_at_head(tmp_path) -> None:
    """`open_history` reads the head from the migration files (no alembic import) and upgrades
    only when the database is behind it."""
    from fleet.history import open_history
    from fleet.history.engine import at_head, file_head
    from fleet.history.migrate import head_revision

    assert file_head() == head_revision()
    with open_history(str(tmp_path / "h.db")) as h:
        assert at_head(h)
        with h.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = 'older'")
        assert not at_head(h)
