"""Rollout decisions (pure): host states, gate verdicts, failure budgets and the lock rule.

Nothing here does I/O or reads a clock; the engine (`fleet.jobs.rollout`) passes what it saw.

Per-host state machine (one `host_steps` row per host and rollout, written before each step is
taken, `ended_at` unset, and after it ends, `ended_at` set):

    planned -> draining -> drained -> applying -> rebooting -> verifying -> benchmarking
            -> judged -> undraining -> done
    (applying -> verifying when the kernel module did not change: no reboot)

    exits:  failed       the host could not move (drain, pin, reboot or health failed, or it
                         was unreachable); if the pin changed it, it is rolled back
            rolling_back the host is being put back on the release it had (one idempotent step:
                         drain if needed, re-plan, pin, reboot when the module differs, verify)
            rolled_back  back on its previous release, verified
            skipped      left alone (drained by someone else when fleet came to it)

A row whose `ended_at` is unset is a step that was started and may not have finished: resume
redoes it, and every step is idempotent against the host (drain twice is a no-op, a pin is
re-planned before it is re-applied, a second reboot of a drained host is harmless).

Gate verdicts are tri-state plus error (Argo Rollouts): pass, fail (roll back), inconclusive
(pause for `fleet rollout promote|abort`, never passes on its own), error (could not measure:
retried `max_retries` times, then inconclusive).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

HostState = Literal[
    "planned", "draining", "drained", "applying", "rebooting", "verifying", "benchmarking",
    "judged", "undraining", "done", "failed", "rolling_back", "rolled_back", "skipped",
]
HOST_STATES: tuple[HostState, ...] = (
    "planned", "draining", "drained", "applying", "rebooting", "verifying", "benchmarking",
    "judged", "undraining", "done", "failed", "rolling_back", "rolled_back", "skipped",
)
TERMINAL: frozenset[str] = frozenset({"done", "failed", "rolled_back", "skipped"})

TRANSITIONS: dict[str, frozenset[str]] = {
    "planned": frozenset({"draining", "skipped", "failed"}),
    "draining": frozenset({"drained", "skipped", "failed"}),  # skipped: wave rolled back
    # back to draining: a resume (or a promote) asks the scheduler again before the pin/reboot
    "drained": frozenset({"applying", "failed", "skipped", "draining"}),
    "applying": frozenset({"rebooting", "verifying", "failed", "rolling_back", "draining"}),
    "rebooting": frozenset({"verifying", "failed", "rolling_back", "draining"}),
    "verifying": frozenset({"benchmarking", "judged", "failed", "rolling_back"}),
    "benchmarking": frozenset({"judged", "failed", "rolling_back"}),
    "judged": frozenset({"undraining", "failed", "rolling_back"}),
    "undraining": frozenset({"done"}),
    "done": frozenset({"rolling_back"}),  # rollback of every host moved so far
    "failed": frozenset({"rolling_back"}),
    "rolling_back": frozenset({"rolled_back", "failed"}),
    "rolled_back": frozenset(),
    "skipped": frozenset(),
}

# States in which the host's packages may already be on the target release.
MAY_HAVE_MOVED: frozenset[str] = frozenset({
    "applying", "rebooting", "verifying", "benchmarking", "judged", "undraining", "done",
})


def can_transition(src: str, dst: str) -> bool:
    """Whether the engine may move a host from `src` to `dst` (a resumed step re-enters its own
    state, which is always allowed)."""
    return src == dst or dst in TRANSITIONS.get(src, frozenset())


GateVerdict = Literal["pass", "fail", "inconclusive", "error"]
GATE_ORDER: dict[str, int] = {"pass": 0, "error": 1, "inconclusive": 2, "fail": 3}


def combine(verdicts: Iterable[str]) -> GateVerdict:
    """One verdict for several gates: the worst wins (fail > inconclusive > error > pass);
    no gate at all passes."""
    worst: GateVerdict = "pass"
    for v in verdicts:
        if v not in GATE_ORDER:
            raise ValueError(f"unknown gate verdict {v!r}")
        if GATE_ORDER[v] > GATE_ORDER[worst]:
            worst = v  # type: ignore[assignment]
    return worst


def from_judge(verdict: str) -> GateVerdict:
    """The judge's verdict as a gate verdict: nodata means nothing could be measured."""
    return {"pass": "pass", "fail": "fail", "inconclusive": "inconclusive",
            "nodata": "error"}.get(verdict, "error")  # type: ignore[return-value]


def after_retries(verdict: GateVerdict, attempt: int, max_retries: int) -> GateVerdict | None:
    """What an `error` verdict means after `attempt` (1-based) tries: None to try again, else
    the verdict to act on (error becomes inconclusive once the retries are spent)."""
    if verdict != "error":
        return verdict
    return None if attempt <= max_retries else "inconclusive"


@dataclass(frozen=True)
class Budget:
    """Hosts that may fail (failed or unreachable) in one wave and in the whole pool."""

    per_wave: int
    total: int

    def exceeded(self, failed_in_wave: int, failed_total: int) -> str | None:
        """Why the budget is blown, or None. A budget is exceeded when failures go *over* it
        (0 tolerates none)."""
        if failed_in_wave > self.per_wave:
            return (f"{failed_in_wave} host(s) failed in the wave, over the per-wave budget of "
                    f"{self.per_wave}")
        if failed_total > self.total:
            return (f"{failed_total} host(s) failed in the pool so far, over the total budget "
                    f"of {self.total}")
        return None


def health_verdict(failed_in_wave: int, failed_total: int, budget: Budget,
                   moved: int) -> tuple[GateVerdict, str]:
    """The health gate of a wave: fail when the budget is blown or nothing moved at all."""
    why = budget.exceeded(failed_in_wave, failed_total)
    if why:
        return "fail", why
    if moved == 0 and failed_in_wave > 0:
        return "fail", "every host of the wave failed"
    return "pass", (f"{moved} host(s) healthy" + (f", {failed_in_wave} failed within budget"
                                                   if failed_in_wave else ""))


def lock_state(*, owner: str | None, pid: int | None, heartbeat_age_s: float | None,
               stale_after_s: float, same_machine: bool,
               pid_alive: bool | None) -> Literal["free", "live", "stale"]:
    """Whether a rollout's lock is free, held by a live controller, or stale.

    Stale: the heartbeat is older than `stale_after_s`, or the owner ran on this machine and its
    pid is gone. A stale lock is taken over only when forced; a live one never.
    """
    if owner is None:
        return "free"
    if heartbeat_age_s is None or heartbeat_age_s > stale_after_s:
        return "stale"
    if same_machine and pid is not None and pid_alive is False:
        return "stale"
    return "live"


def count_states(states: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states:
        out[s] = out.get(s, 0) + 1
    return out


def wave_summary(states: Mapping[str, str]) -> str:
    """`3 done, 1 failed` for a wave's host states."""
    counts = count_states(states.values())
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: HOST_STATES.index(
        kv[0]) if kv[0] in HOST_STATES else 99))
