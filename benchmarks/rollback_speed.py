"""How long `fleet rollback` takes to put an 8-host lab pool back on its known-good release.

    sudo .venv/bin/python benchmarks/rollback_speed.py [--runs 3] [--keep-lab]

Issue 5 §2 ("an 8-host lab pool rolls back in well under a minute"). A 17-host netns lab with
the example matrix puts 8 H100 hosts in pool `h100` (h2, h5, h6, h9, h10, h13, h14, h17; h1 is
the H100 canary). Then, per run:

1. `fleet apply -r r580-cuda13.0 -l h100` (the golden release, pinned: the known-good in the
   history; timed on the first run only, when it pins the unpinned lab hosts),
2. `fleet apply -r r595-cuda13.2 -l h100` (the candidate: new driver branch, reboot, verify),
3. `fleet rollback --pool h100 --reason ... --yes` (timed: each host's previous known-good from
   the history, re-pin, reboot, verify, record).

Every command must exit 0 with all 8 hosts changed and verified; after the rollback each host's
NVML reports the r570 driver. Prints each figure and the median of the rollbacks.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fleet.lab import lab  # noqa: E402
from fleet.lab.paths import LabPaths  # noqa: E402

MATRIX = ROOT / "matrices" / "example.yaml"
INVENTORY = ROOT / "inventories" / "lab.py"
POOL, GOLDEN, CANDIDATE = "h100", "r580-cuda13.0", "r595-cuda13.2"
R580 = "580.95.05"
GOAL_S = 60.0


def fleet(env: dict[str, str], *args: str) -> tuple[float, dict]:
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600, check=False)
    dt = time.monotonic() - t
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"fleet {' '.join(args)}: exit {r.returncode}, no JSON: "
                           f"{r.stdout[-1500:]}{r.stderr[-1500:]}") from None
    if r.returncode != 0:
        raise RuntimeError(f"fleet {' '.join(args)}: exit {r.returncode}: "
                           f"{json.dumps(doc)[-2000:]}{r.stderr[-1000:]}")
    return dt, doc


def check_outcomes(doc: dict, n: int, what: str) -> None:
    bad = {h["host"]: h.get("outcome") for h in doc["hosts"] if h.get("outcome") != "changed"}
    if len(doc["hosts"]) != n or bad:
        raise RuntimeError(f"{what}: expected {n} hosts changed, got {len(doc['hosts'])}; "
                           f"not changed: {bad}")


def nvml_drivers(paths: LabPaths, state: lab.LabState, names: list[str]) -> dict[str, str]:
    import paramiko

    code = ("import pynvml as n; n.nvmlInit(); print(n.nvmlSystemGetDriverVersion())")
    out = {}
    for name in names:
        h = state.host(name)
        c = paramiko.SSHClient()
        c.load_host_keys(str(paths.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect(h.address, port=h.port, username="root", key_filename=str(paths.client_key),
                  allow_agent=False, look_for_keys=False, timeout=10)
        try:
            _, so, _ = c.exec_command(f"python3 -c '{code}'", timeout=30)
            out[name] = so.read().decode().strip()
        finally:
            c.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=17, help="lab size (17: 8 hosts in pool h100)")
    ap.add_argument("--keep-lab", action="store_true")
    ap.add_argument("--run-dir", default="/run/fleet-lab-bench")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (the lab)", file=sys.stderr)
        return 2
    paths = LabPaths(cache=LabPaths.from_env().cache, run=Path(a.run_dir))
    lab.down(paths)
    t = time.monotonic()
    state = lab.up(paths, lab.UpConfig(hosts=a.hosts, matrix=MATRIX, model_server=False))
    pool = sorted((h.name for h in state.hosts if h.pool == POOL), key=lambda n: int(n[1:]))
    print(f"lab up: {a.hosts} hosts in {time.monotonic() - t:.1f} s; pool {POOL}: "
          f"{len(pool)} hosts ({', '.join(pool)})", flush=True)
    work = Path(tempfile.mkdtemp(prefix="fleet-rollback-speed-"))
    env = {**os.environ, "FLEET_LAB_DIR": str(paths.run), "FLEET_DB": str(work / "fleet.db"),
           "FLEET_MATRIX": str(MATRIX), "FLEET_INVENTORY": str(INVENTORY), "COLUMNS": "200"}
    n = len(pool)
    rollbacks: list[float] = []
    try:
        for i in range(a.runs):
            dt, doc = fleet(env, "apply", "-r", GOLDEN, "-l", POOL)
            if i == 0:
                check_outcomes(doc, n, f"apply {GOLDEN}")  # pins and holds the lab's install
                print(f"apply {GOLDEN} (pin the unpinned pool): {dt:.1f} s", flush=True)
            dt, doc = fleet(env, "apply", "-r", CANDIDATE, "-l", POOL)
            check_outcomes(doc, n, f"apply {CANDIDATE}")
            reboots = sum(bool(h.get("rebooted")) for h in doc["hosts"])
            print(f"run {i + 1}: apply {CANDIDATE}: {dt:.1f} s ({reboots} rebooted)", flush=True)
            dt, doc = fleet(env, "rollback", "--pool", POOL, "--reason",
                            f"benchmarks/rollback_speed.py run {i + 1}", "--yes")
            check_outcomes(doc, n, "rollback")
            back = {h["host"]: h.get("to_release") for h in doc["hosts"]}
            if set(back.values()) != {GOLDEN}:
                raise RuntimeError(f"rollback went to {back}")
            drivers = nvml_drivers(paths, state, pool)
            if set(drivers.values()) != {R580}:
                raise RuntimeError(f"after the rollback NVML says {drivers}")
            rollbacks.append(dt)
            print(f"run {i + 1}: rollback --pool {POOL} ({n} hosts, to {GOLDEN}, NVML "
                  f"{R580} on all): {dt:.1f} s", flush=True)
    finally:
        if not a.keep_lab:
            left = lab.down(paths)
            if left:
                print(f"lab teardown left: {left}", file=sys.stderr)
    med = statistics.median(rollbacks)
    ok = med < GOAL_S
    print(f"\nfleet rollback of an {n}-host pool: median {med:.1f} s over {len(rollbacks)} "
          f"run(s) (min {min(rollbacks):.1f}, max {max(rollbacks):.1f}); goal well under "
          f"{GOAL_S:.0f} s: {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
