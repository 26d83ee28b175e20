"""`fleet apply` and `fleet rollback` drain through the scheduler before any reboot."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import Scheduler
from fleet.history import list_events, open_history
from fleet.jobs.apply import pin_hosts
from fleet.schedulers.kubernetes import KubernetesScheduler
from fleet.schedulers.slurm import SlurmScheduler
from fleet.sim import Latency, SimClock, SimFleet
from tests.unit.rollout.helpers import with_drain
from tests.unit.schedulers.conftest import DATA, k8s_node

POOL = "h100"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix


def rig(matrix: Matrix, tmp_path: Path) -> tuple[SimFleet, SimClock, list[str]]:
    clock = SimClock()
    fleet = SimFleet.build(matrix, None, 0, pools={POOL: 4}, clock=clock,
                           latency=Latency.zero())
    return fleet, clock, [h.name for h in fleet.hosts()]


def test_apply_waits_for_jobs_then_undrains(matrix: Matrix, tmp_path: Path) -> None:
    m = with_drain(matrix, timeout_minutes=30, poll_seconds=10)
    fleet, clock, names = rig(m, tmp_path)
    sched = fleet.scheduler()
    sched.start_job(names[0], seconds=95, job_id="31")
    target = m.release("r595-cuda13.2")
    with open_history(str(tmp_path / "h.db")) as history:
        t0 = clock()
        out = pin_hosts(fleet, history, m, dict.fromkeys(names, target), now=clock,
                        scheduler=sched, sleep=clock.advance, serial=2)
    assert [r.outcome for r in out] == ["changed"] * 4, [r.error for r in out]
    assert (clock() - t0).total_seconds() >= 95  # waited for job 31
    assert all(r.drained and not r.left_drained for r in out)
    assert all(sched.state(n).state == "available" for n in names)
    drains = [h for verb, h in sched.calls if verb == "drain"]
    assert set(drains) == set(names)


def test_jobs_outliving_the_timeout_leave_the_host_unchanged(matrix: Matrix,
                                                             tmp_path: Path) -> None:
    m = with_drain(matrix, timeout_minutes=1, poll_seconds=10)
    fleet, clock, names = rig(m, tmp_path)
    sched = fleet.scheduler()
    sched.start_job(names[1], seconds=7200, job_id="88")
    before = fleet.installed_release(names[1])
    with open_history(str(tmp_path / "h.db")) as history:
        out = pin_hosts(fleet, history, m, dict.fromkeys(names, m.release("r595-cuda13.2")),
                        now=clock, scheduler=sched, sleep=clock.advance, kind="rollback",
                        reason="incident 12")
    by = {r.host: r for r in out}
    assert by[names[1]].outcome == "failed"
    assert "88" in (by[names[1]].error or "") and "not changed" in (by[names[1]].error or "")
    assert fleet.installed_release(names[1]) == before
    st = sched.state(names[1])
    assert st.state == "available" and st.jobs == ()  # undrained, job left running
    assert ("cancel", names[1]) not in sched.calls
    assert all(by[n].outcome == "changed" for n in names if n != names[1])


def test_no_drain_is_recorded_with_the_reason(matrix: Matrix, tmp_path: Path) -> None:
    fleet, clock, names = rig(matrix, tmp_path)
    sched = fleet.scheduler()
    with open_history(str(tmp_path / "h.db")) as history:
        out = pin_hosts(fleet, history, matrix, dict.fromkeys(names, matrix.release(
            "r595-cuda13.2")), now=clock, scheduler=sched, drain=False, kind="rollback",
            reason="Xid 79 storm, no time", actor="oncall")
        events = [e for e in list_events(history) if e.kind == "rollback.no_drain"]
    assert all(r.outcome == "changed" for r in out)
    assert not [c for c in sched.calls if c[0] == "drain"]
    assert len(events) == 1 and events[0].data["reason"] == "Xid 79 storm, no time"
    assert sorted(events[0].data["hosts"]) == sorted(names)


def _kube_runner(node: dict[str, Any], pods_fail: bool) -> Any:
    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if argv[1:3] == ["get", "node"]:
            return 0, json.dumps(node), ""
        if argv[1:3] == ["get", "pods"]:
            if pods_fail:  # the training pods are there, but the list times out
                return 1, "", "Unable to connect to the server: net/http: TLS handshake timeout"
            return 0, json.dumps({"items": []}), ""
        return 0, "", ""
    return runner


def _slurm_runner(state: str) -> Any:
    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if argv[:3] == ["scontrol", "show", "node"]:
            return 0, (f"NodeName={argv[3]} Arch=x86_64\n   State={state} ThreadsPerCore=2\n"
                       "   Reason=ops: replace PSU [alice@2025-01-06T09:00:00]\n"), ""
        return 0, "", ""  # squeue lists nothing (a suspended job, say, is not asked for)
    return runner


@pytest.mark.parametrize("case", ["kubernetes, pod listing fails", "slurm MIXED+DRAIN"])
def test_someone_elses_drain_with_no_job_list_is_never_rebooted(
        matrix: Matrix, tmp_path: Path, case: str) -> None:
    fleet, clock, names = rig(matrix, tmp_path)
    host = names[0]
    sched: Scheduler
    if case.startswith("kubernetes"):
        sample = json.loads((DATA / "kubectl_get_node.json").read_text())
        node = k8s_node(sample, host, unschedulable=True,
                        annotations={"k8saas.nvidia.com/cordon-by": "NVSentinel",
                                     "k8saas.nvidia.com/cordon-reason": "GpuXidError"})
        sched = KubernetesScheduler(_kube_runner(node, pods_fail=True))
    else:
        sched = SlurmScheduler(_slurm_runner("MIXED+DRAIN"))
    before = fleet.installed_release(host)
    reboots: list[str] = []
    real_reboot = fleet.reboot
    fleet.reboot = (  # type: ignore[method-assign]
        lambda hs, **kw: (reboots.extend(hs), real_reboot(hs, **kw))[1])
    with open_history(str(tmp_path / "h.db")) as history:
        out = pin_hosts(fleet, history, matrix, {host: matrix.release("r595-cuda13.2")},
                        now=clock, scheduler=sched, sleep=clock.advance)
    assert out[0].outcome == "failed" and "not changed" in (out[0].error or ""), out[0].error
    assert reboots == [] and fleet.installed_release(host) == before


def test_someone_elses_drain_listed_empty_is_changed_and_left_drained(
        matrix: Matrix, tmp_path: Path) -> None:
    fleet, clock, names = rig(matrix, tmp_path)
    sched = SlurmScheduler(_slurm_runner("IDLE+DRAIN"))  # drained, squeue lists nothing
    with open_history(str(tmp_path / "h.db")) as history:
        out = pin_hosts(fleet, history, matrix, {names[0]: matrix.release("r595-cuda13.2")},
                        now=clock, scheduler=sched, sleep=clock.advance)
    assert out[0].outcome == "changed", out[0].error
    assert not out[0].drained  # not fleet's drain: never undrained
