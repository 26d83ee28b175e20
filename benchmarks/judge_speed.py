"""How fast is the canary judge on big samples? (target: 100,000 samples per side < 1 s)

    .venv/bin/python benchmarks/judge_speed.py [--n 100000] [--runs 5]

One latency-like metric (the heaviest: Mann-Whitney + Hodges-Lehmann interval + p95 and p99
bootstrap), one error-rate metric (0/1 outcomes, same n) and one run-level throughput metric.
Prints the median and the worst time over the runs, per metric kind and for the whole judgement.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from fleet.domain.judge import JudgeConfig, MetricSpec, judge, judge_metric


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.n
    canary = {"latency_ms": rng.lognormal(np.log(10.2), 0.25, n).tolist(),
              "errors": (rng.random(n) < 0.002).astype(float).tolist(),
              "throughput": [100.0, 101.0, 99.5, 100.2, 100.4]}
    baseline = {"latency_ms": rng.lognormal(np.log(10.0), 0.25, n).tolist(),
                "errors": (rng.random(n) < 0.002).astype(float).tolist(),
                "throughput": [100.3, 100.1, 99.9, 100.6, 100.0]}
    cfg = JudgeConfig()
    spec = MetricSpec("latency_ms", "lower", 0.05, tails=(0.95, 0.99))
    loc, whole = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        judge_metric(spec, canary["latency_ms"], baseline["latency_ms"], cfg)
        loc.append(time.perf_counter() - t)
        t = time.perf_counter()
        result = judge(canary, baseline, config=cfg)
        whole.append(time.perf_counter() - t)
    print(f"n={n} per side, {args.runs} runs")
    print(f"  latency metric (location + p95 + p99): median {statistics.median(loc):.3f} s, "
          f"worst {max(loc):.3f} s")
    print(f"  whole judgement (latency, errors, throughput): median "
          f"{statistics.median(whole):.3f} s, worst {max(whole):.3f} s -> {result.verdict}")
    for m in result.metrics:
        print("   ", m.reason)


if __name__ == "__main__":
    main()
