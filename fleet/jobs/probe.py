"""Probe hosts over SSH, judge them with the check catalog, record everything in the history.

Hosts that cannot be reached are recorded as unreachable snapshots and reported, never dropped:
the drift audit fails closed on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

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
    """The host's pool: its `pool` host data, else the first of its groups the matrix knows.

    `host` is a pyinfra Host or a `HostRef` (both have `.data` and `.groups`)."""
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
    via: Literal["ssh", "slurm"] = "ssh",
    partition: str | None = None,
    srun_timeout: float = 120.0,
) -> list[ProbeResult]:
    """Probe the inventory's hosts, over SSH or (`via="slurm"`) with one srun on the hosts
    that are nodes of `partition`; from the facts on, both take the same path."""
    from fleet.domain.checks.expect import expectations_for
    from fleet.remote.backend import SshBackend

    backend: SshBackend
    if via == "slurm":
        from fleet.remote.srun_probe import SrunBackend

        if partition is None:
            raise ValueError("probing via slurm needs a partition")
        backend = SrunBackend(inventory_path, limit, partition=partition,
                              timeout_s=srun_timeout, connect_timeout=connect_timeout)
    else:
        backend = SshBackend(inventory_path, limit, connect_timeout=connect_timeout)
    refs = backend.hosts()
    names = [r.name for r in refs]
    answers = backend.probe(names, since=kernel_cursors(history, names), frameworks=frameworks)
    results: list[ProbeResult] = []
    taken = now()
    for ref in refs:
        name, pool, got = ref.name, pool_of(ref, matrix), answers[ref.name]
        if got.value is None:  # unreachable, or the probe failed: a finding too
            results.append(ProbeResult(name, pool, got.reachable, got.error))
            continue
        facts = got.value
        expect = None
        if matrix is not None and pool is not None and pool in matrix.pools:
            expect = expectations_for(matrix, pool, gpu_model=ref.gpu_model,
                                      gpu_count=ref.gpu_count)
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
    data: dict[str, Any] = {"hosts": [r.host for r in results]}
    if via == "slurm":
        data |= {"via": "slurm", "partition": partition}
    record_event(history, "probe", ",".join(limit or []) or "all",
                 f"probed {len(results)} host(s), {sum(not r.reachable for r in results)} "
                 "unreachable", data)
    return results
