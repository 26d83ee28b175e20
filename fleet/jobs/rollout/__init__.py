"""The rollout engine: canary pools first, then waves, gated by health and benchmarks,
rolled back automatically, paused for a human when a gate cannot decide, resumable after a
crash at any point.

Per wave (states in `fleet.domain.gates`):

    drain      record each host's administrative state, check max_unavailable against what is
               out of service now, then drain it (never a host someone else drained: it is
               skipped and never undrained); a resumed wave drains its unfinished hosts again
    apply      re-plan, then pin the target release on the hosts whose plan still changes
               something (a failed pin is put back on the release the host had, `restored`
               only when a verify says so)
    reboot     the hosts whose kernel module changed
    verify     health gate: probe + checks against the target release (a snapshot per host)
    budgets    failed or unreachable hosts over the per-wave or the pool's total budget fail
               the wave
    benchmark  synthetic and/or replay samples of the wave's hosts against a same-time baseline
               (hosts of the same pool and GPU model still on the old release, idle as the
               scheduler says), else the pool's recent history on the old release (lower
               confidence), judged by the judge; a canary that could not be measured while
               others were is retried, then fails on its own
    bake       wait `bake_minutes` (a `sleep` callable, so tests and rehearsals do not wait),
               then probe the wave again
    repair     hosts that failed after their pin changed are rolled back one by one
    undrain    only what fleet drained

Verdicts: fail rolls back the wave's hosts (or every host moved so far in the pool, with
`rollback_scope="all"`), health-checked, and the rollout stops `rolled_back`; inconclusive pauses
it (`paused`) until `promote` or `abort`; error (could not measure) is retried `max_retries`
times, then it is inconclusive. A drain timeout pauses before any gate: `keep_waiting` (never
`promote`, which passes only a gate that ran) or `abort`.

Durability: every step is written to the history before it is taken (`ended_at` unset) and
after it ends, in one transaction per step per wave; the same transaction refreshes the lock's
heartbeat and appends the events that explain it. Resume re-reads the rows and re-enters each
step for the hosts whose state says it is due or unfinished; every step is idempotent against
the hosts (see `fleet.domain.gates`). The history's transactions never span a backend call.
"""

from __future__ import annotations

from fleet.domain.matrix.models import Release
from fleet.jobs.rollout.engine import RolloutEngine
from fleet.jobs.rollout.model import (
    SUITE_PARAMS,
    SUITE_SPECS,
    RolloutOptions,
    RolloutResult,
    Status,
    admin_states,
    invariants,
)

__all__ = ["RolloutEngine", "RolloutOptions", "RolloutResult", "SUITE_PARAMS", "SUITE_SPECS",
           "Status", "admin_states", "invariants", "Release"]
