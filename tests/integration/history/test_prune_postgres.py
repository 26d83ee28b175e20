"""`fleet history prune` on a real PostgreSQL server: the same trends after pruning, idempotent,
and no sample lost while other writers (another controller) and another prune run at once."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from sqlmodel import func, select

from fleet.domain.retention import RetentionPolicy
from fleet.history import History, add_snapshot, open_history
from fleet.history.models import GpuRollup, GpuSample
from fleet.history.retention import prune
from tests.unit.history.test_retention import assert_same_trend
from tests.unit.history.test_retention_prune import NOW_DT, fill, year_trends

pytestmark = pytest.mark.postgres


def samples_accounted(h: History) -> int:
    """Raw samples left plus the samples every rollup stands for."""
    with h.read() as s:
        raw = int(s.exec(select(func.count()).select_from(GpuSample)).one())
        folded = int(s.exec(select(func.coalesce(func.sum(GpuRollup.count), 0))).one())
    return raw + folded


def test_prune_on_postgres_keeps_trends_and_is_idempotent(pg_db: str) -> None:
    with open_history(pg_db) as h:
        fill(h, weeks=30)
        before = year_trends(h)
        total = samples_accounted(h)
        policy = RetentionPolicy(raw_weeks=8, rollup_weeks=None)
        r1 = prune(h, policy, now=NOW_DT)
        assert r1.samples_rolled_up > 0 and r1.rollups_added > 0 and r1.snapshots_deleted > 0
        assert samples_accounted(h) == total
        after = year_trends(h)
        assert after.keys() == before.keys()
        for key in before:
            assert_same_trend(after[key], before[key])
        r2 = prune(h, policy, now=NOW_DT)
        assert not r2.changed and year_trends(h) == after


def test_no_sample_lost_while_controllers_write_and_prune_at_once(pg_db: str) -> None:
    """Two prunes and a writer of old and new samples race; afterwards every sample written is
    either still raw or counted in exactly one rollup."""
    with open_history(pg_db) as h:
        fill(h, weeks=20)
    written = [0]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        with open_history(pg_db) as w:
            i = 0
            while not stop.is_set() and i < 400:
                # alternately a sample in a week being pruned and one of today
                age = dt.timedelta(weeks=12, hours=i) if i % 2 else dt.timedelta(hours=i)
                add_snapshot(w, f"late{i % 3}", taken_at=NOW_DT - age, source="nvml",
                             gpus=[{"gpu_index": 0, "uuid": f"GPU-late{i % 3}",
                                    "ecc_corrected_aggregate": i}])
                written[0] += 1
                i += 1

    def pruner(results: list[Any]) -> None:
        try:
            with open_history(pg_db) as p:
                for _ in range(3):
                    results.append(prune(p, RetentionPolicy(raw_weeks=6), now=NOW_DT,
                                         batch_hosts=1))
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    with open_history(pg_db) as h:
        start_total = samples_accounted(h)
    results: list[Any] = []
    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=pruner, args=(results,)) for _ in range(2)]
    for t in threads[1:]:
        t.start()
    threads[0].start()
    for t in threads[1:]:
        t.join(timeout=120)
    stop.set()
    threads[0].join(timeout=120)
    assert not errors, errors
    assert len(results) == 6 and sum(r.samples_rolled_up for r in results) > 0
    with open_history(pg_db) as h:
        final = prune(h, RetentionPolicy(raw_weeks=6), now=NOW_DT)  # folds what came late
        assert samples_accounted(h) == start_total + written[0]
        cutoff = final.raw_cutoff
        with h.read() as s:
            old_raw = s.exec(select(func.count()).select_from(GpuSample)
                             .where(GpuSample.taken_at <= cutoff)).one()
        assert old_raw == 0
        assert not prune(h, RetentionPolicy(raw_weeks=6), now=NOW_DT).changed
