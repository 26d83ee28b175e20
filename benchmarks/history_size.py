"""History size per host per week, before and after `fleet history prune` (issue 17.2).

    .venv/bin/python benchmarks/history_size.py [--hosts 200] [--weeks 52] [--per-week 7]
        [--facts-bytes 1500] [--dir /tmp/fleet-history-size]

Builds a SQLite history (schema through the migrations, rows written straight through sqlite3)
of HOSTS hosts x 8 GPUs x WEEKS weeks with PER_WEEK probes a week (7: a daily probe; the weekly
hygiene run alone is 1), each probe a snapshot with a facts document of about FACTS_BYTES bytes,
one finding, and one counter sample per GPU (slow growth, reboots now and then, a rare Xid).
Then it copies the file twice and prunes the copies through `fleet.history.retention.prune`:
- the default policy (13 weeks raw, 104 weeks of rollups) at the end of the year;
- everything rolled up (raw kept 1 week, run a week after the last sample): the cost of a
  rolled-up week alone.
Sizes are of the file after VACUUM (SQLite does not shrink a file by itself), in bytes per host
per week; the ratios are raw / rolled-up. Prune time is the one transaction's wall time.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
GPUS = 8


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


def build(path: Path, hosts: int, weeks: int, per_week: int, facts_bytes: int) -> int:
    """The raw history; returns the number of GPU samples written."""
    from fleet.history import open_history

    path.unlink(missing_ok=True)
    open_history(str(path)).close()
    rnd = random.Random(17)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    step = timedelta(weeks=1) / per_week
    times = [NOW - timedelta(weeks=weeks) + step * (i + 1) for i in range(weeks * per_week)]
    stamps = [_stamp(t) for t in times]
    db.executemany(
        "INSERT INTO hosts (id, name, pool, gpu_model, gpu_count, labels, first_seen, last_seen)"
        " VALUES (?, ?, 'h100', 'H100', 8, '{}', ?, ?)",
        [(h + 1, f"gpu{h:05d}", stamps[0], stamps[-1]) for h in range(hosts)])
    facts = json.dumps({"note": "x" * max(0, facts_bytes - 20)})
    snap_id = 0
    snaps: list[tuple[object, ...]] = []
    finds: list[tuple[object, ...]] = []
    samples: list[tuple[object, ...]] = []
    n = 0
    for h in range(hosts):
        agg = [rnd.randint(0, 40) for _ in range(GPUS)]
        aer = [0] * GPUS
        for stamp in stamps:
            snap_id += 1
            snaps.append((snap_id, h + 1, stamp, "nvml", 1, facts))
            finds.append((snap_id, "driver", "ok", "driver matches the golden release", "{}"))
            reboot = rnd.random() < 0.01
            for g in range(GPUS):
                agg[g] += rnd.choice((0, 0, 0, 1))
                aer[g] = 0 if reboot else aer[g] + rnd.choice((0, 0, 1))
                xid = '{"13": 1}' if rnd.random() < 0.0005 else "{}"
                samples.append((snap_id, h + 1, stamp, g, f"GPU-{h:05d}-{g}", agg[g] % 7, 0,
                                agg[g], 0, None, None, None, 0, 0, False, False, aer[g],
                                aer[g], 0, 0, xid))
                n += 1
        if len(samples) >= 200_000:
            _flush(db, snaps, finds, samples)
    _flush(db, snaps, finds, samples)
    db.commit()
    db.close()
    return n


def _flush(db: sqlite3.Connection, snaps: list[tuple[object, ...]],
           finds: list[tuple[object, ...]], samples: list[tuple[object, ...]]) -> None:
    db.executemany("INSERT INTO snapshots (id, host_id, taken_at, source, reachable, facts)"
                   " VALUES (?, ?, ?, ?, ?, ?)", snaps)
    db.executemany("INSERT INTO findings (snapshot_id, check_id, severity, message, details)"
                   " VALUES (?, ?, ?, ?, ?)", finds)
    db.executemany(
        "INSERT INTO gpu_samples (snapshot_id, host_id, taken_at, gpu_index, uuid,"
        " ecc_corrected_volatile, ecc_uncorrected_volatile, ecc_corrected_aggregate,"
        " ecc_uncorrected_aggregate, retired_sbe, retired_dbe, retired_pending,"
        " remapped_corrected, remapped_uncorrected, remapped_pending, remapped_failure,"
        " pcie_replay, aer_corrected, aer_nonfatal, aer_fatal, xid_counts)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", samples)
    for rows in (snaps, finds, samples):
        rows.clear()


def vacuumed_size(path: Path) -> int:
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    db.close()
    return path.stat().st_size


def pruned_copy(src: Path, dst: Path, raw_weeks: int, rollup_weeks: int | None,
                now: datetime) -> tuple[int, float, dict[str, object]]:
    from fleet.domain.retention import RetentionPolicy
    from fleet.history import open_history
    from fleet.history.retention import prune

    shutil.copyfile(src, dst)
    with open_history(str(dst)) as h:
        t0 = time.perf_counter()
        result = prune(h, RetentionPolicy(raw_weeks=raw_weeks, rollup_weeks=rollup_weeks),
                       now=now, actor="benchmark")
        seconds = time.perf_counter() - t0
    return vacuumed_size(dst), seconds, result.as_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--weeks", type=int, default=52)
    ap.add_argument("--per-week", type=int, default=7)
    ap.add_argument("--facts-bytes", type=int, default=1500)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/fleet-history-size"))
    ap.add_argument("--json", action="store_true", help="One JSON document on stdout.")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    raw = a.dir / "raw.db"
    t0 = time.perf_counter()
    n = build(raw, a.hosts, a.weeks, a.per_week, a.facts_bytes)
    build_s = time.perf_counter() - t0
    raw_size = vacuumed_size(raw)
    host_weeks = a.hosts * a.weeks
    default_size, default_s, default_r = pruned_copy(raw, a.dir / "default.db", 13, 104, NOW)
    all_size, all_s, all_r = pruned_copy(raw, a.dir / "all.db", 1, None,
                                         NOW + timedelta(weeks=1))
    figures = {
        "hosts": a.hosts, "gpus_per_host": GPUS, "weeks": a.weeks, "probes_per_week": a.per_week,
        "facts_bytes": a.facts_bytes, "gpu_samples": n, "build_s": round(build_s, 1),
        "raw_bytes": raw_size,
        "raw_bytes_per_host_week": round(raw_size / host_weeks),
        "default_policy": {"raw_weeks": 13, "rollup_weeks": 104, "bytes": default_size,
                           "bytes_per_host_week": round(default_size / host_weeks),
                           "ratio": round(raw_size / default_size, 2),
                           "prune_s": round(default_s, 1),
                           "samples_rolled_up": default_r["samples_rolled_up"]},
        "all_rolled_up": {"bytes": all_size,
                          "bytes_per_host_week": round(all_size / host_weeks),
                          "ratio": round(raw_size / all_size, 2), "prune_s": round(all_s, 1),
                          "rollups": all_r["rollups_added"]},
    }
    if a.json:
        print(json.dumps({"schema": 1, **figures}, indent=2))
        return
    d, r = figures["default_policy"], figures["all_rolled_up"]
    assert isinstance(d, dict) and isinstance(r, dict)
    print(f"history: {a.hosts} hosts x {GPUS} GPUs x {a.weeks} weeks, {a.per_week} probes a "
          f"week ({n:,} GPU samples, facts ~{a.facts_bytes} B a probe), built in {build_s:.1f} s")
    print(f"raw:                        {raw_size / 2**20:8.1f} MiB  "
          f"{figures['raw_bytes_per_host_week']:>7,} B/host/week")
    print(f"pruned, 13 w raw + rollups: {default_size / 2**20:8.1f} MiB  "
          f"{d['bytes_per_host_week']:>7,} B/host/week  ratio {d['ratio']}x  "
          f"(prune {d['prune_s']} s)")
    print(f"all weeks rolled up:        {all_size / 2**20:8.1f} MiB  "
          f"{r['bytes_per_host_week']:>7,} B/host/week  ratio {r['ratio']}x  "
          f"(prune {r['prune_s']} s)")


if __name__ == "__main__":
    main()
