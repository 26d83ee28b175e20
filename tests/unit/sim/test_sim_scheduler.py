from __future__ import annotations

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import AdminState, Scheduler
from fleet.sim import SimClock, SimFleet, SimScheduler


def test_drain_wait_and_undrain(matrix: Matrix) -> None:
    clock = SimClock()
    fleet = SimFleet.build(matrix, 10, seed=1, clock=clock)
    s: Scheduler = fleet.scheduler()
    assert isinstance(s, SimScheduler)
    h = "h100-00001"
    s.start_job(h, 600)
    r = s.drain(h, "wave 1", wait_s=0)
    assert r.ok and r.changed
    assert s.state(h) == AdminState("draining", "fleet: wave 1", True, jobs=("1",))
    r = s.drain(h, "wave 1", wait_s=60)
    assert not r.ok and "still running" in (r.error or "") and not r.changed
    clock.advance(590)
    r = s.drain(h, "wave 1", wait_s=60)
    assert r.ok and r.seconds == 10
    assert s.state(h) == AdminState("drained", "fleet: wave 1", True)
    assert s.undrain(h).changed
    assert s.state(h) == AdminState("available")


def test_never_undrain_someone_elses_drain(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 10, seed=1, drained={"a100-00001": "NHC: ECC"})
    s = fleet.scheduler()
    assert s.state("a100-00001") == AdminState("drained", "NHC: ECC", False)
    d = s.drain("a100-00001", "wave 1")
    assert d.ok and not d.changed
    u = s.undrain("a100-00001")
    assert not u.ok and "someone else" in (u.error or "")
    assert s.state("a100-00001") == AdminState("drained", "NHC: ECC", False)


def test_failing_drain_and_down_hosts(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 10, seed=1)
    s = fleet.scheduler()
    s.fail_drains("h100-00002")
    assert not s.drain("h100-00002", "x").ok
    fleet.inject("h100-00003", unreachable=True)
    assert s.state("h100-00003").state == "down"
    assert not s.drain("h100-00003", "x").ok
