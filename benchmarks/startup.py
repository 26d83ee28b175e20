"""How long does `fleet` take to start? (goal: `fleet --help` and `fleet probe`'s start-up well
under 0.2 s; issue 17 point 3)

    .venv/bin/python benchmarks/startup.py [--runs 11] [--fleet .venv/bin/fleet] [--fleet OTHER]

Every command runs in a fresh process, as an operator's shell runs it, interleaved with the
others so that a burst of load on the machine hits them all alike. Prints the median and the
best wall time of each, and its ratio to a bare `python -c pass` measured in the same run (the
floor no Python CLI can go under on this machine). Several `--fleet` (say, a wrapper that runs
an older checkout) are measured in the same rounds, each row labelled with its script's name.

`fleet probe -i MISSING` is `fleet probe`'s start-up up to the point where it would connect:
what the command imports before it reads the inventory, which fails (exit 2). Since the probe
connects first and loads the matrix, the history and the checks while hosts answer
(fleet/jobs/probe.py), that is most of what stands between the command line and the first SSH
handshake.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fresh_bytecode import ensure_bytecode

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("probe", "--help"),
    ("matrix", "check", "--help"),
    ("--version",),
)
MISSING = "/nonexistent/fleet-startup-inventory.py"


def timed(argv: list[str], expect: int = 0) -> float:
    """Wall seconds of one fresh process; its output is thrown away, its exit code checked."""
    t = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - t
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}, expected {expect}\n"
                         f"{done.stderr.decode()}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11, help="fresh processes per command")
    ap.add_argument("--fleet", action="append", help="a fleet console script; repeatable "
                    "(default: the one next to this python)")
    args = ap.parse_args()
    fleets = args.fleet or [str(Path(sys.executable).with_name("fleet"))]
    ensure_bytecode(Path(__file__).resolve().parent.parent / "fleet")
    with tempfile.TemporaryDirectory() as tmp:
        times = measure(fleets, args.runs, Path(tmp))
    floor = statistics.median(times["python -c pass"])
    print(f"{args.runs} fresh processes each, wall time (python {sys.version.split()[0]})")
    width = max(len(name) for name in times) + 2
    print(f"  {'command':<{width}} {'median':>8} {'best':>8} {'x python':>9}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:<{width}} {med * 1000:>6.0f}ms {min(ts) * 1000:>6.0f}ms "
              f"{med / floor:>8.1f}x")


def measure(fleets: list[str], runs: int, tmp: Path) -> dict[str, list[float]]:
    """Wall times per command line, `runs` rounds of every case after one warm-up round."""
    cases: dict[str, tuple[list[str], int]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], 0)}
    for i, fleet in enumerate(fleets):
        label = f" [{Path(fleet).name}]" if len(fleets) > 1 else ""
        for extra in COMMANDS:
            cases["fleet " + " ".join(extra) + label] = ([fleet, *extra], 0)
        db = str(tmp / f"history-{i}.db")
        cases["fleet probe -i MISSING" + label] = ([fleet, "--db", db, "probe", "-i", MISSING], 2)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for argv, expect in cases.values():  # page cache, .pyc files, the history's schema
        timed(argv, expect)
    for _ in range(runs):
        for name, (argv, expect) in cases.items():
            times[name].append(timed(argv, expect))
    return times


if __name__ == "__main__":
    main()
