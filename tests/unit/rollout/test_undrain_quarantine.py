"""A quarantine outranks a rollout's undrain, read once per batch window, not once per host.

The undrain loop asks "is this host quarantined now?" before each host's undrain. It asked the
database once per host (1,000 queries at 1,000 hosts, issue 28); now one read covers the
undrains that start within the fence's batch window (`fence.BATCH_FRESH_S`), then it reads
again, so a quarantine opened while the loop runs still keeps the hosts undrained after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.history import open_quarantine
from fleet.jobs.rollout import RolloutEngine, RolloutOptions, steps
from fleet.jobs.rollout.fence import FreshRead
from tests.unit.rollout.helpers import Rig, Wrap


def test_fresh_read_reads_again_once_the_window_is_over() -> None:
    t, reads = [10.0], []

    def read() -> int:
        reads.append(t[0])
        return len(reads)

    fresh = FreshRead(read, clock=lambda: t[0], fresh_s=0.25)
    assert [fresh() for _ in range(500)] == [1] * 500  # no time passes: one read
    t[0] += 0.2
    assert fresh() == 1  # still within the window of the first read
    t[0] += 0.05
    assert fresh() == 2  # the window is over: read again
    assert reads == [10.0, 10.25]


def _no_bench(matrix: Matrix) -> Matrix:
    """The matrix with the h100 pool's benchmark and replay gates off: these tests are about
    the undrain loop, and the judge's bootstrap per wave is most of a rollout's time."""
    pool = matrix.pools["h100"]
    gates = pool.rollout.gates.model_copy(update={"benchmark": False, "replay": False})
    rollout = pool.rollout.model_copy(update={"gates": gates})
    return matrix.model_copy(update={"pools": {
        **matrix.pools, "h100": pool.model_copy(update={"rollout": rollout})}})


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _engine(rig: Rig, scheduler: Any, clock: _Clock) -> RolloutEngine:
    eng = RolloutEngine(rig.backend, scheduler, rig.history, rig.matrix, now=rig.clock,
                        sleep=rig.clock.advance, actor="tester", options=RolloutOptions(),
                        pid=1000, machine="testbox", pid_alive=lambda p: True)
    eng._guard._clock = clock  # the batch window's clock, moved by the test
    return eng


def test_a_quarantine_opened_during_the_undrain_loop_keeps_the_host_drained(
        matrix: Matrix, tmp_path: Path) -> None:
    """While the loop undrains a wave's first host, ops quarantine another host of the wave
    and time passes beyond the window: the next read sees it, and that host stays drained."""
    rig = Rig(_no_bench(matrix), tmp_path, pools={"h100": 20})  # 10%: 2 of a wave drained at once
    sched = rig.fleet.scheduler()
    clock, victim = _Clock(), []

    class QuarantineMidLoop(Wrap):
        def undrain(self, host: str) -> Any:
            others = [h for h in (r.name for r in rig.fleet.hosts()) if h != host
                      and self.inner.state(h).state == "drained"]  # this wave's, still drained
            if not victim and others:
                victim.append(others[0])
                open_quarantine(rig.history, others[0], reason="ECC rising", opened_by="ops",
                                at=rig.clock())
                clock.t += 1.0  # the undrain took a second: past the batch window
            return self.inner.undrain(host)

    res = _engine(rig, QuarantineMidLoop(sched), clock).start(
        matrix_path="m.yaml", releases=rig.fleet.releases_by_host(),
        unreachable=rig.fleet.unreachable_hosts())
    (host,) = victim
    step = next(s for s in rig.steps(res.rollout_id) if s.host == host)
    assert step.detail.get("quarantined"), step.detail
    a = sched.state(host)
    assert a.state == "drained" and a.by_fleet, a


def test_the_undrain_loop_reads_quarantines_once_per_batch_window(
        matrix: Matrix, tmp_path: Path, monkeypatch: Any) -> None:
    """20 hosts undrained with the window's clock standing still: one quarantine read per
    wave's undrain batch, not one per host."""
    reads = [0]
    real = steps.quarantined_hosts

    def counted(history: Any) -> frozenset[str]:
        reads[0] += 1
        return real(history)

    monkeypatch.setattr(steps, "quarantined_hosts", counted)
    rig = Rig(_no_bench(matrix), tmp_path, pools={"h100": 20})
    res = _engine(rig, rig.fleet.scheduler(), _Clock()).start(
        matrix_path="m.yaml", releases=rig.fleet.releases_by_host(),
        unreachable=rig.fleet.unreachable_hosts())
    assert res.status == "completed", res.reason
    assert res.hosts == {"done": 20}
    assert reads[0] == len(res.waves), (reads[0], len(res.waves))
