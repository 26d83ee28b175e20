"""The append-only event log: who did what, when and why.

The actor is the OS user running fleet (the invoking user under sudo), so a rollback at 3 a.m. is
attributable without a login system.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from fleet.history.engine import History
from fleet.history.lite import os_actor, require_aware
from fleet.history.models import Event, utcnow


def record_event(
    history: History,
    kind: str,
    subject: str,
    message: str,
    data: dict[str, Any] | None = None,
    actor: str | None = None,
    *,
    at: dt.datetime | None = None,
    session: Session | None = None,
) -> int:
    """Append one event and return its id.

    Pass `session` to write the event in the caller's transaction (atomically with the change it
    explains); otherwise it is committed on its own.
    """
    event = Event(
        at=require_aware(at, "at") if at is not None else utcnow(),
        actor=actor or os_actor(),
        kind=kind,
        subject=subject,
        message=message,
        data=dict(data or {}),
    )
    if session is not None:
        session.add(event)
        session.flush()
    else:
        with history.write() as s:
            s.add(event)
            s.flush()
    assert event.id is not None
    return event.id


def list_events(
    history: History, limit: int = 50, kind: str | None = None, subject: str | None = None,
    subjects: Collection[str] | None = None,
) -> list[Event]:
    """The newest `limit` events, newest first (of `subject`, or of any of `subjects`)."""
    stmt = select(Event).order_by(col(Event.at).desc(), col(Event.id).desc()).limit(limit)
    if kind is not None:
        stmt = stmt.where(Event.kind == kind)
    if subject is not None:
        stmt = stmt.where(Event.subject == subject)
    if subjects is not None:
        stmt = stmt.where(col(Event.subject).in_(list(subjects)))
    with history.read() as s:
        return list(s.exec(stmt).all())


def count_events(history: History, kind: str | None = None) -> int:
    stmt = select(func.count()).select_from(Event)
    if kind is not None:
        stmt = stmt.where(Event.kind == kind)
    with history.read() as s:
        return int(s.exec(stmt).one())
