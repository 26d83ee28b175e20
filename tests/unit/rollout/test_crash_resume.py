"""Kill the controller at random step boundaries (and half-way through a batch), resume,
and check the invariants: no host left drained by fleet, each host on exactly one release (the
target when done, its previous one when rolled back), and an event for every host that moved."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.models import Matrix
from fleet.history.rollouts import LockHeld, list_rollouts
from fleet.jobs.rollout import RolloutResult
from tests.unit.rollout.helpers import Crash, Rig

POOLS = {"h100-canary": 3, "h100": 6}


def _count_checkpoints(matrix: Matrix, tmp: Path, **build: Any) -> tuple[int, str]:
    labels: list[str] = []
    rig = Rig(matrix, tmp, pools=POOLS, **build)
    res = rig.start(engine=rig.engine(checkpoint=labels.append))
    return len(labels), res.status


def _crash_at(k: int) -> Any:
    seen = [0]

    def checkpoint(label: str) -> None:
        seen[0] += 1
        if seen[0] == k:
            raise Crash(label)

    return checkpoint


def _run_crashed(matrix: Matrix, tmp: Path, k: int, **build: Any) -> tuple[Rig, Any]:
    rig = Rig(matrix, tmp, pools=POOLS, **build)
    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=_crash_at(k)))
    ro = list_rollouts(rig.history, limit=1)
    if not ro:  # killed before the rollout was recorded: nothing was touched
        assert all(not s.by_fleet for s in map(rig.fleet.scheduler().state,
                                                [h.name for h in rig.fleet.hosts()]))
        return rig, rig.start()
    rid = ro[0].id
    assert rid is not None
    if ro[0].status not in ("running", "rolling_back", "aborting"):  # killed after its end
        assert ro[0].lock_owner is None
        return rig, RolloutResult(rid, ro[0].status)
    # the dead controller's lock: refused without --force, taken over with it (recorded)
    with pytest.raises(LockHeld, match="stale"):
        rig.engine(pid=2000, dead=True).resume(rid)
    res = rig.engine(pid=2000, dead=True).resume(rid, force=True)
    assert any(e.kind == "rollout.lock.takeover" for e in rig.events(rid))
    return rig, res


SCENARIOS = {
    "pass": {},
    "health-fail": {"faults": None},  # filled in per fleet below
    "slow": {"release_perf": {"r595-cuda13.2": 0.8}},
}


@pytest.mark.parametrize("scenario", ["pass", "slow", "health-fail"])
def test_crash_anywhere_then_resume(matrix: Matrix, tmp_path: Path, scenario: str) -> None:
    build: dict[str, Any] = {}
    if scenario == "slow":
        build["release_perf"] = {"r595-cuda13.2": 0.8}
    if scenario == "health-fail":
        from fleet.sim import HostFaults

        build["faults"] = {"h100-00002": HostFaults(xid_after_upgrade=(79,))}
    (tmp_path / "clean").mkdir()
    total, clean_status = _count_checkpoints(matrix, tmp_path / "clean", **build)
    assert total > 20
    points = sorted(random.Random(f"crash/{scenario}").sample(range(1, total + 1), 14))
    for k in points:
        where = tmp_path / f"k{k}"
        where.mkdir()
        rig, res = _run_crashed(matrix, where, k, **build)
        assert res.status == clean_status, (k, res.reason)
        assert rig.problems(res.rollout_id) == [], k
        assert rig.explained(res.rollout_id) == [], k
        # each host is on exactly one release, and the one its row says
        for st in rig.steps(res.rollout_id):
            on = rig.fleet.installed_release(st.host)
            assert on == rig.fleet.loaded_release(st.host), (k, st.host)


class HalfBatch:
    """Dies half-way through one apply batch: some hosts pinned, the rest not, nothing after."""

    def __init__(self, fleet: Any, after: int) -> None:
        self.fleet, self.after, self.armed = fleet, after, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def apply(self, hosts: Any, release: Any, **kw: Any) -> Any:
        if self.armed and len(hosts) > self.after:
            self.armed = False
            self.fleet.apply(list(hosts)[: self.after], release, **kw)
            raise Crash("half-way through a batch")
        return self.fleet.apply(hosts, release, **kw)


def test_crash_half_way_through_a_batch(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100": 60})
    rig.backend = HalfBatch(rig.fleet, 2)
    with pytest.raises(Crash):
        rig.start()
    rid = list_rollouts(rig.history, limit=1)[0].id
    assert rid is not None
    rig.backend = rig.fleet
    res = rig.engine(pid=3000, dead=True).resume(rid, force=True)
    assert res.status == "completed"
    assert rig.problems(rid) == []
    # nothing applied twice: every host's packages changed once (boots once)
    assert all(rig.fleet.state(h.name)["boots"] == 1 for h in rig.fleet.hosts())


@pytest.mark.parametrize("op", ["resume", "abort"])
def test_crash_right_after_the_rollout_is_recorded(matrix: Matrix, tmp_path: Path,
                                                    op: str) -> None:
    """Killed at "created" (the row is written, no step taken): the dead controller's lock
    blocks the pools until `resume --force` or `abort --force` ends the rollout."""
    rig = Rig(matrix, tmp_path, pools=POOLS)

    def checkpoint(label: str) -> None:
        if label == "created":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    rid = list_rollouts(rig.history, limit=1)[0].id
    assert rid is not None
    with pytest.raises(LockHeld):
        rig.start(engine=rig.engine(pid=2000, dead=True))
    eng = rig.engine(pid=2000, dead=True)
    with pytest.raises(LockHeld, match="stale"):
        eng.resume(rid) if op == "resume" else eng.abort(rid)
    res = (eng.resume(rid, force=True) if op == "resume"
           else rig.engine(pid=3000, dead=True).abort(rid, force=True))
    assert res.status == ("completed" if op == "resume" else "aborted"), res.reason
    assert rig.problems(rid) == []
    ro = list_rollouts(rig.history, limit=1)[0]
    assert ro.status == res.status and ro.lock_owner is None
