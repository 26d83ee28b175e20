"""What the history says of every host, for `fleet hosts`: a handful of reads, no SSH.

Each host's newest probe (and newest reachable one: the release and driver it was seen on), the
findings of that probe by severity, the release fleet last put on it (a finished rollout step,
a rollback or apply), its open quarantine, the step of an unfinished rollout it is in, and the
administrative state a rollout last saw. The row a person reads is made from these by the pure
`fleet.domain.fleet_view`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel import col, func, select

from fleet.history.controllers import ACTIVE
from fleet.history.engine import History
from fleet.history.models import Event, Finding, Host, HostStep, Rollout, Wave
from fleet.history.store import latest_snapshots, list_hosts, list_quarantines

_CHUNK = 500  # ids per IN (...) list: SQLite's limit on bound parameters is far above


@dataclass(frozen=True)
class Probe:
    taken_at: dt.datetime
    reachable: bool
    release: str | None
    driver: str | None


@dataclass(frozen=True)
class Placed:
    """A release fleet put on the host, and by what (`rollout 2`, `rollback`, `apply`)."""

    release: str
    at: dt.datetime
    by: str


@dataclass(frozen=True)
class InRollout:
    rollout: int
    status: str
    wave: int
    state: str


@dataclass
class HostRecord:
    """One host as the history has it; None where the history has nothing."""

    name: str
    pool: str
    latest: Probe | None = None
    seen: Probe | None = None  # the newest reachable probe
    findings: dict[str, int] = field(default_factory=dict)
    placed: Placed | None = None
    quarantine: dict[str, Any] | None = None  # reason, by, since, drained_by_fleet
    rollout: InRollout | None = None
    admin: dict[str, Any] | None = None  # state, reason, owner, by_fleet, at, rollout
    left_drained: dict[str, Any] | None = None  # an apply/rollback that left it drained


def _driver(snap: Any) -> str | None:
    """The loaded kernel module's version first: what the GPUs run now."""
    found = snap.driver_kmod or snap.driver_nvml or snap.driver_package
    return str(found) if found else None


def read_fleet(history: History, *, hosts: Sequence[str] | None = None) -> list[HostRecord]:
    """Every host the history knows (or those of `hosts`), by pool then name."""
    known = list_hosts(history)
    if hosts is not None:
        wanted = set(hosts)
        known = [h for h in known if h.name in wanted]
    recs = {h.name: HostRecord(h.name, h.pool) for h in known}
    names = list(recs)
    latest_ids: dict[int, str] = {}
    for h, s in latest_snapshots(history, hosts=names if hosts is not None else None):
        if h.name in recs:
            recs[h.name].latest = Probe(s.taken_at, s.reachable, s.release, _driver(s))
            latest_ids[s.id] = h.name  # type: ignore[index]
    for h, s in latest_snapshots(history, hosts=names if hosts is not None else None,
                                 reachable_only=True):
        if h.name in recs:
            recs[h.name].seen = Probe(s.taken_at, s.reachable, s.release, _driver(s))
    _findings(history, latest_ids, recs)
    _steps(history, recs)
    _quarantines(history, recs)
    _applied(history, recs)
    return list(recs.values())


def _findings(history: History, ids: dict[int, str], recs: dict[str, HostRecord]) -> None:
    keys = list(ids)
    with history.read() as s:
        for i in range(0, len(keys), _CHUNK):
            part = keys[i:i + _CHUNK]
            stmt = (select(Finding.snapshot_id, Finding.severity, func.count())
                    .where(col(Finding.snapshot_id).in_(part))
                    .group_by(col(Finding.snapshot_id), col(Finding.severity)))
            for sid, sev, n in s.exec(stmt).all():
                recs[ids[sid]].findings[sev] = int(n)


def _steps(history: History, recs: dict[str, HostRecord]) -> None:
    """Per host, its newest finished move, its step in an unfinished rollout and the admin
    state the newest step that asked recorded."""
    stmt = (sa_select(*(col(c) for c in (
                Host.name, HostStep.rollout_id, HostStep.state, HostStep.from_release,
                HostStep.to_release, HostStep.started_at, HostStep.ended_at, HostStep.detail,
                Wave.index, Rollout.status)))
            .join(Host, col(Host.id) == col(HostStep.host_id))
            .join(Wave, col(Wave.id) == col(HostStep.wave_id))
            .join(Rollout, col(Rollout.id) == col(HostStep.rollout_id))
            .order_by(col(HostStep.id)))
    with history.read() as s:
        rows = s.execute(stmt).all()
    for name, rid, state, src, dst, started, ended, detail, wave, status in rows:
        rec = recs.get(name)
        if rec is None:
            continue
        detail = detail or {}
        if state == "done" and dst and ended is not None:
            rec.placed = _newer(rec.placed, Placed(dst, ended, f"rollout {rid}"))
        elif state == "rolled_back" and ended is not None:
            back = detail.get("rollback_to") or src
            if back:
                rec.placed = _newer(rec.placed, Placed(back, ended, f"rollout {rid} (rollback)"))
        moving = state not in ("done", "skipped", "rolled_back", "planned")
        if status in ACTIVE and (moving or (rec.rollout is None and state == "planned")):
            rec.rollout = InRollout(rid, status, wave, state)
        admin = detail.get("admin")
        if isinstance(admin, dict) and admin.get("state"):
            rec.admin = {**admin, "at": ended or started, "rollout": rid}


def _newer(old: Placed | None, new: Placed) -> Placed:
    return new if old is None or new.at >= old.at else old


def _quarantines(history: History, recs: dict[str, HostRecord]) -> None:
    opened = {}
    with history.read() as s:
        for ev in s.exec(select(Event).where(Event.kind == "quarantine.open")).all():
            qid = (ev.data or {}).get("quarantine_id")
            if qid is not None:
                opened[qid] = bool((ev.data or {}).get("drained_by_fleet"))
    for q, h in list_quarantines(history):
        rec = recs.get(h.name)
        if rec is not None:
            rec.quarantine = {"id": q.id, "reason": q.reason, "by": q.opened_by,
                              "since": q.opened_at, "drained_by_fleet": opened.get(q.id)}


def _applied(history: History, recs: dict[str, HostRecord]) -> None:
    """`fleet apply` and `fleet rollback` end events: the release they put on a host, and
    whether they left it drained."""
    stmt = (select(Event).where(col(Event.kind).in_(["apply.end", "rollback.end"]))
            .order_by(col(Event.id)))
    with history.read() as s:
        events = s.exec(stmt).all()
    for ev in events:
        rec = recs.get(ev.subject)
        data = ev.data or {}
        if rec is None:
            continue
        verb = ev.kind.split(".")[0]
        if data.get("outcome") in ("changed", "unchanged") and data.get("to_release"):
            rec.placed = _newer(rec.placed, Placed(str(data["to_release"]), ev.at,
                                                   f"{verb} ({ev.actor})"))
        rec.left_drained = ({"by": f"{verb} ({ev.actor})", "at": ev.at}
                            if data.get("left_drained") else None)
