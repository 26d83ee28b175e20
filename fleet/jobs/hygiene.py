"""The weekly hygiene job: probe, drift audit (fail closed), trends, quarantine, benchmarks.

    report = run_hygiene(backend, scheduler, history, matrix, now=now)

1. Probe every host through the `Backend`; every answer lands in the history as a snapshot with
   its GPU counter samples and check findings (an unreachable host as an unreachable snapshot).
2. Drift audit of this run's facts against the matrix (`fleet.domain.drift`): an unreachable or
   non-conformant host is a problem, listed with what differs.
3. Trends of the error counters from the history (`fleet.domain.trends`), over the trend window.
4. Quarantine proposals behind the per-pool circuit breaker (`fleet.domain.quarantine`); with
   `apply_quarantine`, take the host's share of the pool's budget under the history's lock
   (re-checked there: an overlapping run cannot spend it twice), then drain through the
   `Scheduler`; the quarantine's event records which scheduler drained it.
   A host someone else already drained is recorded, not drained again, and never marked as
   drained by fleet (so `fleet quarantine release` will not undrain it).
5. Benchmark regression per pool: the small synthetic benchmark on a few healthy, conformant
   hosts of each pool, judged (`fleet.domain.judge.judge`, history baseline) against the pool's
   samples of the trailing weeks, then recorded as the baseline of later weeks.
6. Serving per pool and model from Prometheus (`fleet.jobs.hygiene_serving`): latency and
   queue quantiles this week against last week and the pool's other release, load time, cache
   hit rate, p99 against requests per GPU; "could not measure" when it cannot.

The report's `exit_code`: 0 clean; 1 problems found (drift, an unreachable host, a failing
health check, a failing or quarantine-worthy trend, a proposal, a tripped breaker, a failed
drain, a benchmark regression, a serving regression or a serving query that failed).
Errors that stop the job itself (history unusable, no hosts) raise `FleetError` (exit 3).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from fleet.domain.checks import Finding, Severity, expectations_for, run_checks
from fleet.domain.checks.base import profile_of
from fleet.domain.checks.node_pool import PoolHost, pool_vbios_findings
from fleet.domain.drift import DriftInput, HostDrift, audit, summarize
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix
from fleet.domain.node_state import node_state_section
from fleet.domain.ports import Backend, HostRef, Samples, Scheduler
from fleet.domain.prom_result import MetricsSource
from fleet.domain.quarantine import QuarantinePlan, propose
from fleet.domain.serving_units import facts_gpus, serving_units
from fleet.domain.trends import TrendReport, TrendSettings, analyze
from fleet.errors import CouldNotComplete, ExitCode
from fleet.history import (
    History,
    add_snapshot,
    close_quarantine,
    iter_gpu_series,
    list_quarantines,
    os_actor,
    record_event,
)
from fleet.history.controllers import STALE_AFTER_S, in_flight_hosts
from fleet.history.quarantines import reserve_quarantine
from fleet.history.rollouts import list_rollouts
from fleet.jobs.hygiene_bench import BENCH_NAME as BENCH_NAME
from fleet.jobs.hygiene_bench import BenchJudge as BenchJudge
from fleet.jobs.hygiene_bench import PoolBenchmark as PoolBenchmark
from fleet.jobs.hygiene_bench import Sizing, pool_benchmarks
from fleet.jobs.hygiene_serving import serving_section
from fleet.jobs.record import kernel_cursors, record_snapshot

DRAIN_MARK = "fleet-hygiene"
VERSION_CHECKS = frozenset({"driver.agreement", "release.conformance", "packages.other_release"})
"""Checks a host fails on purpose while a rollout moves it (between its apply and reboot)."""


def default_judge() -> BenchJudge | None:
    """The canary judge with a history baseline, or None when it cannot be imported."""
    try:
        from fleet.domain.judge import judge
    except ImportError:  # judge needs numpy/scipy; without them benchmarks are recorded only
        return None

    def _judge(candidate: Samples, baseline: Samples) -> Mapping[str, Any]:
        return judge(candidate, baseline, baseline_source="history").as_dict()

    return _judge


@dataclass
class QuarantineAction:
    host: str
    applied: bool
    drained_by_fleet: bool
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "applied": self.applied,
                "drained_by_fleet": self.drained_by_fleet, "message": self.message}


@dataclass
class HygieneReport:
    now: dt.datetime
    hosts: list[HostRef]
    drift: list[HostDrift]
    trends: TrendReport
    quarantine: QuarantinePlan
    applied: list[QuarantineAction] = field(default_factory=list)
    apply_requested: bool = False
    benchmarks: list[PoolBenchmark] = field(default_factory=list)
    findings: dict[str, list[Finding]] = field(default_factory=dict)
    open_quarantines: list[dict[str, Any]] = field(default_factory=list)
    node_profiles: dict[str, str | None] = field(default_factory=dict)
    """Audited host -> the node profile its pool selects (None: none)."""
    serving: dict[str, Any] = field(default_factory=dict)
    """The serving section (fleet.jobs.hygiene_serving), with its own `problems`."""

    def node_state(self) -> dict[str, Any]:
        """The node-state section: conformance to the node profiles (fleet.domain.node_state)."""
        pools = {d.host: d.pool for d in self.drift}
        return node_state_section(self.findings, pools, self.node_profiles)

    @property
    def non_conformant(self) -> list[HostDrift]:
        """Drifted hosts: not conformant and not being moved by a rollout."""
        return [d for d in self.drift if not d.conformant and d.in_flight is None]

    @property
    def in_flight(self) -> list[HostDrift]:
        """Hosts a rollout (on any controller) is moving: reported, not counted as drift."""
        return [d for d in self.drift if not d.conformant and d.in_flight is not None]

    def failing_checks(self) -> list[str]:
        """This run's failing health checks, one line each. A host a rollout is moving is
        expected to fail the version checks (its drift entry says so); its health checks count."""
        moving = {d.host for d in self.in_flight}
        return [f"{host}: {f.check}: {f.message}" for host, found in self.findings.items()
                for f in found if f.severity == Severity.FAIL
                and not (host in moving and f.check in VERSION_CHECKS)]

    def problems(self) -> list[str]:
        out = [f"{d.host}: " + ("; ".join(str(x) for x in d.differences))
               for d in self.non_conformant]
        out += self.failing_checks()
        out += [f"{g.label}: {f.message}" for g in self.trends.gpus for f in g.flags
                if f.severity == "fail" or f.quarantine]
        out += self.quarantine.alerts()
        out += [f"{a.host}: quarantine not applied: {a.message}" for a in self.applied
                if not a.applied]
        out += [f"pool {b.pool}: synthetic benchmark regressed: {b.reason}"
                for b in self.benchmarks if b.verdict == "fail"]
        out += list(self.serving.get("problems", []))
        return out

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PROBLEMS if self.problems() else ExitCode.OK

    def summary(self) -> dict[str, Any]:
        flagged = self.trends.flagged()
        return {
            "drift": dict(summarize(self.drift)),
            "gpus_analyzed": len(self.trends.gpus),
            "gpus_flagged": len(flagged),
            "hosts_flagged": len({g.host for g in flagged}),
            "quarantine_proposed": len(self.quarantine.proposals),
            "quarantine_applied": sum(a.applied for a in self.applied),
            "breakers_tripped": [b.pool for b in self.quarantine.tripped],
            "benchmark_regressions": [b.pool for b in self.benchmarks if b.verdict == "fail"],
            "serving": self.serving.get("status", "not_run"),
            "problems": len(self.problems()),
            "exit_code": int(self.exit_code),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.now.isoformat(),
            "summary": self.summary(),
            "drift": [d.as_dict() for d in self.drift],
            "trends": {
                "window_weeks": self.trends.settings.window_weeks,
                "medians": self.trends.medians,
                "pools": self.trends.pool_weekly(),
                "flagged": [g.as_dict() for g in self.trends.worst(n=len(self.trends.gpus))],
            },
            "quarantine": {**self.quarantine.as_dict(), "apply": self.apply_requested,
                           "applied": [a.as_dict() for a in self.applied],
                           "open": self.open_quarantines},
            "benchmarks": [b.as_dict() for b in self.benchmarks],
            "node_state": self.node_state(),
            "serving": self.serving,
            "problems": self.problems(),
        }


def run_hygiene(
    backend: Backend,
    scheduler: Scheduler,
    history: History,
    matrix: Matrix,
    *,
    now: dt.datetime,
    hosts: Sequence[str] | None = None,
    apply_quarantine: bool = False,
    settings: TrendSettings | None = None,
    benchmark: bool = True,
    bench_hosts_per_pool: int | None = None,
    bench_baseline_weeks: int | None = None,
    bench_samples: int | None = None,
    dcgm_level: int | None = None,
    judge: BenchJudge | Literal["default"] | None = "default",
    actor: str | None = None,
    progress: Callable[[str], None] | None = None,
    wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    stale_after_s: float = STALE_AFTER_S,
    serving: MetricsSource | None = None,
    serving_where: str | None = None,
) -> HygieneReport:
    """Run the weekly hygiene job once (see the module docstring).

    The benchmark's hosts per pool, baseline weeks, samples per side and dcgmi level default to
    the matrix's `hygiene:` settings; the arguments override them (the CLI's options). `wall` is
    the real clock rollout heartbeats are compared with (a host is in flight only while its
    rollout's lock is live: heartbeat at most `stale_after_s` old). `serving` is the
    Prometheus to read the serving section from (None: that section could not measure);
    `serving_where` how the report names it.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    settings = settings or TrendSettings()
    actor = actor or os_actor()
    say = progress or (lambda _m: None)
    th = matrix.policy.thresholds

    all_refs = backend.hosts()
    refs = [r for r in all_refs if hosts is None or r.name in set(hosts)]
    if not refs:
        raise CouldNotComplete("no hosts to audit" + (f" (asked for {', '.join(hosts)})"
                                                      if hosts else ""))
    pools = {r.name: r.pool or "" for r in all_refs}

    # 1. probe and record; hosts a rollout moves before or during the probe are in flight
    say(f"probing {len(refs)} host(s)")
    names = [r.name for r in refs]
    moving = in_flight_hosts(history, names, wall=wall(), stale_after_s=stale_after_s)
    answers = backend.probe(names, since=kernel_cursors(history, names))
    inputs: list[DriftInput] = []
    findings: dict[str, list[Finding]] = {}
    node_profiles: dict[str, str | None] = {}
    probed: dict[str, PoolHost] = {}
    for ref in refs:
        res = answers.get(ref.name)
        pool = ref.pool or ""
        facts = res.value if res is not None and res.ok else None
        if isinstance(facts, HostFacts):
            expect = expectations_for(matrix, pool, gpu_model=ref.gpu_model,
                                      gpu_count=ref.gpu_count)
            found = run_checks(facts, expect, th)
            findings[ref.name] = found
            node_profiles[ref.name] = matrix.profile_name_for(
                pool, next((g.name for g in facts.gpus if g.name), None) or ref.gpu_model)
            probed[ref.name] = PoolHost(pool, facts, profile_of(facts, expect))
            inputs.append(DriftInput(ref.name, pool, True, facts))
        else:
            node_profiles[ref.name] = matrix.profile_name_for(pool, ref.gpu_model)
            reachable = res.reachable if res is not None else False
            error = (res.error if res is not None else None) or "no answer from the backend"
            add_snapshot(history, ref.name, taken_at=now, source="none", reachable=reachable,
                         facts={"error": error}, pool=pool)
            inputs.append(DriftInput(ref.name, pool, reachable, None, error))

    for name, extra in pool_vbios_findings(probed).items():  # the pool's odd hosts out
        findings[name] += extra
    for name, h in probed.items():
        record_snapshot(history, name, h.facts, findings[name], taken_at=now, pool=h.pool)

    # 2. drift
    say("auditing drift")
    moving.update(in_flight_hosts(history, names, wall=wall(), stale_after_s=stale_after_s))
    drift = audit([replace(i, in_flight=moving.get(i.host)) for i in inputs], matrix)

    # 3. trends
    say("reading trends from the history")
    since = now - dt.timedelta(seconds=settings.lookback_s)
    trends = analyze(  # the audited hosts only: a host gone from the inventory (RMA'd) or
        # outside the selection is never proposed, let alone drained
        iter_gpu_series(history, since=since, until=now, hosts=names),
        now=now.timestamp(), thresholds=th, settings=settings)

    # 4. quarantine
    open_rows = list_quarantines(history)
    open_names = [h.name for _q, h in open_rows]
    audited = set(names)
    plan = propose([replace(t, pool=pools[t.host]) for t in trends.hosts() if t.host in audited],
                   Counter(pools.values()), max_share=th.quarantine_max_share,
                   already_quarantined=open_names, host_pools=pools)
    for alert in plan.alerts():
        record_event(history, "hygiene.breaker", "", alert,
                     {"breakers": [b.as_dict() for b in plan.tripped]}, actor=actor, at=now)
    applied: list[QuarantineAction] = []
    if apply_quarantine:
        budget = {b.pool: b.limit for b in plan.breakers}
        for p in plan.to_apply():
            members = [n for n, pool in pools.items() if pool == p.pool]
            applied.append(_quarantine(history, scheduler, p.host, p.reason, p.as_dict(),
                                       pool_hosts=members, limit=budget[p.pool], actor=actor,
                                       now=now))

    # 5. benchmarks
    benches: list[PoolBenchmark] = []
    if benchmark:
        judge_fn = default_judge() if judge == "default" else judge
        excluded = {p.host for p in plan.proposals} | set(open_names)
        hs = matrix.hygiene
        benches = pool_benchmarks(
            backend, history, drift, excluded, now=now,
            per_pool=bench_hosts_per_pool or hs.benchmark.hosts_per_pool,
            baseline_weeks=bench_baseline_weeks or hs.benchmark.baseline_weeks,
            judge=judge_fn, matrix=matrix,
            sizing=Sizing.from_settings(hs.benchmark, bench_samples),
            dcgm_level=dcgm_level or hs.dcgm_diag_level, say=say)

    # 6. serving
    say("reading serving metrics" if serving is not None else "serving: no Prometheus")
    week = [{"id": r.id, "release": r.release, "scope": r.scope,
             "started_at": r.started_at.isoformat()}
            for r in list_rollouts(history, limit=200)
            if _utc(r.started_at) > now - dt.timedelta(weeks=1)]
    by_name = {r.name: r for r in refs}
    units = {n: serving_units(by_name[n].gpu_count, facts_gpus(h.facts.gpus))
             for n, h in probed.items()}
    served = serving_section(serving, matrix, refs, drift, now=now, rollouts=week,
                             where=serving_where, units=units)

    report = HygieneReport(
        now=now, hosts=refs, drift=drift, trends=trends, quarantine=plan, applied=applied,
        apply_requested=apply_quarantine, benchmarks=benches, findings=findings,
        node_profiles=node_profiles, serving=served,
        open_quarantines=[
            {"host": h.name, "pool": h.pool, "reason": q.reason, "opened_at": q.opened_at,
             "opened_by": q.opened_by} for q, h in list_quarantines(history)],
    )
    record_event(history, "hygiene.run", ",".join(hosts or []) or "all",
                 f"hygiene: {len(report.non_conformant)} non-conformant of {len(drift)}"
                 + (f" ({len(report.in_flight)} more in a rollout)" if report.in_flight else "")
                 + ", "
                 f"{len(trends.flagged())} GPU(s) flagged, {len(plan.proposals)} proposal(s)",
                 report.summary(), actor=actor, at=now)
    keep = matrix.hygiene.retention
    if keep.prune_after_hygiene:  # after the audit read its trends; records history.prune
        from fleet.domain.retention import RetentionPolicy
        from fleet.history.retention import prune

        say("pruning the history")
        prune(history, RetentionPolicy(keep.raw_weeks, keep.rollup_weeks_or_none), now=now,
              actor=actor)
    return report


def _utc(t: dt.datetime) -> dt.datetime:
    """A time read back from the history (SQLite drops the zone; it is stored in UTC)."""
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t


def _quarantine(history: History, scheduler: Scheduler, host: str, reason: str,
                proposal: Mapping[str, Any], *, pool_hosts: Sequence[str], limit: int,
                actor: str, now: dt.datetime) -> QuarantineAction:
    """Quarantine one host: its share of the pool's budget is taken under the history's lock
    (re-checked there, so an overlapping run cannot spend it too) before anything is drained;
    a failed drain gives it back."""
    state = scheduler.state(host)
    data = {"scheduler": scheduler.name, "proposal": dict(proposal),
            "state_before": state.state, "state_reason_before": state.reason}
    if state.state == "unknown":
        why = state.reason or "-"
        return QuarantineAction(host, False, False, f"scheduler state unknown ({why}): "
                                "not drained")
    theirs = state.state in ("drained", "draining", "down") and not state.by_fleet
    qid = reserve_quarantine(history, host, pool_hosts=pool_hosts, limit=limit, reason=reason,
                             opened_by=actor, at=now,
                             data={**data, "drained_by_fleet": not theirs})
    if qid is None:
        return QuarantineAction(host, False, False, "deferred: the pool's quarantine budget is "
                                f"spent (limit {limit}; another run may have taken it)")
    if theirs:
        return QuarantineAction(host, True, False,
                                f"already {state.state} by someone else ({state.reason or '-'}): "
                                "recorded, not drained again")
    res = scheduler.drain(host, f"{DRAIN_MARK}: {reason}"[:200])
    if not res.ok:
        record_event(history, "quarantine.drain_failed", host, res.error or "drain failed",
                     data, actor=actor, at=now)
        close_quarantine(history, host, closed_by=actor, at=now,
                         reason=f"drain failed: {res.error or '-'}", data={"quarantine_id": qid})
        return QuarantineAction(host, False, False, f"drain failed: {res.error}")
    return QuarantineAction(host, True, True, f"drained through {scheduler.name}")
