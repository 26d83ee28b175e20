"""Trend analysis at fleet scale: 10,000 hosts x 8 GPUs x 52 weekly samples, SQLite and PostgreSQL.

    .venv/bin/python benchmarks/trends_scale.py [--sizes 1000,5000,10000] [--weeks 52]
        [--dir /tmp/fleet-trends-scale] [--full] [--runs 3] [--pg URL]

For each size it builds (once, cached in --dir) a history with that many hosts, 8 GPUs each and one
sample per GPU per week (10,000 hosts: ~4.2 M GPU samples, ~520 k snapshots), written straight
through sqlite3 with the schema the migrations create. Most GPUs are healthy with a little noise;
one in a thousand has rising corrected ECC; counters reset now and then (reboots).

Then, in a fresh process per measurement (so peak RSS is that of the analysis alone), it times the
weekly trend analysis the hygiene job runs: `iter_gpu_series` (one streaming query ordered by
GPU then time, plain tuples) into `fleet.domain.trends.analyze`, over the trend window (the
default: last 4 weeks plus a baseline week). With --full it also times a scan of the whole
52-week history twice, side by side in each round: condensed (`window_start`: each GPU's
samples before the window read as its first and last, `fleet.history.trend_read`) and row by row
(every sample), and checks both give the same report. --runs repeats every measurement (modes
alternate within a round) and prints medians. Targets: window <= 10 s and <= 1 GB at 10,000
hosts (issue 8); full scan <= 5 s (issue 17).

--pg URL (a server you may create databases on, e.g. `bash scripts/pg-throwaway start`) copies
each history into a database of its own there (COPY, cached by size) and measures the same modes
on PostgreSQL, printing PostgreSQL / SQLite per mode (goal: within 2x).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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


MODES = ("window", "full", "full-rows")
"""window: the hygiene job's read (trend window plus a baseline week); full: all 52 weeks,
condensed before the window; full-rows: all 52 weeks, every sample (the reference)."""


def measure(target: str, mode: str) -> dict[str, Any]:
    """Runs in its own process: time, CPU time and peak RSS of one trend analysis."""
    import hashlib

    from fleet.domain.matrix.models import Thresholds
    from fleet.domain.trends import TrendSettings, analyze
    from fleet.history import iter_gpu_series, open_history

    settings = TrendSettings()
    history = open_history(target)
    since = NOW - timedelta(seconds=settings.lookback_s) if mode == "window" else None
    start = NOW - timedelta(seconds=settings.window_s) if mode == "full" else None
    t0, c0 = time.perf_counter(), time.process_time()
    report = analyze(iter_gpu_series(history, since=since, until=NOW, window_start=start),
                     now=NOW.timestamp(), thresholds=Thresholds(), settings=settings)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    history.close()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    digest = hashlib.sha256(json.dumps([g.as_dict() for g in report.gpus],
                                       sort_keys=True).encode()).hexdigest()[:16]
    return {"seconds": seconds, "cpu": cpu, "rss_mib": rss_mib, "gpus": len(report.gpus),
            "flagged": len(report.flagged()), "digest": digest}


def load_pg(path: Path, base_url: str, hosts: int, weeks: int) -> str:
    """The SQLite history at `path` copied into database fleet_trends_<hosts>_<weeks> on the
    server (COPY, the rows formatted by SQLite); kept and reused when already complete."""
    from sqlalchemy import create_engine, make_url, text

    from fleet.history import open_history

    name = f"fleet_trends_{hosts}_{weeks}"
    url = make_url(base_url).set(database=name).render_as_string(hide_password=False)
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    expected = hosts * GPUS * weeks
    with admin.connect() as c:
        exists = c.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                           {"n": name}).first()
    if exists:
        probe = create_engine(url)
        try:
            with probe.connect() as c:
                have = c.execute(text("SELECT count(*) FROM gpu_samples")).scalar_one()
        except Exception:
            have = -1
        probe.dispose()
        if have == expected:
            admin.dispose()
            return url
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    open_history(url).close()  # schema through the migrations
    t0 = time.perf_counter()
    src = sqlite3.connect(path)
    engine = create_engine(url)
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("SET TIME ZONE 'UTC'")
        for table in ("hosts", "snapshots", "gpu_samples"):
            cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
            line = " || char(9) || ".join(f"coalesce(CAST({c} AS TEXT), '\\N')" for c in cols)
            with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:  # type: ignore[attr-defined]
                q = src.execute(f"SELECT {line} FROM {table} ORDER BY id")
                while chunk := q.fetchmany(50_000):
                    cp.write("\n".join(r[0] for r in chunk) + "\n")
        raw.commit()
    finally:
        raw.close()
        src.close()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    print(f"copied {path.name} into PostgreSQL {name} in {time.perf_counter() - t0:.1f} s",
          flush=True)
    return url


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--weeks", type=int, default=52)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/fleet-trends-scale"))
    ap.add_argument("--full", action="store_true",
                    help="also time the whole history, condensed and row by row")
    ap.add_argument("--runs", type=int, default=1, help="rounds of measurements (medians)")
    ap.add_argument("--pg", metavar="URL", help="also measure on this PostgreSQL server")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="window", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.mode)))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.sizes.split(",")]
    modes = MODES if args.full else MODES[:1]
    results: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for n in sizes:
        path = args.dir / f"hist-{n}-{args.weeks}.db"
        t0 = time.perf_counter()
        existed = path.exists()
        build(path, n, args.weeks)
        if not existed:
            print(f"built {path.name}: {n * GPUS * args.weeks:,} samples in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
        targets = [("sqlite", str(path))]
        if args.pg:
            targets.append(("pg", load_pg(path, args.pg, n, args.weeks)))
        for _round in range(args.runs):
            for db, target in targets:
                for mode in modes:
                    cmd = [sys.executable, __file__, "--measure", target, "--mode", mode]
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    results.setdefault((n, db, mode), []).append(r)
                    print(f"{n:>6} hosts {n * GPUS * args.weeks:>10,} samples  {db:<6} "
                          f"{mode:<9} {r['seconds']:6.2f} s (CPU {r['cpu']:5.2f} s)  peak RSS "
                          f"{r['rss_mib']:7.1f} MiB  gpus {int(r['gpus']):>6}  "
                          f"flagged {int(r['flagged'])}", flush=True)
    dbs = ["sqlite", "pg"] if args.pg else ["sqlite"]
    print(f"\nmedians of {args.runs} run(s), seconds (CPU seconds):")
    med: dict[tuple[int, str, str], float] = {}
    for n in sizes:
        for db in dbs:
            cells = []
            for mode in modes:
                rs = results[(n, db, mode)]
                med[(n, db, mode)] = _median([r["seconds"] for r in rs])
                cells.append(f"{mode} {med[(n, db, mode)]:.2f} "
                             f"({_median([r['cpu'] for r in rs]):.2f})")
            line = f"{n:>6} hosts {db:<6} " + "  ".join(cells)
            if args.full:
                digests = {r["digest"] for m in ("full", "full-rows")
                           for r in results[(n, db, m)]}
                same = "same report" if len(digests) == 1 else "REPORTS DIFFER"
                ratio = med[(n, db, "full-rows")] / med[(n, db, "full")]
                line += f"  row-by-row/condensed {ratio:.1f}x ({same})"
            print(line)
        if args.pg:
            print(f"{n:>6} hosts pg/sqlite " + "  ".join(
                f"{m} {med[(n, 'pg', m)] / med[(n, 'sqlite', m)]:.2f}x" for m in modes))
    big = sizes[-1]
    w = results[(big, "sqlite", "window")]
    ok = _median([r["seconds"] for r in w]) <= 10 and max(r["rss_mib"] for r in w) <= 1024
    print(f"target (<= 10 s, <= 1 GiB at {big} hosts, trend window): "
          f"{'met' if ok else 'NOT met'}")
    if args.full:
        full = med[(big, "sqlite", "full")]
        print(f"target (<= 5 s at {big} hosts, all {args.weeks} weeks): "
              f"{'met' if full <= 5 else 'NOT met'} ({full:.2f} s)")
    if args.pg:
        worst = max(med[(big, "pg", m)] / med[(big, "sqlite", m)] for m in modes)
        print(f"target (PostgreSQL within 2x of SQLite at {big} hosts): "
              f"{'met' if worst <= 2 else 'NOT met'} (worst {worst:.2f}x)")


if __name__ == "__main__":
    main()
