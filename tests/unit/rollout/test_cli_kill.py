"""Real SIGKILLs: `fleet rollout start --sim` in a subprocess, killed at random moments, then
`fleet rollout resume --force`; the simulated hosts persist in their state file, as real hosts
would. Then the CLI's exit codes and reports."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.history import open_history
from fleet.history.rollouts import list_rollouts, load_steps, rollout_events
from fleet.jobs.reboot_gate import gated_reboot
from fleet.jobs.rollout import invariants
from fleet.sim import load_fleet
from tests.unit.rollout.helpers import fleet_killed_at

ROOT = Path(__file__).resolve().parents[3]
MATRIX = str(ROOT / "matrices" / "example.yaml")


def fleet_cmd(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fleet", "--db", str(db), "rollout", *args]


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(fleet_cmd(db, *args), capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200"})


START = ("start", "-m", MATRIX, "--sim", "80", "--pool", "h100-canary", "--pool", "h100")


@pytest.mark.parametrize("k", range(4))
def test_sigkill_then_resume(tmp_path: Path, k: int) -> None:
    db = tmp_path / "h.db"
    proc = subprocess.Popen(fleet_cmd(db, *START), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # until the rollout begins
        if (tmp_path / "h.db.sim.json").exists():
            break
        time.sleep(0.02)
    time.sleep(random.Random(f"kill/{k}").uniform(0.0, 2.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    m = load_matrix(MATRIX, today=date.today()).matrix
    with open_history(str(db)) as h:
        rows = list_rollouts(h, limit=1)
    if not rows:
        pytest.skip("killed before the rollout was recorded")
    rid = rows[0].id
    if rows[0].status in ("running", "rolling_back"):
        refused = run(db, "resume", str(rid))
        if proc.returncode == -signal.SIGKILL and rows[0].lock_owner:
            assert refused.returncode == 3 and "--force" in refused.stderr
        done = run(db, "resume", str(rid), "--force", "--json")
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["status"] == "completed"
    fleet = load_fleet(tmp_path / "h.db.sim.json", m)
    with open_history(str(db)) as h:
        steps = load_steps(h, rid)
        assert invariants(steps, fleet.scheduler(), fleet.installed_release) == []
        kinds = [e.kind for e in rollout_events(h, rid)]
    assert kinds[-1] == "rollout.end"
    for s in steps:
        assert fleet.installed_release(s.host) == s.to_release


def test_cli_exit_codes_and_reports(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    slow = run(db, "start", "-m", MATRIX, "--sim", "80", "--pool", "h100-canary",
               "--sim-slow", "r595-cuda13.2=0.8", "--json")
    assert slow.returncode == 1, slow.stderr[-2000:]
    assert json.loads(slow.stdout)["status"] == "rolled_back"
    paused = run(db, "start", "-m", MATRIX, "--sim", "80", "--pool", "h100-canary",
                 "--sim-slow", "r595-cuda13.2=0.96", "--json")
    assert paused.returncode == 3
    rid = json.loads(paused.stdout)["rollout_id"]
    again = run(db, "start", "-m", MATRIX, "--sim", "80", "--pool", "h100-canary")
    assert again.returncode == 3 and "paused" in again.stderr
    aborted = run(db, "abort", str(rid), "--reason", "too slow", "--json")
    assert aborted.returncode == 1 and json.loads(aborted.stdout)["status"] == "aborted"
    status = run(db, "status", str(rid), "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "aborted"
    hist = run(db, "history", "--json")
    assert [r["status"] for r in json.loads(hist.stdout)["rollouts"]] == ["aborted",
                                                                          "rolled_back"]


CANARY = ("start", "-m", MATRIX, "--sim", "80", "--pool", "h100-canary")


def _killed_at_created(db: Path, *args: str) -> int:
    """`fleet rollout start ARGS` SIGKILLed right after the rollout row is written, before the
    simulated fleet's first save; returns the rollout's id, left running under a dead lock."""
    proc = subprocess.run(fleet_killed_at("created", "--db", str(db), "rollout", *args),
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    with open_history(str(db)) as h:
        ro = list_rollouts(h, limit=1)[0]
    assert ro.status == "running" and ro.lock_owner is not None
    assert ro.id is not None
    return ro.id


def test_sigkill_before_the_first_save_then_resume_force(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    rid = _killed_at_created(db, *CANARY)
    assert not (tmp_path / "h.db.sim.json").exists()
    again = run(db, *CANARY)
    assert again.returncode == 3 and f"rollout {rid} is running" in again.stderr
    refused = run(db, "resume", str(rid))
    assert refused.returncode == 3 and "--force" in refused.stderr
    done = run(db, "resume", str(rid), "--force", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "completed"
    m = load_matrix(MATRIX, today=date.today()).matrix
    fleet = load_fleet(tmp_path / "h.db.sim.json", m)
    assert len(fleet.hosts()) == 80
    with open_history(str(db)) as h:
        steps = load_steps(h, rid)
        assert invariants(steps, fleet.scheduler(), fleet.installed_release) == []
    assert all(fleet.installed_release(s.host) == s.to_release for s in steps)


def test_sigkill_before_the_first_save_then_abort_force(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    rid = _killed_at_created(db, *CANARY)
    refused = run(db, "abort", str(rid))  # recorded, but no controller is left to carry it out
    assert refused.returncode == 3 and "--force" in refused.stderr, refused.stderr[-2000:]
    aborted = run(db, "abort", str(rid), "--force", "--json")
    assert aborted.returncode == 1, aborted.stderr[-2000:]
    assert json.loads(aborted.stdout)["status"] == "aborted"
    with open_history(str(db)) as h:
        ro = list_rollouts(h, limit=1)[0]
        assert ro.status == "aborted" and ro.lock_owner is None
    after = run(db, *CANARY, "--json")  # the pools are free again
    assert after.returncode == 0, after.stderr[-2000:]
    assert json.loads(after.stdout)["status"] == "completed"


def test_sigkill_before_the_first_save_ignores_an_earlier_fleet(tmp_path: Path) -> None:
    """An earlier rollout's fleet (40 hosts) is in the state file: the killed rollout's own
    fleet (80 hosts) is rebuilt from what it recorded, never taken from the earlier one."""
    db = tmp_path / "h.db"
    first = run(db, "start", "-m", MATRIX, "--sim", "40", "--pool", "h100-canary", "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    rid = _killed_at_created(db, *CANARY)
    done = run(db, "resume", str(rid), "--force", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "completed"
    m = load_matrix(MATRIX, today=date.today()).matrix
    fleet = load_fleet(tmp_path / "h.db.sim.json", m)
    assert len(fleet.hosts()) == 80
    with open_history(str(db)) as h:
        steps = load_steps(h, rid)
    assert all(fleet.installed_release(s.host) == s.to_release for s in steps)


def test_a_reboot_through_the_simulated_scheduler_is_saved_at_once(tmp_path: Path) -> None:
    """The h100 pool reboots through Slurm: the simulated scheduler's `reboot_nodes` reboots
    the hosts, and the state must be on disk before the engine records the reboot. When it was
    saved only at the next backend call, a kill in between made the resumed rollout verify a
    host whose new driver's module never loaded, and roll it back (seen in CI)."""
    from fleet.cli.rollout.wiring import wiring

    m = load_matrix(MATRIX, today=date.today()).matrix
    path = tmp_path / "fleet.sim.json"
    source = {"source": "sim", "sim_state": str(path)}
    backend, sched, _ = wiring(m, source, create=True, build={"n": 8, "seed": 1})
    fleet = backend._target
    host = next(h for h in fleet.hosts() if h.pool == "h100").name
    fleet.apply([host], m.release("r580-cuda13.0"))
    sched.drain(host, sched.marker + " test")
    saved_before = path.stat().st_mtime_ns
    gated_reboot(backend, {host: m.release("r580-cuda13.0")}, reboot=lambda ns, g: (
        sched.reboot_nodes(ns, "test", timeout_s=60, gate=g)))
    assert path.stat().st_mtime_ns != saved_before
    again = load_fleet(path, m)
    assert again.installed_release(host) == "r580-cuda13.0"
    assert again.loaded_release(host) == "r580-cuda13.0"
