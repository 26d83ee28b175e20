"""The condensing trend reader on a real PostgreSQL server: the same reports as the row-by-row
reader, and as the same history on SQLite (resets, swaps, NULL counters, rollups after a prune;
across the two databases to float rounding: SQLite's julianday reads times to the millisecond)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from fleet.domain.retention import RetentionPolicy
from fleet.domain.trends import TrendSettings
from fleet.history import add_snapshot, open_history
from fleet.history.retention import prune
from tests.unit.history.test_retention import assert_same_trend
from tests.unit.history.test_trend_read import (  # noqa: F401  (spy: a fixture)
    GPUS,
    HOSTS,
    NOW_DT,
    fill_varied,
    reports,
    spy,
)

pytestmark = pytest.mark.postgres


def test_condensed_read_on_postgres_matches_row_by_row_and_sqlite(
        pg_db: str, tmp_path: Path, spy: dict[str, int]) -> None:  # noqa: F811
    s = TrendSettings()
    with open_history(pg_db) as pg, open_history(str(tmp_path / "same.db")) as lite:
        for h in (pg, lite):
            fill_varied(h, weeks=16)
            for d in range(6):  # a host whose samples all sit inside the window
                add_snapshot(h, "fresh", taken_at=NOW_DT - dt.timedelta(days=3 * d),
                             source="nvml", gpus=[{"gpu_index": 0, "uuid": "G",
                                                   "aer_corrected": 1000 * (6 - d)}])
        for step in ("raw", "pruned"):
            if step == "pruned":
                for h in (pg, lite):
                    prune(h, RetentionPolicy(raw_weeks=9, rollup_weeks=None), now=NOW_DT)
            a = reports(pg, s, condensed=True)
            assert a == reports(pg, s, condensed=False)
            b = reports(lite, s, condensed=True)
            assert a.keys() == b.keys() and len(a) == HOSTS * GPUS + 2
            for key in a:
                if key[1] >= 0:
                    assert_same_trend(a[key], b[key])
            assert any(g["flags"] for key, g in a.items() if key[1] >= 0)
        assert spy["condensed"] >= 12 and spy["full"] >= 4  # both paths, on both databases
