"""Rollout options and results, the lock-free end state, and the invariants a finished
rollout must hold (checked by the tests and the demo)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from fleet.domain.gates import (
    count_states,
)
from fleet.domain.judge import JudgeConfig, MetricSpec
from fleet.domain.plan import RolloutPlan
from fleet.domain.ports import AdminState, Scheduler
from fleet.domain.prom_result import MetricsSource
from fleet.history.controllers import CONTROLLER_ENV as CONTROLLER_ENV
from fleet.history.controllers import controller_name as controller_name
from fleet.history.rollouts import (
    StepRow,
)

Status = Literal["completed", "rolled_back", "aborted", "paused", "running", "nothing",
                 "aborting", "rolling_back", "failed"]

SUITE_SPECS: dict[str, tuple[MetricSpec, ...]] = {
    "synthetic": (
        MetricSpec("tflops", "higher", 0.05, kind="run"),
        MetricSpec("latency_ms", "lower", 0.05, kind="location"),
    ),
    "replay": (
        MetricSpec("latency_ms", "lower", 0.05, kind="location", tails=(0.95,)),
        MetricSpec("throughput_rps", "higher", 0.05, kind="run"),
    ),
}
"""What the benchmark gates judge by default. Error counts are left to the health gate: bounding
an error rate to 0.2 percentage point takes thousands of requests, more than a gate runs."""

SUITE_PARAMS: dict[str, dict[str, Any]] = {"synthetic": {"samples": 50},
                                           "replay": {"samples": 200}}


@dataclass
class RolloutOptions:
    rollback_scope: Literal["wave", "all"] = "wave"
    stale_after_s: float = 300.0  # a lock whose heartbeat is older is stale
    bench_hosts: int = 4  # hosts per side benchmarked by a gate
    suite_params: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {k: dict(v) for k, v in SUITE_PARAMS.items()})
    suite_specs: Mapping[str, Sequence[MetricSpec]] = field(
        default_factory=lambda: dict(SUITE_SPECS))
    judge_config: JudgeConfig | None = None
    probe_batch: int = 1000
    record_snapshots: bool = True
    heartbeat_s: float = 60.0  # longest sleep between heartbeats while baking
    # the timer keeps the heartbeat fresh only while the controller showed a sign of life (a
    # host call started, a history write) within this; past it a hung controller goes stale
    quiet_limit_s: float = 3600.0
    reboot_timeout_s: float = 900.0  # a node rebooted through the scheduler must be back
    # the live gate's Prometheus (None: a pool with `gates.live` enabled could not measure)
    live_source: MetricsSource | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rollback_scope": self.rollback_scope, "stale_after_s": self.stale_after_s,
                "bench_hosts": self.bench_hosts,
                "suite_params": {k: dict(v) for k, v in self.suite_params.items()}}


@dataclass
class RolloutResult:
    rollout_id: int | None
    status: str
    reason: str = ""
    waves: list[dict[str, Any]] = field(default_factory=list)
    hosts: dict[str, int] = field(default_factory=dict)  # state -> count
    plan: RolloutPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "status": self.status, "reason": self.reason,
                "waves": self.waves, "hosts": self.hosts}


class _Stop(Exception):
    """Leave the wave loop: the rollout paused, rolled back or was aborted."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class _AbortRequested(Exception):
    pass


def _pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wall() -> datetime:
    return datetime.now(UTC)




_UNLOCK = {"lock_owner": None, "lock_pid": None, "lock_heartbeat": None}
"""Written with a rollout's last step: a controller killed right after it leaves no lock."""


def _is_failure(r: StepRow) -> bool:
    """A host that failed in this rollout (including one put back afterwards)."""
    return r.state == "failed" or (r.state == "rolled_back" and bool(r.detail.get("failed_at")))


def _moved(r: StepRow) -> bool:
    return bool(r.detail.get("changed")) and not r.detail.get("restored")


def _most_common(values: Sequence[str]) -> str | None:
    counts = count_states(values)
    return max(counts, key=lambda k: counts[k]) if counts else None


def _summary(rows: Sequence[StepRow]) -> str:
    return ", ".join(f"{n} {s}" for s, n in count_states(r.state for r in rows).items())


def admin_states(scheduler: Scheduler, hosts: Sequence[str]) -> dict[str, AdminState]:
    return {h: scheduler.state(h) for h in hosts}


def invariants(steps: Sequence[StepRow], scheduler: Scheduler,
               installed: Callable[[str], str | None] | None = None) -> list[str]:
    """What is wrong with a finished rollout's hosts (empty when nothing): every host fleet
    drained is undrained (unless quarantined on record), and each host that started runs the
    release it ended on (target when done, previous when rolled back)."""
    problems = []
    for r in steps:
        a = scheduler.state(r.host)
        if a.by_fleet and a.state in ("drained", "draining") and not r.detail.get("quarantined"):
            problems.append(f"{r.host}: left drained by fleet ({r.state})")
        if installed is None:
            continue
        on = installed(r.host)
        if r.state == "done" and on != r.to_release:
            problems.append(f"{r.host}: done but on {on}, not {r.to_release}")
        if r.state == "rolled_back" and on != r.detail.get("rollback_to"):
            problems.append(f"{r.host}: rolled back but on {on}, not "
                            f"{r.detail.get('rollback_to')}")
        if r.state not in ("done", "rolled_back", "failed", "planned", "skipped"):
            problems.append(f"{r.host}: left in state {r.state}")
    return problems
