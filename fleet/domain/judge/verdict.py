"""The canary's verdict over all its metrics, and the choice of its baseline (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet.domain.judge.metrics import judge_metric
from fleet.domain.judge.model import (
    BaselineSource,
    JudgeConfig,
    Judgement,
    MetricSpec,
    MetricVerdict,
    Verdict,
    count,
)
from fleet.domain.judge.specs import default_spec
from fleet.domain.judge.utilization import is_utilization, utilization_checks


def overall(metrics: Sequence[MetricVerdict]) -> tuple[Verdict, str]:
    """The canary's verdict from its metrics' (see the module docstring)."""
    crit_fail = [m for m in metrics if m.critical and m.verdict in ("fail", "nodata")]
    if crit_fail:
        return "fail", "; ".join(m.reason for m in crit_fail)
    soft = [m for m in metrics if m.verdict == "inconclusive"
            or (m.verdict == "fail" and not m.critical)]
    if soft:
        return "inconclusive", "; ".join(m.reason for m in soft)
    passed = [m for m in metrics if m.verdict == "pass"]
    if passed:
        return "pass", f"{len(passed)} check(s) within allowance"
    return "nodata", "nothing to judge: no metric has samples on both sides"


def judge(
    canary: Mapping[str, Sequence[float]],
    baseline: Mapping[str, Sequence[float]],
    specs: Sequence[MetricSpec] | Mapping[str, MetricSpec] | None = None,
    *,
    baseline_source: BaselineSource = "same-time",
    config: JudgeConfig | None = None,
    only_specified: bool = False,
) -> Judgement:
    """Judge every metric in either input (or only those in `specs` when `only_specified`).

    Metrics without a spec get `default_spec(name)`; one whose direction cannot be told from its
    name is reported inconclusive, never silently skipped. GPU utilization is judged whenever
    either side measured it, `only_specified` or not (`fleet.domain.judge.utilization`): it is
    the third measurement of every gate, next to latency and throughput.
    """

    by_name = dict(specs) if isinstance(specs, Mapping) else {s.name: s for s in specs or ()}
    names = list(by_name) if only_specified else sorted(
        set(canary) | set(baseline) | set(by_name))
    cfg = config or JudgeConfig()
    results: list[MetricVerdict] = []
    for name in names:
        if is_utilization(name):
            continue
        spec = by_name.get(name) or default_spec(name)
        nc, nb = count(canary.get(name)), count(baseline.get(name))
        if spec is None:
            results.append(MetricVerdict(
                name, "location", "inconclusive", False, "lower", 0.0, nc, nb,
                reason=f"{name}: inconclusive: no direction known for this name; "
                       "configure it (NAME:lower|higher:ALLOWANCE%)"))
            continue
        results.extend(judge_metric(spec, canary.get(name), baseline.get(name), config))
    results += utilization_checks(canary, baseline, by_name, cfg,
                                             required=cfg.require_utilization)
    verdict, reason = overall(results)
    if baseline_source == "history":
        reason += " (history baseline: lower confidence)"
    return Judgement(verdict, results, baseline_source, reason)


def choose_baseline(
    same_time: Mapping[str, Sequence[float]] | None,
    history: Mapping[str, Sequence[float]] | None,
    *, min_runs: int = 1,
) -> tuple[dict[str, list[float]], BaselineSource] | None:
    """Prefer a same-time baseline (same pool and GPU model, still on the old release).

    Falls back to the pool's recent history on the old release (flagged lower confidence);
    None when neither has data.
    """
    def usable(s: Mapping[str, Sequence[float]] | None) -> bool:
        return bool(s) and any(len(v) >= min_runs for v in s.values())  # type: ignore[union-attr]

    if usable(same_time):
        return {k: list(v) for k, v in same_time.items()}, "same-time"  # type: ignore[union-attr]
    if usable(history):
        return {k: list(v) for k, v in history.items()}, "history"  # type: ignore[union-attr]
    return None
