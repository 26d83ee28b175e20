"""Drain hosts through the workload manager and wait until they are empty.

One path for every job that reboots hosts (rollout, apply, rollback): issue the drain on every
host, then poll the scheduler until each host is drained with nothing running or completing on
it, someone else took it over, it went down, or its jobs outlived the pool's timeout. Waiting is
per round over all hosts, never host after host, so a wave of a hundred nodes waits as long as its
longest job, not the sum. `since` lets a resumed controller keep counting from the first wait.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fleet.domain.drain import DrainOutcome, DrainView, describe_jobs, view
from fleet.domain.matrix.rollout_settings import DrainSettings
from fleet.domain.ports import JobControl, Scheduler

OnRound = Callable[[list[DrainView]], None]


@dataclass
class DrainWait:
    """The waiting loop's wiring: the scheduler, the pool's settings, the clock and sleep."""

    scheduler: Scheduler
    settings: DrainSettings
    reason: str
    now: Callable[[], datetime]
    sleep: Callable[[float], object]
    on_round: OnRound | None = None
    since: dict[str, datetime] = field(default_factory=dict)
    kicked: dict[str, str] = field(default_factory=dict)  # host -> last repeated drain's error

    def __post_init__(self) -> None:
        # an adapter whose drain takes per-pool options (Kubernetes: pod selector, emptyDir)
        configure = getattr(self.scheduler, "for_drain", None)
        if callable(configure):
            self.scheduler = configure(self.settings)

    @property
    def kick_s(self) -> float:
        """Seconds a repeated drain may block to push evictions along (Kubernetes: `kubectl
        drain` evicts and waits); 0 for schedulers whose drain is a flag (Slurm)."""
        return float(getattr(self.scheduler, "drain_kick_s", 0.0))

    def waited(self, host: str) -> float:
        start = self.since.setdefault(host, self.now())
        return max(0.0, (self.now() - start).total_seconds())

    def issue(self, hosts: Sequence[str]) -> dict[str, DrainView]:
        """Drain each host (idempotent); returns the hosts whose drain was refused."""
        failed: dict[str, DrainView] = {}
        for h in hosts:
            res = self.scheduler.drain(h, self.reason, wait_s=0)
            self.since.setdefault(h, self.now())
            if not res.ok:
                outcome: DrainOutcome = "down" if not res.reachable else "failed"
                failed[h] = DrainView(h, outcome, self.waited(h), reason=res.error)
        return failed

    def look(self, host: str) -> DrainView:
        return view(host, self.scheduler.state(host), self.waited(host), self.settings)

    def wait(self, hosts: Sequence[str], *, limit_s: float | None = None,
             issue: bool = True) -> dict[str, DrainView]:
        """Poll until every host has a final outcome (ready, taken, down, failed, timeout).

        `issue=False` when the caller has drained the hosts already (no second drain call).
        `limit_s` caps this call's wait below the pool's timeout (a grace period after jobs
        were cancelled): hosts still busy then come back as `timeout`.
        """
        final = self.issue(hosts) if issue else {}
        pending = [h for h in hosts if h not in final]
        started = self.now()
        while pending:
            views = []
            for h in pending:
                v = self.look(h)
                if v.outcome == "lost":  # resumed by someone else: ours to drain again
                    again = self.scheduler.drain(h, self.reason, wait_s=0)
                    v = DrainView(h, "wait" if again.ok else "failed", v.waited_s,
                                  reason=again.error)
                if (v.outcome == "wait" and limit_s is not None
                        and (self.now() - started).total_seconds() >= limit_s):
                    v = DrainView(h, "timeout", v.waited_s, v.jobs, v.reason, v.owner)
                if v.outcome in ("wait", "timeout") and self.kicked.get(h):
                    v = DrainView(h, v.outcome, v.waited_s, v.jobs, self.kicked[h], v.owner)
                views.append(v)
            if self.on_round is not None:
                self.on_round(views)
            for v in views:
                if v.outcome != "wait":
                    final[v.host] = v
            pending = [v.host for v in views if v.outcome == "wait"]
            if not pending:
                break
            self.sleep(self.settings.poll_seconds)
            if self.kick_s > 0:  # e.g. kubectl drain: evict again (a budget may block it)
                for h in pending:
                    kick = self.scheduler.drain(h, self.reason, wait_s=self.kick_s)
                    self.kicked[h] = "" if kick.ok else (kick.error or "")
        return final


def stop_jobs(scheduler: Scheduler, v: DrainView, action: str) -> tuple[bool, str]:
    """Cancel or requeue the jobs that outlived the drain (only when the matrix says so).
    Returns (done, message for the event log)."""
    if not isinstance(scheduler, JobControl):
        return False, f"{scheduler.name} cannot {action} jobs; {v.host} left waiting"
    if action not in ("cancel", "requeue"):
        return False, f"unknown action {action!r}"
    res = scheduler.stop_jobs(v.host, list(v.jobs), action)  # type: ignore[arg-type]
    if not res.ok:
        return False, f"{v.host}: {action} of {describe_jobs(v.jobs)} failed: {res.error}"
    return True, f"{v.host}: {action}ed {describe_jobs(tuple(res.value or v.jobs))} " \
                 f"after {v.waited_s:.0f} s"


def drain_hosts(wait: DrainWait, hosts: Sequence[str], *,
                on_stop: Callable[[str, str, list[str]], None] | None = None,
                issued: bool = False) -> dict[str, DrainView]:
    """Drain and wait, applying `on_timeout` for `skip`, `cancel` and `requeue` (and returning
    `timeout` views for `pause`, which the caller turns into a pause or a refusal).

    After a cancel or requeue the host gets a grace period of six polls (at least a minute) to
    empty; jobs that survive even that come back as `timeout`.
    """
    final = wait.wait(hosts, issue=not issued)
    action = wait.settings.on_timeout
    late = [v for v in final.values() if v.outcome == "timeout"]
    if not late or action in ("pause", "skip"):
        return final
    stopped = []
    for v in late:
        ok, msg = stop_jobs(wait.scheduler, v, action)
        if on_stop is not None:
            on_stop(v.host, msg, list(v.jobs))
        if ok:
            stopped.append(v.host)
    if stopped:
        grace = max(60.0, 6 * wait.settings.poll_seconds)
        final.update(wait.wait(stopped, limit_s=grace, issue=False))
    return final


def not_ready(views: Mapping[str, DrainView]) -> dict[str, DrainView]:
    return {h: v for h, v in views.items() if v.outcome != "ready"}


__all__ = ["DrainWait", "drain_hosts", "not_ready", "stop_jobs"]
