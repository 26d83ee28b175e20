"""The rollout engine over real SSH on the lab: a good release goes through every wave, the slow
release fails the benchmark gate and is rolled back, so does a release on which the workload falls
back to the CPU (GPU utilization), a controller killed with SIGKILL resumes.

Pool h100 of the session lab holds h2 and h5 (H100): wave 1 moves one host while the other, still
on the old release, is the same-time baseline. `matrices/lab.yaml` gives the pools the lab's own
benchmark (`fleet-lab-bench`) and no bake time; the session lab runs r550 at 0.75 speed. These
tests judge the benchmark gate: pool h100's live gate is off in their matrix (it is tested in
tests/integration/prometheus/test_live_gate_on_lab.py).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleet.lab import lab
from tests.integration.fleet_cli import fleet

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
POOL_HOSTS = ("h2", "h5")
R595, R580 = "595.58.03", "580.95.05"


@pytest.fixture(scope="module")
def env(lab_paths, lab_state, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:
    assert sorted(h.name for h in lab_state.hosts if h.pool == "h100") == list(POOL_HOSTS)
    for name in POOL_HOSTS:
        lab.reset(lab_paths, name)
    tmp = tmp_path_factory.mktemp("rollout")
    doc = yaml.safe_load((ROOT / "matrices" / "lab.yaml").read_text())
    doc["pools"]["h100"]["rollout"]["gates"]["live"] = {"enabled": False}
    (tmp / "lab.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    yield {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(tmp / "fleet.db"),
           "FLEET_MATRIX": str(tmp / "lab.yaml"),
           "FLEET_INVENTORY": str(ROOT / "inventories" / "lab.py"), "COLUMNS": "200"}


def pin(env: dict[str, str], release: str) -> None:
    rc, doc = fleet(env, "apply", "-r", release, "-l", "h100")
    assert rc == 0, doc


def drivers(hosts) -> dict[str, str]:  # noqa: ANN001 - conftest.Host
    out = {}
    for name in POOL_HOSTS:
        hosts[name].close()
        out[name] = hosts[name].nvml().get("driver")
    return out


def start(env: dict[str, str], release: str) -> tuple[int, dict]:
    return fleet(env, "rollout", "start", "--pool", "h100", "--release", release)


def test_a_good_release_goes_through_every_wave(env, hosts) -> None:
    pin(env, "r580-cuda13.0")
    rc, doc = start(env, "r595-cuda13.2")
    assert rc == 0 and doc["status"] == "completed", doc
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R595)


def test_the_slow_release_fails_the_benchmark_gate_and_is_rolled_back(env, hosts) -> None:
    pin(env, "r595-cuda13.2")
    rc, doc = start(env, "r570-cuda12.8")
    assert rc == 1 and doc["status"] == "rolled_back", doc
    assert "benchmark" in doc["reason"], doc["reason"]
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R595)


def test_a_release_whose_workload_falls_back_to_the_cpu_is_rolled_back(env, hosts,
                                                                      lab_paths) -> None:
    """On driver branch 595 the hosts' workload computes on the CPU (`cpu-fallback`): the
    canary's GPUs idle during its benchmark, the gate fails naming GPU utilization with the
    baseline's and the candidate's figures, the wave goes back to r580; the utilization samples
    of both sides are in the history (this rollout's: baseline peak ~50-60%)."""
    pin(env, "r580-cuda13.0")
    try:
        for name in POOL_HOSTS:
            lab.inject(lab_paths, name, ["cpu-fallback:branch=595"])
        rc, doc = start(env, "r595-cuda13.2")
    finally:
        for name in POOL_HOSTS:
            lab.reset(lab_paths, name)
    assert rc == 1 and doc["status"] == "rolled_back", doc
    reason = doc["reason"]
    assert "GPU utilization (gpu_util_pct): fail: candidate 0.0% vs baseline " in reason, reason
    assert "the candidate's GPUs idle while serving" in reason
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R580)
    with sqlite3.connect(env["FLEET_DB"]) as db:
        rows = db.execute(
            "SELECT r.release, max(s.value) FROM benchmark_samples s JOIN benchmark_runs r "
            "ON r.id = s.run_id WHERE s.metric = 'gpu_util_pct' AND r.rollout_id = "
            "(SELECT max(id) FROM rollouts) GROUP BY r.release").fetchall()
    peak = dict(rows)
    assert peak.get("r595-cuda13.2") == 0.0 and peak.get("r580-cuda13.0", 0) > 20, rows


def test_a_killed_controller_resumes_and_finishes(env, hosts) -> None:
    pin(env, "r580-cuda13.0")
    before = _last_rollout(env)
    proc = subprocess.Popen([sys.executable, "-m", "fleet", "rollout", "start", "--pool", "h100",
                             "--release", "r595-cuda13.2"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the kill must land inside this rollout, not before it exists: a loaded machine starts
    # the CLI slowly (a fixed sleep once killed it before its rollout was recorded)
    deadline = time.monotonic() + 120
    while _last_rollout(env)[0] == before[0]:
        assert proc.poll() is None, f"rollout start exited {proc.returncode} before recording"
        assert time.monotonic() < deadline, "rollout start recorded no rollout in 120 s"
        time.sleep(0.1)
    time.sleep(random.Random(os.getpid()).uniform(0.5, 5.0))  # somewhere in drain..gates
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    last, status = _last_rollout(env)
    rid = str(last)
    if status == "completed":
        pytest.fail("the rollout finished before the kill: lengthen the benchmark or kill sooner")
    refused = subprocess.run([sys.executable, "-m", "fleet", "rollout", "resume", rid], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
    # the lock's owner is gone: taking it over needs --force
    assert refused.returncode == 3 and "--force" in refused.stderr, refused.stderr
    rc, doc = fleet(env, "rollout", "resume", rid, "--force")
    assert rc == 0 and doc["status"] == "completed", doc
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R595)


def _last_rollout(env: dict[str, str]) -> tuple[int | None, str | None]:
    """The newest rollout's id and status, read straight from the history (no CLI start-up)."""
    if not Path(env["FLEET_DB"]).exists():
        return None, None
    with sqlite3.connect(env["FLEET_DB"]) as db:
        try:
            row = db.execute("SELECT id, status FROM rollouts ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # the schema is not there yet
            return None, None
    return (row[0], row[1]) if row else (None, None)
