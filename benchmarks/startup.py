"""How long does `fleet` take to start? (goal: `fleet --help` and `fleet probe`'s start-up well
under 0.2 s; issue 17 point 3)

    .venv/bin/python benchmarks/startup.py [--runs 11] [--fleet .venv/bin/fleet]

Every command runs in a fresh process, as an operator's shell runs it, interleaved with the
others so that a burst of load on the machine hits them all alike. Prints the median and the
best wall time of each, and its ratio to a bare `python -c pass` measured in the same run (the
floor no Python CLI can go under on this machine).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("probe", "--help"),
    ("matrix", "check", "--help"),
    ("--version",),
)


def timed(argv: list[str]) -> float:
    """Wall seconds of one fresh process; its output is thrown away, its exit code checked."""
    t = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr.decode()}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11, help="fresh processes per command")
    default_fleet = Path(sys.executable).with_name("fleet")
    ap.add_argument("--fleet", default=str(default_fleet), help="the fleet console script")
    args = ap.parse_args()
    cases: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
    for extra in COMMANDS:
        cases["fleet " + " ".join(extra)] = [args.fleet, *extra]
    times: dict[str, list[float]] = {name: [] for name in cases}
    for argv in cases.values():  # one warm-up each: page cache, .pyc files
        timed(argv)
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(timed(argv))
    floor = statistics.median(times["python -c pass"])
    print(f"{args.runs} fresh processes each, wall time (python {sys.version.split()[0]})")
    print(f"  {'command':<28} {'median':>8} {'best':>8} {'x python':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<28} {med * 1000:>6.0f}ms {min(ts) * 1000:>6.0f}ms {med / floor:>8.1f}x")


if __name__ == "__main__":
    main()
