"""The SQLite engine: private file, WAL, foreign keys, write lock up front, clean errors."""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import exc, text

from fleet.errors import BadInput, CouldNotComplete
from fleet.history import add_snapshot, open_history, record_event, utcnow
from fleet.history.engine import parse_target
from fleet.history.models import Event, GpuSample, Host, Snapshot


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "fleet.db"


def test_new_file_is_private_even_with_a_loose_umask(db: Path) -> None:
    old = os.umask(0o022)
    try:
        with open_history(str(db)) as h:
            record_event(h, "t", "s", "m")
    finally:
        os.umask(old)
    assert db.stat().st_mode & 0o777 == 0o600


def test_existing_file_mode_is_left_alone(db: Path) -> None:
    db.touch(mode=0o640)
    os.chmod(db, 0o640)
    open_history(str(db)).close()
    assert db.stat().st_mode & 0o777 == 0o640


def test_sqlite_url_and_plain_path_are_the_same_file(db: Path) -> None:
    assert parse_target(str(db)).database == str(db)
    with open_history(f"sqlite:///{db}") as h:
        record_event(h, "t", "s", "via url")
    assert db.stat().st_mode & 0o777 == 0o600


def test_pragmas(db: Path) -> None:
    with open_history(str(db)) as h, h.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000


def _other_writer_blocked(db: Path) -> bool:
    """Can another connection take the write lock right now (no waiting)?"""
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as e:
        assert "locked" in str(e)
        return True
    finally:
        other.close()


def test_write_sessions_take_the_lock_at_begin_reads_do_not(db: Path) -> None:
    with open_history(str(db)) as h:
        with h.write() as s:
            s.exec(text("SELECT 1"))  # a read inside a write session already holds the lock
            assert _other_writer_blocked(db)
        with h.read() as s:
            s.exec(text("SELECT count(*) FROM events"))
            assert not _other_writer_blocked(db)
        assert not _other_writer_blocked(db)


def test_foreign_keys_cascade(db: Path) -> None:
    with open_history(str(db)) as h:
        add_snapshot(h, "gpu01", taken_at=utcnow(), source="nvml",
                     gpus=[{"gpu_index": 0}, {"gpu_index": 1}],
                     findings=[{"check_id": "ecc", "severity": "warn"}])
        with h.write() as s:
            s.delete(s.get(Host, 1))
        with h.read() as s:
            assert s.exec(text("SELECT count(*) FROM snapshots")).scalar() == 0
            assert s.exec(text("SELECT count(*) FROM gpu_samples")).scalar() == 0
            assert s.exec(text("SELECT count(*) FROM findings")).scalar() == 0


def test_foreign_keys_enforced(db: Path) -> None:
    with open_history(str(db)) as h, pytest.raises(exc.IntegrityError), h.write() as s:
        s.add(Snapshot(host_id=999, taken_at=utcnow(), source="nvml"))


def test_naive_datetime_rejected_by_api_and_by_models(db: Path) -> None:
    naive = dt.datetime(2025, 1, 1, 12, 0)
    with open_history(str(db)) as h:
        with pytest.raises(ValueError, match="timezone-aware"):
            record_event(h, "t", "s", "m", at=naive)
        with pytest.raises(ValueError, match="timezone-aware"):
            add_snapshot(h, "gpu01", taken_at=naive, source="nvml")
        with pytest.raises(exc.StatementError, match="timezone"), h.write() as s:
            s.add(Event(at=naive, actor="a", kind="k"))


def test_aware_datetimes_come_back_in_utc(db: Path) -> None:
    cest = dt.timezone(dt.timedelta(hours=2))
    at = dt.datetime(2025, 6, 1, 14, 0, tzinfo=cest)
    with open_history(str(db)) as h:
        add_snapshot(h, "gpu01", taken_at=at, source="nvml", gpus=[{"gpu_index": 0}])
        with h.read() as s:
            sample = s.get(GpuSample, 1)
            assert sample is not None
            assert sample.taken_at == at
            assert sample.taken_at.utcoffset() == dt.timedelta(0)
            assert sample.taken_at.hour == 12


def test_event_log_is_append_only(db: Path) -> None:
    with open_history(str(db)) as h:
        record_event(h, "t", "s", "m")
        for stmt in ("UPDATE events SET message = 'rewritten'", "DELETE FROM events"):
            with pytest.raises(exc.IntegrityError, match="append-only"), h.write() as s:
                s.exec(text(stmt))


def test_missing_directory_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist"):
        open_history(str(tmp_path / "nope" / "fleet.db"))


def test_not_a_database_could_not_complete(db: Path) -> None:
    db.write_text("this is not sqlite\n" * 200)
    with pytest.raises(CouldNotComplete, match="not a SQLite database"):
        open_history(str(db))


def test_unwritable_directory_could_not_complete(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*_a: object, **_k: object) -> int:  # as root, chmod cannot make a dir unwritable
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("fleet.history.engine.os.open", denied)
    with pytest.raises(CouldNotComplete, match="cannot create history database .*Permission"):
        open_history(str(db))


@pytest.mark.parametrize("url", ["", "  ", "nosuchdialect://x/y", "postgresql+nosuchdriver://h/db"])
def test_bad_urls_are_bad_input(url: str) -> None:
    with pytest.raises(BadInput):
        open_history(url)


def test_unreachable_server_could_not_complete() -> None:
    with pytest.raises(CouldNotComplete, match=r"postgres:\*\*\*@127.0.0.1:1/") as info:
        open_history("postgresql+psycopg://postgres:secret@127.0.0.1:1/fleet")
    assert "secret" not in str(info.value)


def test_in_memory_sqlite_works() -> None:
    with open_history("sqlite:///:memory:") as h:
        assert record_event(h, "t", "s", "m") == 1
