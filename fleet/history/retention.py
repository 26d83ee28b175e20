"""Retention in the history: fold old GPU samples into weekly rollups, expire old rollups.

The rules are pure (`fleet.domain.retention`); this runs them in ONE write transaction:
1. per batch of hosts, `DELETE ... RETURNING` the samples at or before the raw cut-off and roll
   up exactly the rows that statement deleted, merging into any rollup of the same week and
   board (so a sample another controller writes late into a pruned week is kept on the next run);
   no row can be deleted without reaching a rollup, whatever commits concurrently;
2. delete rollups older than the rollup retention (none when it is forever);
3. delete snapshots (and their findings) at or before the cut-off that no sample refers to any
   more, keeping each host's latest snapshot (`latest_snapshots` reads it).
Benchmark runs and the event log are never pruned (baselines and the audit trail).
On PostgreSQL a transaction-scoped advisory lock serialises prunes; SQLite's BEGIN IMMEDIATE does.
A second run with the same `now` finds nothing to do.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    and_,
    cast,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    text,
    update,
)

from fleet.domain.retention import (
    RetentionPolicy,
    WeeklyRollup,
    expand,
    padded,
    plan,
    roll_up,
    week_of,
)
from fleet.domain.trend_report import SERIES_FIELDS
from fleet.history.engine import History
from fleet.history.events import record_event
from fleet.history.lite import require_aware
from fleet.history.models import Finding, GpuRollup, GpuSample, Snapshot

_PG_PRUNE_LOCK = 0x666C656574 + 1  # next to the migration lock: one prune at a time per server
SAMPLE_COLUMNS: tuple[str, ...] = SERIES_FIELDS[1:]
"""Sample columns after the time, in the order of `fleet.domain.trends.SERIES_FIELDS`."""


@dataclass(frozen=True)
class PruneResult:
    """What a prune did (or, with dry, would do)."""

    dry: bool
    raw_weeks: int
    rollup_weeks: int | None
    raw_cutoff: dt.datetime
    rollup_cutoff_week: int | None
    samples_rolled_up: int = 0
    rollups_added: int = 0
    rollups_merged: int = 0
    rollups_expired: int = 0
    snapshots_deleted: int = 0
    findings_deleted: int = 0

    @property
    def changed(self) -> bool:
        return any((self.samples_rolled_up, self.rollups_expired, self.snapshots_deleted,
                    self.findings_deleted))

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["raw_cutoff"] = self.raw_cutoff.isoformat()
        d["changed"] = self.changed
        return d


class _DryRun(Exception):
    """Raised inside the transaction to roll a dry run back."""

    def __init__(self, result: PruneResult) -> None:
        super().__init__("dry run")
        self.result = result


def _rollup(week: int, uuid: str, t_first: float, t_last: float, count: int, first: list[Any],
            last: list[Any], end: list[Any], xid: dict[str, int], first_known: list[Any] | None,
            breaks: list[list[Any]] | None) -> WeeklyRollup:
    """A stored row as a rollup: an empty `last` is the first sample's values (a week of one
    sample, or no counter moved), an empty `end_known` is `last`'s (see `_values`)."""
    first = padded(first)
    last = padded(last) or list(first)
    return WeeklyRollup(week=week, uuid=uuid or None, t_first=t_first, t_last=t_last,
                        count=count, first=first, last=last,
                        end_known=padded(end) or list(last), xid_counts=dict(xid),
                        first_known=padded(first_known) if first_known is not None else None,
                        breaks=[[b[0], *padded(b[1:])] for b in breaks or ()])


def _rollup_from_row(r: Any) -> WeeklyRollup:
    return _rollup(r.week, r.uuid, r.t_first, r.t_last, r.count, r.first, r.last, r.end_known,
                   r.xid_counts, r.first_known, r.breaks)


def _values(host_id: int, gpu_index: int, r: WeeklyRollup) -> dict[str, Any]:
    """Column values; `last` and `end_known` stored empty when they repeat what precedes them
    (most weeks of a weekly probe): a third of the bytes, and less to parse on a long read."""
    return {"host_id": host_id, "gpu_index": gpu_index, "week": r.week, "uuid": r.uuid or "",
            "t_first": r.t_first, "t_last": r.t_last, "count": r.count, "first": r.first,
            "last": [] if r.last == r.first else r.last,
            "end_known": [] if r.end_known == r.last else r.end_known,
            "xid_counts": r.xid_counts, "first_known": r.first_known,
            "breaks": r.breaks or None}


def _fold_batch(conn: Connection, host_ids: Sequence[int], cutoff: dt.datetime) -> \
        tuple[int, int, int]:
    """Delete one batch's old samples and fold exactly those into rollups."""
    gs = GpuSample.__table__.c  # type: ignore[attr-defined]
    gr = GpuRollup.__table__  # type: ignore[attr-defined]
    table = GpuSample.__table__  # type: ignore[attr-defined]
    stmt = (delete(table)
            .where(gs.host_id.in_(list(host_ids)), gs.taken_at <= cutoff)
            .returning(gs.host_id, gs.gpu_index, gs.taken_at, gs.id,
                       *(gs[c] for c in SAMPLE_COLUMNS)))
    series: dict[tuple[int, int], list[tuple[float, int, tuple[Any, ...]]]] = defaultdict(list)
    n = 0
    for row in conn.execute(stmt):
        n += 1
        t = row[2].timestamp()
        series[(row[0], row[1])].append((t, row[3], (t, *row[4:])))
    if not n:
        return 0, 0, 0
    existing: dict[tuple[int, int, int, str], Any] = {}
    for r in conn.execute(select(gr).where(gr.c.host_id.in_(list(host_ids)))):
        existing[(r.host_id, r.gpu_index, r.week, r.uuid)] = r
    added = merged = 0
    new_rows: list[dict[str, Any]] = []
    for (host_id, gpu_index), samples in series.items():
        samples.sort(key=lambda x: (x[0], x[1]))
        for ru in roll_up(x[2] for x in samples):
            key = (host_id, gpu_index, ru.week, ru.uuid or "")
            old = existing.get(key)
            if old is None:
                new_rows.append(_values(host_id, gpu_index, ru))
                added += 1
                continue
            both = _rollup_from_row(old).merged(ru)
            conn.execute(update(gr).where(gr.c.id == old.id)
                         .values(**_values(host_id, gpu_index, both)))
            merged += 1
    if new_rows:
        conn.execute(insert(gr), new_rows)
    return n, added, merged


def prune(history: History, policy: RetentionPolicy, *, now: dt.datetime, dry: bool = False,
          actor: str | None = None, batch_hosts: int = 50) -> PruneResult:
    """Apply the retention policy in one transaction (rolled back when `dry`); a prune that
    changed something records a `history.prune` event in that same transaction."""
    now = require_aware(now, "now")
    p = plan(policy, now.timestamp())
    cutoff = dt.datetime.fromtimestamp(p.raw_cutoff, dt.UTC)
    base = PruneResult(dry=dry, raw_weeks=policy.raw_weeks, rollup_weeks=policy.rollup_weeks,
                       raw_cutoff=cutoff, rollup_cutoff_week=p.rollup_cutoff_week)
    try:
        with history.write() as s:
            conn = s.connection()
            if history.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_PRUNE_LOCK})
            gs = GpuSample.__table__.c  # type: ignore[attr-defined]
            host_ids = [h for (h,) in conn.execute(
                select(gs.host_id).where(gs.taken_at <= cutoff).distinct().order_by(gs.host_id))]
            rolled = added = merged = 0
            for i in range(0, len(host_ids), batch_hosts):
                a, b, c = _fold_batch(conn, host_ids[i:i + batch_hosts], cutoff)
                rolled, added, merged = rolled + a, added + b, merged + c
            expired = 0
            if p.rollup_cutoff_week is not None:
                gr = GpuRollup.__table__  # type: ignore[attr-defined]
                expired = conn.execute(
                    delete(gr).where(gr.c.week < p.rollup_cutoff_week)).rowcount or 0
            snaps, finds = _prune_snapshots(conn, cutoff)
            result = PruneResult(**{**asdict(base), "samples_rolled_up": rolled,
                                    "rollups_added": added, "rollups_merged": merged,
                                    "rollups_expired": expired, "snapshots_deleted": snaps,
                                    "findings_deleted": finds})
            if dry:
                raise _DryRun(result)
            if result.changed:
                record_event(history, "history.prune", "",
                             f"history pruned: {rolled} sample(s) into weekly rollups, "
                             f"{expired} rollup(s) expired, {snaps} snapshot(s) deleted",
                             result.as_dict(), actor=actor, at=now, session=s)
    except _DryRun as d:
        return d.result
    return result


def _prune_snapshots(conn: Connection, cutoff: dt.datetime) -> tuple[int, int]:
    """Old snapshots no sample refers to, but never a host's latest one; their findings first."""
    sn = Snapshot.__table__  # type: ignore[attr-defined]
    fi = Finding.__table__  # type: ignore[attr-defined]
    gs = GpuSample.__table__  # type: ignore[attr-defined]
    latest = select(sn.c.host_id, func.max(sn.c.taken_at).label("t")).group_by(
        sn.c.host_id).subquery()
    keep = select(sn.c.id).join(latest, and_(sn.c.host_id == latest.c.host_id,
                                             sn.c.taken_at == latest.c.t))
    old = select(sn.c.id).where(
        sn.c.taken_at <= cutoff, sn.c.id.not_in(keep),
        ~exists(select(gs.c.id).where(gs.c.snapshot_id == sn.c.id)))
    ids = [i for (i,) in conn.execute(old)]
    finds = snaps = 0
    for i in range(0, len(ids), 5000):
        chunk = ids[i:i + 5000]
        finds += conn.execute(delete(fi).where(fi.c.snapshot_id.in_(chunk))).rowcount or 0
        snaps += conn.execute(delete(sn).where(sn.c.id.in_(chunk))).rowcount or 0
    return snaps, finds


_JSON_COLUMNS = ("first", "last", "end_known", "xid_counts", "first_known", "breaks")


def rollup_series(conn: Connection, *, since: float | None, until: float | None,
                  host_ids: Iterable[int] | None = None) -> dict[tuple[int, int],
                                                                  list[tuple[Any, ...]]]:
    """Rolled-up weeks as trend sample rows per (host_id, gpu_index), within [since, until]."""
    gr = GpuRollup.__table__  # type: ignore[attr-defined]
    c = gr.c
    # the JSON columns joined into one JSON text by the database and parsed with one
    # json.loads a row: SQLAlchemy's JSON result processing, one call a column, was 3/4 of a
    # year's read at 1,000 hosts
    doc: Any = literal("[", Text)
    for i, k in enumerate(_JSON_COLUMNS):
        doc = doc + ("," if i else "") + func.coalesce(cast(c[k], Text), "null")
    stmt = select(c.host_id, c.gpu_index, c.week, c.uuid, c.t_first, c.t_last, c.count,
                  doc + "]")
    if since is not None:
        stmt = stmt.where(gr.c.week >= week_of(since))
    if until is not None:
        stmt = stmt.where(gr.c.week <= week_of(until))
    if host_ids is not None:
        stmt = stmt.where(gr.c.host_id.in_(list(host_ids)))
    stmt = stmt.order_by(c.host_id, c.gpu_index, c.t_first, c.t_last)
    out: dict[tuple[int, int], list[tuple[Any, ...]]] = defaultdict(list)
    lo = -math.inf if since is None else since
    hi = math.inf if until is None else until
    for r in conn.execute(stmt):
        first, last, end, xid, first_known, breaks = json.loads(r[7])
        rows = out[(r[0], r[1])]
        if r[6] == 1:  # one sample that week (a weekly probe): that sample, as it was
            if lo <= r[4] <= hi:
                rows.append((r[4], r[3] or None, *padded(first), xid))
            continue
        rows.extend(x for x in expand(_rollup(r[2], r[3], r[4], r[5], r[6], first, last, end,
                                              xid, first_known, breaks))
                    if lo <= x[0] <= hi)
    return {k: v for k, v in out.items() if v}


def with_rollups(old: list[tuple[Any, ...]] | None,
                 rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rollup rows before raw rows, in time order (a late raw sample may predate a rollup)."""
    if not old:
        return rows
    out = old + rows
    if rows and old[-1][0] > rows[0][0]:
        out.sort(key=lambda r: r[0])
    return out
