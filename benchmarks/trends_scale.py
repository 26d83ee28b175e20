"""Trend analysis at fleet scale: 10,000 hosts x 8 GPUs x 52 weekly samples on SQLite.

    .venv/bin/python benchmarks/trends_scale.py [--sizes 1000,5000,10000] [--weeks 52]
        [--dir /tmp/fleet-trends-scale] [--full]

For each size it builds (once, cached in --dir) a history with that many hosts, 8 GPUs each and one
sample per GPU per week (10,000 hosts: ~4.2 M GPU samples, ~520 k snapshots), written straight
through sqlite3 with the schema the migrations create. Most GPUs are healthy with a little noise;
one in a thousand has rising corrected ECC; counters reset now and then (reboots).

Then, in a fresh process per size (so peak RSS is that of the analysis alone), it times the
weekly trend analysis the hygiene job runs: `iter_gpu_series` (one streaming query ordered by
GPU then time, plain tuples) into `fleet.domain.trends.analyze`, over the trend window (the
default: last 4 weeks plus a baseline week). With --full it also times a scan of the whole
52-week history. Targets (issue 8): <= 10 s and <= 1 GB at 10,000 hosts, linear growth.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 1, 5, 6, 0, tzinfo=UTC)
GPUS = 8


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


def build(path: Path, hosts: int, weeks: int, seed: int = 8) -> None:
    from fleet.history import open_history

    if path.exists():
        return
    tmp = path.with_suffix(".tmp")
    for p in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        p.unlink(missing_ok=True)
    open_history(str(tmp)).close()  # schema through the migrations
    rng = random.Random(seed)
    db = sqlite3.connect(tmp)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    times = [NOW - timedelta(weeks=weeks - 1 - w, hours=1) for w in range(weeks)]
    stamps = [_ts(t) for t in times]
    pools = ["h100", "a100", "l40s", "h100-canary"]
    db.executemany(
        "INSERT INTO hosts (id, name, pool, gpu_model, gpu_count, labels, first_seen, last_seen)"
        " VALUES (?, ?, ?, ?, 8, '{}', ?, ?)",
        [(h + 1, f"gpu{h:05d}", pools[h % 4], pools[h % 4].split("-")[0].upper(), stamps[0],
          stamps[-1]) for h in range(hosts)])
    snap_id = 0
    sample_rows = []
    snap_rows = []
    for h in range(hosts):
        state = []
        for _g in range(GPUS):
            rising = rng.random() < 0.001
            state.append([rng.randint(0, 50), rising, rng.randint(0, 3), 0])
        for w in range(weeks):
            snap_id += 1
            snap_rows.append((snap_id, h + 1, stamps[w], "nvml", 1, "{}"))
            reboot = rng.random() < 0.02
            for g in range(GPUS):
                st = state[g]
                st[0] += (2 ** max(0, w - weeks + 6) * 40) if st[1] else rng.choice(
                    (0, 0, 0, 0, 1, 2))
                st[2] = 0 if reboot else st[2] + rng.choice((0, 0, 0, 1))
                volatile = 0 if reboot else st[0] % 100
                sample_rows.append((
                    snap_id, h + 1, stamps[w], g, f"GPU-{h:05d}-{g}", volatile, 0, st[0], 0,
                    None, None, None, 0, 0, False, False, st[2], st[2] // 2, 0, 0, "{}"))
        if len(sample_rows) >= 200_000:
            _flush(db, snap_rows, sample_rows)
    _flush(db, snap_rows, sample_rows)
    db.commit()
    db.close()
    tmp.rename(path)


def _flush(db: sqlite3.Connection, snaps: list[tuple[object, ...]],
           samples: list[tuple[object, ...]]) -> None:
    db.executemany("INSERT INTO snapshots (id, host_id, taken_at, source, reachable, facts)"
                   " VALUES (?, ?, ?, ?, ?, ?)", snaps)
    db.executemany(
        "INSERT INTO gpu_samples (snapshot_id, host_id, taken_at, gpu_index, uuid,"
        " ecc_corrected_volatile, ecc_uncorrected_volatile, ecc_corrected_aggregate,"
        " ecc_uncorrected_aggregate, retired_sbe, retired_dbe, retired_pending,"
        " remapped_corrected, remapped_uncorrected, remapped_pending, remapped_failure,"
        " pcie_replay, aer_corrected, aer_nonfatal, aer_fatal, xid_counts)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", samples)
    snaps.clear()
    samples.clear()


def measure(path: Path, full: bool) -> dict[str, float]:
    """Runs in its own process: time and peak RSS of one trend analysis."""
    from fleet.domain.matrix.models import Thresholds
    from fleet.domain.trends import TrendSettings, analyze
    from fleet.history import iter_gpu_series, open_history

    settings = TrendSettings()
    history = open_history(str(path))
    since = None if full else NOW - timedelta(seconds=settings.lookback_s)
    t0 = time.perf_counter()
    report = analyze(iter_gpu_series(history, since=since, until=NOW), now=NOW.timestamp(),
                     thresholds=Thresholds(), settings=settings)
    seconds = time.perf_counter() - t0
    history.close()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "rss_mib": rss_mib, "gpus": len(report.gpus),
            "flagged": len(report.flagged())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--weeks", type=int, default=52)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/fleet-trends-scale"))
    ap.add_argument("--full", action="store_true", help="also time a scan of the whole history")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.full)))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[tuple[int, str], dict[str, float]] = {}
    for n in sizes:
        path = args.dir / f"hist-{n}-{args.weeks}.db"
        t0 = time.perf_counter()
        existed = path.exists()
        build(path, n, args.weeks)
        if not existed:
            print(f"built {path.name}: {n * GPUS * args.weeks:,} samples in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        for mode in (("window", "full") if args.full else ("window",)):
            cmd = [sys.executable, __file__, "--measure", str(path)]
            if mode == "full":
                cmd.append("--full")
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            r = results[(n, mode)] = json.loads(out.strip().splitlines()[-1])
            print(f"{n:>6} hosts {n * GPUS * args.weeks:>10,} samples  {mode:<6} "
                  f"{r['seconds']:6.2f} s  peak RSS {r['rss_mib']:7.1f} MiB  "
                  f"gpus {int(r['gpus']):>6}  flagged {int(r['flagged'])}", flush=True)
    base = sizes[0]
    for mode in (("window", "full") if args.full else ("window",)):
        b = results[(base, mode)]["seconds"]
        ratios = ", ".join(
            f"{n // base}x hosts -> {results[(n, mode)]['seconds'] / b:.2f}x time"
            for n in sizes[1:])
        print(f"{mode}: {ratios}")
    big = results[(sizes[-1], "window")]
    ok = big["seconds"] <= 10 and big["rss_mib"] <= 1024
    print(f"target (<= 10 s, <= 1 GiB at {sizes[-1]} hosts, trend window): "
          f"{'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
