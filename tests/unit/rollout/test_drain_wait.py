"""Drain means drained and empty: the engine waits for running jobs, on the simulated fleet.

The same paths run against the lab's real Slurm in tests/integration/slurm; here every policy
(pause, skip, cancel, requeue), a controller killed mid-wait and an admin drain mid-wait.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.models import Matrix
from tests.unit.rollout.helpers import Crash, Rig, with_drain

CANARY = "h100-canary"


def first_canary(rig: Rig) -> str:
    return next(h.name for h in rig.fleet.hosts() if h.pool == CANARY)


def test_waits_for_a_running_job_before_changing_the_host(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=30, poll_seconds=10), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    before = rig.fleet.installed_release(host)
    rig.fleet.scheduler().start_job(host, seconds=125, job_id="4711")
    applied_at: list[Any] = []
    orig_apply = rig.fleet.apply

    def apply(hosts: Any, release: Any, **kw: Any) -> Any:
        if host in hosts:
            applied_at.append(rig.clock())
        return orig_apply(hosts, release, **kw)

    rig.fleet.apply = apply  # type: ignore[method-assign]
    t0 = rig.clock()
    res = rig.start()
    assert res.status == "completed", res.reason
    assert rig.fleet.installed_release(host) != before
    # not touched until the job had ended (125 s of logical time, polled every 10 s)
    assert applied_at and (applied_at[0] - t0).total_seconds() >= 125
    step = next(s for s in rig.steps(res.rollout_id) if s.host == host)
    assert step.detail["drain_waited_s"] >= 125
    assert rig.fleet.scheduler().calls.count(("drain", host)) == 1  # drained once, then polled
    assert "waiting_for" not in step.detail
    assert rig.problems(res.rollout_id) == []


def test_jobs_outliving_the_timeout_pause_and_nothing_is_rebooted(matrix: Matrix,
                                                                   tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=2, poll_seconds=10), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    before = rig.fleet.installed_release(host)
    sched = rig.fleet.scheduler()
    sched.start_job(host, seconds=3600, job_id="4711")
    res = rig.start()
    assert res.status == "paused"
    assert "4711" in res.reason and host in res.reason and "drain timeout" in res.reason
    assert rig.fleet.installed_release(host) == before
    assert rig.fleet.loaded_release(host) == before  # never rebooted onto anything
    st = sched.state(host)
    assert (st.state, st.by_fleet, st.jobs) == ("draining", True, ("4711",))  # job untouched
    assert ("cancel", host) not in sched.calls and ("requeue", host) not in sched.calls
    step = next(s for s in rig.steps(res.rollout_id) if s.host == host)
    assert step.state == "draining" and step.detail["drain_timed_out"]
    assert step.detail["waiting_for"]["jobs"] == ["4711"]
    pause = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.pause"]
    assert pause and pause[-1].data["hosts"] == {host: ["4711"]}
    # the operator aborts: nothing moved, the host is undrained, the job still runs
    eng = rig.engine()
    out = eng.abort(res.rollout_id)
    assert out.status == "aborted"
    assert sched.state(host).state == "available"
    assert rig.problems(res.rollout_id) == []


def test_keep_waiting_after_a_drain_pause_waits_again_then_goes_on(matrix: Matrix,
                                                                    tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=2, poll_seconds=10), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    rig.fleet.scheduler().start_job(host, seconds=200, job_id="77")
    res = rig.start()
    assert res.status == "paused"
    out = rig.engine().keep_waiting(res.rollout_id, reason="job 77 ends soon")
    assert out.status == "completed", out.reason
    assert rig.problems(res.rollout_id) == []


def test_skip_leaves_the_busy_host_alone_and_moves_the_rest(matrix: Matrix,
                                                            tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=1, on_timeout="skip"), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    before = rig.fleet.installed_release(host)
    sched = rig.fleet.scheduler()
    sched.start_job(host, seconds=3600)
    res = rig.start()
    assert res.status == "completed", res.reason
    step = next(s for s in rig.steps(res.rollout_id) if s.host == host)
    assert step.state == "skipped" and "outlived the drain timeout" in step.detail["why"]
    assert rig.fleet.installed_release(host) == before
    assert sched.state(host).state == "available"  # undrained: fleet drained it
    others = [s for s in rig.steps(res.rollout_id) if s.host != host]
    assert others and all(s.state == "done" for s in others)


@pytest.mark.parametrize("action", ["cancel", "requeue"])
def test_cancel_or_requeue_only_when_the_matrix_says_so(matrix: Matrix, tmp_path: Path,
                                                         action: str) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=1, on_timeout=action), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    sched = rig.fleet.scheduler()
    sched.start_job(host, seconds=3600, job_id="999")
    res = rig.start()
    assert res.status == "completed", res.reason
    assert (action, host) in sched.calls
    stops = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.drain.stop"]
    assert [(e.data["host"], e.data["jobs"], e.data["action"]) for e in stops] == [
        (host, ["999"], action)]
    assert rig.problems(res.rollout_id) == []


def test_a_controller_killed_while_waiting_resumes_the_wait(matrix: Matrix,
                                                            tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=10, poll_seconds=10), tmp_path,
              pools={CANARY: 3})
    host = first_canary(rig)
    rig.fleet.scheduler().start_job(host, seconds=300, job_id="5")
    waits = [0]

    def checkpoint(label: str) -> None:
        if label.endswith(":drain:wait"):
            waits[0] += 1
            if waits[0] == 3:
                raise Crash(label)

    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=checkpoint))
    rid = 1
    step = next(s for s in rig.steps(rid) if s.host == host)
    assert step.state == "draining" and not step.ended_at
    since = step.detail["drain_since"]
    assert step.detail["waiting_for"]["jobs"] == ["5"]
    res = rig.engine(pid=2000, dead=True).resume(rid, force=True)
    assert res.status == "completed", res.reason
    step = next(s for s in rig.steps(rid) if s.host == host)
    assert step.detail["drain_since"] == since  # the wait kept counting from its start
    assert step.detail["drain_waited_s"] >= 300
    assert rig.problems(rid) == []


def test_an_admin_drain_during_the_wait_is_left_alone(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(with_drain(matrix, timeout_minutes=10), tmp_path, pools={CANARY: 3})
    host = first_canary(rig)
    sched = rig.fleet.scheduler()
    sched.start_job(host, seconds=300)

    def checkpoint(label: str) -> None:
        if label.endswith(":drain:wait"):
            sched.set_drained(host, "ops: RMA 123")

    res = rig.start(engine=rig.engine(checkpoint=checkpoint))
    assert res.status == "completed", res.reason
    step = next(s for s in rig.steps(res.rollout_id) if s.host == host)
    assert step.state == "skipped" and "ops: RMA 123" in step.detail["why"]
    st = sched.state(host)
    assert (st.state in ("drained", "draining"), st.by_fleet, st.reason) == (
        True, False, "ops: RMA 123")
    assert ("undrain", host) not in sched.calls


def test_reboot_through_the_scheduler_when_the_pool_says_so(matrix: Matrix,
                                                            tmp_path: Path) -> None:
    pools = {}
    for name, p in matrix.pools.items():
        pools[name] = p.model_copy(update={"rollout": p.rollout.model_copy(
            update={"reboot": "slurm"})})
    rig = Rig(matrix.model_copy(update={"pools": pools}), tmp_path, pools={CANARY: 3})
    res = rig.start()
    assert res.status == "completed", res.reason
    sched = rig.fleet.scheduler()
    rebooted = {h for verb, h in sched.calls if verb == "reboot"}
    assert rebooted == {h.name for h in rig.fleet.hosts()}
    assert rig.problems(res.rollout_id) == []
