"""The Slurm adapter against real `scontrol show node` output and the fake scontrol/squeue."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.domain.ports import AdminState
from fleet.schedulers.slurm import SlurmNode, SlurmScheduler, parse_show_node, split_reason

from .conftest import DATA, FakeCluster


def test_parse_real_sample_drained_by_slurm() -> None:
    nodes = parse_show_node((DATA / "scontrol_show_node_drained.txt").read_text())
    assert [n.name for n in nodes] == ["localhost"]
    n = nodes[0]
    assert n.state == "IDLE+DRAIN"
    assert n.reason == "Kill task failed"  # the owner and time scontrol appends are split off
    assert (n.owner, n.reason_time) == ("root", "2024-08-08T19:12:57")
    assert n.fields["OS"].startswith("Linux 6.5.0-25-generic #25~22.04.1-Ubuntu SMP")
    assert n.fields["Gres"] == "gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600"
    assert n.fields["AllocTRES"] == ""
    assert n.admin_state() == AdminState("drained", n.reason, by_fleet=False, owner="root")


def test_parse_real_sample_two_nodes() -> None:
    nodes = parse_show_node((DATA / "scontrol_show_node_multi.txt").read_text())
    assert [(n.name, n.state, n.reason) for n in nodes] == [
        ("gn0101.twcc.ai", "IDLE+DRAIN", "node-switch"),
        ("cu201", "IDLE+DRAIN", "Low RealMemory"),
    ]
    assert nodes[1].fields["Comment"] == "(null)"
    assert nodes[0].fields["CPUSpecList"] == "0-1"


@pytest.mark.parametrize(("state", "reason", "expected"), [
    ("IDLE", None, AdminState("available")),
    ("MIXED", None, AdminState("available")),
    ("ALLOCATED+DRAIN", "fleet: r580 wave 1", AdminState("draining", "fleet: r580 wave 1", True)),
    ("MIXED+DRAIN", "ops: bad fan", AdminState("draining", "ops: bad fan", False)),
    ("IDLE+DRAIN", "fleet: x", AdminState("drained", "fleet: x", True)),
    ("DRAINED", "fleet: x", AdminState("drained", "fleet: x", True)),
    ("DOWN*+DRAIN", "fleet: x", AdminState("down", "fleet: x", True)),
    ("IDLE*", None, AdminState("down", None, False)),
    ("DOWN", "Not responding", AdminState("down", "Not responding", False)),
    ("FUTURE", None, AdminState("unknown", None, False)),
])
def test_state_mapping(state: str, reason: str | None, expected: AdminState) -> None:
    assert SlurmNode("n1", state, reason).admin_state("fleet:") == expected


def _slurm(cluster: FakeCluster, nodes: dict[str, dict[str, Any]]) -> SlurmScheduler:
    st = cluster.read()
    st["slurm"]["nodes"] = nodes
    cluster.write(st)
    return SlurmScheduler(cluster.runner, poll_s=0.0, sleep=lambda s: None)


def test_drain_wait_resume(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {"gpu01": {"jobs": [{"id": "4711", "polls": 2}]}})
    assert s.state("gpu01") == AdminState("available")
    r = s.drain("gpu01", "upgrade to r580-cuda13.0, wave 1", wait_s=60)
    assert r.ok and r.changed, r.error
    node = cluster.slurm_node("gpu01")
    assert node["drain"] and node["reason"] == "fleet: upgrade to r580-cuda13.0, wave 1"
    assert not node["jobs"]  # waited until squeue saw none
    st = s.state("gpu01")
    assert (st.state, st.by_fleet) == ("drained", True)
    assert st.reason is not None and st.reason.startswith("fleet: upgrade")
    assert ["squeue", "-h", "-w", "gpu01", "-t", "R,CG,S,ST", "-o", "%i"] in cluster.log()
    r = s.undrain("gpu01")
    assert r.ok and r.changed
    assert s.state("gpu01") == AdminState("available")
    assert ["scontrol", "update", "nodename=gpu01", "state=resume"] in cluster.log()


def test_drain_is_idempotent_for_our_drain(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {"gpu01": {}})
    assert s.drain("gpu01", "wave 1").changed
    again = s.drain("gpu01", "wave 1")
    assert again.ok and not again.changed
    updates = [a for a in cluster.log() if a[:2] == ["scontrol", "update"]]
    assert len(updates) == 1


def test_drain_times_out_waiting_for_jobs(cluster: FakeCluster) -> None:
    clock = iter(range(0, 1000, 10))
    s = _slurm(cluster, {"gpu01": {"jobs": [{"id": "9", "polls": 100}]}})
    s.monotonic = lambda: float(next(clock))
    r = s.drain("gpu01", "wave 2", wait_s=30)
    assert not r.ok and r.changed
    assert r.error == "1 job(s) still running after 30 s: 9"
    st = s.state("gpu01")
    assert (st.state, st.by_fleet) == ("draining", True)  # still ours, the caller decides


def test_never_resume_a_node_drained_by_someone_else(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {"gpu02": {"drain": True, "reason": "NHC: ECC errors",
                                   "reason_user": "root"}})
    st = s.state("gpu02")
    assert (st.state, st.by_fleet) == ("drained", False)
    d = s.drain("gpu02", "wave 1")
    assert d.ok and not d.changed  # left alone: not re-drained under our marker
    u = s.undrain("gpu02")
    assert not u.ok and "someone else" in (u.error or "")
    node = cluster.slurm_node("gpu02")
    assert node["drain"] and node["reason"] == "NHC: ECC errors"
    assert not [a for a in cluster.log() if a[:2] == ["scontrol", "update"]]


def test_down_node_of_someone_else_is_not_taken_over(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {"gpu03": {"down": True, "reason": "Not responding"}})
    assert s.state("gpu03").state == "down"
    r = s.drain("gpu03", "wave 1")
    assert not r.ok and "not taking it over" in (r.error or "")


def test_unknown_node_and_failing_tool(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {})
    st = s.state("nope")
    assert st.state == "unknown" and st.reason == "Node nope not found"
    r = s.drain("nope", "x")
    assert not r.ok and r.error == "Node nope not found"


def test_missing_scontrol_is_an_error_not_a_crash() -> None:
    s = SlurmScheduler(scontrol="/nonexistent/scontrol")
    st = s.state("gpu01")
    assert st.state == "unknown" and "not found" in (st.reason or "")


def test_node_names_never_reach_a_command_unchecked(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {})
    with pytest.raises(ValueError):
        s.state("gpu01 state=resume")
    assert cluster.log() == []


def test_runner_seam_gets_argv_lists_and_timeouts() -> None:
    calls: list[tuple[list[str], float | None]] = []

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        calls.append((argv, timeout))
        return 0, "NodeName=n1 Arch=x86_64\n   State=IDLE ThreadsPerCore=2\n", ""

    s = SlurmScheduler(runner, timeout_s=7)
    assert s.state("n1") == AdminState("available")
    assert calls == [(["scontrol", "show", "node", "n1"], 7)]


@pytest.mark.parametrize(("printed", "expected"), [
    ("ops: RMA 12 [alice@2026-11-30T10:00:00]", ("ops: RMA 12", "alice", "2026-11-30T10:00:00")),
    ("fleet: rollout 3 wave 1 : reboot issued [root@2026-11-30T10:00:01]",
     ("fleet: rollout 3 wave 1 : reboot issued", "root", "2026-11-30T10:00:01")),
    ("no owner here", ("no owner here", None, None)),
    ("brackets [inside] text", ("brackets [inside] text", None, None)),
    (None, (None, None, None)),
])
def test_split_reason(printed: str | None, expected: tuple[str | None, ...]) -> None:
    assert split_reason(printed) == expected


def test_drained_flag_with_jobs_left_is_still_draining() -> None:
    node = SlurmNode("n1", "IDLE+DRAIN", "fleet: x")
    assert node.admin_state("fleet:", ["4711"]) == AdminState("draining", "fleet: x", True,
                                                              None, ("4711",))
    assert node.admin_state("fleet:").state == "drained"


def test_someone_elses_busy_drain_with_no_job_listed_is_not_empty() -> None:
    # MIXED+DRAIN while squeue (running, completing, suspended, stopped) names nothing
    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if argv[:3] == ["scontrol", "show", "node"]:
            return 0, ("NodeName=gpu7 Arch=x86_64\n   State=MIXED+DRAIN ThreadsPerCore=2\n"
                       "   Reason=ops: replace PSU [alice@2025-01-06T09:00:00]\n"), ""
        return 0, "", ""

    st = SlurmScheduler(runner).state("gpu7")
    assert (st.state, st.by_fleet, st.jobs) == ("draining", False, ())  # never "drained"


def test_suspended_and_stopped_jobs_hold_the_node(cluster: FakeCluster) -> None:
    s = _slurm(cluster, {"gpu01": {"drain": True, "reason": "fleet: wave 1",
                                   "jobs": [{"id": "70", "polls": 9, "state": "S"},
                                            {"id": "71", "polls": 9, "state": "ST"}]}})
    st = s.state("gpu01")
    assert (st.state, st.jobs) == ("draining", ("70", "71"))


@pytest.mark.parametrize(("node", "idle"), [
    ({}, True),
    ({"jobs": [{"id": "5", "polls": 9}]}, False),  # ALLOCATED
    ({"drain": True, "reason": "fleet: x"}, False),  # out of service: not a baseline
    ({"down": True, "reason": "Not responding"}, False),
])
def test_idle_means_idle_and_no_job_listed(cluster: FakeCluster, node: dict[str, Any],
                                           idle: bool) -> None:
    out = _slurm(cluster, {"gpu01": node}).idle("gpu01")
    assert out.ok and out.value is idle


def test_idle_with_squeue_failing_is_unknown() -> None:
    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if argv[0] == "scontrol":
            return 0, "NodeName=n1 Arch=x86_64\n   State=IDLE ThreadsPerCore=2\n", ""
        return 1, "", "squeue: error: slurm_load_jobs error: Socket timed out"

    out = SlurmScheduler(runner).idle("n1")
    assert not out.ok and "Socket timed out" in (out.error or "")
    busy = SlurmScheduler(lambda argv, t: (
        0, "NodeName=n1 Arch=x86_64\n   State=MIXED ThreadsPerCore=2\n", "")).idle("n1")
    assert busy.ok and busy.value is False
