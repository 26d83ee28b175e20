"""Several controllers on one history: who holds a pool, preempting a rollout, fencing.

A rollout's lock row (`rollouts.lock_owner`, `lock_pid`, `lock_heartbeat`) is the lease of the
controller that runs it. `rollouts.py` creates, takes and refreshes it; this module answers the
questions other controllers ask of it, and is kept apart so that module stays small:

- `holders`: who holds these pools, since when, with what heartbeat (a refused start or
  rollback says so);
- `preempt`: a forced `fleet rollback` takes the lock of the rollouts that cover its pools, so
  their controllers stop at their next step (`LockLost`, naming who and why);
- `check_lock`: the fence a controller passes before it touches a host;
- `in_flight_hosts`: the hosts an unfinished rollout with a live lock is moving (the audit
  does not call them drifted).

On PostgreSQL the rollout row is read `FOR UPDATE` (and a start takes a transaction-scoped
advisory lock), so two controllers never both see a pool free; SQLite's BEGIN IMMEDIATE
serialises writers already.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlmodel import Session, col, select

from fleet.domain.gates import TERMINAL
from fleet.history.engine import History
from fleet.history.lite import require_aware
from fleet.history.models import Event, Host, HostStep, Rollout

ACTIVE = ("running", "paused", "aborting", "rolling_back")
_PG_START_LOCK = 0x666C_7472  # "fltr": one key serialises rollout starts across controllers


CONTROLLER_ENV = "FLEET_CONTROLLER"
STALE_AFTER_S = 300.0
"""A lock whose heartbeat is older is stale (the rollout engine's default `stale_after_s`)."""


def controller_name() -> str:
    """This controller's name in a lock (`actor@NAME`): $FLEET_CONTROLLER when set (several
    controllers on one machine, or a stable name per region), else the host name."""
    import os
    import socket

    from fleet.errors import BadInput

    name = os.environ.get(CONTROLLER_ENV)
    if name is None:
        return socket.gethostname()
    if not name or any(c.isspace() or c == "@" for c in name) or len(name) > 64:
        raise BadInput.single(f"${CONTROLLER_ENV}={name!r}: expected a name of 1 to 64 "
                              "characters without spaces or '@'", field=CONTROLLER_ENV)
    return name


@dataclass(frozen=True)
class Holder:
    """An unfinished rollout that holds some pools, and the controller running it."""

    rollout_id: int
    status: str
    pools: list[str]
    owner: str | None
    pid: int | None
    since: dt.datetime
    heartbeat: dt.datetime | None

    def describe(self, wall: dt.datetime | None = None) -> str:
        who = (f"controller {self.owner} (pid {self.pid})" if self.owner
               else "no live controller (its lock is free: resume or abort it)")
        beat = "never"
        if self.heartbeat is not None:
            beat = _iso(self.heartbeat)
            if wall is not None:
                beat += f", {max(0.0, (wall - _aware(self.heartbeat)).total_seconds()):.0f} s ago"
        return (f"rollout {self.rollout_id} is {self.status} on {', '.join(self.pools)}: "
                f"{who}, since {_iso(self.since)}, last heartbeat {beat}")

    def as_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "status": self.status, "pools": self.pools,
                "owner": self.owner, "pid": self.pid, "since": _iso(self.since),
                "heartbeat": _iso(self.heartbeat) if self.heartbeat else None}


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _iso(t: dt.datetime) -> str:
    return _aware(t).isoformat(timespec="seconds")


def serialise_starts(s: Session, dialect: str) -> None:
    """Make the caller's transaction the only one deciding which pools are free (PostgreSQL:
    READ COMMITTED lets two transactions both find a pool free; SQLite is serialised)."""
    if dialect == "postgresql":
        s.connection().execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_START_LOCK})


def holders_in(s: Session, pools: Iterable[str]) -> list[Holder]:
    want = set(pools)
    out = []
    for ro in s.exec(select(Rollout).where(col(Rollout.status).in_(ACTIVE))
                     .order_by(col(Rollout.id))).all():
        shared = sorted(want & {p for p in ro.scope.split(",") if p})
        if shared:
            assert ro.id is not None
            out.append(Holder(ro.id, ro.status, shared, ro.lock_owner, ro.lock_pid,
                              ro.started_at, ro.lock_heartbeat))
    return out


def holders(history: History, pools: Iterable[str]) -> list[Holder]:
    """The unfinished rollouts covering any of `pools`, with their controllers."""
    with history.read() as s:
        return holders_in(s, pools)


def lost_reason(s: Session, rollout_id: int) -> str:
    """Why a controller lost its lock: the latest takeover or preemption on record."""
    ev = s.exec(select(Event).where(Event.subject == f"rollout/{rollout_id}",
                                    col(Event.kind).in_(("rollout.lock.takeover",
                                                         "rollout.preempt")))
                .order_by(col(Event.id).desc()).limit(1)).first()
    return f" ({ev.actor}: {ev.message})" if ev is not None else ""


def check_lock(history: History, rollout_id: int, owner: str, pid: int) -> str | None:
    """None while (owner, pid) still holds the rollout's lock; else why not (who has it and
    why). Read before a controller touches a host, so one that was stopped (a hung machine, a
    partition) and came back after a takeover stops instead of acting on hosts."""
    with history.read() as s:
        ro = s.get(Rollout, rollout_id)
        if ro is None:
            return f"rollout {rollout_id} is gone from the history"
        if (ro.lock_owner, ro.lock_pid) == (owner, pid):
            return None
        holder = (f"{ro.lock_owner} (pid {ro.lock_pid})" if ro.lock_owner
                  else "nobody (released by whoever took it)")
        return (f"rollout {rollout_id}: this controller ({owner}, pid {pid}) lost its lock; "
                f"it is held by {holder}{lost_reason(s, rollout_id)}; this controller stops "
                "without touching another host")


def preempt(history: History, pools: Sequence[str], *, owner: str, pid: int, actor: str,
            reason: str | None, kind: str, at: dt.datetime,
            wall: dt.datetime) -> list[Holder]:
    """Take the lock of every unfinished rollout covering `pools` for a forced pin (`fleet
    rollback --force`): each running one is paused (one aborting or rolling back stays so) and
    its controller stops at its next step, told why by the `rollout.preempt` event. Returns
    what held them. `release(...)` gives the locks back when the pin is done (the rollouts stay
    paused: resume or abort them)."""
    when, beat = require_aware(at, "at"), require_aware(wall, "wall")
    with history.write() as s:
        serialise_starts(s, history.dialect)  # no start slips in between the read and the take
        found = holders_in(s, pools)
        for h in found:
            ro = s.get(Rollout, h.rollout_id, with_for_update=True)
            assert ro is not None
            ro.lock_owner, ro.lock_pid, ro.lock_heartbeat = owner, pid, beat
            if ro.status == "running":  # an abort or rollback under way stays what it is
                ro.status = "paused"
            s.add(ro)
            s.add(Event(at=when, actor=actor, kind="rollout.preempt",
                        subject=f"rollout/{h.rollout_id}",
                        message=f"{kind} --force on {', '.join(h.pools)} by {owner} (pid {pid})"
                                + (f": {reason}" if reason else "") + f"; rollout {ro.status}",
                        data={"previous": h.as_dict(), "owner": owner, "pid": pid,
                              "kind": kind, "reason": reason}))
        return found


def release(history: History, rollout_ids: Iterable[int], owner: str, pid: int) -> None:
    """Drop the locks `preempt` took, where still ours."""
    with history.write() as s:
        for rid in rollout_ids:
            ro = s.get(Rollout, rid, with_for_update=True)
            if ro is not None and (ro.lock_owner, ro.lock_pid) == (owner, pid):
                ro.lock_owner = ro.lock_pid = ro.lock_heartbeat = None
                s.add(ro)


def in_flight_hosts(history: History, hosts: Iterable[str] | None = None, *,
                    wall: dt.datetime, stale_after_s: float) -> dict[str, str]:
    """Hosts an unfinished rollout is moving (a step started, not ended): host -> what, e.g.
    `rollout 7 wave 2 (h100): applying`. Planned hosts have not moved; ended ones are judged
    like any other.

    Only while the rollout's lock is live: held, with a heartbeat at most `stale_after_s` old at
    `wall` (the real clock the heartbeats are written with). A rollout whose controller died, or
    that nobody runs (a free lock), moves nothing: its half-moved hosts are judged as drift."""
    wanted = set(hosts) if hosts is not None else None
    beat = require_aware(wall, "wall")
    from fleet.history.models import Wave

    stmt = (select(Host.name, HostStep.rollout_id, HostStep.state,  # type: ignore[call-overload]
                   Wave.index, Wave.pool, Rollout.lock_owner, Rollout.lock_heartbeat)
            .join(HostStep, col(HostStep.host_id) == col(Host.id))
            .join(Wave, col(Wave.id) == col(HostStep.wave_id))
            .join(Rollout, col(Rollout.id) == col(HostStep.rollout_id))
            .where(col(Rollout.status).in_(ACTIVE), col(HostStep.ended_at).is_(None),
                   HostStep.state != "planned", col(HostStep.state).not_in(TERMINAL)))
    with history.read() as s:
        rows = s.exec(stmt).all()
    return {name: f"rollout {rid} wave {idx} ({pool}): {state}"
            for name, rid, state, idx, pool, owner, heartbeat in rows
            if (wanted is None or name in wanted)
            and lock_live(owner, heartbeat, beat, stale_after_s)}


def lock_live(owner: str | None, heartbeat: dt.datetime | None, wall: dt.datetime,
              stale_after_s: float) -> bool:
    """A lock a controller holds and refreshed within `stale_after_s` of `wall`."""
    if owner is None or heartbeat is None:
        return False
    return (wall - _aware(heartbeat)).total_seconds() <= stale_after_s
