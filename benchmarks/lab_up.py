"""Time to bring the lab up for 8, 20 and 50 hosts, and memory per host (root only).

    sudo .venv/bin/python benchmarks/lab_up.py [--sizes 8,20,50] [--runs 3] [--mode netns]

Each run: `lab.up` (base rootfs cached; repo, layer, network, hosts, until every sshd answers),
then the PSS of every lab process (host sshd + model server, daemon) and the overlay upper dirs,
then `lab.down` (timed too). Prints the median of the runs per size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fleet.lab import lab
from fleet.lab.base import BaseRecipe, ensure_base
from fleet.lab.paths import LabPaths

ROOT = Path(__file__).resolve().parent.parent


def pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def lab_pss(paths: LabPaths) -> int:
    pids = set(lab._lab_processes(paths.run))
    with contextlib.suppress(OSError, ValueError):
        pids.add(int(paths.daemon_pid.read_text()))
    return sum(pss_kib(p) for p in pids)


def du_kib(path: Path) -> int:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=False)
    return int(out.stdout.split()[0]) if out.stdout else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8,20,50")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mode", default="netns", choices=["netns", "loopback"])
    ap.add_argument("--no-model-server", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    paths = LabPaths(cache=LabPaths.from_env().cache, run=Path("/run/fleet-lab-bench"))
    t = time.monotonic()
    ensure_base(paths, BaseRecipe())
    print(f"base rootfs ready (cached or built) in {time.monotonic() - t:.1f} s")
    print(
        f"{'hosts':>5} {'up s':>6} {'down s':>6} {'PSS MiB':>8} "
        f"{'PSS/host MiB':>12} {'upper/host KiB':>14}"
    )
    for n in [int(x) for x in a.sizes.split(",")]:
        ups, downs, pss, upper = [], [], [], []
        for _ in range(a.runs):
            lab.down(paths)
            t = time.monotonic()
            lab.up(
                paths,
                lab.UpConfig(
                    hosts=n,
                    mode=a.mode,
                    matrix=ROOT / "matrices/example.yaml",
                    model_server=not a.no_model_server,
                ),
            )
            ups.append(time.monotonic() - t)
            time.sleep(1.0)  # let model servers finish starting
            pss.append(lab_pss(paths) / 1024)
            upper.append(
                sum(du_kib(paths.host_dir(f"h{i}") / "upper") for i in range(1, n + 1)) / n
            )
            t = time.monotonic()
            left = lab.down(paths)
            downs.append(time.monotonic() - t)
            assert not left, left
        m = statistics.median
        print(
            f"{n:5d} {m(ups):6.2f} {m(downs):6.2f} {m(pss):8.1f} "
            f"{m(pss) / n:12.2f} {m(upper):14.0f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
