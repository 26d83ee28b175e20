"""Turn host facts and findings into history rows: one snapshot per probe or import.

The mapping is pure (`fleet.domain.snapshot_rows`); `record_snapshot` is the one write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from fleet.domain.checks import Finding
from fleet.domain.facts import HostFacts
from fleet.domain.snapshot_rows import gpu_model, snapshot_columns
from fleet.history import History, add_snapshot, latest_snapshots


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
    """One probe as the input of `fleet.history.rollouts.add_snapshots` (bulk writes)."""
    return {"host": host, "taken_at": taken_at, "reachable": reachable, "release": release,
            **snapshot_columns(facts, findings)}


def kernel_cursors(history: History, hosts: Sequence[str]) -> dict[str, str | None]:
    """Each host's kernel-log cursor from its newest reachable snapshot, in one query."""
    out: dict[str, str | None] = dict.fromkeys(hosts)
    if not hosts:
        return out
    for host, snap in latest_snapshots(history, hosts=list(hosts), reachable_only=True):
        log = (snap.facts or {}).get("kernel_log") or {}
        cursor = log.get("cursor") if isinstance(log, dict) else None
        out[host.name] = cursor if isinstance(cursor, str) else None
    return out
