"""Quarantine bookkeeping the hygiene job, its release and the rollout engine share.

- `reserve_quarantine`: open a quarantine only while the pool's budget has room, deciding under
  the history's lock (SQLite: the write transaction's BEGIN IMMEDIATE; PostgreSQL: a
  transaction-scoped advisory lock), so two overlapping hygiene runs can never both spend it.
  The job reserves before it drains, and closes the reservation when the drain fails.
- `open_record`: the open quarantine of a host with what its `quarantine.open` event recorded
  (which scheduler drained it, and whether fleet did), for `fleet quarantine release`.
- `is_quarantined` / `quarantined_hosts`: asked right before a rollout undrains a host (a
  quarantine outranks it); the second answers for every host at once (one query per batch of
  undrains, not one per host).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlmodel import Session, col, func, select

from fleet.history.engine import History
from fleet.history.events import record_event
from fleet.history.lite import require_aware
from fleet.history.models import Event, Host, Quarantine
from fleet.history.store import _upsert_host

_PG_BUDGET_LOCK = 0x666C_7471  # "fltq": one key serialises quarantine budgets across runs


def lock_budget(s: Session, dialect: str) -> None:
    """Make the caller's write transaction the only one spending quarantine budgets (SQLite's
    BEGIN IMMEDIATE serialises writers already)."""
    if dialect == "postgresql":
        s.connection().execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_BUDGET_LOCK})


def reserve_quarantine(
    history: History,
    host: str,
    *,
    pool_hosts: Collection[str],
    limit: int,
    reason: str,
    opened_by: str,
    at: dt.datetime,
    data: Mapping[str, Any] | None = None,
) -> int | None:
    """Open `host`'s quarantine if fewer than `limit` of `pool_hosts` are in quarantine now
    (re-read under the lock); its id, or None when the budget is spent (or the host is already
    in quarantine: it holds its share already)."""
    when = require_aware(at, "at")
    with history.write() as s:
        lock_budget(s, history.dialect)
        open_now = s.exec(select(Host.name)
                          .join(Quarantine, col(Quarantine.host_id) == col(Host.id))
                          .where(col(Quarantine.closed_at).is_(None))).all()
        if host in open_now:
            return None
        held = len(set(open_now) & set(pool_hosts))
        if held >= limit:
            return None
        h = _upsert_host(s, host, None, {})
        assert h.id is not None
        q = Quarantine(host_id=h.id, reason=reason, opened_at=when, opened_by=opened_by)
        s.add(q)
        s.flush()
        record_event(history, "quarantine.open", host, reason,
                     {"quarantine_id": q.id, "budget": {"limit": limit, "held_before": held},
                      **dict(data or {})}, actor=opened_by, at=when, session=s)
        assert q.id is not None
        return q.id


@dataclass(frozen=True)
class OpenQuarantine:
    id: int
    host: str
    reason: str
    scheduler: str | None
    """The scheduler the quarantine drained through (None: not recorded)."""
    drained_by_fleet: bool


def open_record(history: History, host: str) -> OpenQuarantine | None:
    """`host`'s open quarantine with what its opening recorded, or None."""
    with history.read() as s:
        q = s.exec(select(Quarantine).join(Host, col(Host.id) == col(Quarantine.host_id))
                   .where(Host.name == host, col(Quarantine.closed_at).is_(None))).first()
        if q is None or q.id is None:
            return None
        data: dict[str, Any] = {}
        for ev in s.exec(select(Event).where(Event.kind == "quarantine.open", Event.subject == host)
                         .order_by(col(Event.id).desc())).all():
            if (ev.data or {}).get("quarantine_id") == q.id:
                data = dict(ev.data)
                break
        sched = data.get("scheduler")
        return OpenQuarantine(q.id, host, q.reason, str(sched) if sched else None,
                              bool(data.get("drained_by_fleet")))


def is_quarantined(history: History, host: str) -> bool:
    """Whether `host` has an open quarantine now."""
    with history.read() as s:
        n = s.exec(select(func.count()).select_from(Quarantine)
                   .join(Host, col(Host.id) == col(Quarantine.host_id))
                   .where(Host.name == host, col(Quarantine.closed_at).is_(None))).one()
    return bool(n)


def quarantined_hosts(history: History) -> frozenset[str]:
    """The hosts with an open quarantine now, in one query (there are few)."""
    with history.read() as s:
        names = s.exec(select(Host.name).join(Quarantine, col(Host.id) == col(Quarantine.host_id))
                       .where(col(Quarantine.closed_at).is_(None))).all()
    return frozenset(names)
