"""`fleet rollout start --dry`: the plan a start would take and what its first wave would do,
acting on nothing.

The plan is the one `RolloutEngine.start` computes (`plan_start`: the same checks, the same
administrative states read from the scheduler). The first wave is then planned host by host
the way `fleet apply --dry` plans (`pin_hosts(dry=True)`): each host's packages, holds and pin
files are read (over SSH for an inventory) and its change computed; whether it would be drained
through the scheduler and rebooted (over SSH or through Slurm) comes from the pool's settings.

Nothing is installed, drained or rebooted, no rollout row is written and no lock is taken. The
history, when there is one, is only read: quarantines, and the rollouts that hold a pool (the
start would then be refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.domain.plan import RolloutPlan
from fleet.domain.ports import Backend, Scheduler
from fleet.history import History, list_quarantines
from fleet.jobs.apply import pin_hosts
from fleet.jobs.apply_host import HostApply
from fleet.jobs.rollout.startplan import nothing_reason, plan_start, pool_settings


@dataclass
class FirstWave:
    """What the rollout's first wave would do, host by host."""

    pool: str
    release: str
    index: int
    drain_through: str | None  # the scheduler its hosts are drained through; None: none
    drain_timeout_minutes: float
    reboot_via: str  # ssh | slurm
    hosts: list[HostApply] = field(default_factory=list)

    @property
    def unread(self) -> list[str]:
        """Hosts whose change could not be computed (unreachable, packages unreadable)."""
        return [h.host for h in self.hosts if h.outcome in ("unreachable", "failed")]

    def as_dict(self) -> dict[str, Any]:
        return {"pool": self.pool, "release": self.release, "index": self.index,
                "drain_through": self.drain_through,
                "drain_timeout_minutes": self.drain_timeout_minutes,
                "reboot_via": self.reboot_via,
                "hosts": [h.as_dict() for h in self.hosts]}


@dataclass
class StartPreview:
    status: str  # would_start | nothing | refused
    reason: str
    plan: RolloutPlan
    first_wave: FirstWave | None = None
    held_by: dict[str, int] = field(default_factory=dict)  # pool -> rollout holding it

    def as_dict(self) -> dict[str, Any]:
        return {"dry": True, "status": self.status, "reason": self.reason,
                **self.plan.as_dict(), "unreachable": self.plan.unreachable,
                "held_by": dict(self.held_by),
                "first_wave": self.first_wave.as_dict() if self.first_wave else None}


def preview_start(backend: Backend, scheduler: Scheduler, matrix: Matrix,
                  history: History | None, *, now: Callable[[], datetime],
                  pools: Sequence[str] | None = None, release: str | None = None,
                  releases: Mapping[str, str | None] | None = None,
                  unreachable: Sequence[str] = ()) -> StartPreview:
    """What `RolloutEngine.start` with these arguments would plan, and its first wave's
    changes; raises what the start would raise before acting (bad input, a forbidden release).
    `history` None: there is no history yet (no quarantine, no rollout holds a pool)."""
    from fleet.history.rollouts import active_rollouts

    refs = list(backend.hosts())
    quarantined = ({h.name: q.reason for q, h in list_quarantines(history)}
                   if history is not None else {})
    plan = plan_start(matrix, refs, scheduler, quarantined, pools=pools, release=release,
                      releases=releases or {}, unreachable=unreachable)
    moving = [p for p in plan.pools if p.waves]
    if not moving:
        blocked = [p.pool for p in plan.pools if p.blocked]
        why = (f"nothing can move: max_unavailable used up in {', '.join(blocked)}" if blocked
               else nothing_reason(plan))
        return StartPreview("refused" if blocked else "nothing", why, plan)
    held_by: dict[str, int] = {}
    if history is not None:
        wanted = {p.pool for p in moving}
        held_by = {p: rid for rid, _, shared in active_rollouts(history, wanted)
                   for p in shared}
    first = moving[0]
    wave = first.waves[0]
    settings = pool_settings(matrix, first.pool)
    draining = scheduler.name != "none"
    results = pin_hosts(backend, history, matrix,
                        dict.fromkeys(wave.hosts, matrix.release(first.release)), now=now,
                        dry=True, kind="rollout", scheduler=scheduler, drain=draining,
                        force=True)  # a rollout pins whatever `apply` would refuse for a lock
    fw = FirstWave(first.pool, first.release, wave.index,
                   scheduler.name if draining else None, settings.drain.timeout_minutes,
                   settings.reboot, results)
    if held_by:
        return StartPreview("refused", "pool(s) held by another rollout: " + ", ".join(
            f"{p} (rollout {rid})" for p, rid in sorted(held_by.items())), plan, fw, held_by)
    waves = sum(len(p.waves) for p in moving)
    hosts = sum(len(p.hosts) for p in moving)
    return StartPreview("would_start", f"{hosts} host(s) in {waves} wave(s) over "
                        f"{len(moving)} pool(s)", plan, fw)
