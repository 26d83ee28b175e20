"""`fleet probe` over SSH against `fleet probe --via slurm` on the lab, side by side.

    flock /tmp/fleet-lab.lock sudo .venv/bin/python benchmarks/probe_slurm_vs_ssh.py \\
        [--runs 5] [--partition all] [--inventory inventories/lab.py]

Issue 12 part 7. Needs a lab that is up with its Slurm (`fleet lab up --slurm`); the lab
inventory carries `slurm_conf`, so nothing else is set. Per run, in alternating order, each in a
fresh process with its own SQLite history (as an operator would run them):

    python -m fleet probe -i INV --no-frameworks --json
    python -m fleet probe -i INV --no-frameworks --json --via slurm -p PARTITION

Both must probe the same hosts, every one from NVML; a run that does not is reported and counts
as failed. Prints the wall-time medians, the ratio (SSH / srun; above 1 means srun is faster) and
the per-host facts both saw (driver, GPU count, serials) so a mismatch shows.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = ROOT / "inventories" / "lab.py"


def run_probe(inventory: Path, db: Path, slurm: str | None) -> tuple[float, dict[str, Any], str]:
    argv = [sys.executable, "-m", "fleet", "--db", str(db), "probe", "-i", str(inventory),
            "--no-frameworks", "--json"]
    if slurm:
        argv += ["--via", "slurm", "-p", slurm]
    start = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "COLUMNS": "200"})
    took = time.perf_counter() - start
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {}
    return took, doc, p.stderr.strip()[-500:] if p.returncode not in (0, 1) else ""


def summary(doc: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {h["host"]: (h["reachable"], h["source"], h["driver"], h["gpus"])
            for h in doc.get("hosts", [])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--partition", default="all", help="Slurm partition holding the lab hosts")
    ap.add_argument("--inventory", type=Path, default=INVENTORY)
    args = ap.parse_args()

    times: dict[str, list[float]] = {"ssh": [], "slurm": []}
    failed: list[str] = []
    last: dict[str, dict[str, tuple[Any, ...]]] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        for i in range(args.runs):
            order = ["ssh", "slurm"] if i % 2 == 0 else ["slurm", "ssh"]
            for via in order:
                took, doc, err = run_probe(args.inventory, Path(tmp) / f"{via}.db",
                                           args.partition if via == "slurm" else None)
                got = summary(doc)
                bad = [h for h, s in got.items() if not s[0] or s[1] != "nvml"]
                if not got or bad or err:
                    failed.append(f"run {i + 1} {via}: {err or 'not from NVML: ' + ', '.join(bad)}")
                    continue
                times[via].append(took)
                last[via] = got
                print(f"run {i + 1} {via:5s} {took:6.2f} s  {len(got)} host(s)", flush=True)
    if set(last.get("ssh", {})) != set(last.get("slurm", {})):
        failed.append(f"different hosts: ssh {sorted(last.get('ssh', {}))} "
                      f"slurm {sorted(last.get('slurm', {}))}")
    elif last.get("ssh") != last.get("slurm"):
        failed.append("different facts: " + json.dumps(last, sort_keys=True))
    if times["ssh"] and times["slurm"]:
        ssh, srun = statistics.median(times["ssh"]), statistics.median(times["slurm"])
        hosts = len(last.get("ssh") or last.get("slurm") or {})
        print(f"\n{hosts} host(s), {len(times['ssh'])}/{len(times['slurm'])} good runs "
              f"(ssh/slurm), wall time of `fleet probe` in a fresh process:")
        print(f"  over SSH           median {ssh:6.2f} s   (min {min(times['ssh']):.2f})")
        print(f"  --via slurm -p {args.partition:4s} median {srun:6.2f} s   "
              f"(min {min(times['slurm']):.2f})")
        print(f"  ratio SSH / srun   {ssh / srun:6.2f}x")
    for line in failed:
        print(f"FAILED: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
