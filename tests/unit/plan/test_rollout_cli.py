"""`fleet rollout plan` end to end: exit codes, JSON, inventory plus history, simulated fleet."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from .conftest import ROOT

MATRIX = str(ROOT / "matrices" / "example.yaml")


def test_plan_sim_json(fleet_cli) -> None:  # type: ignore[no-untyped-def]
    r = fleet_cli("rollout", "plan", "--matrix", MATRIX, "--sim", "300", "--seed", "4", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "sim" and doc["seed"] == 4
    assert [p["pool"] for p in doc["pools"]] == ["h100-canary", "h100", "a100", "l40s"]
    assert sum(len(w["hosts"]) for p in doc["pools"] for w in p["waves"]) == 300
    assert doc["pools"][0]["canary"] is True
    again = fleet_cli("rollout", "plan", "--matrix", MATRIX, "--sim", "300", "--seed", "4",
                      "--json")
    assert again.stdout == r.stdout


def test_plan_human_output_and_pool_filter(fleet_cli) -> None:  # type: ignore[no-untyped-def]
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim", "100", "--pool", "l40s")
    assert r.returncode == 0, r.stderr
    assert "l40s -> r580-cuda13.0" in r.stdout and "wave 1: 2 host(s)" in r.stdout
    assert "h100-canary" not in r.stdout


def test_plan_usage_errors(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = fleet_cli("rollout", "plan", "-m", MATRIX)
    assert r.returncode == 2 and "exactly one of" in r.stderr
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim", "10", "--pool", "nope")
    assert r.returncode == 2 and "no pool 'nope'" in r.stderr and "h100-canary" in r.stderr
    bad = tmp_path / "spec.yaml"
    bad.write_text("pools: {h100: {hosts: many}}\n")
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(bad))
    assert r.returncode == 2 and "pools.h100.hosts" in r.stderr


def test_plan_blocked_pool_exits_1(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools:\n  h100-canary: {hosts: 3}\n"
                    "drained:\n  h100-canary-00002: 'ops: fan'\n")
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert r.returncode == 1, r.stderr
    pool = json.loads(r.stdout)["pools"][0]
    assert pool["blocked"] and pool["unavailable"] == ["h100-canary-00002"]
    assert pool["skipped"]["h100-canary-00002"] == "drained by someone else: ops: fan"


def test_plan_inventory_with_history(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from fleet.history import add_snapshot, open_history, open_quarantine

    inv = tmp_path / "hosts.py"
    inv.write_text(
        'canary = [("gpu-c1", {"pool": "h100-canary"})]\n'
        'h100 = [("gpu-h1", {"unit": "rack1"}), ("gpu-h2", {"unit": "rack1"}),\n'
        '        ("gpu-h3", {"unit": "rack2"})] + [f"gpu-h{i}" for i in range(4, 41)]\n'
    )
    db = tmp_path / "fleet.db"
    now = datetime(2025, 6, 1, tzinfo=UTC)
    with open_history(str(db)) as history:
        add_snapshot(history, "gpu-h3", taken_at=now, source="nvml", release="r580-cuda13.0")
        add_snapshot(history, "gpu-h5", taken_at=now, source="none", reachable=False)
        open_quarantine(history, "gpu-h2", reason="ECC trend", opened_by="test", at=now)
    r = fleet_cli("--db", str(db), "rollout", "plan", "-m", MATRIX, "-i", str(inv), "--json")
    # gpu-h5 unreachable, 39 hosts never probed: the plan is shown, and it is incomplete
    assert r.returncode == 3, r.stderr
    assert "never probed" in r.stderr and "unreachable at their latest probe: gpu-h5" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "inventory" and doc["releases_known"] == 1
    assert doc["unreachable"] == ["gpu-h5"] and len(doc["never_probed"]) == 39
    assert "gpu-h3" not in doc["never_probed"] and "gpu-h2" in doc["never_probed"]
    pools = {p["pool"]: p for p in doc["pools"]}
    assert list(pools) == ["h100-canary", "h100"]
    h100 = pools["h100"]
    assert h100["skipped"] == {"gpu-h2": "quarantined: ECC trend",
                               "gpu-h3": "already on r580-cuda13.0", "gpu-h5": "unreachable"}
    assert h100["waves"][0]["hosts"] == ["gpu-h1"] and h100["waves"][0]["units"] == ["rack1"]
    assert any("rack1" in n for n in h100["notes"])
    # without a history nothing is known: every host moves
    r = fleet_cli("--db", str(tmp_path / "none.db"), "rollout", "plan", "-m", MATRIX,
                  "-i", str(inv), "--json")
    assert r.returncode == 3, r.stderr  # nobody looked at any host
    doc = json.loads(r.stdout)
    assert doc["releases_known"] == 0 and len(doc["never_probed"]) == 41
    assert not (tmp_path / "none.db").exists()
    assert sum(len(w["hosts"]) for p in doc["pools"] for w in p["waves"]) == 41


def _probed_inventory(tmp_path: Path, *, down: str | None = None,
                      skip: str | None = None) -> tuple[Path, Path]:
    """An inventory of three h100 hosts and a history in which each was probed (reachable,
    on r570) except `skip`; `down`'s latest probe could not reach it."""
    from fleet.history import add_snapshot, open_history

    tmp_path.mkdir()
    inv = tmp_path / "hosts.py"
    inv.write_text('h100 = ["gpu-1", "gpu-2", "gpu-3"]\n')
    db = tmp_path / "fleet.db"
    now = datetime(2025, 6, 1, tzinfo=UTC)
    with open_history(str(db)) as history:
        for h in ("gpu-1", "gpu-2", "gpu-3"):
            if h == skip:
                continue
            add_snapshot(history, h, taken_at=now, source="nvml", release="r570-cuda12.8")
            if h == down:
                add_snapshot(history, h, taken_at=now.replace(hour=1), source="none",
                             reachable=False)
    return inv, db


def test_plan_exit_codes_follow_what_is_known(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """0 when every host of the plan was probed and reached; 3 when one was unreachable at its
    latest probe or never probed (docs/exit-codes.md), the plan still shown."""
    inv, db = _probed_inventory(tmp_path / "ok")
    r = fleet_cli("--db", str(db), "rollout", "plan", "-m", MATRIX, "-i", str(inv), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["unreachable"] == [] and doc["never_probed"] == []
    inv, db = _probed_inventory(tmp_path / "down", down="gpu-2")
    r = fleet_cli("--db", str(db), "rollout", "plan", "-m", MATRIX, "-i", str(inv), "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["unreachable"] == ["gpu-2"]
    inv, db = _probed_inventory(tmp_path / "unknown", skip="gpu-3")
    r = fleet_cli("--db", str(db), "rollout", "plan", "-m", MATRIX, "-i", str(inv))
    assert r.returncode == 3 and "never probed" in r.stderr and "gpu-3" in r.stderr
    assert "wave 1" in r.stdout  # the plan is printed (stdout) before the exit


def test_plan_of_a_sim_with_an_unreachable_host_exits_3(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools:\n  h100: {hosts: 6}\n")
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert r.returncode == 0, r.stderr
    spec.write_text("pools:\n  h100: {hosts: 6}\nfaults:\n  h100-00003: {unreachable: true}\n")
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["unreachable"] == ["h100-00003"] and "h100-00003" in r.stderr
    assert doc["never_probed"] == []  # a simulated fleet knows every host


def test_plan_and_status_say_which_waves_max_unavailable_capped(
        fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Wave sizes no longer change silently (issue 30): 120 h100 hosts, waves [1, 5, "20%"],
    max_unavailable 10% = 12."""
    note = "waves 3-11 capped by max_unavailable 12: from 24 to 12 host(s) each"
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools: {h100: {hosts: 120}}\n")
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec))
    assert r.returncode == 0, r.stderr
    assert note in r.stdout + r.stderr
    r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert json.loads(r.stdout)["pools"][0]["notes"] == [note]
    db = str(tmp_path / "f.db")
    r = fleet_cli("--db", db, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec),
                  "--dry")
    assert r.returncode == 0 and note in r.stdout + r.stderr, r.stderr
    small = tmp_path / "small.yaml"  # a rollout that is quick to run: 6 hosts, cap 1
    small.write_text("pools: {h100: {hosts: 6}}\n")
    r = fleet_cli("--db", db, "rollout", "start", "-m", MATRIX, "--sim-spec", str(small))
    assert r.returncode == 0, r.stderr
    one = "wave 2 capped by max_unavailable 1: from 5 to 1 host(s)"
    r = fleet_cli("--db", db, "rollout", "status", "1")
    assert f"note: h100: {one}" in r.stdout + r.stderr
    r = fleet_cli("--db", db, "rollout", "status", "1", "--json")
    assert json.loads(r.stdout)["plan_notes"] == {"h100": [one]}


def test_an_empty_simulated_fleet_is_bad_input(fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "spec.yaml"
    for text, why in (("hosts: 0\n", "the simulated fleet has no host"),
                      ("pools: {l40s: {hosts: 0}}\n", "the simulated fleet has no host"),
                      ("pools: {}\n", "hosts: the simulation spec names neither pools nor hosts")):
        spec.write_text(text)
        r = fleet_cli("rollout", "plan", "-m", MATRIX, "--sim-spec", str(spec))
        assert r.returncode == 2 and f"{spec}: {why}" in r.stderr, (text, r.stderr)


def test_a_start_whose_hosts_are_all_drained_by_others_is_not_a_success(
        fleet_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Nothing moved because every host was skipped (drained by someone else): exit 3 with the
    reason, not the exit 0 of a pool that is done."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools:\n  l40s: {hosts: 2}\n"
                    "drained:\n  l40s-00001: 'ops: fan'\n  l40s-00002: 'ops: psu'\n")
    r = fleet_cli("rollout", "start", "-m", MATRIX, "--sim-spec", str(spec), "--pool", "l40s",
                  cwd=tmp_path)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert "nothing to move: 2 drained by someone else" in r.stdout + r.stderr
