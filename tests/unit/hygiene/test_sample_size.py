"""The samples each judged check needs (fleet.domain.sample_size) agree with the judge itself:
at the planned count a healthy comparison passes, one sample fewer it does not."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.domain.judge import MetricSpec, judge_metric
from fleet.domain.sample_size import check_needs, plan_samples


def _need(plan_checks: list, check: str) -> int | None:  # noqa: ANN001
    return next(c.need for c in plan_checks if c.check == check)


def test_zero_errors_against_zero_need_what_newcombe_needs() -> None:
    """0/n vs 0/n: Newcombe's upper bound is z^2/(n+z^2), under 0.2 pp from n = 1917."""
    spec = MetricSpec("errors", "lower", 0.002, kind="rate")
    (need,) = check_needs(spec)
    assert need.need == 1917 and "1917" in need.rule
    at = judge_metric(spec, [0.0] * 1917, [0.0] * 1917)[0]
    below = judge_metric(spec, [0.0] * 1916, [0.0] * 1916)[0]
    assert at.verdict == "pass", at.reason
    assert below.verdict == "inconclusive", below.reason


@pytest.mark.parametrize("q,need", [(0.95, 200), (0.99, 1000)])
def test_tail_needs_ten_samples_beyond_the_quantile(q: float, need: int) -> None:
    spec = MetricSpec("latency_ms", tails=(q,))
    needs = check_needs(spec)
    assert _need(needs, f"latency_ms:p{q * 100:g}") == need
    rng = np.random.default_rng(1)
    base = 10 * rng.lognormal(0, 0.02, 4 * need)
    ok = judge_metric(spec, 10 * rng.lognormal(0, 0.02, need), base)[1]
    short = judge_metric(spec, 10 * rng.lognormal(0, 0.02, need - 1), base)[1]
    assert ok.verdict == "pass", ok.reason
    assert short.verdict == "inconclusive" and f">= {need}" in short.reason


def test_minimum_counts_when_the_noise_is_unknown() -> None:
    assert _need(check_needs(MetricSpec("latency_ms")), "latency_ms") == 20
    assert _need(check_needs(MetricSpec("tflops", "higher", kind="run")), "tflops") == 3


def test_noisy_metric_needs_more_and_then_passes() -> None:
    """Log sd 0.3 with a 5% allowance: far more than the judge's minimum 20; at the planned
    count healthy samples pass (9 seeds of 10 at least: power 0.9), at a tenth they do not."""
    spec = MetricSpec("latency_ms")
    (main,) = check_needs(spec, sigma=0.3)
    assert main.need is not None and 500 < main.need < 2000, main
    passed = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        c, b = rng.lognormal(0, 0.3, main.need), rng.lognormal(0, 0.3, main.need)
        passed += judge_metric(spec, c, b)[0].verdict == "pass"
    assert passed >= 9
    rng = np.random.default_rng(0)
    few = judge_metric(spec, rng.lognormal(0, 0.3, main.need // 10),
                       rng.lognormal(0, 0.3, main.need // 10))[0]
    assert few.verdict == "inconclusive", few.reason


def test_checks_that_can_never_pass_need_none() -> None:
    (zero,) = check_needs(MetricSpec("errors", "lower", 0.0, kind="rate"))
    assert zero.need is None
    plan = plan_samples(["gpu_widgets", "tflops"])
    assert plan.need_of("gpu_widgets").need is None  # type: ignore[union-attr]
    assert plan.per_side == 3 and [c.check for c in plan.impossible] == ["gpu_widgets"]


def test_plan_takes_names_specs_and_noise_like_the_judge() -> None:
    rng = np.random.default_rng(2)
    base = {"tflops": list(100 * rng.normal(1, 0.02, 300)),
            "latency_ms": list(rng.lognormal(0, 0.02, 300)), "errors": [0.0] * 300}
    plan = plan_samples(base, noise_from=base)
    assert [c.check for c in plan.checks] == [
        "errors", "latency_ms", "latency_ms:p95", "latency_ms:p99", "tflops"]
    assert plan.per_side == 1917
    assert plan.as_dict()["per_side"] == 1917
    # a baseline with errors in it: a rate near 1% needs far more than 0 against 0
    with_errors = plan_samples(["errors"], noise_from={"errors": [1.0] * 10 + [0.0] * 990})
    assert with_errors.per_side > 10_000
