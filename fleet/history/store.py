"""Repository functions the other layers call: hosts, probe snapshots, counter trends.

Each function is one short transaction, or joins the caller's when given `session=`. Nothing here
does I/O other than SQL, so no transaction is ever held across SSH or a sleep. Times are passed in
(aware) or taken from `utcnow()`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from fleet.history.engine import History
from fleet.history.events import require_aware
from fleet.history.models import Finding as FindingRow
from fleet.history.models import (
    FindingBase,
    GpuSample,
    GpuSampleBase,
    Host,
    Snapshot,
    utcnow,
)

GpuCounters = GpuSampleBase
"""Input for one GPU's counters in `add_snapshot` (validated pydantic model)."""

FindingRecord = FindingBase
"""Input for one finding in `add_snapshot` (validated pydantic model)."""


def upsert_host(
    history: History,
    name: str,
    *,
    pool: str | None = None,
    gpu_model: str | None = None,
    gpu_count: int | None = None,
    labels: Mapping[str, Any] | None = None,
    seen_at: dt.datetime | None = None,
    session: Session | None = None,
) -> int:
    """Create the host or update the fields given (None leaves a field alone); returns its id.

    `seen_at` moves `last_seen` forward only; a new host gets it as `first_seen` too.
    """
    seen = require_aware(seen_at, "seen_at") if seen_at is not None else utcnow()
    fields: dict[str, Any] = {
        k: v for k, v in
        {"pool": pool, "gpu_model": gpu_model, "gpu_count": gpu_count,
         "labels": dict(labels) if labels is not None else None}.items()
        if v is not None
    }
    if session is not None:
        return _upsert_host(session, name, seen, fields).id  # type: ignore[return-value]
    with history.write() as s:
        return _upsert_host(s, name, seen, fields).id  # type: ignore[return-value]


def _upsert_host(s: Session, name: str, seen: dt.datetime | None,
                 fields: dict[str, Any]) -> Host:
    stmt = select(Host).where(Host.name == name).with_for_update()  # no-op on SQLite
    host = s.exec(stmt).first()
    if host is None:
        first = seen or utcnow()
        try:
            with s.begin_nested():  # a concurrent insert on a server DB loses the race cleanly
                host = Host(name=name, first_seen=first, last_seen=first, **fields)
                s.add(host)
            return host
        except IntegrityError:
            host = s.exec(stmt).one()
    for key, value in fields.items():
        setattr(host, key, value)
    if seen is not None and seen > host.last_seen:
        host.last_seen = seen
    s.add(host)
    s.flush()
    return host


def get_host(history: History, name: str) -> Host | None:
    with history.read() as s:
        return s.exec(select(Host).where(Host.name == name)).first()


def list_hosts(history: History, pool: str | None = None) -> list[Host]:
    """All hosts (of one pool if given), by pool then name."""
    stmt = select(Host).order_by(col(Host.pool), col(Host.name))
    if pool is not None:
        stmt = stmt.where(Host.pool == pool)
    with history.read() as s:
        return list(s.exec(stmt).all())


def add_snapshot(
    history: History,
    host: str,
    *,
    taken_at: dt.datetime,
    source: str,
    reachable: bool = True,
    driver_nvml: str | None = None,
    driver_kmod: str | None = None,
    driver_package: str | None = None,
    release: str | None = None,
    facts: Mapping[str, Any] | None = None,
    gpus: Sequence[GpuCounters | Mapping[str, Any]] = (),
    findings: Sequence[FindingRecord | Mapping[str, Any]] = (),
    pool: str | None = None,
    gpu_model: str | None = None,
    session: Session | None = None,
) -> int:
    """Store one probe of `host` (created if new) with its GPU counters and findings, atomically.

    Inputs are validated before the transaction opens; returns the snapshot id. The host's
    `last_seen` moves only when it was reachable; `gpu_count` follows the GPUs reported.
    """
    taken = require_aware(taken_at, "taken_at")
    gpu_rows = [GpuCounters.model_validate(g, from_attributes=True) for g in gpus]
    finding_rows = [FindingRecord.model_validate(f, from_attributes=True) for f in findings]
    host_fields: dict[str, Any] = {}
    if pool is not None:
        host_fields["pool"] = pool
    if gpu_model is not None:
        host_fields["gpu_model"] = gpu_model
    if reachable and gpu_rows:
        host_fields["gpu_count"] = len(gpu_rows)

    def _write(s: Session) -> int:
        h = _upsert_host(s, host, taken if reachable else None, host_fields)
        snap = Snapshot(
            host_id=h.id, taken_at=taken, source=source, reachable=reachable,  # type: ignore[arg-type]
            driver_nvml=driver_nvml, driver_kmod=driver_kmod, driver_package=driver_package,
            release=release, facts=dict(facts or {}),
        )
        s.add(snap)
        s.flush()
        assert snap.id is not None and h.id is not None
        s.add_all(
            GpuSample(**g.model_dump(), snapshot_id=snap.id, host_id=h.id, taken_at=taken)
            for g in gpu_rows
        )
        s.add_all(FindingRow(**f.model_dump(), snapshot_id=snap.id) for f in finding_rows)
        s.flush()
        return snap.id

    if session is not None:
        return _write(session)
    with history.write() as s:
        return _write(s)


def gpu_samples(
    history: History,
    *,
    uuid: str | None = None,
    host: str | None = None,
    gpu_index: int | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[GpuSample]:
    """Counter samples for trends, oldest first (served by the (uuid or host+gpu, time) indexes)."""
    stmt = select(GpuSample).order_by(col(GpuSample.taken_at), col(GpuSample.id))
    if uuid is not None:
        stmt = stmt.where(GpuSample.uuid == uuid)
    if host is not None:
        stmt = stmt.join(Host, col(Host.id) == col(GpuSample.host_id)).where(Host.name == host)
    if gpu_index is not None:
        stmt = stmt.where(GpuSample.gpu_index == gpu_index)
    if since is not None:
        stmt = stmt.where(col(GpuSample.taken_at) >= require_aware(since, "since"))
    if until is not None:
        stmt = stmt.where(col(GpuSample.taken_at) < require_aware(until, "until"))
    with history.read() as s:
        return list(s.exec(stmt).all())


def findings_of(history: History, snapshot_id: int) -> list[FindingRow]:
    stmt = select(FindingRow).where(FindingRow.snapshot_id == snapshot_id).order_by(
        col(FindingRow.id))
    with history.read() as s:
        return list(s.exec(stmt).all())


def latest_snapshots(
    history: History, *, pool: str | None = None, hosts: Sequence[str] | None = None,
    reachable_only: bool = False,
) -> list[tuple[Host, Snapshot]]:
    """Each host's newest snapshot (optionally its newest reachable one), by pool then name."""
    newest = select(Snapshot.host_id, func.max(Snapshot.taken_at).label("taken_at"))
    if reachable_only:
        newest = newest.where(col(Snapshot.reachable).is_(True))
    sub = newest.group_by(col(Snapshot.host_id)).subquery()
    stmt = (
        select(Host, Snapshot)
        .join(Snapshot, col(Snapshot.host_id) == col(Host.id))
        .join(sub, (sub.c.host_id == col(Snapshot.host_id))
              & (sub.c.taken_at == col(Snapshot.taken_at)))
        .order_by(col(Host.pool), col(Host.name), col(Snapshot.id).desc())
    )
    if pool is not None:
        stmt = stmt.where(Host.pool == pool)
    if hosts:
        stmt = stmt.where(col(Host.name).in_(list(hosts)))
    with history.read() as s:
        rows = s.exec(stmt).all()
    seen: set[int] = set()
    out = []
    for host, snap in rows:  # two snapshots with the same time: keep the newer id
        if host.id not in seen:
            seen.add(host.id)  # type: ignore[arg-type]
            out.append((host, snap))
    return out
