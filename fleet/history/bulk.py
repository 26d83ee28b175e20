"""Bulk writes of what a rollout measures: benchmark runs and probes by the thousand, each
call one transaction with executemany (a wave verifies thousands of hosts), and the host ids
they hang on. Apart from `rollouts.py` (rollouts, waves, steps, the lock), which uses
`host_ids` when a rollout starts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session, col, select

from fleet.history.engine import History
from fleet.history.lite import require_aware
from fleet.history.models import Host


def host_ids(s: Session, names: Sequence[str], info: Mapping[str, Mapping[str, Any]],
              when: dt.datetime) -> dict[str, int]:
    """Ids of `names` in the hosts table, inserting the missing ones in one statement."""
    ids: dict[str, int] = {}
    wanted = list(dict.fromkeys(names))
    for i in range(0, len(wanted), 900):
        chunk = wanted[i:i + 900]
        for hid, name in s.exec(select(Host.id, Host.name).where(col(Host.name).in_(chunk))):
            ids[name] = hid  # type: ignore[assignment]
    missing = [n for n in wanted if n not in ids]
    if missing:
        rows: list[dict[str, Any]] = []
        for n in missing:
            meta = info.get(n, {})
            rows.append({"name": n, "pool": meta.get("pool") or "",
                         "gpu_model": meta.get("gpu_model"),
                         "gpu_count": int(meta.get("gpu_count") or 0), "labels": {},
                         "first_seen": when, "last_seen": when})
        s.connection().execute(insert(Host.__table__), rows)  # type: ignore[attr-defined]
        for i in range(0, len(missing), 900):
            chunk = missing[i:i + 900]
            for hid, name in s.exec(select(Host.id, Host.name).where(col(Host.name).in_(chunk))):
                ids[name] = hid  # type: ignore[assignment]
    return ids


def record_benchmarks(
    history: History,
    runs: Sequence[tuple[str, str | None, Mapping[str, Sequence[float]] | None, str]],
    *,
    kind: str,
    name: str,
    started_at: dt.datetime,
    ended_at: dt.datetime,
    rollout_id: int | None = None,
) -> list[int]:
    """Store several benchmark runs at once: (host, release, samples, status) each, like
    `store.record_benchmark` but with one executemany for all samples (a gate records
    thousands); returns the run ids."""
    from fleet.history.models import BenchmarkRun, BenchmarkSample

    started = require_aware(started_at, "started_at")
    ended = require_aware(ended_at, "ended_at")
    run_t = BenchmarkRun.__table__  # type: ignore[attr-defined]
    with history.write() as s:
        ids = host_ids(s, [r[0] for r in runs], {}, started)
        conn = s.connection()
        out = _insert_ids(conn, run_t, [
            {"host_id": ids[host], "rollout_id": rollout_id, "release": release, "kind": kind,
             "name": name, "status": status, "started_at": started, "ended_at": ended}
            for host, release, _values, status in runs])
        samples: list[dict[str, Any]] = []
        for rid, (_host, _release, values, _status) in zip(out, runs, strict=True):
            samples += [{"run_id": rid, "metric": str(m), "value": float(v), "unit": "",
                         "gpu_index": None}
                        for m, vs in (values or {}).items() for v in vs]
        if samples:
            conn.execute(insert(BenchmarkSample.__table__), samples)  # type: ignore[attr-defined]
        return out


def add_snapshots(history: History, snaps: Sequence[Mapping[str, Any]]) -> None:
    """Store many probes at once, like `store.add_snapshot` each (host, taken_at, source,
    reachable, driver_nvml, driver_kmod, driver_package, release, facts, gpus, findings, pool),
    in one transaction with executemany for the GPU and finding rows (a wave verifies
    thousands of hosts). Hosts must exist (a rollout created them)."""
    from fleet.history.models import Finding as FindingRow
    from fleet.history.models import GpuSample, Snapshot

    if not snaps:
        return
    snap_t = Snapshot.__table__  # type: ignore[attr-defined]
    with history.write() as s:
        first = require_aware(snaps[0]["taken_at"], "taken_at")
        ids = host_ids(s, [d["host"] for d in snaps], {}, first)
        conn = s.connection()
        gpus: list[dict[str, Any]] = []
        findings: list[dict[str, Any]] = []
        seen: dict[int, dt.datetime] = {}
        taken_at = [require_aware(d["taken_at"], "taken_at") for d in snaps]
        sids = _insert_ids(conn, snap_t, [
            {"host_id": ids[d["host"]], "taken_at": taken, "source": d.get("source") or "none",
             "reachable": bool(d.get("reachable", True)), "driver_nvml": d.get("driver_nvml"),
             "driver_kmod": d.get("driver_kmod"), "driver_package": d.get("driver_package"),
             "release": d.get("release"), "facts": dict(d.get("facts") or {})}
            for d, taken in zip(snaps, taken_at, strict=True)])
        for d, taken, sid in zip(snaps, taken_at, sids, strict=True):
            hid = ids[d["host"]]
            gpus += [{**_GPU_DEFAULTS, **g, "snapshot_id": sid, "host_id": hid,
                      "taken_at": taken} for g in d.get("gpus") or ()]
            findings += [{**_FINDING_DEFAULTS, **f, "snapshot_id": sid}
                         for f in d.get("findings") or ()]
            if d.get("reachable", True):
                seen[hid] = max(taken, seen.get(hid, taken))
        if gpus:
            conn.execute(insert(GpuSample.__table__), gpus)  # type: ignore[attr-defined]
        if findings:
            conn.execute(insert(FindingRow.__table__), findings)  # type: ignore[attr-defined]
        host_t = Host.__table__  # type: ignore[attr-defined]
        if seen:
            conn.execute(update(host_t).where(host_t.c.id == bindparam("_id"))
                         .where(host_t.c.last_seen < bindparam("_seen"))
                         .values(last_seen=bindparam("_seen")),
                         [{"_id": k, "_seen": v} for k, v in seen.items()])


def _insert_ids(conn: Any, table: Any, rows: list[dict[str, Any]]) -> list[int]:
    """Insert `rows` with one executemany and return their ids in the order of `rows`
    (RETURNING in parameter order: SQLite 3.35+, PostgreSQL): a statement built and compiled
    per row cost more than the rows themselves on a wave of thousands of hosts."""
    if not rows:
        return []
    stmt = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return [int(r[0]) for r in conn.execute(stmt, rows)]


def _defaults(model: Any) -> dict[str, Any]:
    return {name: (f.default if f.default_factory is None else f.default_factory())
            for name, f in model.model_fields.items()}


_GPU_DEFAULTS: dict[str, Any] = {}
_FINDING_DEFAULTS: dict[str, Any] = {}


def _init_defaults() -> None:
    from fleet.history.models import FindingBase, GpuSampleBase

    _GPU_DEFAULTS.update({k: v for k, v in _defaults(GpuSampleBase).items()
                          if k != "gpu_index"})
    _FINDING_DEFAULTS.update({k: v for k, v in _defaults(FindingBase).items()
                              if k not in ("check_id", "severity")})


_init_defaults()
