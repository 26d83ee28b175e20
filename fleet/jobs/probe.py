"""Probe hosts over SSH, judge them with the check catalog, record everything in the history.

Hosts that cannot be reached are recorded as unreachable snapshots and reported, never dropped:
the drift audit fails closed on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleet.domain.checks import Finding, run_checks
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix
from fleet.history import History, add_snapshot, record_event
from fleet.jobs.record import kernel_cursors, record_snapshot


@dataclass
class ProbeResult:
    host: str
    pool: str | None
    reachable: bool
    error: str | None = None
    facts: HostFacts | None = None
    findings: list[Finding] = field(default_factory=list)
    snapshot: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "pool": self.pool, "reachable": self.reachable,
            "error": self.error, "snapshot": self.snapshot,
            "source": self.facts.source if self.facts else None,
            "driver": self.facts.versions.driver_library if self.facts else None,
            "gpus": len(self.facts.gpus) if self.facts else None,
            "findings": [f.model_dump(mode="json") for f in self.findings],
        }


def pool_of(host: Any, matrix: Matrix | None) -> str | None:
    """The host's pool: its `pool` host data, else the first of its groups the matrix knows."""
    explicit = host.data.get("pool")
    if explicit:
        return str(explicit)
    groups: list[str] = sorted(getattr(host, "groups", []) or [])
    if matrix is not None:
        for g in groups:
            if g in matrix.pools:
                return g
    return None


def probe_inventory(
    inventory_path: str | Path,
    limit: Sequence[str] | None,
    history: History,
    *,
    now: Callable[[], datetime],
    matrix: Matrix | None = None,
    frameworks: bool = True,
    connect_timeout: int = 10,
) -> list[ProbeResult]:
    from fleet.domain.checks.expect import expectations_for
    from fleet.remote.probe_fact import HostProbe
    from fleet.remote.session import connected, gather, load_inventory, select_hosts

    inventory = load_inventory(inventory_path)
    hosts = select_hosts(inventory, limit)
    cursors = kernel_cursors(history, [h.name for h in hosts])
    pools = {h.name: pool_of(h, matrix) for h in hosts}
    with connected(inventory, hosts, connect_timeout=connect_timeout) as conn:
        raw = gather(conn, HostProbe, kwargs_for=lambda h: {
            "since": cursors[h.name], "frameworks": frameworks})
        unreachable = dict(conn.unreachable)
        host_data = {h.name: h.data for h in hosts}
    results: list[ProbeResult] = []
    taken = now()
    for h in hosts:
        name, pool = h.name, pools[h.name]
        if name in unreachable:
            results.append(ProbeResult(name, pool, False, unreachable[name]))
            continue
        value = raw.get(name)
        try:
            if isinstance(value, Exception):
                raise value
            facts = HostFacts.model_validate(value)
        except (ValidationError, ValueError, Exception) as exc:  # a broken probe is a finding too
            results.append(ProbeResult(name, pool, True, f"probe failed: {exc}"))
            continue
        expect = None
        if matrix is not None and pool is not None and pool in matrix.pools:
            data = host_data[name]
            expect = expectations_for(matrix, pool, gpu_model=data.get("gpu_model"),
                                      gpu_count=data.get("gpu_count"))
        findings = run_checks(facts, expect,
                              matrix.policy.thresholds if matrix is not None else None)
        results.append(ProbeResult(name, pool, True, None, facts, findings))
    for r in results:
        if r.facts is not None:
            r.snapshot = record_snapshot(history, r.host, r.facts, r.findings, taken_at=taken,
                                         pool=r.pool)
        else:
            r.snapshot = add_snapshot(history, r.host, taken_at=taken, source="none",
                                      reachable=r.reachable, facts={"error": r.error},
                                      pool=r.pool)
    record_event(history, "probe", ",".join(limit or []) or "all",
                 f"probed {len(results)} host(s), {sum(not r.reachable for r in results)} "
                 "unreachable", {"hosts": [r.host for r in results]})
    return results
