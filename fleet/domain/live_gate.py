"""The live gate's verdict: canary hosts against baseline hosts on the traffic they served (pure).

Per model, over the same window:

    latency_ms:pQ  the per-host pQ latency at each step (one value per host and step) of each
                   side, judged by the judge as run-level values (Welch t on the log ratio,
                   at least 3 runs per side); critical
    queue_ms:p95   the same for the queue time; not critical (queues grow with load as much as
                   with a release): a failure pauses, it does not roll back
    error_rate     failed requests out of all, from the servers' counters, judged as a rate
                   (Newcombe interval, absolute allowance); critical; where the family
                   exports no error counter (vLLM) the gate says so and judges without it
    throughput_per_gpu
                   requests per second per host and step divided by the host's GPUs (its MIG
                   instances where it runs MIG: `fleet.domain.serving_units`), run-level values
                   like the latency, higher is better; not critical (live throughput follows
                   what the load balancer sends a host as much as what the host can do): a drop
                   pauses. A host whose GPU count is unknown makes it could not measure, as do
                   sides that count differently (MIG instances against whole GPUs)

Before any latency is judged, each side must have served enough requests for its tail: the
judge's own rule, n * (1 - q) >= TAIL_EVENTS (p95: 200 requests, p99: 1000). Less traffic is
inconclusive, never a pass. A signal that could not be measured (Prometheus unreachable, a
query error, no series) makes the model, and the gate, "error": could not measure, which the
engine retries and then treats as inconclusive (the rollout pauses). No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.gates import GateVerdict, combine, from_judge
from fleet.domain.judge import (
    TAIL_EVENTS,
    JudgeConfig,
    MetricSpec,
    MetricVerdict,
    judge_counts,
    judge_metric,
    overall,
)
from fleet.domain.matrix.live_settings import LiveGateSettings


@dataclass(frozen=True)
class LiveSide:
    """What one side (canary or baseline hosts) served of one model in the window.

    `latency` maps a quantile to its values in ms (per host and step); `requests` and `errors`
    are counts over the window (None: not measured, or for `errors` not exported); `missing`
    says why a signal could not be measured."""

    hosts: tuple[str, ...]
    latency: Mapping[float, Sequence[float]] = field(default_factory=dict)
    queue: Sequence[float] = ()
    requests: float | None = None
    errors: float | None = None
    missing: tuple[str, ...] = ()
    throughput: Sequence[float] = ()  # requests/s per GPU (or MIG instance), per host and step
    unit_kinds: frozenset[str] = frozenset()  # "gpu", "mig": what the throughput is per


@dataclass(frozen=True)
class ModelVerdict:
    model: str
    verdict: GateVerdict
    reason: str
    metrics: tuple[MetricVerdict, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "verdict": self.verdict, "reason": self.reason,
                "metrics": [m.as_dict() for m in self.metrics]}


def tail_need(q: float) -> int:
    """Requests a side must have served before its `q` quantile is judged."""
    return math.ceil(TAIL_EVENTS / (1 - q) - 1e-9)


def _pct(q: float) -> str:
    return f"p{q * 100:g}"


def _too_little(name: str, q: float, nc: float, nb: float) -> MetricVerdict:
    need = tail_need(q)
    return MetricVerdict(name, "run", "inconclusive", True, "lower", 0.0, int(nc), int(nb),
                         reason=f"{name}: inconclusive: too little traffic, {int(nc)}/{int(nb)} "
                                f"requests, {_pct(q)} needs >= {need} per side")


def _units(kinds: frozenset[str]) -> str:
    return " and ".join({"gpu": "whole GPUs", "mig": "MIG instances"}[k] for k in sorted(kinds))


def judge_model(model: str, canary: LiveSide, baseline: LiveSide, settings: LiveGateSettings,
                *, errors_exported: bool, config: JudgeConfig | None = None) -> ModelVerdict:
    """One model's live verdict (see the module docstring)."""
    cfg = config or JudgeConfig()
    missing = [f"canary: {m}" for m in canary.missing] + \
              [f"baseline: {m}" for m in baseline.missing]
    if canary.requests is None or baseline.requests is None:
        missing.append("request counts not measured")
    for side, s in (("canary", canary), ("baseline", baseline)):
        if not s.missing and not any(math.isfinite(v) for v in s.throughput):
            missing.append(f"{side}: throughput per GPU not measured")
    if canary.unit_kinds and baseline.unit_kinds and canary.unit_kinds != baseline.unit_kinds:
        missing.append(f"throughput per GPU: the canary hosts count "
                       f"{_units(canary.unit_kinds)}, the baseline hosts "
                       f"{_units(baseline.unit_kinds)}")
    if missing:
        return ModelVerdict(model, "error",
                            f"model {model}: could not measure: {'; '.join(missing)}")
    assert canary.requests is not None and baseline.requests is not None
    nc, nb = max(canary.requests, 0.0), max(baseline.requests, 0.0)
    metrics: list[MetricVerdict] = []
    for q in settings.quantiles:
        name = f"latency_ms:{_pct(q)}"
        if min(nc, nb) < tail_need(q):
            metrics.append(_too_little(name, q, nc, nb))
            continue
        spec = MetricSpec(name, "lower", settings.latency_allowance, kind="run")
        metrics += judge_metric(spec, canary.latency.get(q, ()), baseline.latency.get(q, ()),
                                cfg)
    queue = MetricSpec("queue_ms:p95", "lower", settings.queue_allowance, critical=False,
                       kind="run")
    throughput = MetricSpec("throughput_per_gpu", "higher", settings.throughput_allowance,
                            critical=False, kind="run")
    if min(nc, nb) >= tail_need(0.95):
        metrics += judge_metric(queue, canary.queue, baseline.queue, cfg)
        metrics += judge_metric(throughput, canary.throughput, baseline.throughput, cfg)
    if errors_exported:
        if canary.errors is None or baseline.errors is None:
            return ModelVerdict(model, "error", f"model {model}: could not measure: error "
                                                "counts", tuple(metrics))
        spec = MetricSpec("error_rate", "lower", settings.error_allowance, kind="rate")
        ic, ib = round(nc), round(nb)
        metrics.append(judge_counts(spec, min(round(canary.errors), ic), ic,
                                    min(round(baseline.errors), ib), ib, cfg))
    verdict, why = overall(metrics)
    note = "" if errors_exported else " (no error counter exported: error rate not judged)"
    return ModelVerdict(model, from_judge(verdict),
                        f"model {model}: {verdict}: {why}{note}", tuple(metrics))


def live_verdict(models: Sequence[ModelVerdict], *, low_confidence: bool = False
                 ) -> tuple[GateVerdict, str]:
    """The gate over every model: the worst model's verdict; no model at all could not
    measure. The reason names the models that decided it."""
    if not models:
        return "error", "could not measure: no model served on the canary hosts"
    verdict = combine(m.verdict for m in models)
    deciding = [m for m in models if m.verdict == verdict] if verdict != "pass" else list(models)
    reason = "; ".join(m.reason for m in deciding)
    if low_confidence:
        reason += " (baseline: the same hosts before the change, lower confidence)"
    return verdict, reason
