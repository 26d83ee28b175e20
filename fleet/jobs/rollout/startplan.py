"""The plan a new rollout starts from, with the checks that refuse it before anything runs:
shared by `RolloutEngine.start` and its dry run (`fleet.jobs.rollout.preview`), so a dry run
shows exactly the plan a start would take."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet.domain.matrix.models import Matrix, RolloutSettings
from fleet.domain.plan import RolloutPlan, plan_rollout
from fleet.domain.ports import HostRef, NodeReboot, Scheduler
from fleet.domain.selection import pool_problems, release_problem
from fleet.errors import BadInput, CouldNotComplete, Problem, ProblemsFound
from fleet.jobs.apply import refusal


def pool_settings(matrix: Matrix, pool: str) -> RolloutSettings:
    s = matrix.pools.get(pool)
    return s.rollout if s is not None else RolloutSettings()


def plan_start(matrix: Matrix, refs: Sequence[HostRef], scheduler: Scheduler,
               quarantined: Mapping[str, str], *, pools: Sequence[str] | None,
               release: str | None, releases: Mapping[str, str | None],
               unreachable: Sequence[str]) -> RolloutPlan:
    """The waves of a new rollout; reads each in-scope host's administrative state from the
    scheduler. Refused (`BadInput`) when `pools` names a pool without a host, `release` is not
    in the matrix, or a pool reboots through Slurm without the Slurm scheduler; `ProblemsFound`
    when the matrix forbids the release on a pool's hosts."""
    problems = [Problem(None, None, "pools", m) for m in pool_problems(pools or (), refs, matrix)]
    if (why := release_problem(release, matrix)) is not None:
        problems.append(Problem(None, None, "release", why))
    if problems:
        raise BadInput(problems)
    in_scope = [r for r in refs if r.pool and (pools is None or r.pool in pools)]
    admin = {r.name: s for r in in_scope if (s := scheduler.state(r.name)).state != "available"}
    targets = dict.fromkeys(pools or {r.pool for r in in_scope if r.pool}, release) \
        if release else None
    plan = plan_rollout(matrix, refs, releases=releases, admin=admin, quarantined=quarantined,
                        unreachable=unreachable, pools=set(pools) if pools else None,
                        targets=targets)
    moving = [p for p in plan.pools if p.waves]
    slurm_reboot = [p.pool for p in moving if pool_settings(matrix, p.pool).reboot == "slurm"]
    if slurm_reboot and not isinstance(scheduler, NodeReboot):
        raise BadInput.single(f"pool(s) {', '.join(slurm_reboot)} reboot through Slurm "
                              f"(rollout.reboot: slurm) but the scheduler is "
                              f"{scheduler.name}; pass --scheduler slurm",
                              field="rollout.reboot")
    by_name = {r.name: r for r in refs}
    for p in moving:
        try:
            rel = matrix.release(p.release)
        except KeyError:
            raise CouldNotComplete(f"pool {p.pool}: no release {p.release!r} in the "
                                   "matrix") from None
        why = refusal(matrix, rel, by_name[p.waves[0].hosts[0]])
        if why:
            raise ProblemsFound(f"pool {p.pool}: {p.release} must not go onto its hosts: "
                                f"{why}")
    return plan


def all_on_target(plan: RolloutPlan) -> bool:
    """Nothing to move because every host in scope runs its target already: the one "nothing"
    that is a success. Hosts skipped for any other reason (drained by someone else,
    quarantined, unreachable) or no host at all are a rollout that could not do its job."""
    skipped = [why for p in plan.pools for why in p.skipped.values()]
    return bool(skipped) and all(why.startswith("already on ") for why in skipped)


def nothing_reason(plan: RolloutPlan) -> str:
    """Why a rollout has nothing to move: how many hosts are on their target, and why the
    others were skipped."""
    reasons: dict[str, int] = {}
    for p in plan.pools:
        for why in p.skipped.values():
            key = "on their target" if why.startswith("already on ") else why.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
    if not reasons:
        return "no host in scope"
    if list(reasons) == ["on their target"]:
        return "every host is on its target already"
    return "nothing to move: " + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
