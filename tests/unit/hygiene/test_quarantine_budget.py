"""The quarantine budget holds (issue 31, defects 4, 5 and 7).

- 4: a release goes through the scheduler that drained the host, or is refused: closing the
  quarantine while the node stays drained would free the budget and let the pool creep.
- 5: a quarantine outranks a rollout's undrain: a resumed rollout leaves a quarantined host
  drained.
- 7: two overlapping hygiene runs cannot both spend the budget.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.app import run
from fleet.domain.matrix.loader import load_matrix
from fleet.errors import ExitCode
from fleet.history import History, list_quarantines, open_history
from fleet.history.quarantines import open_record
from fleet.history.rollouts import list_rollouts
from fleet.jobs.hygiene import run_hygiene
from tests.unit.hygiene.fakes import (
    NOW,
    ROOT,
    WEEK,
    FakeBackend,
    FakeScheduler,
    example_matrix,
    fleet,
)
from tests.unit.rollout.helpers import Crash, Rig


def _drained(sched: FakeScheduler) -> list[str]:
    return sorted(n for n, s in sched.states.items() if s.state == "drained")


def _release(capsys: pytest.CaptureFixture[str], db: str, host: str,
             *extra: str) -> tuple[int, Any]:
    """(exit code, JSON document) of `fleet quarantine release HOST`, run in this process."""
    with pytest.raises(SystemExit) as info:
        run(["--db", db, "quarantine", "release", host, "--reason", "triaged", "--json",
              *extra])
    out = capsys.readouterr().out
    return int(info.value.code or 0), json.loads(out)


class Slurmish(FakeScheduler):
    """Stands for Slurm: its state outlives each command."""

    name = "slurm"


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Slurmish:
    sched = Slurmish()
    import fleet.cli.hygiene_cmd as hc

    real = hc.make_scheduler
    monkeypatch.setattr(hc, "make_scheduler",
                        lambda name, sim=None: sched if name == "slurm" else real(name, sim))
    return sched


def test_release_goes_through_the_scheduler_that_drained_it(
        tmp_path: Path, slurm: Slurmish, capsys: pytest.CaptureFixture[str]) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 20})  # budget floor(10% of 20) = 2
    by = {h.name: h for h in hosts}
    db = str(tmp_path / "h.db")
    bad = iter(f"h100-{i:02d}" for i in range(1, 7))
    for week in range(3):  # two new faulty hosts a week, each week's released the usual way
        with open_history(db) as hist:
            for _ in range(2):
                by[next(bad)].counters[0]["remapped_rows_failure"] = True
            run_hygiene(FakeBackend(hosts), slurm, hist, m, now=NOW + week * WEEK, judge=None,
                        benchmark=False, apply_quarantine=True)
            opened = [h.name for _q, h in list_quarantines(hist)]
        assert len(_drained(slurm)) <= 2
        for host in opened:
            code, doc = _release(capsys, db, host)  # no --scheduler: the recorded one
            assert code == 0, doc
            assert doc["scheduler"] == "slurm"
            by[host].counters[0]["remapped_rows_failure"] = False
        assert _drained(slurm) == []  # released means back in service
    assert len(set(slurm.undrained)) == 6


def test_release_through_another_scheduler_is_refused(
        tmp_path: Path, slurm: Slurmish, capsys: pytest.CaptureFixture[str]) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 20})
    hosts[1].counters[0]["remapped_rows_failure"] = True
    db = str(tmp_path / "h.db")
    with open_history(db) as hist:
        run_hygiene(FakeBackend(hosts), slurm, hist, m, now=NOW, judge=None, benchmark=False,
                    apply_quarantine=True)
    code, doc = _release(capsys, db, hosts[1].name, "--scheduler", "none")
    assert code == ExitCode.BAD_INPUT, doc
    with open_history(db) as hist:
        assert open_record(hist, hosts[1].name) is not None  # still open, budget still spent
    assert _drained(slurm) == [hosts[1].name]


def test_release_of_a_host_drained_through_an_unreachable_scheduler_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 20})
    hosts[1].counters[0]["remapped_rows_failure"] = True
    db = str(tmp_path / "h.db")
    with open_history(db) as hist:  # FakeScheduler is "fake": no command reaches it
        run_hygiene(FakeBackend(hosts), FakeScheduler(), hist, m, now=NOW, judge=None,
                    benchmark=False, apply_quarantine=True)
    code, doc = _release(capsys, db, hosts[1].name)
    assert code == ExitCode.BAD_INPUT, doc
    with open_history(db) as hist:
        assert open_record(hist, hosts[1].name) is not None


def test_overlapping_runs_cannot_both_spend_the_budget(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 20})
    for n in (1, 2, 11, 12):
        hosts[n].counters[0]["remapped_rows_failure"] = True
    hist = open_history(str(tmp_path / "h.db"))
    rack1, rack2 = [h.name for h in hosts[:10]], [h.name for h in hosts[10:]]

    class Overlap(FakeScheduler):
        started_b = False

        def drain(self, host: str, reason: str, *, wait_s: float = 0) -> Any:
            if not self.started_b:  # run B starts while run A's first drain is under way
                self.started_b = True
                run_hygiene(FakeBackend(hosts), self, hist, m, now=NOW, hosts=rack2,
                            judge=None, benchmark=False, apply_quarantine=True)
            return super().drain(host, reason, wait_s=wait_s)

    s = Overlap()
    rep = run_hygiene(FakeBackend(hosts), s, hist, m, now=NOW, hosts=rack1, judge=None,
                      benchmark=False, apply_quarantine=True)
    assert len(set(s.drained)) == 2
    assert len(list_quarantines(hist)) == 2
    deferred = [a for a in rep.applied if not a.applied]
    assert deferred and "budget" in deferred[0].message


def test_a_resumed_rollout_leaves_a_quarantined_host_drained(tmp_path: Path) -> None:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 10, "h100": 10})
    sched = rig.fleet.scheduler()
    for week in range(4):  # one canary host's corrected ECC rising fast
        rig.fleet.inject("h100-canary-00001", ecc_rising=600 * 2 ** week)
        run_hygiene(rig.fleet, sched, rig.history, matrix, now=rig.clock(), judge=None,
                    benchmark=False)
        rig.clock.advance(7 * 86400)

    def crash(label: str) -> None:
        if label == "wave1:apply:begin":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=crash))
    assert sched.state("h100-canary-00001").state == "drained"  # by the rollout
    rep = run_hygiene(rig.fleet, sched, rig.history, matrix, now=rig.clock(), judge=None,
                      benchmark=False, apply_quarantine=True)
    assert [a.host for a in rep.applied if a.applied] == ["h100-canary-00001"]
    rid = list_rollouts(rig.history, limit=1)[0].id
    assert rid is not None
    rig.engine(pid=2000, dead=True).resume(rid, force=True)
    assert sched.state("h100-canary-00001").state == "drained"
    assert not rig.problems(rid)
    _history: History = rig.history
    assert open_record(_history, "h100-canary-00001") is not None


def race_for_the_budget(url: str, *, racers: int = 6, limit: int = 2) -> list[int | None]:
    """`racers` threads, each with its own connection, reserve a quarantine for a different
    host of one pool at the same instant; what each got. Shared with the PostgreSQL test."""
    import threading

    from fleet.history.quarantines import reserve_quarantine

    open_history(url).close()  # migrated before the race
    hosts = [f"h100-{i:02d}" for i in range(racers)]
    barrier = threading.Barrier(racers)
    got: list[int | None] = []
    lock = threading.Lock()

    def racer(host: str) -> None:
        with open_history(url) as hist:
            barrier.wait()
            qid = reserve_quarantine(hist, host, pool_hosts=hosts, limit=limit,
                                     reason="remap failure", opened_by="test", at=NOW)
            with lock:
                got.append(qid)

    threads = [threading.Thread(target=racer, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == racers
    return got


def test_simultaneous_reservations_spend_the_budget_once(tmp_path: Path) -> None:
    got = race_for_the_budget(str(tmp_path / "h.db"))
    assert sum(q is not None for q in got) == 2
    with open_history(str(tmp_path / "h.db")) as hist:
        assert len(list_quarantines(hist)) == 2
