"""Draining around a pin (`fleet apply`, `fleet rollback`): drain the hosts that change and
wait until they are empty, per pool's `rollout.drain` settings; undrain what fleet drained once
verified. Never undrains a host someone else drained."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime

from fleet.domain.drain import DrainView, describe_jobs
from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.rollout_settings import DrainSettings
from fleet.domain.ports import HostRef, Scheduler
from fleet.history import History, record_event
from fleet.jobs.apply_host import HostApply
from fleet.jobs.drain import DrainWait, drain_hosts


def drain_for_change(scheduler: Scheduler, history: History, matrix: Matrix,
                      refs: Mapping[str, HostRef], names: list[str],
                      results: dict[str, HostApply], *, kind: str, now: Callable[[], datetime],
                      sleep: Callable[[float], object], actor: str | None,
                      say: Callable[[str, str], None]) -> list[str]:
    """Drain `names` and wait until each is empty (per pool's settings); returns the hosts
    that may change. A host someone else drained may change once the scheduler positively
    lists it empty (drained, no job or pod), and is never undrained; their drain with no job
    list (a failed pod listing, MIXED+DRAIN beside an empty squeue) is unknown, and unknown
    never changes. A host whose jobs outlive the timeout is left as it was, and said why."""
    by_pool: dict[str | None, list[str]] = defaultdict(list)
    for n in names:
        by_pool[refs[n].pool].append(n)
    ready: list[str] = []
    for pool, hosts in by_pool.items():
        ps = matrix.pools.get(pool) if pool else None
        settings = ps.rollout.drain if ps else DrainSettings()
        if settings.on_timeout == "pause":  # nothing to pause outside a rollout
            settings = settings.model_copy(update={"on_timeout": "skip"})

        def show(views: list[DrainView]) -> None:
            waiting = [v.describe() for v in views if v.outcome == "wait"]
            if waiting:
                say(",".join(v.host for v in views), "; ".join(waiting))

        wait = DrainWait(scheduler, settings, f"{kind} by {actor or 'fleet'}", now=now,
                         sleep=sleep, on_round=show)

        action = settings.on_timeout

        def stopped(host: str, msg: str, jobs: list[str], action: str = action) -> None:
            record_event(history, f"{kind}.drain.stop", host, msg,
                         {"jobs": jobs, "action": action}, actor=actor, at=now())

        # drained by fleet before this drain (a rollout's host mid-change): never undrained here
        had = {h for h in hosts if (st := scheduler.state(h)).by_fleet
               and st.state in ("drained", "draining", "down")}
        views = drain_hosts(wait, hosts, on_stop=stopped)
        for h in hosts:
            v, res = views[h], results[h]
            if v.outcome == "ready":
                res.drained = True
                ready.append(h)
            elif v.outcome == "taken" and v.empty:
                ready.append(h)  # drained by someone else and empty: change it, leave it drained
            elif v.outcome == "down":
                res.outcome, res.error = "unreachable", f"drain: {v.reason or 'down'}"
            else:
                res.outcome = "failed"
                res.error = _not_changed(v, settings)
                st = scheduler.state(h)
                if st.by_fleet and st.state in ("drained", "draining") and h not in had:
                    scheduler.undrain(h)  # untouched: back into service
                elif st.by_fleet:  # unknown: never undrained on a guess
                    res.left_drained = True
    return ready


def _not_changed(v: DrainView, settings: DrainSettings) -> str:
    """Why a host the drain did not make ready was left unchanged."""
    if v.outcome == "taken":
        work = (f"{describe_jobs(v.jobs)} still on it" if v.jobs else
                "the scheduler does not list it empty (no job list: a failed listing, or "
                "busy with no job named)")
        return (f"not changed: drained by someone else ({v.reason or 'no reason'}"
                + (f", {v.owner}" if v.owner else "") + f") and {work}")
    if v.outcome == "timeout":
        return (f"not changed: {describe_jobs(v.jobs)} still running after {v.waited_s:.0f} s "
                f"(drain timeout {settings.timeout_minutes:g} min)"
                + (f"; {v.reason}" if v.reason else ""))
    return f"drain: {v.describe()}"


def undrain_after_change(scheduler: Scheduler, names: list[str],
                          results: dict[str, HostApply]) -> None:
    """Put back into service what fleet drained and verified; a host that failed stays
    drained (fleet's reason on it) and is reported as such."""
    for n in names:
        res = results[n]
        if not res.drained:
            continue
        if res.outcome in ("would_change", "changed", "unchanged"):
            out = scheduler.undrain(n)
            if not out.ok:
                res.error = f"undrain: {out.error}"
        else:
            res.left_drained = True
