"""Quarantine proposals from trend flags, behind a circuit breaker.

Pure. A host is proposed when one of its GPUs carries a flag that justifies quarantine
(`TrendFlag.quarantine`: uncorrectable ECC, rising corrected ECC, remap failure, an AER storm,
a repeated failing Xid, ...); the proposal carries every reason.

The circuit breaker (NVSentinel's idea, GPU Operator's maxUnavailable accounting): in one run,
never more than `quarantine_max_share` of a pool (default 10%, rounded down). When a pool has
more proposals than that, the breaker trips for the pool: nothing there is quarantined
automatically, the proposals are kept for a human and the run alerts, because mass faults
usually mean a broken monitor or a bad driver, not bad hardware. Below the trip point, hosts
already in quarantine count against the same budget, so repeated runs cannot creep past it;
proposals over the remaining budget are deferred, not applied.

A pool under 1/share hosts (under 10 at 10%) has a budget of 0: its proposals always wait for a
human. One proposal there is deferred, not a tripped breaker: one fault is not "mass faults",
and an alert that blames the monitor for it would be wrong. Two or more trip it as usual.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.domain.trends import HostTrend

Decision = Literal["quarantine", "deferred", "held_by_breaker", "already_quarantined"]


@dataclass
class Proposal:
    host: str
    pool: str
    reasons: list[str]
    decision: Decision = "quarantine"
    gpus: list[int] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "decision": self.decision,
                "gpus": self.gpus, "reasons": list(self.reasons)}


@dataclass
class PoolBreaker:
    pool: str
    size: int
    limit: int
    """Most hosts automatic quarantine may hold in this pool (floor(share * size))."""
    proposed: int
    already: int
    tripped: bool

    @property
    def utilization(self) -> float:
        return (self.proposed + self.already) / self.size if self.size else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"pool": self.pool, "size": self.size, "limit": self.limit,
                "proposed": self.proposed, "already_quarantined": self.already,
                "tripped": self.tripped, "utilization": round(self.utilization, 4)}


@dataclass
class QuarantinePlan:
    proposals: list[Proposal]
    breakers: list[PoolBreaker]
    max_share: float

    @property
    def tripped(self) -> list[PoolBreaker]:
        return [b for b in self.breakers if b.tripped]

    def to_apply(self) -> list[Proposal]:
        return [p for p in self.proposals if p.decision == "quarantine"]

    def alerts(self) -> list[str]:
        return [
            f"circuit breaker tripped in pool {b.pool}: {b.proposed} of {b.size} hosts proposed "
            f"for quarantine (limit {b.limit}, {self.max_share:.0%}); nothing quarantined "
            "automatically there. Mass faults usually mean a broken monitor or a bad driver: "
            "check the probe and the driver before quarantining by hand"
            for b in self.tripped
        ]

    def as_dict(self) -> dict[str, Any]:
        return {"max_share": self.max_share, "proposals": [p.as_dict() for p in self.proposals],
                "breakers": [b.as_dict() for b in self.breakers], "alerts": self.alerts()}


def limit_for(size: int, share: float) -> int:
    """Hosts a pool of `size` may lose to automatic quarantine: floor(share * size).

    Rounded down, so a pool under 1/share hosts (under 10 at 10%) gets no automatic quarantine:
    its proposals always wait for a human.
    """
    return math.floor(share * size + 1e-9)


def propose(
    trends: Iterable[HostTrend],
    pool_sizes: Mapping[str, int],
    *,
    max_share: float,
    already_quarantined: Sequence[str] = (),
    host_pools: Mapping[str, str] | None = None,
) -> QuarantinePlan:
    """Proposals with reasons and each pool's breaker; `pool_sizes` counts every host of a pool
    (reachable or not), `already_quarantined` the hosts with an open quarantine."""
    already = set(already_quarantined)
    proposals: list[Proposal] = []
    for h in trends:
        reasons, gpus = [], []
        for idx, f in h.flags:
            if f.quarantine:
                reasons.append(f"GPU {idx}: {f.message}")
                if idx not in gpus:
                    gpus.append(idx)
        if reasons:
            p = Proposal(h.host, h.pool, reasons, gpus=gpus)
            if h.host in already:
                p.decision = "already_quarantined"
            proposals.append(p)
    proposals.sort(key=lambda p: (p.pool, -len(p.reasons), p.host))
    by_pool: dict[str, list[Proposal]] = defaultdict(list)
    for p in proposals:
        by_pool[p.pool].append(p)
    already_by_pool: dict[str, int] = defaultdict(int)
    for host in already:
        pool = (host_pools or {}).get(host)
        if pool is not None:
            already_by_pool[pool] += 1
    breakers: list[PoolBreaker] = []
    for pool in sorted(set(by_pool) | set(already_by_pool)):
        new = [p for p in by_pool.get(pool, []) if p.decision == "quarantine"]
        size = pool_sizes.get(pool, 0)
        limit = limit_for(size, max_share)
        held = already_by_pool.get(pool, 0)
        tripped = len(new) > max(limit, 1)  # one fault is never "mass faults"
        if tripped:
            for p in new:
                p.decision = "held_by_breaker"
        else:
            room = max(0, limit - held)
            for p in new[room:]:
                p.decision = "deferred"
        breakers.append(PoolBreaker(pool, size, limit, len(new), held, tripped))
    return QuarantinePlan(proposals, breakers, max_share)
