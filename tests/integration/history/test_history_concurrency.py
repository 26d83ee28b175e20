"""Several processes write one history at once and nothing is lost (SQLite file, PostgreSQL)."""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import func, select

from fleet.history import count_events, open_history
from fleet.history.migrate import current_revision, head_revision
from fleet.history.models import Host

sys.path.insert(0, str(Path(__file__).parent))
import history_workers  # noqa: E402

PROCS = 6
EVENTS = 50


def _run_workers(target: str) -> dict[str, float]:
    ctx = mp.get_context("spawn")  # no engine or lock state inherited from the test process
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=history_workers.append_and_count,
                         args=(target, w, EVENTS, go, out)) for w in range(PROCS)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every child import fleet before the race starts
    t0 = time.perf_counter()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    errors = [e for _, _, errs in results for e in errs]
    assert not errors, errors
    total = PROCS * EVENTS
    figures = {"processes": PROCS, "events": total, "increments": total,
               "wall_s": round(wall, 2), "writes_per_s": round(2 * total / wall, 1)}
    print(f"\nconcurrency {target.split(':')[0]}: {figures}")
    return figures


def _assert_nothing_lost(target: str) -> None:
    with open_history(target) as h:
        assert current_revision(h) == head_revision()
        assert count_events(h, kind="concurrency") == PROCS * EVENTS
        with h.read() as s:
            hosts = s.exec(select(Host).where(Host.name == history_workers.COUNTER_HOST)).all()
            assert len(hosts) == 1  # the concurrent upserts made exactly one row
            assert hosts[0].gpu_count == PROCS * EVENTS  # no lost read-modify-write update
            per_worker = s.exec(
                select(func.count()).select_from(Host)).one()
            assert per_worker == 1


@pytest.mark.slow
def test_sqlite_processes_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"  # does not exist yet: the workers race to create and migrate it
    _run_workers(str(db))
    _assert_nothing_lost(str(db))
    assert db.stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
@pytest.mark.postgres
def test_postgres_processes_lose_nothing(pg_db: str) -> None:
    _run_workers(pg_db)  # fresh, empty database: the workers race to migrate it
    _assert_nothing_lost(pg_db)
