"""Every decision path of the rollout engine on the simulated fleet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostResult
from fleet.history.models import Wave
from fleet.history.rollouts import LockHeld
from tests.unit.rollout.helpers import Rig

CANARY_TARGET = "r595-cuda13.2"
H100_TARGET = "r580-cuda13.0"


def test_passes_through_every_wave(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path)
    res = rig.start()
    assert res.status == "completed", res.reason
    assert res.hosts == {"done": 11}
    for h in rig.fleet.hosts():
        want = CANARY_TARGET if h.pool == "h100-canary" else H100_TARGET
        assert rig.fleet.installed_release(h.name) == want
        assert rig.fleet.loaded_release(h.name) == want
        assert rig.fleet.scheduler().state(h.name).state == "available"
    assert rig.problems(res.rollout_id) == []
    assert rig.explained(res.rollout_id) == []
    # canary pool first; every wave judged pass, with benchmark evidence recorded
    pools = [w["pool"] for w in res.waves]
    assert pools.index("h100") > max(i for i, p in enumerate(pools) if p == "h100-canary")
    assert all(w["verdict"] == "pass" for w in res.waves)
    kinds = {e.kind for e in rig.events(res.rollout_id)}
    assert {"rollout.start", "rollout.step", "rollout.gate", "rollout.end"} <= kinds


def test_history_baseline_is_flagged_low_confidence(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    res = rig.start()
    assert res.status == "completed"
    gates = [e.data for e in rig.events(res.rollout_id)
             if e.kind == "rollout.gate" and e.data.get("gate") == "benchmark"]
    sources = [s["baseline_source"] for g in gates for s in g["suites"].values()]
    assert "same-time" in sources and "history" in sources  # the last wave has no old host
    low = [s["low_confidence"] for g in gates for s in g["suites"].values()
           if s["baseline_source"] == "history"]
    assert low and all(low)


def test_canary_health_failure_rolls_back(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path)
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    rig.fleet.inject(first, xid_after_upgrade=(79,))
    res = rig.start()
    assert res.status == "rolled_back"
    assert "health" in res.reason
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert steps[first].state == "rolled_back"
    assert steps[first].detail["failed_at"] == "verify"
    assert rig.fleet.installed_release(first) == "r580-cuda13.0"  # its release before
    assert rig.fleet.loaded_release(first) == "r580-cuda13.0"
    # nothing after the canary's first wave moved
    assert all(s.state == "planned" for s in steps.values() if s.host != first)
    assert rig.problems(res.rollout_id) == []
    assert rig.explained(res.rollout_id) == []


def test_slow_release_fails_the_judge_and_rolls_back(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, release_perf={CANARY_TARGET: 0.8})
    res = rig.start()
    assert res.status == "rolled_back"
    assert "benchmark" in res.reason
    gate = res.waves[0]["gate"]["benchmark"]
    assert gate["verdict"] == "fail"
    moved = [s for s in rig.steps(res.rollout_id) if s.state != "planned"]
    assert [s.state for s in moved] == ["rolled_back"]
    assert rig.fleet.installed_release(moved[0].host) == "r580-cuda13.0"
    assert rig.problems(res.rollout_id) == []


def test_rollback_scope_all_puts_back_earlier_waves(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    hosts = [h.name for h in rig.fleet.hosts()]
    rig.fleet.inject(hosts[2], xid_after_upgrade=(48,))  # the third wave fails
    res = rig.start(engine=rig.engine(rollback_scope="all"))
    assert res.status == "rolled_back"
    states = {s.host: s.state for s in rig.steps(res.rollout_id)}
    assert set(states.values()) == {"rolled_back"}
    assert all(rig.fleet.installed_release(h) == "r580-cuda13.0" for h in hosts)
    assert rig.problems(res.rollout_id) == []


def test_inconclusive_pauses_then_promote_continues(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3}, release_perf={CANARY_TARGET: 0.96})
    res = rig.start()
    assert res.status == "paused", res.reason
    rid = res.rollout_id
    first = next(s for s in rig.steps(rid) if s.state != "planned")
    # paused hosts stay out of service, drained by fleet, on record
    assert rig.fleet.scheduler().state(first.host).by_fleet
    assert rig.engine().resume(rid).status == "paused"  # resuming does not pass it
    # a second rollout on the pool is refused while this one is unfinished
    with pytest.raises(LockHeld):
        rig.start()
    res = rig.engine().promote(rid, reason="checked by hand")
    # the next waves are inconclusive too (the release is 5% slower): each needs a human
    while res.status == "paused":
        res = rig.engine().promote(rid)
    assert res.status == "completed"
    assert rig.problems(rid) == []
    kinds = [e.kind for e in rig.events(rid)]
    assert kinds.count("rollout.promote") >= 1 and "rollout.pause" in kinds


def test_inconclusive_then_abort_rolls_back(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3}, release_perf={CANARY_TARGET: 0.96})
    res = rig.start()
    assert res.status == "paused"
    res = rig.engine().abort(res.rollout_id, reason="not worth it")
    assert res.status == "aborted"
    assert all(rig.fleet.installed_release(h.name) == "r580-cuda13.0"
               for h in rig.fleet.hosts())
    assert rig.problems(res.rollout_id) == []


class FlakyBench:
    """The simulated fleet, but benchmarks cannot run (could not measure)."""

    def __init__(self, fleet: Any) -> None:
        self.fleet = fleet
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def benchmark(self, hosts: Any, suite: str, params: Any = None) -> Any:
        self.calls += 1
        return {h: HostResult.failed(h, "benchmark container failed to start") for h in hosts}


def test_gate_error_is_retried_then_inconclusive(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    rig.backend = FlakyBench(rig.fleet)
    res = rig.start()
    assert res.status == "paused"
    retries = matrix.pools["h100-canary"].rollout.gates.max_retries
    gates = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.gate"
             and e.data.get("gate") == "benchmark"]
    assert [g.data["verdict"] for g in gates] == ["error"] * (retries + 1)
    assert "treated as inconclusive" in res.reason


def test_failure_budget_per_wave(matrix: Matrix, tmp_path: Path) -> None:
    # h100: waves [1, 5, 20%], max_unavailable 10%, per-wave budget 1, total 3
    rig = Rig(matrix, tmp_path, pools={"h100": 60})
    hosts = [h.name for h in rig.fleet.hosts()]
    rig.fleet.inject(hosts[1], apply_fail=True)  # wave 2: one failure is within budget
    res = rig.start()
    assert res.status == "completed", res.reason
    states = {s.host: s for s in rig.steps(res.rollout_id)}
    assert states[hosts[1]].state == "failed"
    assert states[hosts[1]].detail["failed_at"] == "apply"
    assert rig.fleet.installed_release(hosts[1]) == "r570-cuda12.8"
    assert rig.problems(res.rollout_id) == []

    (tmp_path / "b").mkdir()
    rig2 = Rig(matrix, tmp_path / "b", pools={"h100": 60})
    for h in hosts[1:3]:  # two failures in wave 2: over budget
        rig2.fleet.inject(h, apply_fail=True)
    res2 = rig2.start()
    assert res2.status == "rolled_back"
    assert "per-wave budget" in res2.reason
    assert rig2.problems(res2.rollout_id) == []
    assert rig2.fleet.installed_release(hosts[0]) == H100_TARGET  # wave 1 passed: it stays
    assert all(rig2.fleet.installed_release(h) == "r570-cuda12.8" for h in hosts[1:])


def test_unreachable_counts_as_failed(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path)
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")

    def checkpoint(label: str) -> None:  # goes dark after the plan: found out while draining
        if label == "created":
            rig.fleet.inject(first, unreachable=True)

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    assert res.status == "rolled_back"  # the canary pool tolerates no failure
    step = next(s for s in rig.steps(res.rollout_id) if s.host == first)
    assert step.state == "failed" and step.detail["unreachable"]


def test_hung_reboot_is_quarantined_not_left_unrecorded(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path)
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    rig.fleet.inject(first, reboot_hangs=True)
    res = rig.start()
    assert res.status == "rolled_back"
    step = next(s for s in rig.steps(res.rollout_id) if s.host == first)
    assert step.state == "failed" and step.detail.get("quarantined")
    from fleet.history import list_quarantines

    assert [h.name for _, h in list_quarantines(rig.history)] == [first]
    assert rig.problems(res.rollout_id) == []


def test_units_move_together(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"l40s": 40}, unit_size=4)
    res = rig.start()
    assert res.status == "completed"
    unit_of = {h.name: h.unit for h in rig.fleet.hosts()}
    with rig.history.read() as s:
        waves = {w.id: w.index for w in s.exec(select(Wave)).all()}
    wave_of_unit: dict[str, set[int]] = {}
    for st in rig.steps(res.rollout_id):
        wave_of_unit.setdefault(unit_of[st.host] or "", set()).add(waves[st.wave_id])
    assert all(len(ws) == 1 for ws in wave_of_unit.values())


def test_never_undrains_a_host_someone_else_drained(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100": 40})
    hosts = [h.name for h in rig.fleet.hosts()]
    sched = rig.fleet.scheduler()
    sched.set_drained(hosts[0], "hw: ticket HW-77")  # before the plan: skipped by the plan

    def checkpoint(label: str) -> None:  # after the plan: the operator drains a later host
        if label == "wave1:drain:begin":
            sched.set_drained(hosts[-1], "operator: disk swap")

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    assert res.status == "completed"
    for h, reason in ((hosts[0], "hw: ticket HW-77"), (hosts[-1], "operator: disk swap")):
        st = sched.state(h)
        assert st.state == "drained" and not st.by_fleet and st.reason == reason
        assert ("undrain", h) not in sched.calls
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert hosts[0] not in steps
    assert steps[hosts[-1]].state == "skipped"
    assert rig.fleet.installed_release(hosts[-1]) == "r570-cuda12.8"


def test_second_start_refused_while_running(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    seen: list[Any] = []

    def checkpoint(label: str) -> None:
        if label == "wave1:apply:begin" and not seen:
            with pytest.raises(LockHeld) as e:
                rig.start(engine=rig.engine(pid=2000))
            seen.append(str(e.value))

    assert rig.start(engine=rig.engine(checkpoint=checkpoint)).status == "completed"
    assert seen and "running" in seen[0]


def test_rollback_target_comes_from_the_rollout_history(matrix: Matrix, tmp_path: Path) -> None:
    """After a rollout moved a host, `fleet rollback --to previous` goes back to what it ran
    before that move, not to the matrix's policy.previous."""
    from fleet.jobs.apply import previous_known_good

    rig = Rig(matrix, tmp_path, pools={"h100": 4})
    before = {h.name: rig.fleet.installed_release(h.name) for h in rig.fleet.hosts()}
    res = rig.start()
    assert res.status == "completed", res.reason
    host = next(iter(before))
    assert before[host] != rig.fleet.installed_release(host)
    # a matrix whose policy.previous names another release, so the two sources differ
    other = next(r.name for r in matrix.releases
                 if r.name not in (before[host], rig.fleet.installed_release(host)))
    policy = matrix.policy.model_copy(update={"previous": {**matrix.policy.previous,
                                                           "h100": other}})
    m2 = matrix.model_copy(update={"policy": policy})
    prev, source = previous_known_good(rig.history, m2, host, "h100")
    assert (prev.name if prev else None, source) == (before[host], "history")


def test_every_host_unreachable_is_not_on_target(matrix: Matrix, tmp_path: Path) -> None:
    """Nobody knows what an unreachable host runs: never "on its target already"."""
    from fleet.errors import CouldNotComplete
    from fleet.history.rollouts import list_rollouts

    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    for h in rig.fleet.hosts():
        rig.fleet.inject(h.name, unreachable=True)
    with pytest.raises(CouldNotComplete, match="3 host.*could not be reached") as info:
        rig.start()
    assert "h100-canary-00001" in str(info.value)
    assert list_rollouts(rig.history) == []


def test_nothing_to_move_says_why(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3}, start=CANARY_TARGET)
    res = rig.start()
    assert res.status == "nothing" and res.reason == "every host is on its target already"


def test_unknown_pool_or_release_is_refused_before_anything(matrix: Matrix,
                                                             tmp_path: Path) -> None:
    from fleet.errors import BadInput
    from fleet.history.rollouts import list_rollouts

    rig = Rig(matrix, tmp_path)
    with pytest.raises(BadInput, match="no pool 'nosuch'.*pools: a100, h100, h100-canary"):
        rig.start(pools=["h100", "nosuch"])
    with pytest.raises(BadInput, match="pool 'l40s' has no host"):
        rig.start(pools=["l40s"])
    with pytest.raises(BadInput, match="no release 'r999'.*releases: r570"):
        rig.start(pools=["h100"], release="r999")
    assert list_rollouts(rig.history) == []
    assert all(rig.fleet.scheduler().state(h.name).state == "available"
               for h in rig.fleet.hosts())
