"""Rollout safety (issue 29): a failed pin is restored only when a verify says so; the rollback
and a resume drain and wait like a forward step; max_unavailable holds against what is out of
service now; the lock's heartbeat stays fresh through a long call; every reboot follows the
pool's `reboot` setting."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import AdminState, HostResult
from fleet.history.rollouts import LockHeld, LockLost
from fleet.jobs.apply import pin_hosts
from fleet.jobs.rollout import RolloutEngine, RolloutOptions
from tests.unit.rollout.helpers import Crash, ManualTicker, RebootLog, Rig, Wrap


def _names(rig: Rig) -> list[str]:
    return sorted(h.name for h in rig.fleet.hosts())


def _step(rig: Rig, rid: int | None, host: str) -> Any:
    assert rid is not None
    return {s.host: s for s in rig.steps(rid)}[host]


# --------------------------------------------------------------- 1: a failed pin is restored
def test_pin_cut_off_mid_apply_is_not_taken_as_restored(matrix: Matrix, tmp_path: Path) -> None:
    """The pin ran, then SSH dropped: nothing was restored, so the host is put back by a
    verified rollback (or stays drained), never returned to service half-changed."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    victim = _names(rig)[0]

    class DropAfterApply(Wrap):
        def apply(self, hosts: Any, release: Any, **kw: Any) -> Any:
            out = self.inner.apply(hosts, release, **kw)  # the packages really changed
            if victim in out and release.name != rig.fleet.state(victim)["initial"]:
                out[victim] = HostResult.unreachable(victim, "ssh: Connection reset by peer")
            return out

    rig.backend = DropAfterApply(rig.fleet)
    res = rig.start()
    st = _step(rig, res.rollout_id, victim)
    assert not st.detail.get("restored"), st.detail
    truth = rig.fleet.state(victim)
    back_in_service = rig.fleet.scheduler().state(victim).state == "available"
    if back_in_service:  # only after a verified rollback onto what it had
        assert st.state == "rolled_back", st.detail
        assert truth["installed"] == truth["loaded"] == truth["initial"]
    else:
        assert st.detail.get("quarantined"), st.detail
    assert rig.problems(res.rollout_id) == []


def test_failed_restore_leaves_host_drained_and_named(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    victim = _names(rig)[0]

    class HalfApply(Wrap):
        """The pin changes packages, then dpkg fails; putting the old ones back fails too."""

        def apply(self, hosts: Any, release: Any, **kw: Any) -> Any:
            back = release.name == rig.fleet.state(victim)["initial"]
            out = self.inner.apply([h for h in hosts if not (back and h == victim)], release,
                                   **kw)
            if victim in hosts:
                out[victim] = HostResult(victim, None, ok=False,
                                         error="dpkg: error processing nvidia-dkms (exit 100)")
            return out

    rig.backend = HalfApply(rig.fleet)
    res = rig.start()
    st = _step(rig, res.rollout_id, victim)
    assert st.state == "failed" and not st.detail.get("restored"), st.detail
    assert st.detail.get("quarantined")
    a = rig.fleet.scheduler().state(victim)
    assert a.state == "drained" and a.by_fleet, a
    assert res.status == "rolled_back"  # it counted against the canary's budget of 0
    named = [e for e in rig.events(res.rollout_id)
             if e.kind == "rollout.host" and (e.data or {}).get("host") == victim]
    assert named


def test_failed_pin_restored_only_after_a_verify(matrix: Matrix, tmp_path: Path) -> None:
    """apt fails before changing anything: the restore is verified by a probe against the
    release the host had, so it may go back into service (and it still counts as failed)."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    victim = _names(rig)[0]
    rig.fleet.inject(victim, apply_fail=True)
    probes = rig.fleet.state(victim)["probes"]
    res = rig.start()
    st = _step(rig, res.rollout_id, victim)
    assert st.state == "failed" and st.detail.get("restored") is True, st.detail
    assert "verified" in st.detail["error"]
    assert rig.fleet.state(victim)["probes"] > probes
    assert rig.fleet.scheduler().state(victim).state == "available"
    assert res.status == "rolled_back"


# --------------------------------------------------- 2: the rollback drains and waits, always
def _health_fail_third(rig: Rig) -> tuple[str, str]:
    hosts = _names(rig)
    rig.fleet.inject(hosts[2], xid_after_upgrade=(48,))  # the third wave fails its health gate
    return hosts[0], hosts[2]


def test_rollback_never_reboots_a_host_someone_else_drained_with_a_job(
        matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    first, _ = _health_fail_third(rig)
    sched = rig.fleet.scheduler()
    log = RebootLog(rig.fleet)

    def checkpoint(label: str) -> None:
        if label == "wave1:done":  # back in service, a job lands
            sched.start_job(first, seconds=6 * 3600, job_id="9001")
        if label == "wave3:drain:end":  # then NHC drains the node, the job still running
            sched.set_drained(first, "NHC: check_gpu_ecc: dbe count rising")

    res = rig.start(engine=rig.engine(rollback_scope="all", checkpoint=checkpoint))
    assert res.status == "rolled_back"
    assert log.busy == [], log.busy
    assert log.boots(first) == 1  # the forward reboot only
    st = _step(rig, res.rollout_id, first)
    assert st.detail.get("rollback_skipped"), st.detail
    assert "someone else" in st.detail["error"]
    a = sched.state(first)
    assert a.reason and a.reason.startswith("NHC"), a  # their drain, untouched


def test_rollback_never_reboots_on_an_unreadable_state(matrix: Matrix, tmp_path: Path) -> None:
    """One failed `scontrol show node` during the rollback: the host is asked again (drained
    and waited for), never pinned and rebooted under the job that landed on it."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    first, _ = _health_fail_third(rig)
    sched = rig.fleet.scheduler()
    flaky = {"on": False}

    class Flaky(Wrap):
        def state(self, host: str) -> AdminState:
            if host == first and flaky["on"]:
                flaky["on"] = False
                return AdminState("unknown", "scontrol: Unable to contact slurm controller")
            return self.inner.state(host)

    def checkpoint(label: str) -> None:
        if label == "wave1:done":
            sched.start_job(first, seconds=6 * 3600, job_id="9001")
        if label == "rollback:begin":
            flaky["on"] = True

    log = RebootLog(rig.fleet)
    eng = RolloutEngine(rig.fleet, Flaky(sched), rig.history, rig.matrix, now=rig.clock,
                        sleep=rig.clock.advance, actor="t",
                        options=RolloutOptions(rollback_scope="all"), checkpoint=checkpoint,
                        pid=1000, machine="box", pid_alive=lambda p: True)
    res = rig.start(engine=eng)
    assert res.status == "rolled_back"
    assert log.busy == [], log.busy
    assert log.boots(first) == 1
    st = _step(rig, res.rollout_id, first)
    assert st.detail.get("rollback_skipped"), st.detail
    assert sched.state(first).state == "available"  # verified on what it runs: back in service


def test_rollback_reboots_through_slurm_when_the_pool_says_so(matrix: Matrix,
                                                              tmp_path: Path) -> None:
    """The h100 pool has `reboot: slurm`: the repair of a failed host reboots it through the
    workload manager (RebootProgram, drain kept), not over SSH."""
    assert matrix.pools["h100"].rollout.reboot == "slurm"
    rig = Rig(matrix, tmp_path, pools={"h100": 3})
    victim = _names(rig)[0]
    rig.fleet.inject(victim, xid_after_upgrade=(79,))
    sched = rig.fleet.scheduler()
    rig.start()
    boots = rig.fleet.state(victim)["boots"]
    assert boots == 2  # forward, then back onto the old module
    assert sched.calls.count(("reboot", victim)) == boots


# ------------------------------------------------------- 3: a resume drains and waits again
def test_resume_after_a_forced_rollback_drains_again(matrix: Matrix, tmp_path: Path) -> None:
    """`fleet rollback --force` put the host back and undrained it; a job landed; the resumed
    rollout drains it again and waits (here: pauses on the drain timeout), no reboot."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    host = _names(rig)[0]
    old = rig.fleet.installed_release(host)
    assert old is not None
    sched = rig.fleet.scheduler()

    def checkpoint(label: str) -> None:
        if label == "wave1:apply:end:pre":
            out = pin_hosts(rig.fleet, rig.history, rig.matrix, {host: rig.matrix.release(old)},
                            now=rig.clock, kind="rollback", force=True, reason="INC-1",
                            actor="oncall", scheduler=sched, sleep=rig.clock.advance)
            assert out[0].outcome == "changed"

    with pytest.raises(LockLost):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    assert sched.state(host).state == "available"
    sched.start_job(host, seconds=8 * 3600, job_id="4242")
    log = RebootLog(rig.fleet)
    res = rig.engine(pid=1001).resume(1)
    assert log.busy == [], log.busy
    assert res.status == "paused", res.reason
    assert "4242" in res.reason
    st = _step(rig, 1, host)
    assert st.state == "draining" and st.detail.get("redrain") == "applying", st.detail


def test_resume_after_a_kill_drains_a_node_an_operator_resumed(matrix: Matrix,
                                                                tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    host = _names(rig)[0]
    sched = rig.fleet.scheduler()

    def checkpoint(label: str) -> None:
        if label == "wave1:apply:end":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    sched.undrain(host)  # `scontrol update state=resume` by an operator
    sched.start_job(host, seconds=8 * 3600, job_id="4242")
    log = RebootLog(rig.fleet)
    res = rig.engine(pid=1001, dead=True).resume(1, force=True)
    assert log.busy == [], log.busy
    assert res.status == "paused"
    # the job ends, the operator keeps waiting: the host is drained, then rebooted and verified
    rig.clock.advance(9 * 3600)
    res = rig.engine(pid=1002).keep_waiting(1)
    assert log.busy == []
    assert res.status == "completed", res.reason
    assert rig.problems(1) == []


def test_resume_reasks_a_drained_host_before_the_pin(matrix: Matrix, tmp_path: Path) -> None:
    """Killed between the drain and the pin: on resume the host is asked again."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    host = _names(rig)[0]
    sched = rig.fleet.scheduler()

    def checkpoint(label: str) -> None:
        if label == "wave1:drain:end":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    sched.undrain(host)
    sched.start_job(host, seconds=8 * 3600, job_id="77")
    before = rig.fleet.installed_release(host)
    log = RebootLog(rig.fleet)
    res = rig.engine(pid=1001, dead=True).resume(1, force=True)
    assert res.status == "paused"
    assert log.busy == [] and rig.fleet.installed_release(host) == before


# --------------------------------------------------- 9: max_unavailable, before every drain
def _tight(matrix: Matrix) -> Matrix:
    pools = {}
    for name, p in matrix.pools.items():
        ro = p.rollout.model_copy(update={"waves": [2], "max_unavailable": 2,
                                          "bake_minutes": 0, "failure_budget_per_wave": 1,
                                          "failure_budget_total": 2})
        pools[name] = p.model_copy(update={"rollout": ro})
    return matrix.model_copy(update={"pools": pools})


def test_max_unavailable_holds_against_hosts_out_now(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(_tight(matrix), tmp_path, pools={"h100-canary": 6})
    hosts = _names(rig)
    rig.fleet.inject(hosts[0], reboot_hangs=True)  # wave 1 leaves it down (quarantined)
    sched = rig.fleet.scheduler()
    peak: list[int] = [0]

    def checkpoint(label: str) -> None:
        peak[0] = max(peak[0], sum(1 for h in hosts if sched.state(h).state != "available"))

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    assert peak[0] <= 2, peak
    skipped = [s for s in rig.steps(res.rollout_id or 0) if s.state == "skipped"]
    assert skipped and all("max_unavailable" in s.detail["why"] for s in skipped)
    assert any(hosts[0] in s.detail["why"] for s in skipped)  # names what is out
    assert any(e.kind == "rollout.budget" for e in rig.events(res.rollout_id or 0))
    assert rig.problems(res.rollout_id or 0) == []


# ----------------------------------------------------------------- 11: heartbeat on a timer
def test_heartbeat_stays_fresh_through_a_long_reboot(matrix: Matrix, tmp_path: Path) -> None:
    """A reboot takes 7 minutes of wall time (stale after 5): the timer beats meanwhile, so a
    second controller is refused even with --force and no host is rebooted twice."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    wall = {"t": rig.clock()}
    ticker = ManualTicker()

    def engine(pid: int) -> RolloutEngine:
        return RolloutEngine(rig.fleet, rig.fleet.scheduler(), rig.history, rig.matrix,
                             now=rig.clock, sleep=rig.clock.advance, wall=lambda: wall["t"],
                             actor="ops", options=RolloutOptions(), pid=pid, machine="ctl1",
                             pid_alive=lambda p: True, ticker=ticker)

    orig = rig.fleet.reboot
    refused: list[str] = []

    def slow_reboot(hs: Any, *, gate: Any) -> Any:
        out = orig(hs, gate=gate)
        for _ in range(7):  # POST and boot: the timer fires every minute meanwhile
            wall["t"] += timedelta(seconds=60)
            ticker.fire()
        if not refused:
            refused.append("tried")
            try:
                engine(2000).resume(1, force=True)
            except LockHeld as e:
                refused.append(str(e))
        return out

    rig.fleet.reboot = slow_reboot  # type: ignore[method-assign]
    res = rig.start(engine=engine(1000))
    assert res.status == "completed", res.reason
    assert len(refused) == 2 and "being run by" in refused[1], refused
    assert all(rig.fleet.state(h)["boots"] == 1 for h in _names(rig))
    assert not ticker.running


def test_heartbeat_lets_a_hung_controller_go_stale(matrix: Matrix, tmp_path: Path) -> None:
    """No sign of life for `quiet_limit_s`: the timer stops beating (the lock may go stale)."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    ticker = ManualTicker()
    beats: list[datetime] = []
    eng = rig.engine(quiet_limit_s=0.0)
    eng._ticker = ticker
    eng.wall = lambda: (beats.append(rig.clock()), rig.clock())[1]  # type: ignore[method-assign]
    orig = rig.fleet.reboot

    def hung_reboot(hs: Any, *, gate: Any) -> Any:
        n = len(beats)
        ticker.fire()
        assert len(beats) == n  # quiet for longer than the limit: no beat
        return orig(hs, gate=gate)

    rig.fleet.reboot = hung_reboot  # type: ignore[method-assign]
    assert rig.start(engine=eng).status == "completed"


def test_thread_ticker_beats_until_stopped() -> None:
    from fleet.jobs.rollout.heartbeat import ThreadTicker

    ticks: list[int] = []
    ticker = ThreadTicker()
    ticker.start(0.01, lambda: ticks.append(1))
    for _ in range(500):
        if len(ticks) >= 3:
            break
        time.sleep(0.01)
    ticker.stop()
    seen = len(ticks)
    assert seen >= 3
    time.sleep(0.05)
    assert len(ticks) == seen  # stopped means stopped


# ------------------------------------------ found by the random runs (test_random_invariants)
def test_one_unreadable_state_does_not_leave_a_host_drained(matrix: Matrix,
                                                            tmp_path: Path) -> None:
    """A single failed state read right at the undrain: asked again, then undrained."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    first = _names(rig)[0]
    sched = rig.fleet.scheduler()
    flaky = {"on": False}

    class Flaky(Wrap):
        def state(self, host: str) -> AdminState:
            if host == first and flaky["on"]:
                flaky["on"] = False
                return AdminState("unknown", "scontrol: Unable to contact slurm controller")
            return self.inner.state(host)

    def checkpoint(label: str) -> None:
        if label == "wave1:undrain:begin":
            flaky["on"] = True

    eng = RolloutEngine(rig.fleet, Flaky(sched), rig.history, rig.matrix, now=rig.clock,
                        sleep=rig.clock.advance, actor="t", checkpoint=checkpoint, pid=1000,
                        machine="box", pid_alive=lambda p: True)
    res = rig.start(engine=eng)
    assert res.status == "completed", res.reason
    assert not flaky["on"]  # the read did fail once
    assert sched.state(first).state == "available"
    assert rig.problems(1) == []


def test_resuming_an_interrupted_abort_finishes_it(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    rig.fleet.scheduler().start_job(_names(rig)[0], seconds=8 * 3600, job_id="5")
    res = rig.start()
    assert res.status == "paused"  # the job outlives the drain timeout

    def checkpoint(label: str) -> None:
        if label == "rollback:begin":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.engine(pid=1001, checkpoint=checkpoint).abort(1)
    res = rig.engine(pid=1002, dead=True).resume(1, force=True)
    assert res.status == "aborted", res.reason
    assert rig.problems(1) == []


def test_a_forced_rollback_never_undrains_a_rollout_host_mid_change(
        matrix: Matrix, tmp_path: Path) -> None:
    """The rollout pinned the host (not rebooted) and drains it again after a resume; a forced
    `fleet rollback` of it gives up on the job: the rollout's drain stays, the half-changed
    host is not put back into service."""
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3})
    host = _names(rig)[0]
    sched = rig.fleet.scheduler()

    def checkpoint(label: str) -> None:
        if label == "wave1:apply:end":
            raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    sched.undrain(host)
    sched.start_job(host, seconds=8 * 3600, job_id="4242")
    assert rig.engine(pid=1001, dead=True).resume(1, force=True).status == "paused"
    old = rig.fleet.state(host)["initial"]
    assert rig.fleet.installed_release(host) != rig.fleet.loaded_release(host)  # mid-change
    out = pin_hosts(rig.fleet, rig.history, rig.matrix, {host: rig.matrix.release(old)},
                    now=rig.clock, kind="rollback", force=True, reason="INC-2", actor="oncall",
                    scheduler=sched, sleep=rig.clock.advance)
    assert out[0].outcome == "failed", out[0]
    a = sched.state(host)
    assert a.state == "draining" and a.by_fleet, a


# --------------------------------------------------- a bake keeps the lock's heartbeat fresh
def test_a_long_bake_keeps_beating(matrix: Matrix, tmp_path: Path) -> None:
    """A 10-minute bake with a 60 s heartbeat writes the lock between its sleeps (the stale
    limit is 5 minutes): a controller that only waits must not look dead to another one."""
    pools = {}
    for name, p in matrix.pools.items():
        ro = p.rollout.model_copy(update={"bake_minutes": 10})
        pools[name] = p.model_copy(update={"rollout": ro})
    rig = Rig(matrix.model_copy(update={"pools": pools}), tmp_path, pools={"h100-canary": 2})
    labels: list[str] = []
    eng = RolloutEngine(rig.fleet, rig.fleet.scheduler(), rig.history, rig.matrix,
                        now=rig.clock, sleep=rig.clock.advance, wall=rig.clock, actor="ops",
                        options=RolloutOptions(heartbeat_s=60.0), pid=1000, machine="ctl1",
                        pid_alive=lambda p: True, checkpoint=labels.append)
    res = rig.start(engine=eng)
    assert res.status == "completed", res
    beats = [x for x in labels if x == "wave1:bake:beat"]
    assert len(beats) == 9, labels  # 10 one-minute sleeps, a beat between each
