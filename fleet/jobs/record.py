"""Turn host facts and findings into history rows: one snapshot per probe or import.

The mapping is pure (`fleet.domain.snapshot_rows`); `record_snapshot` is the one write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from fleet.domain.checks import Finding
from fleet.domain.facts import HostFacts
from fleet.domain.snapshot_rows import gpu_model, snapshot_columns
from fleet.history import History, add_snapshot, latest_snapshots
from fleet.history.models import Snapshot


def record_snapshot(history: History, host: str, facts: HostFacts, findings: Sequence[Finding],
                    *, taken_at: datetime, pool: str | None = None,
                    release: str | None = None, reachable: bool = True,
                    session: Session | None = None) -> int:
    return add_snapshot(
        history, host, taken_at=taken_at, reachable=reachable, release=release, pool=pool,
        gpu_model=gpu_model(facts), session=session, **snapshot_columns(facts, findings),
    )


def snapshot_row(host: str, facts: HostFacts, findings: Sequence[Finding], *,
                 taken_at: datetime, release: str | None = None,
                 reachable: bool = True) -> dict[str, Any]:
    """One probe as the input of `fleet.history.bulk.add_snapshots` (bulk writes)."""
    return {"host": host, "taken_at": taken_at, "reachable": reachable, "release": release,
            **snapshot_columns(facts, findings)}


def kernel_cursors(history: History, hosts: Sequence[str]) -> dict[str, str | None]:
    """Each host's kernel-log cursor: that of its newest reachable snapshot whose probe read
    the kernel log. A probe that reached the host and failed (or an imported capture) holds no
    kernel-log read, and the next probe must go on from the last good cursor, not read the
    whole boot again and count its Xids twice (`fleet.history.lite.sqlite_cursors` alike)."""
    out: dict[str, str | None] = dict.fromkeys(hosts)
    if not hosts:
        return out
    for host, snap in latest_snapshots(history, hosts=list(hosts), reachable_only=True):
        log = (snap.facts or {}).get("kernel_log")
        if not isinstance(log, dict):
            log = _last_kernel_log(history, host.id)
        cursor = log.get("cursor") if isinstance(log, dict) else None
        out[host.name] = cursor if isinstance(cursor, str) else None
    return out


def _last_kernel_log(history: History, host_id: int | None) -> dict[str, Any] | None:
    """The kernel-log part of the host's newest reachable snapshot that has one."""
    stmt = (select(Snapshot.facts).where(Snapshot.host_id == host_id)
            .where(col(Snapshot.reachable).is_(True))
            .order_by(col(Snapshot.taken_at).desc(), col(Snapshot.id).desc()))
    with history.read() as s:
        for facts in s.exec(stmt.execution_options(yield_per=16)):
            log = (facts or {}).get("kernel_log")
            if isinstance(log, dict):
                return log
    return None
