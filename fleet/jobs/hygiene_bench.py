"""The weekly benchmark of the hygiene job: per pool, sized so the judge can reach a verdict.

Per pool, a few healthy conformant hosts run the synthetic suite; the samples are judged against
the pool's samples of the trailing weeks (history baseline) and recorded as later weeks' baseline.

Sizing (`hygiene.benchmark.samples` in the matrix, `--bench-samples` on the CLI): with `auto`,
the count per side comes from `fleet.domain.sample_size`, the judge's own rules turned around, for
the metrics and noise the baseline shows; when this week's run brings metrics (or noise) that
need more, one top-up run collects the rest. A fixed number is taken as is. Either way the report
says, per check, how many samples it needed and had, and an inconclusive verdict on too few
samples names the count that would have been enough. `max_samples` bounds `auto`.

`dcgm_level` travels in the suite's parameters to the runner (`dcgmi diag -r N`), where the
synthetic benchmark runs through DCGM.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.domain.drift import HostDrift
from fleet.domain.matrix.hygiene_settings import HygieneBenchmark
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import Backend, Samples
from fleet.domain.sample_size import SamplePlan, plan_samples
from fleet.history import History, benchmark_samples

BENCH_NAME = "hygiene-synthetic"
RUNNER_MAX_REPEATS = 1000  # fleet.remote.bench refuses more runs of the runner per host

BenchJudge = Callable[[Samples, Samples], Mapping[str, Any]]
"""(this week's samples, baseline samples) -> {"verdict": pass|fail|inconclusive|nodata, ...}."""


@dataclass(frozen=True)
class Sizing:
    """How many samples per side to collect: `auto` (the judge's needs) or a fixed count."""

    samples: Literal["auto"] | int = "auto"
    max_samples: int = 4000
    power: float = 0.9

    @classmethod
    def from_settings(cls, s: HygieneBenchmark, override: int | None = None) -> Sizing:
        return cls(override if override is not None else s.samples, s.max_samples, s.power)

    @property
    def auto(self) -> bool:
        return self.samples == "auto"


@dataclass
class PoolBenchmark:
    pool: str
    hosts: list[str]
    verdict: str  # pass, fail, inconclusive, nodata, not_judged, error, skipped
    reason: str = ""
    baseline_samples: int = 0
    judgement: Mapping[str, Any] | None = None
    samples: dict[str, Any] | None = None  # needed and had, per check

    def as_dict(self) -> dict[str, Any]:
        return {"pool": self.pool, "hosts": self.hosts, "verdict": self.verdict,
                "reason": self.reason, "baseline_samples": self.baseline_samples,
                "judgement": dict(self.judgement) if self.judgement else None,
                "samples": self.samples}


def _fewest(samples: Mapping[str, Sequence[float]]) -> int:
    return min((len(v) for v in samples.values()), default=0)


def _params(base: Mapping[str, Any], per_host: int | None, dcgm_level: int) -> dict[str, Any]:
    """The suite's parameters: the pool's, the dcgmi level, and the count per host (`samples`
    for backends that draw samples, `repeats` for the runner, which makes one per run)."""
    out = {**base, "dcgm_level": dcgm_level}
    if per_host is not None:
        out["samples"] = per_host
        out["repeats"] = min(per_host, RUNNER_MAX_REPEATS)
    return out


def samples_report(plan: SamplePlan, judgement: Mapping[str, Any] | None,
                   candidate: Mapping[str, Sequence[float]],
                   baseline: Mapping[str, Sequence[float]], sizing: Sizing,
                   requested: int | None) -> dict[str, Any]:
    """Per judged check: the samples it needed per side and had (this week, baseline)."""
    checks: list[dict[str, Any]] = []
    judged = list((judgement or {}).get("metrics") or [])
    if judged:
        for m in judged:
            need = plan.need_of(str(m.get("metric")))
            checks.append({"check": m.get("metric"), "verdict": m.get("verdict"),
                           "need": need.need if need else None,
                           "rule": need.rule if need else "",
                           "had": int(m.get("n_canary") or 0),
                           "baseline": int(m.get("n_baseline") or 0)})
    else:
        for c in plan.checks:
            metric = c.check.split(":", 1)[0]
            checks.append({"check": c.check, "verdict": None, "need": c.need, "rule": c.rule,
                           "had": len(candidate.get(metric, ())),
                           "baseline": len(baseline.get(metric, ()))})
    return {"mode": "auto" if sizing.auto else "fixed", "needed": plan.per_side,
            "requested": requested, "had": _fewest(candidate), "baseline": _fewest(baseline),
            "max_samples": sizing.max_samples if sizing.auto else None, "checks": checks}


def _short(samples: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Checks that had fewer samples (this week or baseline) than they need."""
    return [c for c in samples["checks"] if c["need"] is not None
            and min(c["had"], c["baseline"]) < c["need"]]


@dataclass
class _Run:
    candidate: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    records: list[tuple[str, str | None, Mapping[str, Sequence[float]] | None, str]] = field(
        default_factory=list)


def _collect(backend: Backend, hosts: Sequence[str], params: Mapping[str, Any],
             release: Mapping[str, str | None], run: _Run) -> None:
    results = backend.benchmark(hosts, "synthetic", params)
    for host in hosts:
        r = results.get(host)
        if r is None or not r.ok or r.value is None:
            run.errors.append(f"{host}: {r.error if r else 'no answer'}")
            continue
        for metric, values in r.value.items():
            run.candidate.setdefault(metric, []).extend(values)
        run.records.append((host, release.get(host), r.value, "done"))


def pool_benchmarks(
    backend: Backend, history: History, drift: Sequence[HostDrift], excluded: set[str], *,
    now: dt.datetime, per_pool: int, baseline_weeks: int, judge: BenchJudge | None,
    matrix: Matrix | None, sizing: Sizing, dcgm_level: int, say: Callable[[str], None],
) -> list[PoolBenchmark]:
    """Benchmark and judge every pool (see the module docstring)."""
    from fleet.history.bulk import record_benchmarks

    by_pool: dict[str, list[HostDrift]] = {}
    for d in drift:
        by_pool.setdefault(d.pool or "", []).append(d)
    out: list[PoolBenchmark] = []
    for pool in sorted(by_pool):
        chosen = sorted(d.host for d in by_pool[pool]
                        if d.conformant and d.host not in excluded)[:per_pool]
        if not chosen:
            out.append(PoolBenchmark(pool, [], "skipped", "no healthy conformant host"))
            continue
        baseline = benchmark_samples(history, pool=pool, name=BENCH_NAME, kind="synthetic",
                                     since=now - dt.timedelta(weeks=baseline_weeks), until=now)
        base_params = (matrix.pools[pool].rollout.gates.suite_params().get("synthetic", {})
                       if matrix is not None and pool in matrix.pools else {})
        if sizing.auto:
            first = plan_samples(baseline, noise_from=baseline, power=sizing.power).per_side \
                if baseline else 0
            want: int | None = min(first, sizing.max_samples) or None
        else:
            want = int(sizing.samples)
        per_host = math.ceil(want / len(chosen)) if want else None
        say(f"benchmarking pool {pool} on {', '.join(chosen)}"
            + (f" ({per_host} sample(s) per host)" if per_host else ""))
        release = {d.host: d.release for d in by_pool[pool]}
        run = _Run()
        _collect(backend, chosen, _params(base_params, per_host, dcgm_level), release, run)
        plan = plan_samples(set(run.candidate) | set(baseline),
                            noise_from=baseline or run.candidate, power=sizing.power)
        if sizing.auto and run.candidate:
            goal = min(plan.per_side, sizing.max_samples)
            have = _fewest(run.candidate)
            if have < goal:  # this week's metrics or noise need more: one top-up run
                top = math.ceil((goal - have) / len(chosen))
                say(f"benchmarking pool {pool}: {top} more sample(s) per host "
                    f"({goal} needed per side, {have} so far)")
                _collect(backend, chosen, _params(base_params, top, dcgm_level), release, run)
                want = goal
        if run.records:
            record_benchmarks(history, run.records, kind="synthetic", name=BENCH_NAME,
                              started_at=now, ended_at=now)
        n_base = sum(len(v) for v in baseline.values())
        candidate = run.candidate
        if not candidate:
            out.append(PoolBenchmark(pool, chosen, "error", "; ".join(run.errors), n_base))
            continue
        if not baseline:
            out.append(PoolBenchmark(pool, chosen, "nodata",
                                     "no baseline yet: this week's samples start it", 0,
                                     samples=samples_report(plan, None, candidate, baseline,
                                                            sizing, want)))
            continue
        if judge is None:
            # SEAM: fleet.domain.judge could not be imported (numpy/scipy missing); samples are
            # still recorded so the baseline builds up.
            out.append(PoolBenchmark(pool, chosen, "not_judged",
                                     "the judge (fleet.domain.judge) is not available", n_base))
            continue
        j = judge(candidate, baseline)
        verdict = str(j.get("verdict", "inconclusive"))
        info = samples_report(plan, j, candidate, baseline, sizing, want)
        reason = str(j.get("reason", ""))
        short = _short(info)
        if verdict == "inconclusive" and short:
            reason = ("too few samples: " + "; ".join(
                f"{c['check']} needs {c['need']} per side, had {c['had']}/{c['baseline']}"
                for c in short) + " (set hygiene.benchmark.samples or --bench-samples); "
                + reason)
        out.append(PoolBenchmark(pool, chosen, verdict, reason, n_base, j, info))
    return out
