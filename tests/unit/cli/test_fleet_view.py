"""`fleet hosts`, the fleet view (issue 30): one row per host from the history, filters, whole
names in every output, and `fleet check` naming the hosts out of service beside "no findings"."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.domain.fleet_view import host_row, keep
from fleet.errors import ExitCode
from fleet.history.fleet_view import HostRecord, InRollout, Placed, Probe
from fleet.jobs import demo as D
from tests.unit.cli.test_operator_contract import fleet

T = datetime(2025, 10, 1, 8, 0, tzinfo=UTC)


def _hosts(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> list[dict[str, object]]:
    code, out, err = fleet(capsys, "--db", str(db), "hosts", *args, "--json")
    assert code == 0, err
    hosts = json.loads(out)["hosts"]
    assert isinstance(hosts, list)
    return hosts


def test_every_demo_host_with_pool_pin_probe_and_quarantine(
        demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = {h["host"]: h for h in _hosts(capsys, demo_db)}
    assert len(hosts) == sum(D.POOLS.values())
    assert {h["pool"] for h in hosts.values()} == set(D.POOLS)
    for name in D.ECC_HOSTS:  # quarantined by the weekly hygiene run, which drained them
        assert hosts[name]["quarantined"] is True
        assert hosts[name]["drained"] is True
        assert str(hosts[name]["drained_by"]).startswith("quarantine")
        assert "corrected ECC" in str(hosts[name]["quarantine_reason"])
    others = [h for n, h in hosts.items() if n not in D.ECC_HOSTS]
    assert not any(h["quarantined"] or h["drained"] for h in others)
    incident = [h for h in hosts.values() if h["pool"] == D.INCIDENT_POOL]
    assert {(h["pinned"], str(h["pinned_by"]).split()[0]) for h in incident} == {
        (D.GOLDEN, "rollback")}
    rest = [h for h in hosts.values() if h["pool"] != D.INCIDENT_POOL]
    assert {(h["pinned"], h["pinned_by"]) for h in rest} == {(D.CANDIDATE_B, "rollout 2")}
    assert all(h["probe"] == "ok" and h["probed_at"] and h["driver"] for h in hosts.values())
    assert all(h["rollout"] is None for h in hosts.values())  # both rollouts ended


def test_filters(demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(h["host"] for h in _hosts(capsys, demo_db, "--quarantined")) == sorted(
        D.ECC_HOSTS)
    assert sorted(h["host"] for h in _hosts(capsys, demo_db, "--drained")) == sorted(
        D.ECC_HOSTS)
    on_golden = _hosts(capsys, demo_db, "--release", D.GOLDEN)
    assert {h["pool"] for h in on_golden} == {D.INCIDENT_POOL}
    assert len(on_golden) == D.POOLS[D.INCIDENT_POOL]
    assert _hosts(capsys, demo_db, "--findings", "-l", D.INCIDENT_POOL) == []
    assert len(_hosts(capsys, demo_db, "--pool", "a100")) == D.POOLS["a100"]
    code, _, err = fleet(capsys, "--db", str(demo_db), "hosts", "-l", "nosuch")
    assert code == ExitCode.BAD_INPUT and "nosuch" in err


def test_table_and_tsv_keep_whole_names(demo_db: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = fleet(capsys, "--db", str(demo_db), "hosts", "--quarantined")
    assert code == 0 and "…" not in out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["host", "pool"] and len(lines) == 3
    assert all(D.CANDIDATE_B in line and "quarantine (" in line for line in lines[1:])
    code, out, _ = fleet(capsys, "--db", str(demo_db), "hosts", "--quarantined", "-o", "tsv")
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header[:3] == ["host", "pool", "seen on"] and len(rows) == 2
    reason = header.index("quarantine reason")
    assert all(r[reason].startswith("GPU ") and "x9.6 the earlier weeks" in r[reason]
               for r in rows)


def test_check_names_the_hosts_out_of_service(
        demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's latest probes have no findings, but two hosts are quarantined: `check`
    must not leave it at "no findings"."""
    code, out, err = fleet(capsys, "--db", str(demo_db), "check")
    said = out + err
    assert code == 0
    assert "2 host(s) quarantined" in said and "fleet hosts --quarantined" in said
    code, out, _ = fleet(capsys, "--db", str(demo_db), "check", "--json")
    assert sorted(json.loads(out)["quarantined"]) == sorted(D.ECC_HOSTS)


def test_rows_say_what_the_history_cannot_know() -> None:
    never = host_row(HostRecord("gpu-01", "h100"))
    assert (never.probe, never.release, never.drained) == ("never probed", None, False)
    lost = host_row(HostRecord("gpu-02", "h100", latest=Probe(T, False, None, None),
                               seen=Probe(T, True, "r570", "570.1")))
    assert (lost.probe, lost.release) == ("unreachable", "r570")  # as last seen
    moving = host_row(HostRecord("gpu-03", "h100", rollout=InRollout(7, "paused", 2, "judged"),
                                 placed=Placed("r570", T, "rollout 6")))
    assert moving.drained and moving.drained_by == "rollout 7"
    assert moving.as_dict()["rollout"] == {"id": 7, "wave": 2, "state": "judged"}
    theirs = host_row(HostRecord("gpu-04", "h100", admin={
        "state": "drained", "by_fleet": False, "owner": "slurm:alice", "reason": "bad fan",
        "rollout": 6}))
    assert theirs.drained and theirs.drained_by is not None
    assert "slurm:alice" in theirs.drained_by and "bad fan" in theirs.drained_by
    assert keep([never, lost, moving, theirs], drained=True) == [moving, theirs]
    assert keep([never, lost, moving, theirs], release=["r570"]) == [lost, moving]
