"""Pin releases onto hosts and verify them: the path behind `fleet apply` and `fleet rollback`.

Per host: refuse what the matrix forbids (blocked versions, a branch the GPU cannot run), plan,
record the step, pin, reboot when the kernel module changed, verify with the probe (driver
three-way agreement, release conformance, health checks), record the outcome. Hosts that cannot
be reached are reported and the others proceed. Benchmark gates are not on this path: a rollback
at 3 a.m. must not wait for a benchmark.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from fleet.domain.checks import Finding, Severity, run_checks
from fleet.domain.checks.expect import pool_profiles, release_expectation
from fleet.domain.checks.models import Expectations
from fleet.domain.facts import HostFacts
from fleet.domain.host_change import host_change
from fleet.domain.kernel_hold import holding
from fleet.domain.matrix.models import Matrix, OsFamily, Release
from fleet.domain.matrix.rules import architecture_problems, blocked_components
from fleet.domain.pinning import release_of
from fleet.domain.ports import Backend, HostRef, HostResult, Scheduler
from fleet.history import History, list_events, record_event
from fleet.jobs.apply_drain import drain_for_change, undrain_after_change
from fleet.jobs.apply_host import HostApply
from fleet.jobs.node_apply import NodeChange, plan_nodes, put_right, settle_before_reboot
from fleet.jobs.reboot_gate import gated_reboot
from fleet.jobs.record import record_snapshot


def refusal(matrix: Matrix, release: Release, ref: HostRef) -> str | None:
    """Why `release` must not go onto this host, or None."""
    blocked = blocked_components(matrix, release)
    if blocked:
        return "; ".join(blocked)
    model = ref.gpu_model or (matrix.pools[ref.pool].gpu_model
                              if ref.pool in matrix.pools else None)
    if model:
        problems = architecture_problems(release, model)
        if problems:
            return "; ".join(problems)
    return None


def pin_hosts(
    backend: Backend,
    history: History | None,
    matrix: Matrix,
    targets: Mapping[str, Release],
    *,
    now: Callable[[], datetime],
    dry: bool = False,
    kind: str = "apply",
    reason: str | None = None,
    actor: str | None = None,
    force: bool = False,
    on_progress: Callable[[str, str], None] | None = None,
    scheduler: Scheduler | None = None,
    drain: bool = True,
    serial: int = 0,
    sleep: Callable[[float], object] = time.sleep,
) -> list[HostApply]:
    """Put each host of `targets` on its release; returns one `HostApply` per host.

    Hosts of a pool that an unfinished rollout covers are refused, unless `force` (recorded):
    pinning under a running rollout would fight its waves and confuse its resume.
    With a `scheduler`, hosts that change are drained first and waited for until empty (the
    pool's `rollout.drain` settings; jobs outliving the timeout leave the host unchanged), at
    most `serial` hosts at a time (0: all), and undrained once verified; `drain=False` (an
    incident's `--no-drain`) skips that and is recorded.

    With `dry`, each host is only planned from what it has (packages, holds, pin files and the
    loaded kernel module, read over SSH) and its `change` says what the pin would do; nothing
    is changed, drained or recorded, and `history` may be None (no history file yet: no
    rollout can hold a pool).
    """
    from fleet.history import controllers as ctl

    say = on_progress or (lambda host, what: None)
    refs = {r.name: r for r in backend.hosts()}
    pools = {p for n in targets if n in refs and (p := refs[n].pool)}
    held = ctl.holders(history, pools) if history is not None else []
    locked = {p: h.rollout_id for h in held for p in h.pools}
    told = {p: h.describe(now()) for h in held for p in h.pools}
    if not dry and history is None:
        raise ValueError("pinning hosts records what it does: it needs a history")
    lease: tuple[str, int] | None = None
    if locked and force and not dry:
        assert history is not None
        record_event(history, f"{kind}.force", ",".join(sorted(locked)),
                     f"{kind} forced over active rollout(s) "
                     + ", ".join(f"{rid} ({p})" for p, rid in sorted(locked.items())),
                     {"rollouts": locked, "reason": reason,
                      "holders": [h.as_dict() for h in held]}, actor=actor, at=now())
        # the rollouts' controllers stop at their next step (recorded as rollout.preempt)
        lease = (f"{actor or 'fleet'}@{ctl.controller_name()}", os.getpid())
        ctl.preempt(history, sorted(locked), owner=lease[0], pid=lease[1], actor=actor or "",
                    reason=reason, kind=kind, at=now(), wall=datetime.now(UTC))
    results = {name: HostApply(name, refs[name].pool if name in refs else None, rel.name)
               for name, rel in targets.items()}
    by_release: dict[str, list[str]] = defaultdict(list)
    for name, rel in targets.items():
        res = results[name]
        if name not in refs:
            res.outcome, res.error = "refused", "not in the inventory"
        elif (pool := refs[name].pool) is not None and pool in locked and not force:
            res.outcome = "refused"
            res.error = f"{told[pool]}; finish or abort it, or pass --force"
        elif (why := refusal(matrix, rel, refs[name])) is not None:
            res.outcome, res.error = "refused", why
        else:
            by_release[rel.name].append(name)

    _refuse_operator_drivers(scheduler, by_release, results)
    to_change: dict[str, list[str]] = defaultdict(list)
    for rel_name, names in by_release.items():
        release = matrix.release(rel_name)
        say(",".join(names), f"planning {rel_name}")
        hold = holding(matrix, ((n, refs[n].pool) for n in names))
        for name, planned in backend.plan(names, release, kernel_hold=hold).items():
            res = results[name]
            if not planned.ok or planned.value is None:
                res.outcome = ("unreachable" if not planned.reachable
                               else "refused" if planned.refused else "failed")
                res.error = planned.error
                continue
            plan = planned.value
            res.from_release = release_of(matrix.releases, plan.installed, plan.os_family)
            res.changes, res.reboot_required = list(plan.changes), plan.reboot_required
            res.change = host_change(plan, release.packages(plan.os_family))
            if plan.changed:
                res.outcome, res.packages_change = "would_change", True
                to_change[rel_name].append(name)
    readable = [refs[n] for n in targets if results[n].outcome in ("unchanged", "would_change")]
    for name, node in plan_nodes(backend, matrix, readable).items():
        res = results[name]
        res.node = node
        if node.changed and res.outcome == "unchanged":
            res.outcome = "would_change"
            to_change[targets[name].name].append(name)
    draining = scheduler is not None and scheduler.name != "none" and drain
    if draining:
        assert scheduler is not None
        for names in to_change.values():
            for name in names:
                if results[name].needs_drain:
                    results[name].drain_through = scheduler.name
    if dry:
        return [results[n] for n in targets]
    assert history is not None
    if scheduler is not None and scheduler.name != "none" and not drain and any(to_change.values()):
        changing = sorted(n for ns in to_change.values() for n in ns)
        record_event(history, f"{kind}.no_drain", ",".join(changing),
                     f"{kind} without draining {len(changing)} host(s) through "
                     f"{scheduler.name}: running jobs may be killed by the reboot",
                     {"hosts": changing, "reason": reason}, actor=actor, at=now())
    batches = [(rel, names[i:i + (serial or len(names))])
               for rel, names in to_change.items() for i in range(0, len(names),
                                                                    serial or len(names))]
    for rel_name, batch in batches:
        names = batch
        must = [n for n in batch if results[n].needs_drain]
        if draining and must:
            assert scheduler is not None
            say(",".join(must), f"draining through {scheduler.name}")
            ready = set(drain_for_change(scheduler, history, matrix, refs, must, results,
                                          kind=kind, now=now, sleep=sleep, actor=actor,
                                          say=say))
            names = [n for n in batch if n in ready or n not in must]
        release = matrix.release(rel_name)
        started = time.monotonic()
        for name in names:
            res = results[name]
            record_event(history, f"{kind}.start", name,
                         f"pinning {rel_name} (from {res.from_release or 'unknown'})",
                         {"from_release": res.from_release, "to_release": rel_name,
                          "reason": reason}, actor=actor, at=now())
        pins = [n for n in names if results[n].packages_change]
        early = [refs[n] for n in pins if results[n].reboot_required and _waits_for_reboot(
            results[n].node)]
        if early:  # an ECC change rides on the driver's reboot: one reboot, not two
            say(",".join(r.name for r in early), "node state that waits for the reboot")
            settle_before_reboot(backend, matrix, early)
        if pins:
            say(",".join(pins), f"pinning {rel_name}")
        applied = backend.apply(pins, release, kernel_hold=holding(
            matrix, ((n, refs[n].pool) for n in pins))) if pins else {}
        rebooting = []
        for name in pins:
            res, out = results[name], applied[name]
            if not out.ok:
                res.outcome = "unreachable" if not out.reachable else "failed"
                res.error = out.error
                if out.reachable:
                    res.error = f"{out.error}; {_restore(backend, matrix, res)}"
            elif res.reboot_required:
                rebooting.append(name)
        if rebooting:
            say(",".join(rebooting), "rebooting (kernel module changed)")
            gated = gated_reboot(backend, {n: release for n in rebooting})
            for name, booted in gated.results.items():
                results[name].rebooted = booted.ok
                if not booted.ok:
                    results[name].outcome = "failed" if booted.reachable else "unreachable"
                    results[name].error = booted.error
                if name in gated.refused:  # not rebooted: the gate's finding says why
                    results[name].findings = [gated.refused[name]]
        fix = [n for n in names if results[n].outcome == "would_change" and results[n].node]
        if fix:
            say(",".join(fix), "node state")
            _node_state(backend, matrix, release, [refs[n] for n in fix], results,
                        drained=set(must) if draining else None)
        verify = [n for n in names if results[n].outcome == "would_change"]
        if verify:
            say(",".join(verify), "verifying")
            _verify(backend, history, matrix, release, [refs[n] for n in verify], results, now)
        for name in names:
            results[name].seconds = time.monotonic() - started
        if draining:
            assert scheduler is not None
            undrain_after_change(scheduler, batch, results)

    _boot_units(backend, results)
    for name in targets:
        res = results[name]
        if res.outcome in ("would_change",):
            res.outcome = "changed"
        if res.outcome == "unchanged" and not res.error:
            continue
        record_event(history, f"{kind}.end", name,
                     f"{res.outcome}: {res.from_release or 'unknown'} -> {res.to_release}"
                     + (f" ({res.error})" if res.error else ""),
                     {**res.as_dict(), "reason": reason}, actor=actor, at=now())
    if lease is not None:  # the preempted rollouts stay paused: resume or abort them
        ctl.release(history, set(locked.values()), *lease)
    return [results[n] for n in targets]


def _refuse_operator_drivers(scheduler: Scheduler | None, by_release: dict[str, list[str]],
                             results: dict[str, HostApply]) -> None:
    """The scheduler's side of `fleet.domain.driver_owner` (Kubernetes: the Node's
    nvidia.com/gpu.deploy.driver label and the operator's driver pods), before anything is
    planned; the host's side (/run/nvidia) is read with the plan (`SshBackend._plans`)."""
    ask = getattr(scheduler, "driver_owner", None)  # only schedulers that know of one
    if ask is None:
        return
    from fleet.domain.driver_owner import refusal as driver_refusal

    for rel_name in list(by_release):
        keep = []
        for name in by_release[rel_name]:
            owner = ask(name)
            why = driver_refusal(owner) if owner is not None else None
            if why is None:
                keep.append(name)
            else:
                results[name].outcome, results[name].error = "refused", why
        if keep:
            by_release[rel_name] = keep
        else:
            del by_release[rel_name]


def _node_state(backend: Backend, matrix: Matrix, release: Release, refs: Sequence[HostRef],
                results: dict[str, HostApply], *, drained: set[str] | None) -> None:
    """Put the node state right, planned again from what the hosts show now (after the pin
    and its reboot, which forgets some settings); an ECC change's reboot goes through the
    pre-reboot gate. `drained`: the hosts that went through the drain (None: no drain on this
    run); one that now needs idle GPUs but was not drained for it is left as it is, and said
    why."""
    fresh = plan_nodes(backend, matrix, refs)
    go: dict[str, NodeChange] = {}
    for ref in refs:
        res = results[ref.name]
        node = res.node = fresh.get(ref.name, res.node)
        if node is None:
            continue
        if node.drain and drained is not None and ref.name not in drained:
            node.error = ("node state not applied: it now needs idle GPUs (MIG or ECC) and the "
                          "host was not drained for it; run fleet apply again")
        else:
            go[ref.name] = node

    def reboot(names: list[str]) -> dict[str, HostResult[None]]:
        gated = gated_reboot(backend, dict.fromkeys(names, release))
        for name in gated.refused:
            results[name].findings = [gated.refused[name]]
        return gated.results

    put_right(backend, go, reboot)
    for ref in refs:
        res = results[ref.name]
        if res.node is not None and res.node.error:
            res.outcome, res.error = "failed", res.node.error
        elif res.node is not None and res.node.rebooted:
            res.rebooted = True


def _waits_for_reboot(node: NodeChange | None) -> bool:
    return node is not None and any(s.reboot for s in node.plan.steps)


def _boot_units(backend: Backend, results: dict[str, HostApply]) -> None:
    """Hosts whose node state already matches, and whose boot unit the probe did not read,
    still get the boot unit that keeps it across a reboot, where it is missing or differs (no
    drain: it only writes files); one read as missing or stale is a change of its own."""
    idle = {n: r.node for n, r in results.items() if r.outcome == "unchanged"
            and r.node is not None and r.node.boot_files and r.node.boot_state == "unknown"}
    if not idle:
        return
    put_right(backend, idle, lambda names: {})
    for name, node in idle.items():
        if node.error:
            results[name].outcome, results[name].error = "failed", node.error
        elif node.boot_written:
            results[name].outcome = "changed"


def _restore(backend: Backend, matrix: Matrix, res: HostApply) -> str:
    return restore_release(backend, matrix, res.host, res.from_release, res.pool)


def restore_release(backend: Backend, matrix: Matrix, host: str,
                    from_release: str | None, pool: str | None) -> str:
    """Put a host whose pin failed half-way back on the release it had (never reboot it);
    returns what happened, for the record."""
    if from_release is None:
        return "no known previous release to restore: the host needs attention"
    back = backend.apply([host], matrix.release(from_release),
                         kernel_hold=holding(matrix, [(host, pool)]))[host]
    if back.ok:
        return f"restored {from_release}"
    return f"restoring {from_release} failed too: {back.error}"


def os_family_of(facts: HostFacts) -> OsFamily:
    pk = facts.versions.packages
    return "rhel" if (pk is not None and pk.manager == "rpm") else "debian"


def health_findings(facts: HostFacts, release: Release, ref: HostRef,
                    matrix: Matrix) -> list[Finding]:
    """The health gate of one host: every check against `release` (driver three-way
    agreement, release conformance, GPU count and model, errors) and the pool's node profile
    (the `node.*` checks); FAIL findings fail it."""
    profile, by_model = pool_profiles(matrix, ref.pool)
    expect = Expectations(release=release_expectation(release, os_family_of(facts)),
                          gpu_count=ref.gpu_count, gpu_model=ref.gpu_model, profile=profile,
                          profile_by_model=by_model)
    return run_checks(facts, expect, matrix.policy.thresholds)


def needs_reboot(findings: Sequence[Finding]) -> bool:
    """The loaded kernel module is not the installed driver: a reboot loads it."""
    return any(f.check == "driver.agreement" and f.remediation == "reboot"
               and f.severity is Severity.FAIL for f in findings)


def _verify(backend: Backend, history: History, matrix: Matrix, release: Release,
            refs: Sequence[HostRef], results: dict[str, HostApply],
            now: Callable[[], datetime]) -> None:
    """Probe after the pin: the host counts as moved only if nothing fails."""
    probed = backend.probe([r.name for r in refs])
    for ref in refs:
        res, got = results[ref.name], probed[ref.name]
        if not got.ok or got.value is None:
            res.outcome, res.error = "failed", f"verification probe: {got.error}"
            continue
        facts = got.value
        findings = health_findings(facts, release, ref, matrix)
        res.findings = findings
        record_snapshot(history, ref.name, facts, findings, taken_at=now(), pool=ref.pool,
                        release=release.name)
        failing = [f for f in findings if f.severity is Severity.FAIL]
        if failing:
            res.outcome = "failed"
            res.error = "verification failed: " + "; ".join(f.message for f in failing[:3])


def previous_known_good(history: History, matrix: Matrix, host: str,
                        pool: str | None) -> tuple[Release | None, str]:
    """The release a host ran before its last forward move, else the matrix's previous.

    Forward moves are `fleet apply` pins (apply.end events) and finished rollout steps; after a
    rollback B -> A, "previous" stays A's predecessor, never the release just rolled back from.
    Returns the release (None when neither source has one) and where it came from.
    """
    from fleet.history.rollouts import completed_moves

    moves = [(at, src) for at, src, _ in completed_moves(history, host)]
    for event in list_events(history, limit=200, kind="apply.end", subject=host):
        data = event.data or {}
        if (data.get("outcome") == "changed" and data.get("from_release")
                and data.get("from_release") != data.get("to_release")):  # not node state only
            moves.append((event.at, str(data["from_release"])))
    for _, name in sorted(moves, key=lambda m: m[0], reverse=True):
        try:
            return matrix.release(name), "history"
        except KeyError:
            continue  # a release the matrix no longer has
    if pool is not None:
        prev = matrix.previous_for(pool)
        if prev is not None:
            return prev, "matrix"
    return None, "none"
