"""Repository functions of the rollout engine: rollouts, waves, host steps and the lock.

Kept apart from `store.py` (hosts, snapshots, trends) so each module stays small. Same rules:
one short transaction per call (BEGIN IMMEDIATE on SQLite), never held across a backend call;
times are passed in, aware.

Writes are batched: `write_steps` updates any number of host-step rows, appends the events that
explain them and refreshes the lock's heartbeat in ONE transaction, with executemany, so a wave
step over thousands of hosts costs one commit. It also checks that the lock is still held by
this controller (a `--force` takeover by another one makes the old controller stop at its next
write instead of fighting over the hosts).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session, col, select

from fleet.errors import CouldNotComplete
from fleet.history.bulk import host_ids
from fleet.history.controllers import ACTIVE as _ACTIVE
from fleet.history.controllers import holders_in, lost_reason, serialise_starts
from fleet.history.engine import History
from fleet.history.lite import require_aware
from fleet.history.models import Event, Host, HostStep, Rollout, Wave

ACTIVE = _ACTIVE
"""Statuses of a rollout that is not finished: it holds its pools."""


class LockHeld(CouldNotComplete):
    """Another rollout holds the pool, or this rollout's lock belongs to a live controller, or
    to a dead one (`stale`: taken over only with --force)."""

    def __init__(self, message: str, *, stale: bool = False,
                 holders: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.stale = stale
        self.holders = list(holders)  # controllers.Holder: who holds the pools asked for


class LockLost(CouldNotComplete):
    """This controller's lock was taken over (forced) by another one: stop now."""


@dataclass
class StepRow:
    """One host's row in a rollout, as the engine keeps it in memory."""

    id: int
    host: str
    wave_id: int
    pool: str
    state: str
    from_release: str | None
    to_release: str | None
    started_at: dt.datetime
    ended_at: dt.datetime | None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "state": self.state,
                "from_release": self.from_release, "to_release": self.to_release,
                "started_at": self.started_at, "ended_at": self.ended_at,
                "detail": self.detail}


@dataclass
class WaveRow:
    id: int
    index: int
    pool: str
    status: str
    verdict: str | None
    started_at: dt.datetime | None
    ended_at: dt.datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "pool": self.pool, "status": self.status,
                "verdict": self.verdict, "started_at": self.started_at,
                "ended_at": self.ended_at}


@dataclass
class EventRow:
    """An event to append with a batch write (`kind`, `subject`, `message`, `data`)."""

    kind: str
    subject: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


def scope_pools(scope: str) -> list[str]:
    return [p for p in scope.split(",") if p]


def subject_of(rollout_id: int) -> str:
    return f"rollout/{rollout_id}"


# ----------------------------------------------------------------------------------- create
def create_rollout(
    history: History,
    *,
    matrix_path: str,
    release: str,
    pools: Sequence[str],
    waves: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    started_by: str,
    owner: str,
    pid: int,
    at: dt.datetime,
    wall: dt.datetime,
    host_info: Mapping[str, Mapping[str, Any]] | None = None,
    start_data: Mapping[str, Any] | None = None,
) -> int:
    """Record a new rollout, its waves and one `planned` step per host, holding its lock.

    `waves`: (pool, [(host, to_release), ...]) in execution order. Refused (`LockHeld`, naming
    the controller that holds it, since when, its last heartbeat) when an unfinished rollout
    (running, paused) covers one of `pools`. Checked and written in one transaction, serialised
    across controllers (an advisory lock on PostgreSQL), so two starts cannot both win.
    """
    when = require_aware(at, "at")
    beat = require_aware(wall, "wall")
    info = dict(host_info or {})
    with history.write() as s:
        serialise_starts(s, history.dialect)
        busy = holders_in(s, pools)
        if busy:
            h = busy[0]
            raise LockHeld(f"refused: {h.describe(beat)}; wait for it, or `fleet rollout "
                           f"resume|promote|abort {h.rollout_id}`", holders=busy)
        ro = Rollout(matrix_path=matrix_path, release=release, scope=",".join(pools),
                     status="running", started_by=started_by, started_at=when,
                     lock_owner=owner, lock_pid=pid, lock_heartbeat=beat)
        s.add(ro)
        s.flush()
        assert ro.id is not None
        names = [h for _, hosts in waves for h, _ in hosts]
        ids = host_ids(s, names, info, when)
        wave_table = Wave.__table__  # type: ignore[attr-defined]
        step_rows: list[dict[str, Any]] = []
        for k, (pool, hosts) in enumerate(waves, start=1):
            wid = s.connection().execute(  # type: ignore[index]
                insert(wave_table).values(rollout_id=ro.id, index=k, pool=pool,
                                          status="pending")).inserted_primary_key[0]
            step_rows += [{"rollout_id": ro.id, "wave_id": wid, "host_id": ids[h],
                           "state": "planned", "from_release": None, "to_release": rel,
                           "started_at": when, "ended_at": None, "detail": {}}
                          for h, rel in hosts]
        if step_rows:
            s.connection().execute(insert(HostStep.__table__), step_rows)  # type: ignore[attr-defined]
        s.add(Event(at=when, actor=started_by, kind="rollout.start", subject=subject_of(ro.id),
                    message=f"rollout {ro.id} of {', '.join(pools)} to {release} started: "
                            f"{len(step_rows)} host(s) in {len(waves)} wave(s)",
                    data={"owner": owner, "pid": pid, **dict(start_data or {})}))
        s.flush()
        return ro.id


def _busy(s: Session, pools: Iterable[str]) -> list[tuple[int, str, list[str]]]:
    want = set(pools)
    out = []
    for ro in s.exec(select(Rollout).where(col(Rollout.status).in_(ACTIVE))
                     .order_by(col(Rollout.id))).all():
        shared = sorted(want & set(scope_pools(ro.scope)))
        if shared:
            assert ro.id is not None
            out.append((ro.id, ro.status, shared))
    return out


def active_rollouts(history: History, pools: Iterable[str]) -> list[tuple[int, str, list[str]]]:
    """Unfinished rollouts covering any of `pools`: (id, status, the pools they share)."""
    with history.read() as s:
        return _busy(s, pools)


# ------------------------------------------------------------------------------------- read
def get_rollout(history: History, rollout_id: int) -> Rollout | None:
    with history.read() as s:
        return s.get(Rollout, rollout_id)


def list_rollouts(history: History, *, limit: int = 50,
                  status: Sequence[str] | None = None) -> list[Rollout]:
    """Newest first."""
    stmt = select(Rollout).order_by(col(Rollout.id).desc()).limit(limit)
    if status:
        stmt = stmt.where(col(Rollout.status).in_(list(status)))
    with history.read() as s:
        return list(s.exec(stmt).all())


def load_waves(history: History, rollout_id: int) -> list[WaveRow]:
    with history.read() as s:
        rows = s.exec(select(Wave).where(Wave.rollout_id == rollout_id)
                      .order_by(col(Wave.index))).all()
    return [WaveRow(w.id, w.index, w.pool, w.status, w.verdict, w.started_at,  # type: ignore[arg-type]
                    w.ended_at) for w in rows]


def load_steps(history: History, rollout_id: int) -> list[StepRow]:
    """Every host step of a rollout, in plan order."""
    stmt = (select(HostStep, Host.name, Wave.pool)
            .join(Host, col(Host.id) == col(HostStep.host_id))
            .join(Wave, col(Wave.id) == col(HostStep.wave_id))
            .where(HostStep.rollout_id == rollout_id)
            .order_by(col(HostStep.id)))
    with history.read() as s:
        return [StepRow(st.id, name, st.wave_id, pool, st.state, st.from_release,  # type: ignore[arg-type]
                        st.to_release, st.started_at, st.ended_at, dict(st.detail or {}))
                for st, name, pool in s.exec(stmt).all()]


def rollout_events(history: History, rollout_id: int, *, limit: int = 10_000) -> list[Event]:
    """The events of one rollout (subject `rollout/ID`), oldest first."""
    stmt = (select(Event).where(Event.subject == subject_of(rollout_id))
            .order_by(col(Event.id)).limit(limit))
    with history.read() as s:
        return list(s.exec(stmt).all())


def completed_moves(history: History, host: str) -> list[tuple[dt.datetime, str, str]]:
    """A host's finished rollout moves as (ended_at, from_release, to_release), newest first:
    where `previous_known_good` learns what a host ran before a rollout moved it."""
    stmt = (
        select(HostStep.ended_at, HostStep.from_release, HostStep.to_release)
        .join(Host, col(Host.id) == col(HostStep.host_id))
        .where(Host.name == host, HostStep.state == "done",
               col(HostStep.from_release).is_not(None), col(HostStep.ended_at).is_not(None))
        .order_by(col(HostStep.ended_at).desc())
    )
    with history.read() as s:
        return [(at, src, dst) for at, src, dst in s.exec(stmt).all()
                if at is not None and src is not None and dst is not None and src != dst]


def start_data(history: History, rollout_id: int) -> dict[str, Any]:
    """What `rollout.start` recorded (the options a resume needs)."""
    stmt = select(Event).where(Event.subject == subject_of(rollout_id),
                               Event.kind == "rollout.start").order_by(col(Event.id)).limit(1)
    with history.read() as s:
        ev = s.exec(stmt).first()
    return dict(ev.data or {}) if ev is not None else {}


# ------------------------------------------------------------------------------------ write
_STEP_UPDATE = None


def _step_update() -> Any:
    global _STEP_UPDATE
    if _STEP_UPDATE is None:
        t = HostStep.__table__  # type: ignore[attr-defined]
        _STEP_UPDATE = update(t).where(t.c.id == bindparam("_id")).values(
            state=bindparam("_state"), from_release=bindparam("_from"),
            started_at=bindparam("_started"), ended_at=bindparam("_ended"),
            detail=bindparam("_detail"))
    return _STEP_UPDATE


def write_steps(
    history: History,
    rollout_id: int,
    steps: Sequence[StepRow],
    *,
    at: dt.datetime,
    actor: str,
    events: Sequence[EventRow] = (),
    lock: tuple[str, int] | None = None,
    wall: dt.datetime | None = None,
    wave: tuple[int, Mapping[str, Any]] | None = None,
    rollout: Mapping[str, Any] | None = None,
) -> str:
    """Write host steps (their current in-memory values), events, a wave's and the rollout's
    fields in one transaction; refresh the heartbeat when `lock` = (owner, pid) is given.

    Returns the rollout's status as stored (so a running controller sees an abort request).
    Raises `LockLost` when `lock` is given and the rollout's lock is no longer (owner, pid).
    """
    when = require_aware(at, "at")
    with history.write() as s:
        ro = s.get(Rollout, rollout_id, with_for_update=True)
        if ro is None:
            raise CouldNotComplete(f"no rollout {rollout_id} in the history")
        if lock is not None:
            if (ro.lock_owner, ro.lock_pid) != lock:
                raise LockLost(f"rollout {rollout_id}: the lock was taken over by "
                               f"{ro.lock_owner} (pid {ro.lock_pid})"
                               f"{lost_reason(s, rollout_id)}; this controller stops")
            ro.lock_heartbeat = require_aware(wall or when, "wall")
        if steps:
            s.connection().execute(_step_update(), [
                {"_id": st.id, "_state": st.state, "_from": st.from_release,
                 "_started": st.started_at, "_ended": st.ended_at, "_detail": dict(st.detail)}
                for st in steps])
        if wave is not None:
            w = s.get(Wave, wave[0])
            assert w is not None
            for k, v in wave[1].items():
                setattr(w, k, v)
            s.add(w)
        for k, v in (rollout or {}).items():
            setattr(ro, k, v)
        s.add(ro)
        if events:
            s.add_all(Event(at=when, actor=actor, kind=e.kind, subject=e.subject,
                            message=e.message, data=dict(e.data)) for e in events)
        s.flush()
        return ro.status


def take_lock(
    history: History,
    rollout_id: int,
    *,
    owner: str,
    pid: int,
    wall: dt.datetime,
    at: dt.datetime,
    actor: str,
    force: bool,
    stale_after_s: float,
    this_machine: str,
    pid_alive: Any,
) -> str:
    """Take the rollout's lock for (owner, pid); returns "free" or "stale" (what it was).

    A live lock is never taken (`LockHeld`); a stale one only with `force`, and the takeover is
    recorded as a `rollout.lock.takeover` event with the previous holder.
    """
    from fleet.domain.gates import lock_state

    beat = require_aware(wall, "wall")
    with history.write() as s:
        ro = s.get(Rollout, rollout_id, with_for_update=True)
        if ro is None:
            raise CouldNotComplete(f"no rollout {rollout_id} in the history")
        age = ((beat - ro.lock_heartbeat).total_seconds()
               if ro.lock_heartbeat is not None else None)
        same = bool(ro.lock_owner) and ro.lock_owner.split("@")[-1] == this_machine  # type: ignore[union-attr]
        alive = pid_alive(ro.lock_pid) if (same and ro.lock_pid is not None) else None
        state = lock_state(owner=ro.lock_owner, pid=ro.lock_pid, heartbeat_age_s=age,
                           stale_after_s=stale_after_s, same_machine=same, pid_alive=alive)
        if state == "live":
            raise LockHeld(f"rollout {rollout_id} is being run by {ro.lock_owner} (pid "
                           f"{ro.lock_pid}, heartbeat {age:.0f} s ago)")
        if state == "stale":
            if not force:
                raise LockHeld(
                    f"rollout {rollout_id} has a stale lock from {ro.lock_owner} (pid "
                    f"{ro.lock_pid}, heartbeat "
                    + (f"{age:.0f} s ago" if age is not None else "never")
                    + ("; that process is gone" if alive is False else "")
                    + "): its controller died or hangs; take it over with --force",
                    stale=True)
            s.add(Event(at=require_aware(at, "at"), actor=actor, kind="rollout.lock.takeover",
                        subject=subject_of(rollout_id),
                        message=f"stale lock of {ro.lock_owner} (pid {ro.lock_pid}) taken over "
                                f"by {owner} (pid {pid}) with --force",
                        data={"previous_owner": ro.lock_owner, "previous_pid": ro.lock_pid,
                              "heartbeat_age_s": age, "pid_alive": alive,
                              "owner": owner, "pid": pid}))
        ro.lock_owner, ro.lock_pid, ro.lock_heartbeat = owner, pid, beat
        s.add(ro)
        s.flush()
        return state


def release_lock(history: History, rollout_id: int, owner: str, pid: int) -> None:
    """Drop the lock if it is still ours."""
    with history.write() as s:
        ro = s.get(Rollout, rollout_id, with_for_update=True)
        if ro is not None and (ro.lock_owner, ro.lock_pid) == (owner, pid):
            ro.lock_owner = ro.lock_pid = ro.lock_heartbeat = None
            s.add(ro)


def request_status(history: History, rollout_id: int, status: str, *, at: dt.datetime,
                   actor: str, kind: str, message: str,
                   data: Mapping[str, Any] | None = None,
                   allowed_from: Sequence[str] = ACTIVE) -> str:
    """Set a rollout's status (an operator's decision) with its event; returns the old status."""
    with history.write() as s:
        ro = s.get(Rollout, rollout_id, with_for_update=True)
        if ro is None:
            raise CouldNotComplete(f"no rollout {rollout_id} in the history")
        old = ro.status
        if old not in allowed_from:
            verb = kind.split(".")[-1]
            raise CouldNotComplete(f"rollout {rollout_id} is {old}: nothing to {verb}")
        ro.status = status
        s.add(ro)
        s.add(Event(at=require_aware(at, "at"), actor=actor, kind=kind,
                    subject=subject_of(rollout_id), message=message, data=dict(data or {})))
        return old
