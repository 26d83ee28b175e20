"""Dry runs end to end (issue 13.5): `rollout start --dry` prints the plan and the first wave's
changes and acts on nothing (no rollout row, no lock, no history or simulated fleet written);
`apply --dry` and `rollback --dry` never say "nothing to change" for a host they could not read
(exit 3). Unreachable hosts here are real closed ports on 127.0.0.1; the lab test
tests/integration/remote/test_dry_run_on_lab.py reads real apt/dpkg hosts."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.errors import ExitCode
from fleet.history import open_history
from fleet.history.rollouts import create_rollout, list_rollouts
from tests.conftest import run_fleet

ROOT = Path(__file__).resolve().parents[3]
MATRIX = str(ROOT / "matrices" / "example.yaml")
CANARY = "h100-canary"


def _nothing_written(tmp_path: Path) -> None:
    assert not (tmp_path / "h.db").exists()
    assert not (tmp_path / "h.db.sim.json").exists()


def test_start_dry_on_a_sim_shows_plan_and_first_wave(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    r = run_fleet("--db", db, "rollout", "start", "-m", MATRIX, "--sim", "12", "--seed", "3",
                  "--dry", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry"] is True and doc["status"] == "would_start" and doc["held_by"] == {}
    assert doc["pools"][0]["pool"] == CANARY  # the same plan `rollout plan` shows
    fw = doc["first_wave"]
    target = load_matrix(Path(MATRIX)).matrix.golden_for(CANARY).name
    assert (fw["pool"], fw["index"], fw["release"]) == (CANARY, 1, target)
    assert fw["drain_through"] == "sim" and fw["reboot_via"] in ("ssh", "slurm")
    (host,) = fw["hosts"]
    assert host["host"] == doc["pools"][0]["waves"][0]["hosts"][0]
    assert host["outcome"] == "would_change" and host["reboot_required"]
    kinds = {c["kind"] for c in host["changes"]}
    assert "install" in kinds or "upgrade" in kinds
    assert {h["action"] for h in host["holds"]} >= {"hold"}
    assert set(host["holds"][0]) == {"package", "action", "tool", "version"}
    _nothing_written(tmp_path)
    text = run_fleet("--db", db, "rollout", "start", "-m", MATRIX, "--sim", "12", "--seed",
                     "3", "--dry")
    assert text.returncode == 0, text.stderr
    assert f"first wave: {CANARY} wave 1 -> {target}" in text.stdout
    assert "hold " in text.stdout and "(apt-mark)" in text.stdout
    assert "no rollout recorded, no lock taken" in text.stdout
    _nothing_written(tmp_path)


def test_start_dry_with_an_unreachable_host_exits_3(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"pools:\n  {CANARY}: {{hosts: 3}}\n"
                    f"faults:\n  {CANARY}-00002: {{unreachable: true}}\n")
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX,
                  "--sim-spec", str(spec), "--dry", "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["unreachable"] == [f"{CANARY}-00002"]
    # the canary's budget (1) is used up by the host that is out: nothing could move, and
    # "could not look" (3) wins over "cannot move" (1), as in `check`
    assert doc["status"] == "refused" and "max_unavailable" in doc["reason"]
    assert doc["first_wave"] is None
    assert "unreachable" in r.stderr and f"{CANARY}-00002" in r.stderr
    _nothing_written(tmp_path)


def test_start_dry_says_another_rollout_holds_the_pool(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_history(str(db)) as h:
        create_rollout(h, matrix_path=MATRIX, release="x", pools=[CANARY],
                       waves=[(CANARY, [(f"{CANARY}-00001", "x")])], started_by="t",
                       owner="t@x", pid=1, at=datetime.now(UTC), wall=datetime.now(UTC))
    r = run_fleet("--db", str(db), "rollout", "start", "-m", MATRIX, "--sim", "12", "--dry",
                  "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "refused" and doc["held_by"] == {CANARY: 1}
    with open_history(str(db)) as h:
        assert [ro.id for ro in list_rollouts(h)] == [1]  # no second rollout row


def test_start_dry_bad_input_is_exit_2(tmp_path: Path) -> None:
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "--sim",
                  "12", "--pool", "nope", "--dry")
    assert r.returncode == ExitCode.BAD_INPUT and "nope" in r.stderr
    _nothing_written(tmp_path)


@pytest.fixture
def closed_port_inventory(tmp_path: Path) -> Path:
    """Two hosts of pool l40s (rebooted over SSH) on a port nothing listens on."""
    inv = tmp_path / "inv.py"
    inv.write_text('l40s = [("gpu-1", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}),\n'
                   '        ("gpu-2", {"ssh_hostname": "127.0.0.1", "ssh_port": 1})]\n')
    return inv


def test_apply_dry_never_says_nothing_to_change_for_a_host_it_could_not_read(
        tmp_path: Path, closed_port_inventory: Path) -> None:
    r = run_fleet("--db", str(tmp_path / "h.db"), "apply", "-m", MATRIX, "-i",
                  str(closed_port_inventory), "-r", "r580-cuda13.0", "--dry", "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry"] is True
    assert {h["host"]: h["outcome"] for h in doc["hosts"]} == {"gpu-1": "unreachable",
                                                               "gpu-2": "unreachable"}
    assert "could not read gpu-1, gpu-2" in r.stderr
    _nothing_written(tmp_path)


def test_rollback_dry_asks_nothing_records_nothing(tmp_path: Path,
                                                   closed_port_inventory: Path) -> None:
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollback", "-m", MATRIX, "-i",
                  str(closed_port_inventory), "--pool", "l40s", "--to", "r580-cuda13.0",
                  "--reason", "rehearsal", "--dry", "--json")  # no --yes, no terminal
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry"] is True and doc["sources"] == {"gpu-1": "--to", "gpu-2": "--to"}
    assert "would roll back 2 host(s)" in r.stderr
    _nothing_written(tmp_path)


def test_start_dry_over_ssh_with_an_unreadable_first_wave_exits_3(
        tmp_path: Path, closed_port_inventory: Path) -> None:
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "-i",
                  str(closed_port_inventory), "--dry", "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    fw = json.loads(r.stdout)["first_wave"]
    assert [h["outcome"] for h in fw["hosts"]] == ["unreachable"]
    assert "could not read gpu-1 (first wave)" in r.stderr
    _nothing_written(tmp_path)
