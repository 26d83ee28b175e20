"""The benchmark gate never passes unmeasured: promote vs keep-waiting, crashed canaries, and
baselines only on idle hosts (issue 29, defects 6, 7, 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostResult
from fleet.errors import CouldNotComplete
from tests.unit.rollout.helpers import Rig, with_drain

CANARY = "h100-canary"
TARGET = "r595-cuda13.2"
OLD = "r580-cuda13.0"


def _gates(rig: Rig, rid: int) -> list[dict[str, Any]]:
    return [e.data for e in rig.events(rid)
            if e.kind == "rollout.gate" and e.data.get("gate") == "benchmark"]


def _waves(matrix: Matrix, **rollout: Any) -> Matrix:
    """The matrix with `rollout` settings changed on every pool."""
    pools = {}
    for name, p in matrix.pools.items():
        ro = p.rollout.model_copy(update=rollout)
        pools[name] = p.model_copy(update={"rollout": ro})
    return matrix.model_copy(update={"pools": pools})


# ------------------------------------------------------------ 6: promote vs keep-waiting
def _drain_paused(matrix: Matrix, tmp_path: Path) -> tuple[Rig, str, int]:
    """A canary wave paused because job 77 outlived a 2-minute drain timeout; the target is
    30% slower, so its benchmark gate must fail once it runs."""
    rig = Rig(with_drain(matrix, timeout_minutes=2, poll_seconds=10), tmp_path,
              pools={CANARY: 3}, release_perf={TARGET: 0.7})
    host = sorted(h.name for h in rig.fleet.hosts())[0]
    rig.fleet.scheduler().start_job(host, seconds=200, job_id="77")
    res = rig.start()
    assert res.status == "paused" and "keep-waiting" in res.reason, res.reason
    return rig, host, res.rollout_id


def test_promote_over_a_drain_pause_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    rig, host, rid = _drain_paused(matrix, tmp_path)
    with pytest.raises(CouldNotComplete, match="keep-waiting"):
        rig.engine().promote(rid, reason="job 77 ends soon")
    assert rig.fleet.installed_release(host) == OLD
    assert "rollout.promote" not in [e.kind for e in rig.events(rid)]
    res = rig.engine().resume(rid)  # still paused, on the same wave
    assert res.status == "paused" and "keep-waiting" in res.reason


def test_keep_waiting_runs_every_gate(matrix: Matrix, tmp_path: Path) -> None:
    rig, host, rid = _drain_paused(matrix, tmp_path)
    res = rig.engine().keep_waiting(rid, reason="job 77 ends soon")
    assert res.status == "rolled_back", res.reason  # the benchmark gate ran, and failed
    assert "benchmark" in res.reason
    gates = _gates(rig, rid)
    assert gates and gates[-1]["verdict"] == "fail"
    assert rig.fleet.installed_release(host) == OLD
    kinds = [e.kind for e in rig.events(rid)]
    assert "rollout.keep_waiting" in kinds and "rollout.promote" not in kinds
    assert rig.problems(rid) == []


def test_keep_waiting_is_not_a_promote(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={CANARY: 3}, release_perf={TARGET: 0.96})
    res = rig.start()
    assert res.status == "paused" and "inconclusive" in res.reason
    with pytest.raises(CouldNotComplete, match="promote"):
        rig.engine().keep_waiting(res.rollout_id)
    res = rig.engine().promote(res.rollout_id, reason="p99 within noise")
    promoted = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.promote"]
    assert promoted and promoted[0].data["gate"] == "benchmark"
    assert promoted[0].data["was"] == "inconclusive"


# ------------------------------------------------------------ 7: a crashed canary
class CrashOn:
    """The simulated fleet, but the benchmark crashes on some hosts."""

    def __init__(self, fleet: Any, bad: set[str]) -> None:
        self.fleet, self.bad = fleet, bad
        self.calls: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def benchmark(self, hosts: Any, suite: str, params: Any = None) -> Any:
        self.calls.append(list(hosts))
        out = self.fleet.benchmark(hosts, suite, params)
        for h in self.bad & set(out):
            out[h] = HostResult.failed(h, "CUDA error: an illegal memory access was "
                                          "encountered (Xid 31)")
        return out


@pytest.mark.parametrize("budget", [0, 1])
def test_a_crashed_canary_fails_on_its_own(matrix: Matrix, tmp_path: Path,
                                           budget: int) -> None:
    m = _waves(matrix, waves=[2], max_unavailable=2, bake_minutes=0,
               failure_budget_per_wave=budget, failure_budget_total=budget)
    rig = Rig(m, tmp_path, pools={CANARY: 4})
    hosts = sorted(h.name for h in rig.fleet.hosts())
    bad, good = hosts[1], hosts[0]
    rig.backend = CrashOn(rig.fleet, {bad})
    res = rig.start()
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert (steps[bad].state, steps[bad].detail.get("failed_at")) == (
        "rolled_back", "benchmark"), steps[bad]
    assert "Xid 31" in str(steps[bad].detail)
    assert rig.fleet.installed_release(bad) == OLD  # put back, never left on the target
    retries = m.pools[CANARY].rollout.gates.max_retries
    wave1 = [g for g in _gates(rig, res.rollout_id) if g["wave"] == 1]
    assert [g["verdict"] for g in wave1] == ["error"] * (retries + 1)
    assert all(g["crashed"] == [bad] for g in wave1)
    if budget == 0:  # the canary pool tolerates no failure: the wave rolls back
        assert res.status == "rolled_back", res.reason
        assert rig.fleet.installed_release(good) == OLD
    else:  # within budget: the measured canary is judged on its own samples
        assert res.status == "completed", res.reason
        assert steps[good].state == "done" and rig.fleet.installed_release(good) == TARGET
    assert rig.problems(res.rollout_id) == []


def test_nothing_measured_anywhere_is_still_inconclusive(matrix: Matrix,
                                                         tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={CANARY: 3})
    rig.backend = CrashOn(rig.fleet, {h.name for h in rig.fleet.hosts()})
    res = rig.start()
    assert res.status == "paused" and "treated as inconclusive" in res.reason
    assert all(g["crashed"] == [] for g in _gates(rig, res.rollout_id))


# ------------------------------------------------------------ 8: baselines on idle hosts
def test_baseline_never_beside_a_job(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={CANARY: 4})
    hosts = sorted(h.name for h in rig.fleet.hosts())
    sched = rig.fleet.scheduler()
    busy_at_bench: list[tuple[str, str]] = []
    real = rig.fleet.benchmark

    def bench(hs: Any, suite: str, params: Any = None) -> Any:
        busy_at_bench.extend((suite, h) for h in hs if sched._running(sched._node(h)))
        return real(hs, suite, params)

    rig.fleet.benchmark = bench  # type: ignore[method-assign]

    def checkpoint(label: str) -> None:
        if label == "wave1:verify:end":  # a user's job lands on a host still planned
            sched.start_job(hosts[1], seconds=3600, job_id="555")

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    gate = next(g for g in _gates(rig, res.rollout_id) if g["wave"] == 1)
    assert hosts[1] not in gate["baseline_hosts"]
    assert gate["baseline_passed_over"][hosts[1]] == "busy"
    assert set(gate["baseline_hosts"]) == set(hosts[2:])  # the idle ones
    assert busy_at_bench == []


def test_baseline_from_history_when_no_host_is_idle(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={CANARY: 3})
    hosts = sorted(h.name for h in rig.fleet.hosts())
    sched = rig.fleet.scheduler()

    def checkpoint(label: str) -> None:
        if label == "wave1:verify:end":
            for h in hosts[1:]:
                sched.start_job(h, seconds=3600, job_id=f"6{h[-1]}")

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    gate = next(g for g in _gates(rig, res.rollout_id) if g["wave"] == 1)
    assert gate["baseline_hosts"] == []
    assert {gate["baseline_passed_over"][h] for h in hosts[1:]} == {"busy"}
    # no history of the old release in this fresh rig: could not measure, never a busy host
    assert all(s.get("baseline_source") != "same-time" for s in gate["suites"].values())
