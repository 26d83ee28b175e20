"""The rows of `fleet hosts`: one per host, from what the history recorded (pure).

Nothing here is read from a host: "drained" is what fleet recorded (its own drains, quarantines,
and a drain by someone else that a rollout saw), never the workload manager's word of now; a
host never probed, or unreachable at its latest probe, says so instead of showing a release.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

SEVERITIES = ("fail", "warn", "ok")

IN_SERVICE_OUT = frozenset({"draining", "drained", "applying", "rebooting", "verifying",
                            "benchmarking", "judged", "undraining", "rolling_back"})
"""Rollout step states in which the rollout holds the host drained."""


class Record(Protocol):
    """`fleet.history.fleet_view.HostRecord`, as this module reads it."""

    name: str
    pool: str
    latest: Any
    seen: Any
    findings: dict[str, int]
    placed: Any
    quarantine: dict[str, Any] | None
    rollout: Any
    admin: dict[str, Any] | None
    left_drained: dict[str, Any] | None


@dataclass(frozen=True)
class HostRow:
    host: str
    pool: str
    release: str | None  # seen: the newest reachable probe that recorded a matrix release
    pinned: str | None  # the release fleet last put on it
    pinned_by: str | None
    driver: str | None
    probed_at: datetime | None
    probe: str  # "ok", "unreachable", "never probed"
    drained: bool
    drained_by: str | None
    quarantined: bool
    quarantine_reason: str | None
    rollout: int | None
    wave: int | None
    rollout_state: str | None
    findings: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "release": self.release,
                "pinned": self.pinned, "pinned_by": self.pinned_by, "driver": self.driver,
                "probed_at": self.probed_at, "probe": self.probe, "drained": self.drained,
                "drained_by": self.drained_by, "quarantined": self.quarantined,
                "quarantine_reason": self.quarantine_reason,
                "rollout": ({"id": self.rollout, "wave": self.wave, "state": self.rollout_state}
                            if self.rollout is not None else None),
                "findings": {s: self.findings.get(s, 0) for s in SEVERITIES}}

    @property
    def problems(self) -> int:
        """Findings worth a look: failing and warning ones."""
        return self.findings.get("fail", 0) + self.findings.get("warn", 0)


def _drained(rec: Record) -> str | None:
    """Who holds the host drained, by the history's record; None when nothing says so."""
    q = rec.quarantine
    if q is not None and q.get("drained_by_fleet"):
        return f"quarantine ({q.get('by')})"
    ro = rec.rollout
    if ro is not None and ro.state in IN_SERVICE_OUT:
        return f"rollout {ro.rollout}"
    if rec.left_drained:
        return str(rec.left_drained["by"])
    a = rec.admin
    if a and a.get("state") in ("drained", "draining") and not a.get("by_fleet"):
        who = a.get("owner") or "someone else"
        why = f": {a['reason']}" if a.get("reason") else ""
        return f"{who}{why} (seen by rollout {a.get('rollout')})"
    return None


def host_row(rec: Record) -> HostRow:
    latest, seen = rec.latest, rec.seen
    probe = ("never probed" if latest is None
             else "ok" if latest.reachable else "unreachable")
    drained_by = _drained(rec)
    ro = rec.rollout
    placed = rec.placed
    return HostRow(
        host=rec.name, pool=rec.pool,
        release=seen.release if seen is not None else None,
        pinned=placed.release if placed is not None else None,
        pinned_by=placed.by if placed is not None else None,
        driver=seen.driver if seen is not None else None,
        probed_at=latest.taken_at if latest is not None else None, probe=probe,
        drained=drained_by is not None, drained_by=drained_by,
        quarantined=rec.quarantine is not None,
        quarantine_reason=rec.quarantine.get("reason") if rec.quarantine else None,
        rollout=ro.rollout if ro is not None else None,
        wave=ro.wave if ro is not None else None,
        rollout_state=ro.state if ro is not None else None,
        findings=dict(rec.findings),
    )


def host_rows(records: Iterable[Record]) -> list[HostRow]:
    """One row per record, by pool then host."""
    return sorted((host_row(r) for r in records), key=lambda r: (r.pool, r.host))


def keep(rows: Sequence[HostRow], *, release: Sequence[str] = (), drained: bool = False,
         quarantined: bool = False, findings: bool = False) -> list[HostRow]:
    """The rows every given filter keeps: `release` (observed or pinned, any of them),
    drained, quarantined, with failing or warning findings."""
    out = []
    for r in rows:
        if release and r.release not in release and r.pinned not in release:
            continue
        if drained and not r.drained:
            continue
        if quarantined and not r.quarantined:
            continue
        if findings and not r.problems:
            continue
        out.append(r)
    return out


def cells(r: HostRow) -> dict[str, str]:
    """A row as table text (the columns of `fleet hosts`; `-o wide` adds the last three)."""
    def when(t: datetime | None) -> str:
        return t.strftime("%Y-%m-%d %H:%M") if t is not None else ""

    release = r.release or ("unknown" if r.probed_at is not None else "-")
    probed = (when(r.probed_at) if r.probe == "ok" else r.probe if r.probed_at is None
              else f"{r.probe} {when(r.probed_at)}")
    counts = [f"{r.findings[s]} {s}" for s in ("fail", "warn") if r.findings.get(s)]
    return {
        "host": r.host, "pool": r.pool, "seen on": release, "pinned": r.pinned or "-",
        "driver": r.driver or "-",
        "probed": probed, "drained": f"yes, {r.drained_by}" if r.drained else "no",
        "quarantined": "yes" if r.quarantined else "no",
        "rollout": (f"{r.rollout} wave {r.wave} ({r.rollout_state})"
                    if r.rollout is not None else "-"),
        "findings": ", ".join(counts) if counts else ("-" if r.probe != "ok" else "0"),
        "pinned by": r.pinned_by or "-", "quarantine reason": r.quarantine_reason or "-",
        "ok checks": str(r.findings.get("ok", 0)),
    }


COLUMNS = ("host", "pool", "seen on", "pinned", "driver", "probed", "drained", "quarantined",
           "rollout", "findings")
WIDE = (*COLUMNS, "pinned by", "quarantine reason", "ok checks")


def summary(rows: Sequence[HostRow]) -> dict[str, int]:
    """Counts a reader wants without the table: quarantined, drained, unreachable, never
    probed."""
    return {"hosts": len(rows), "quarantined": sum(r.quarantined for r in rows),
            "drained": sum(r.drained for r in rows),
            "unreachable": sum(r.probe == "unreachable" for r in rows),
            "never_probed": sum(r.probe == "never probed" for r in rows)}
