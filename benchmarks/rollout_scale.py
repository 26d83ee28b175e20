"""Rollout engine + history overhead on the simulated fleet with zero-latency hosts.

    .venv/bin/python benchmarks/rollout_scale.py [--sizes 1000 10000] [--runs 3]

Each run is a fresh process (so its peak RSS is its own): a pool of N H100 x8 hosts moving in a
canary wave of 1% then 4 waves (25%, 25%, 25%, the rest), health + synthetic + replay gates
(same-time baseline, then the pool's history for the last wave), no bake, on a SQLite history
in a temporary directory. A host-step is one step of one host: drain, apply, reboot,
verify, benchmark/judge, undrain (6 per host on a rollout that passes without a bake).
Targets (issue 7): <= 2 ms per host-step at 10,000 hosts, peak memory < 1 GB,
time(10,000) / time(1,000) <= 12. Prints the median of the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS_PER_HOST = 6


def one(n: int) -> dict[str, float]:
    import resource
    import time
    from datetime import date

    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.matrix.models import GateSettings, PoolSettings, RolloutSettings
    from fleet.history import open_history
    from fleet.jobs.rollout import RolloutEngine, RolloutOptions
    from fleet.sim import Latency, SimClock, SimFleet

    m = load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
    gates = GateSettings(health=True, benchmark=True, replay=True, max_retries=1)
    m = m.model_copy(update={"pools": {
        "h100": PoolSettings(gpu_model="H100", rollout=RolloutSettings(
            waves=["1%", "25%"], max_unavailable="25%", bake_minutes=0,
            failure_budget_per_wave=0, failure_budget_total=0, gates=gates)),
    }})
    clock = SimClock()
    fleet = SimFleet.build(m, None, 0, pools={"h100": n}, clock=clock, latency=Latency.zero())
    with tempfile.TemporaryDirectory() as tmp, open_history(f"{tmp}/h.db") as history:
        engine = RolloutEngine(fleet, fleet.scheduler(), history, m, now=clock,
                               sleep=clock.advance, actor="bench", options=RolloutOptions())
        t0, c0 = time.perf_counter(), time.process_time()
        res = engine.start(matrix_path="bench", releases=fleet.releases_by_host())
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - c0
    assert res.status == "completed", res.reason
    assert res.hosts == {"done": n}, res.hosts
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"hosts": n, "waves": len(res.waves), "seconds": seconds,
            "ms_per_host": 1000 * seconds / n,
            "ms_per_host_step": 1000 * seconds / (n * STEPS_PER_HOST),
            "cpu_ms_per_host_step": 1000 * cpu / (n * STEPS_PER_HOST), "peak_rss_mb": rss_mb}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    medians: dict[int, dict[str, float]] = {}
    for n in args.sizes:
        runs = []
        for _ in range(args.runs):
            out = subprocess.run([sys.executable, __file__, "--one", str(n)], check=True,
                                 capture_output=True, text=True, cwd=ROOT)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        medians[n] = med
        print(f"{n:>6} hosts x8 GPUs, {int(med['waves'])} waves: {med['seconds']:.2f} s, "
              f"{med['ms_per_host']:.3f} ms/host, {med['ms_per_host_step']:.3f} ms/host-step "
              f"({med['cpu_ms_per_host_step']:.3f} ms of CPU: the figure to compare on a "
              "loaded machine), "
              f"peak RSS {med['peak_rss_mb']:.0f} MB (median of {args.runs})")
    sizes = sorted(medians)
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        ratio = medians[hi]["seconds"] / medians[lo]["seconds"]
        print(f"time({hi}) / time({lo}) = {ratio:.2f} (hosts x{hi / lo:g}; target <= 12)")
    worst = max(medians[n]["ms_per_host_step"] for n in sizes)
    peak = max(medians[n]["peak_rss_mb"] for n in sizes)
    print(f"worst {worst:.3f} ms/host-step (target <= 2), peak RSS {peak:.0f} MB "
          "(target < 1024)")


if __name__ == "__main__":
    main()
