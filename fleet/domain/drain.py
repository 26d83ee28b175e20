"""When a draining host is ready to change, and what to do with jobs that outlive the wait. Pure.

A host is ready only when the workload manager reports it drained with nothing running or
completing on it: a drain flag alone stops new jobs, not the ones already there (a DRAINING
Slurm node keeps running its jobs until they end). The jobs layer polls the scheduler and asks
`decide` after every look; nothing here reads a clock or calls a command.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleet.domain.matrix.rollout_settings import DrainSettings
from fleet.domain.ports import AdminState

DrainOutcome = Literal["ready", "wait", "timeout", "taken", "down", "lost", "failed"]
"""ready: drained and empty. wait: jobs or pods still there, within the timeout. timeout: they
outlived it (the caller applies `on_timeout`). taken: someone else drained the host meanwhile
(their reason replaced ours): leave it alone. down: the host stopped answering. lost: the host is
no longer drained (someone resumed it): drain it again. failed: the drain itself was refused
(the reason says why)."""


@dataclass(frozen=True)
class DrainView:
    """One look at one host while it drains, as the live display and `rollout status` show it."""

    host: str
    outcome: DrainOutcome
    waited_s: float
    jobs: tuple[str, ...] = ()
    reason: str | None = None
    owner: str | None = None
    empty: bool = False  # the scheduler said drained and listed no work (never inferred)

    def describe(self) -> str:
        what = {"ready": "drained and empty", "wait": "waiting for", "timeout": "timed out on",
                "taken": "drained by someone else:", "down": "down:", "lost": "resumed by "
                "someone else", "failed": "drain failed:"}[self.outcome]
        tail = ""
        if self.outcome in ("wait", "timeout"):
            tail = " " + describe_jobs(self.jobs) + (f" ({self.reason})" if self.reason else "")
        elif self.outcome in ("taken", "down", "failed"):
            tail = f" {self.reason or 'no reason'}" + (f" ({self.owner})" if self.owner else "")
        return f"{self.host}: {what}{tail} after {self.waited_s:.0f} s"


def describe_jobs(jobs: tuple[str, ...] | list[str], limit: int = 8) -> str:
    if not jobs:
        return "its last job(s) to finish"
    shown = ", ".join(jobs[:limit])
    more = f" and {len(jobs) - limit} more" if len(jobs) > limit else ""
    return f"job(s) {shown}{more}"


def decide(state: AdminState, waited_s: float, settings: DrainSettings) -> DrainOutcome:
    """What one look at a host fleet is draining means."""
    if state.state == "down":
        return "down"
    if state.state in ("drained", "draining") and not state.by_fleet:
        return "taken"
    if state.state == "available":
        return "lost"
    if state.state == "drained" and not state.jobs:
        return "ready"
    if waited_s >= settings.timeout_s:
        return "timeout"
    return "wait"


def view(host: str, state: AdminState, waited_s: float, settings: DrainSettings) -> DrainView:
    """One look; the reason is kept where it explains the outcome (someone else's drain, a
    down node, a state the scheduler could not read), not while fleet's own drain waits.
    `empty` only when the scheduler reported the host drained with no work listed: a drain
    with no job list (a failed pod listing, Slurm's MIXED+DRAIN beside an empty squeue) is
    not empty."""
    outcome = decide(state, waited_s, settings)
    reason = state.reason if outcome not in ("ready", "wait", "timeout") or \
        state.state == "unknown" else None  # an unknown state says why it is unknown
    empty = state.state == "drained" and not state.jobs
    return DrainView(host, outcome, waited_s, tuple(state.jobs), reason, state.owner, empty)


__all__ = ["DrainOutcome", "DrainView", "decide", "describe_jobs", "view"]
