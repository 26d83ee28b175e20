"""The condensing trend reader (`iter_gpu_series(..., window_start=)`) against the row-by-row
reader on a real SQLite history: identical reports (every weekly figure, flag and latest value),
with resets, board swaps and back, missed weeks, NULL counters, samples at the same instant,
weekly rollups after a prune, a host filter and a `since`."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest

import fleet.history.trend_read as trend_read
from fleet.domain.matrix.models import Thresholds
from fleet.domain.retention import RetentionPolicy
from fleet.domain.trends import SERIES_FIELDS, WEEK_S, TrendSettings, analyze
from fleet.history import History, add_snapshot, iter_gpu_series, open_history
from fleet.history.retention import prune
from tests.unit.history.test_retention import NOW, gen_series
from tests.unit.hygiene.test_trend_prefix import wild_series

NOW_DT = dt.datetime.fromtimestamp(NOW, dt.UTC)
TH = Thresholds(ecc_corrected_per_week_max=50)
HOSTS = 6
GPUS = 3


def fill_varied(h: History, *, seed: int = 5, weeks: int = 30) -> None:
    """HOSTS hosts x GPUS GPUs: tame GPUs (weekly-ish probes, resets, a swap), wild GPUs
    (counters unreadable alone, boards swapped back, missed weeks, probes at one instant)."""
    rnd = random.Random(seed)
    for host in range(HOSTS):
        per_gpu = [wild_series(seed * 100 + host * 10 + g, weeks=weeks) if (host + g) % 3 == 0
                   else gen_series(seed * 100 + host * 10 + g, weeks=weeks,
                                   per_day=rnd.choice([0.15, 0.5]), swap=g == 1,
                                   reset_share=0.3)
                   for g in range(GPUS)]
        times = sorted({r[0] for rows in per_gpu for r in rows})
        idx = [0] * GPUS
        for t in times:
            gpus = []
            for g, rows in enumerate(per_gpu):
                while idx[g] + 1 < len(rows) and rows[idx[g] + 1][0] <= t:
                    idx[g] += 1
                r = rows[idx[g]]
                if r[0] > t:
                    continue  # this GPU had no sample yet
                d = dict(zip(SERIES_FIELDS, r, strict=True))
                d.pop("t")
                if isinstance(d["xid_counts"], str):
                    d["xid_counts"] = {}
                if d["uuid"] is not None:  # a board's UUID is its own: one index, one board
                    d["uuid"] = f"{d['uuid']}-{g}"
                gpus.append({"gpu_index": g, **d})
            add_snapshot(h, f"gpu{host:02d}", taken_at=dt.datetime.fromtimestamp(round(t), dt.UTC),
                         source="nvml", pool=f"p{host % 2}", gpu_model="H100", gpus=gpus)


def reports(h: History, settings: TrendSettings, *, condensed: bool, now: dt.datetime = NOW_DT,
            **kw: Any) -> dict[tuple[str, int], dict[str, Any]]:
    start = now - dt.timedelta(seconds=settings.window_s)
    report = analyze(iter_gpu_series(h, until=now, window_start=start if condensed else None,
                                     **kw),
                     now=now.timestamp(), thresholds=TH, settings=settings)
    out = {(g.host, g.gpu_index): g.as_dict() for g in report.gpus}
    out[("medians", -1)] = report.medians
    return out


@pytest.fixture(scope="module")
def varied_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trend-read") / "varied.db"
    with open_history(str(path)) as h:
        fill_varied(h)
    return path


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often condensing applied and how often a GPU was read in full."""
    seen = {"condensed": 0, "full": 0}
    real = trend_read.condensed

    def counting(*a: Any, **kw: Any) -> Any:
        out = real(*a, **kw)
        seen["condensed" if out is not None else "full"] += 1
        return out

    monkeypatch.setattr(trend_read, "condensed", counting)
    return seen


@pytest.mark.parametrize(("k", "per_read"), [(1, 500), (4, 2), (13, 4)])
def test_condensed_read_gives_the_same_reports(varied_db: Path, spy: dict[str, int], k: int,
                                               per_read: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trend_read, "HOSTS_PER_READ", per_read)  # slices of hosts, or one
    s = TrendSettings(window_weeks=k, min_weeks=min(3, k))
    with open_history(str(varied_db)) as h:
        a, b = reports(h, s, condensed=True), reports(h, s, condensed=False)
        assert a == b
        assert len(a) == HOSTS * GPUS + 1
        assert spy["condensed"] >= 6 and spy["full"] >= 1  # both paths taken
        assert any(g["flags"] for key, g in a.items() if key[1] >= 0)  # not vacuous
        # since and a host filter, and a `now` between probes
        now = NOW_DT - dt.timedelta(days=2.5)
        kw: dict[str, Any] = {"since": now - dt.timedelta(weeks=k + 6),
                              "hosts": ["gpu01", "gpu04", "nosuch"]}
        a = reports(h, s, condensed=True, now=now, **kw)
        assert a == reports(h, s, condensed=False, now=now, **kw)
        assert {key[0] for key in a} == {"gpu01", "gpu04", "medians"}


def test_condensed_read_after_a_prune_gives_the_same_reports(
        varied_db: Path, tmp_path: Path, spy: dict[str, int]) -> None:
    db = tmp_path / "pruned.db"
    db.write_bytes(varied_db.read_bytes())
    s = TrendSettings()
    with open_history(str(db)) as h:
        r = prune(h, RetentionPolicy(raw_weeks=9, rollup_weeks=None), now=NOW_DT)
        assert r.rollups_added > 0
        a, b = reports(h, s, condensed=True), reports(h, s, condensed=False)
        assert a == b and len(a) == HOSTS * GPUS + 1
        assert spy["condensed"] >= 6
        # every raw sample before the window rolled up: rollups and the window only
        prune(h, RetentionPolicy(raw_weeks=1, rollup_weeks=None),
              now=NOW_DT + dt.timedelta(weeks=3))
        assert reports(h, s, condensed=True) == reports(h, s, condensed=False)


def test_a_window_without_samples_before_it_reads_as_before(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "new.db")) as h:
        for d in range(10):
            add_snapshot(h, "fresh", taken_at=NOW_DT - dt.timedelta(days=d * 2), source="nvml",
                         gpus=[{"gpu_index": 0, "uuid": "G", "aer_corrected": 100 * (10 - d)}])
        s = TrendSettings()
        assert reports(h, s, condensed=True) == reports(h, s, condensed=False)
        assert WEEK_S * 4 > 20 * 86400  # every sample sits inside the window
