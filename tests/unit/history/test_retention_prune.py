"""`fleet history prune` on a real SQLite file: a year of samples folded into weekly rollups reads
the same trends, a second prune changes nothing, a dry run changes nothing, late samples merge."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import func, select
from typer.testing import CliRunner

from fleet.cli.app import app
from fleet.domain.matrix.models import Thresholds
from fleet.domain.retention import RetentionPolicy, week_of
from fleet.domain.trends import SERIES_FIELDS, WEEK_S, analyze
from fleet.errors import BadInput
from fleet.history import History, add_snapshot, iter_gpu_series, list_events, open_history
from fleet.history.models import Finding, GpuRollup, GpuSample, Snapshot
from fleet.history.retention import prune
from tests.unit.history.test_retention import NOW, YEAR, assert_same_trend, gen_series

runner = CliRunner()
NOW_DT = dt.datetime.fromtimestamp(NOW, dt.UTC)
HOSTS = ("gpu01", "gpu02")


def fill(h: History, *, weeks: int = 60, seed: int = 1) -> int:
    """Two hosts x two GPUs, about one probe a day for `weeks` weeks, hot and quiet GPUs."""
    series = {(host, g): gen_series(seed + 10 * i + g, weeks=weeks, per_day=1.0, hot=g == 1)
              for i, host in enumerate(HOSTS) for g in (0, 1)}
    n = 0
    for host in HOSTS:
        # one snapshot per GPU-0 sample time; GPU 1's reading nearest before it rides along
        rows0, rows1 = series[(host, 0)], series[(host, 1)]
        j = 0
        for r0 in rows0:
            while j + 1 < len(rows1) and rows1[j + 1][0] <= r0[0]:
                j += 1
            gpus = []
            for idx, r in ((0, r0), (1, rows1[j])):
                d = dict(zip(SERIES_FIELDS, r, strict=True))
                d.pop("t")
                if d["uuid"] is not None:  # a board's UUID is its own: one index, one board
                    d["uuid"] = f"{d['uuid']}-{idx}"
                gpus.append({"gpu_index": idx, **d})
            t = dt.datetime.fromtimestamp(round(r0[0]), dt.UTC)
            add_snapshot(h, host, taken_at=t, source="nvml", pool="p", gpu_model="H100",
                         gpus=gpus, findings=[{"check_id": "driver", "severity": "ok"}])
            n += 1
    return n


def year_trends(h: History) -> dict[tuple[str, int], dict[str, Any]]:
    since = NOW_DT - dt.timedelta(seconds=YEAR.lookback_s)
    report = analyze(iter_gpu_series(h, since=since, until=NOW_DT), now=NOW,
                     thresholds=Thresholds(), settings=YEAR)
    return {(g.host, g.gpu_index): g.as_dict() for g in report.gpus}


def count(h: History, model: Any) -> int:
    with h.read() as s:
        return int(s.exec(select(func.count()).select_from(model)).one())


@pytest.fixture(scope="module")
def year_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ret") / "year.db"
    with open_history(str(path)) as h:
        fill(h)
    return path


def copy(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    return dst


def test_a_pruned_year_reads_the_same_trends_and_prune_twice_changes_nothing(
        year_db: Path, tmp_path: Path) -> None:
    db = copy(year_db, tmp_path / "f.db")
    with open_history(str(db)) as h:
        before = year_trends(h)
        samples, snaps = count(h, GpuSample), count(h, Snapshot)
        policy = RetentionPolicy(raw_weeks=13, rollup_weeks=None)
        r1 = prune(h, policy, now=NOW_DT, actor="test")
        assert r1.changed and r1.samples_rolled_up > 0 and r1.rollups_added > 0
        assert count(h, GpuSample) == samples - r1.samples_rolled_up
        cutoff = NOW_DT - dt.timedelta(weeks=13)
        with h.read() as s:
            oldest = s.exec(select(func.min(GpuSample.taken_at))).one()
        assert oldest is not None and oldest > cutoff
        # every rolled-up week of every GPU: one rollup, at most 2 hosts x 2 GPUs x 48 weeks
        assert count(h, GpuRollup) == r1.rollups_added <= 2 * 2 * 48
        assert count(h, Snapshot) == snaps - r1.snapshots_deleted
        assert r1.findings_deleted == r1.snapshots_deleted  # one finding per snapshot here
        after = year_trends(h)
        assert after.keys() == before.keys() and len(after) == 4
        for key in before:
            assert_same_trend(after[key], before[key])
        assert any(t["flags"] for t in before.values())  # the comparison is not vacuous
        events = list_events(h, kind="history.prune")
        assert len(events) == 1 and events[0].data["samples_rolled_up"] == r1.samples_rolled_up

        state = (count(h, GpuSample), count(h, GpuRollup), count(h, Snapshot))
        r2 = prune(h, policy, now=NOW_DT, actor="test")
        assert not r2.changed and r2.samples_rolled_up == r2.rollups_added == 0
        assert (count(h, GpuSample), count(h, GpuRollup), count(h, Snapshot)) == state
        assert len(list_events(h, kind="history.prune")) == 1  # nothing done, nothing recorded
        assert year_trends(h) == after


def test_dry_run_reports_and_changes_nothing(year_db: Path, tmp_path: Path) -> None:
    db = copy(year_db, tmp_path / "f.db")
    with open_history(str(db)) as h:
        state = (count(h, GpuSample), count(h, GpuRollup), count(h, Snapshot), count(h, Finding))
        dry = prune(h, RetentionPolicy(raw_weeks=13), now=NOW_DT, dry=True)
        assert dry.dry and dry.samples_rolled_up > 0
        assert (count(h, GpuSample), count(h, GpuRollup), count(h, Snapshot),
                count(h, Finding)) == state
        assert list_events(h, kind="history.prune") == []
        real = prune(h, RetentionPolicy(raw_weeks=13), now=NOW_DT)
        assert (real.samples_rolled_up, real.rollups_added, real.snapshots_deleted) == \
            (dry.samples_rolled_up, dry.rollups_added, dry.snapshots_deleted)


def test_rollups_expire_and_each_host_keeps_its_latest_snapshot(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        fill(h, weeks=30)
        prune(h, RetentionPolicy(raw_weeks=6, rollup_weeks=None), now=NOW_DT)
        weeks_before = count(h, GpuRollup)
        later = NOW_DT + dt.timedelta(weeks=8)  # nothing new written: every sample ages out
        r = prune(h, RetentionPolicy(raw_weeks=6, rollup_weeks=12), now=later)
        assert r.samples_rolled_up > 0 and r.rollups_expired > 0
        with h.read() as s:
            weeks = s.exec(select(GpuRollup.week)).all()
        assert weeks and min(weeks) >= week_of(later.timestamp() - 12 * WEEK_S)
        assert count(h, GpuRollup) < weeks_before + r.rollups_added
        assert count(h, GpuSample) == 0
        with h.read() as s:  # latest_snapshots still has something to show per host
            hosts = s.exec(select(Snapshot.host_id).distinct()).all()
        assert len(hosts) == len(HOSTS)


def test_a_late_sample_in_a_pruned_week_is_merged_on_the_next_prune(tmp_path: Path) -> None:
    with open_history(str(tmp_path / "f.db")) as h:
        fill(h, weeks=20)
        policy = RetentionPolicy(raw_weeks=6, rollup_weeks=None)
        prune(h, policy, now=NOW_DT)
        rollups = count(h, GpuRollup)
        late = NOW_DT - dt.timedelta(weeks=10, hours=3)  # another controller, a week pruned
        add_snapshot(h, "gpu01", taken_at=late, source="nvml",
                     gpus=[{"gpu_index": 0, "uuid": "GPU-a-0", "xid_counts": {"79": 1}}])
        with h.read() as s:
            wk = week_of(late.timestamp())
            old = s.exec(select(GpuRollup).where(GpuRollup.week == wk,
                                                 GpuRollup.gpu_index == 0)).all()
        r = prune(h, policy, now=NOW_DT)
        assert (r.samples_rolled_up, r.rollups_merged, r.rollups_added) == (1, 1, 0)
        assert count(h, GpuRollup) == rollups
        with h.read() as s:
            new = [x for x in s.exec(select(GpuRollup).where(
                GpuRollup.week == wk, GpuRollup.gpu_index == 0)).all()
                if x.host_id == old[0].host_id]
        assert new[0].count == old[0].count + 1
        assert new[0].xid_counts.get("79", 0) == old[0].xid_counts.get("79", 0) + 1


def test_cli_prune_json_and_bad_policy(year_db: Path, tmp_path: Path) -> None:
    db = copy(year_db, tmp_path / "f.db")
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--dry", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["dry"] is True and doc["raw_weeks"] == 13
    assert doc["rollup_weeks"] == 104  # the default policy
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--raw-weeks", "8",
                            "--rollup-weeks", "forever"])
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())  # the console wraps lines
    assert "rollups kept forever" in out and "sample(s) into" in out
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--raw-weeks", "8",
                            "--rollup-weeks", "forever"])
    assert r.exit_code == 0 and "nothing to prune" in " ".join(r.output.split())
    # bad input is BadInput (exit 2 through fleet.cli.app.run), naming the option
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--raw-weeks", "2"])
    assert isinstance(r.exception, BadInput) and "--raw-weeks" in str(r.exception)
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--rollup-weeks", "10"])
    assert isinstance(r.exception, BadInput)
    assert "rollup_weeks (10) must be at least raw_weeks" in str(r.exception)
    r = runner.invoke(app, ["--db", str(db), "history", "prune", "--rollup-weeks", "ever"])
    assert isinstance(r.exception, BadInput) and "--rollup-weeks" in str(r.exception)
    r = runner.invoke(app, ["--db", str(tmp_path / "missing.db"), "history", "prune"])
    assert r.exit_code != 0 and not (tmp_path / "missing.db").exists()


def test_the_weekly_hygiene_run_prunes_after_its_audit(tmp_path: Path) -> None:
    """Old samples (another controller's, 20 weeks back) are rolled up by the weekly run on the
    simulated fleet; with prune_after_hygiene off they stay."""
    from fleet.domain.matrix.loader import load_matrix
    from fleet.jobs.hygiene import run_hygiene
    from fleet.sim import SimFleet

    root = Path(__file__).resolve().parents[3]
    matrix = load_matrix(root / "matrices" / "example.yaml").matrix
    off = matrix.model_copy(update={"hygiene": matrix.hygiene.model_copy(update={
        "retention": matrix.hygiene.retention.model_copy(update={"prune_after_hygiene": False})})})
    for m, pruned_expected in ((off, False), (matrix, True)):
        sim = SimFleet.build(m, pools={"h100": 2}, seed=3)
        with open_history(str(tmp_path / f"{pruned_expected}.db")) as h:
            old = NOW_DT - dt.timedelta(weeks=20)
            add_snapshot(h, "old-host", taken_at=old, source="nvml",
                         gpus=[{"gpu_index": 0, "uuid": "GPU-old", "ecc_corrected_aggregate": 3}])
            run_hygiene(sim, sim.scheduler(), h, m, now=NOW_DT, actor="t", benchmark=False)
            assert count(h, GpuRollup) == (1 if pruned_expected else 0)
            assert len(list_events(h, kind="history.prune")) == (1 if pruned_expected else 0)
            assert count(h, GpuSample) > 0  # this run's samples stay raw


def test_matrix_retention_block_and_its_errors(tmp_path: Path) -> None:
    """The policy comes from the matrix's hygiene.retention; a wrong value names file, line
    and field, and the CLI uses the matrix's policy."""
    from fleet.domain.matrix.loader import parse_matrix

    root = Path(__file__).resolve().parents[3]
    text = (root / "matrices" / "example.yaml").read_text()
    good = text + "\nhygiene:\n  retention:\n    raw_weeks: 8\n    rollup_weeks: forever\n"
    assert "\nhygiene:" not in text  # the example has no hygiene block of its own
    m = parse_matrix(good, "good.yaml").matrix
    assert (m.hygiene.retention.raw_weeks, m.hygiene.retention.rollup_weeks_or_none) == (8, None)
    bad = text + "\nhygiene:\n  retention:\n    raw_weeks: 8\n    rollup_weeks: 4\n"
    with pytest.raises(BadInput) as e:
        parse_matrix(bad, "bad.yaml")
    msg = str(e.value)
    assert "bad.yaml:" in msg and "retention" in msg and "rollup_weeks (4)" in msg
    path = tmp_path / "m.yaml"
    path.write_text(good)
    with open_history(str(tmp_path / "f.db")) as h:
        fill(h, weeks=12)
    r = runner.invoke(app, ["--db", str(tmp_path / "f.db"), "history", "prune", "-m", str(path),
                            "--dry", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["raw_weeks"], doc["rollup_weeks"]) == (8, None) and doc["samples_rolled_up"] > 0
