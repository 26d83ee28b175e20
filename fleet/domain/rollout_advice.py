"""Why a rollout stands where it stands, and what to type next (pure: `fleet rollout status`).

The reason is the one the engine recorded when it stopped (`rollout.pause`, `rollout.end`
events); the next steps are commands that work as printed (`fleet` with the same `--db`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Advice:
    reason: str | None
    next: list[tuple[str, str]] = field(default_factory=list)  # (command, what it does)

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason,
                "next": [{"command": c, "does": d} for c, d in self.next]}


@dataclass(frozen=True)
class Seen:
    """What the history says of the rollout, as `advise` reads it."""

    id: int
    status: str
    events: Sequence[tuple[str, str, Mapping[str, Any]]]  # (kind, message, data), oldest first
    lock_owner: str | None = None
    lock_heartbeat: datetime | None = None
    stale_after_s: float = 300.0
    stopped_pools: Sequence[str] = ()  # pools of waves that failed or rolled back
    pools: Sequence[str] = ()


def _last(seen: Seen, *kinds: str) -> tuple[str, str, Mapping[str, Any]] | None:
    return next((e for e in reversed(seen.events) if e[0] in kinds), None)


def advise(seen: Seen, *, fleet: str, now: datetime) -> Advice:
    """The reason and the next commands for a rollout in `seen.status`; `fleet` is how to
    call fleet (`fleet --db PATH` when the history is not the default)."""
    n, st = seen.id, seen.status
    hosts = f"{fleet} rollout status {n} --hosts"
    if st == "paused":
        ev = _last(seen, "rollout.pause")
        data = ev[2] if ev else {}
        paused = str(data.get("reason") or (ev[1] if ev else "paused"))
        if data.get("reason") == "drain timeout":
            return Advice(ev[1] if ev else paused, [
                (f"{fleet} rollout keep-waiting {n}", "wait another drain timeout for the "
                 "wave's jobs, then go through every gate"),
                (f"{fleet} rollout abort {n}", "roll the wave back and stop")])
        return Advice(f"wave {data.get('wave')} inconclusive: {paused}" if data.get("wave")
                      else paused, [
            (f"{fleet} rollout promote {n} --reason 'looked at the numbers'",
             "pass the inconclusive gate by hand and continue"),
            (f"{fleet} rollout abort {n} --reason 'not good enough'",
             "roll the wave back and stop"),
            (hosts, "each host's step and measurements")])
    if st in ("running", "aborting", "rolling_back"):
        if seen.lock_owner and seen.lock_heartbeat is not None and (
                now - seen.lock_heartbeat).total_seconds() <= seen.stale_after_s:
            return Advice(f"a controller is at work ({seen.lock_owner}, heartbeat "
                          f"{seen.lock_heartbeat.isoformat(timespec='seconds')})",
                          [(f"{fleet} rollout status {n}", "look again"),
                           (f"{fleet} rollout abort {n}", "ask it to roll back and stop")])
        why = (f"its controller stopped: last heartbeat "
               f"{seen.lock_heartbeat.isoformat(timespec='seconds')} ({seen.lock_owner})"
               if seen.lock_heartbeat is not None else "its controller stopped")
        force = " --force" if seen.lock_owner else ""
        return Advice(why, [(f"{fleet} rollout resume {n}{force}",
                             "take it over and carry on where it stopped"),
                            (f"{fleet} rollout abort {n}{force}", "roll back and stop")])
    end = _last(seen, "rollout.end")
    said = str((end[2].get("reason") if end else None) or (end[1] if end else ""))
    reason = said or None
    if st in ("rolled_back", "failed"):
        steps = [(hosts, "which hosts failed which gate, and why")]
        steps += [(f"{fleet} check -l {p}", f"the findings of {p}'s latest probes")
                  for p in seen.stopped_pools]
        return Advice(reason, steps)
    if st == "completed":
        return Advice(reason, [(f"{fleet} hosts " + " ".join(f"-l {p}" for p in seen.pools),
                                "the hosts it moved, as the history has them")])
    return Advice(reason, [(hosts, "each host's step")] if st == "aborted" else [])


@dataclass(frozen=True)
class Split:
    """A pool a rollout left on two releases: the hosts it moved and those it did not."""

    pool: str
    target: str
    moved: list[str]  # on `target`
    others: dict[str, list[str]]  # release (or "not moved") -> hosts

    def as_dict(self) -> dict[str, Any]:
        return {"pool": self.pool, "target": self.target, "moved": list(self.moved),
                "others": {k: list(v) for k, v in self.others.items()}}


NOT_MOVED = "not moved (as before the rollout)"
"""The key of `Split.others` for hosts the rollout never moved (their release is not known)."""


def split_pools(steps: Sequence[Any]) -> list[Split]:
    """The pools whose hosts a stopped rollout left on different releases: some moved to the
    target (`done`), others rolled back or never moved. `steps` are the rollout's host steps
    (`fleet.history.rollouts.StepRow`)."""
    by_pool: dict[str, list[Any]] = {}
    for s in steps:
        by_pool.setdefault(s.pool, []).append(s)
    out = []
    for pool, rows in by_pool.items():
        moved = [s for s in rows if s.state == "done"]
        rest = [s for s in rows if s.state != "done"
                and not str((s.detail or {}).get("why", "")).startswith("already on")]
        if not moved or not rest:
            continue
        others: dict[str, list[str]] = {}
        for s in rest:
            d = s.detail or {}
            where = (d.get("rollback_to") or s.from_release) if s.state == "rolled_back" \
                else s.from_release
            others.setdefault(str(where) if where else NOT_MOVED,
                              []).append(s.host)
        out.append(Split(pool, str(moved[0].to_release), [s.host for s in moved], others))
    return out


def make_whole(split: Split, *, fleet: str, source: Mapping[str, Any],
               matrix: str) -> list[tuple[str, str]]:
    """Commands that put a split pool on one release again, as printed: move the others to the
    target with a new rollout of the pool or, over SSH, put the moved hosts back."""
    import shlex

    q = shlex.quote
    if source.get("source") == "sim":
        build = source.get("build") or {}
        how = (f"--sim-spec {q(str(build['spec']))}" if build.get("spec")
               else f"--sim {build.get('n')} --seed {build.get('seed', 0)}")
        how += f" --sim-state {q(str(source.get('sim_state')))}"
    else:
        how = f"-i {q(str(source.get('inventory')))}"
    steps = [(f"{fleet} rollout start -m {q(matrix)} {how} -l {q(split.pool)} "
              f"--release {q(split.target)}",
              f"move the rest of {split.pool} to {split.target} (a new rollout, gated)")]
    if source.get("source") != "sim":
        hosts = " ".join(f"-l {q(h)}" for h in split.moved)
        steps.append((f"{fleet} rollback -m {q(matrix)} {how} {hosts} --reason "
                      f"{q(f'make {split.pool} whole after an aborted rollout')} --yes",
                      f"put the {len(split.moved)} moved host(s) back on their last "
                      "known-good release"))
    return steps
