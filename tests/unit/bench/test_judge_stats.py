"""The judge's hand-written statistics, cross-checked against scipy and published values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fleet.domain import judge as J
from fleet.domain.judge import stats as judge_stats


def _z(conf: float = 0.95) -> float:
    return float(stats.norm.ppf(1 - (1 - conf) / 2))


@pytest.mark.parametrize("m,n,seed", [(20, 20, 1), (37, 55, 2), (200, 150, 3)])
def test_hodges_lehmann_point_is_the_median_of_pairwise_differences(m: int, n: int,
                                                                     seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.normal(0.3, 1, m), rng.normal(0, 1, n)
    est, _, _ = J.hodges_lehmann(x, y)
    assert est == pytest.approx(float(np.median(np.subtract.outer(x, y))))


def test_interval_inverts_mann_whitney() -> None:
    """Just inside the interval scipy's two-sided test does not reject; just outside it does."""
    rng = np.random.default_rng(7)
    x, y = rng.normal(0.5, 1, 60), rng.normal(0, 1, 45)
    _, lo, hi = J.hodges_lehmann(x, y, 0.95)
    eps = 1e-9

    def p(shift: float) -> float:
        return float(stats.mannwhitneyu(x - shift, y, method="asymptotic",
                                        use_continuity=False).pvalue)

    assert p(lo - eps) <= 0.05 < p(lo + eps)
    assert p(hi + eps) <= 0.05 < p(hi - eps)


def test_large_sample_search_matches_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    x, y = rng.lognormal(0, 0.3, 900), rng.lognormal(0.05, 0.3, 800)
    exact = J.hodges_lehmann(x, y)
    monkeypatch.setattr(judge_stats, "_EXACT_PAIRS", 10)  # force the bisection path
    searched = J.hodges_lehmann(x, y)
    for a, b in zip(exact[1:], searched[1:], strict=True):
        assert b == pytest.approx(a, abs=1e-8)
    assert searched[0] == pytest.approx(exact[0], abs=1e-3)  # one middle value vs their mean


def test_bootstrap_quantile_ratio_agrees_with_scipy_bootstrap() -> None:
    rng = np.random.default_rng(5)
    c, b = rng.lognormal(0.1, 0.3, 400), rng.lognormal(0.0, 0.3, 400)
    point, lo, hi = J.bootstrap_quantile_ratio(c, b, 0.95, resamples=8000, seed=1)

    def stat(cc: np.ndarray, bb: np.ndarray, axis: int = -1) -> np.ndarray:
        return (np.log(np.quantile(cc, 0.95, axis=axis, method="inverted_cdf"))
                - np.log(np.quantile(bb, 0.95, axis=axis, method="inverted_cdf")))

    ref = stats.bootstrap((c, b), stat, method="percentile", n_resamples=4000,
                          random_state=np.random.default_rng(2), vectorized=True)
    assert point == pytest.approx(float(stat(c, b)))
    width = ref.confidence_interval.high - ref.confidence_interval.low
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.15 * width)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.15 * width)


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(5)
    c, b = rng.lognormal(0.1, 0.3, 1000), rng.lognormal(0.0, 0.3, 1000)
    assert J.bootstrap_quantile_ratio(c, b, 0.99, seed=3) == J.bootstrap_quantile_ratio(
        c, b, 0.99, seed=3)


def test_newcombe_matches_the_published_example() -> None:
    # Newcombe (1998), Stat Med 17:873, table II example (a): 56/70 vs 48/80, method 10.
    d, lo, hi = J.newcombe_interval(56, 70, 48, 80)
    assert d == pytest.approx(0.2)
    assert lo == pytest.approx(0.0524, abs=5e-4)
    assert hi == pytest.approx(0.3339, abs=5e-4)


def test_newcombe_zero_counts_are_finite() -> None:
    d, lo, hi = J.newcombe_interval(0, 10, 0, 20)
    assert d == 0 and -1 < lo < 0 < hi < 1


def test_welch_interval_matches_the_formula() -> None:
    a = np.array([90.1, 89.7, 90.4, 90.0])
    b = np.array([100.0, 100.6, 99.5, 100.3])
    d, lo, hi = J.welch_log_interval(a, b)
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / 4, lb.var(ddof=1) / 4
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 3)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert d == pytest.approx(la.mean() - lb.mean())
    assert (lo, hi) == pytest.approx((d - half, d + half))


def test_identical_constant_runs_pass() -> None:
    j = J.judge({"throughput": [100.0] * 3}, {"throughput": [100.0] * 3})
    assert j.verdict == "pass"


@pytest.mark.parametrize("name,direction,kind,tails", [
    ("latency_ms", "lower", "location", (0.95, 0.99)),
    ("ttft_ms", "lower", "location", (0.95, 0.99)),
    ("latency_ms_p99", "lower", "run", ()),
    ("throughput", "higher", "run", ()),
    ("goodput_rps", "higher", "run", ()),
    ("matmul_bf16_tflops", "higher", "run", ()),
    ("d2d_bandwidth_gbps", "higher", "run", ()),
    ("errors", "lower", "rate", ()),
    ("http_errors", "lower", "rate", ()),
])
def test_defaults_by_name(name: str, direction: str, kind: str, tails: tuple[float, ...]) -> None:
    spec = J.default_spec(name)
    assert spec is not None
    assert (spec.direction, spec.kind, spec.tails) == (direction, kind, tails)


def test_unknown_name_has_no_default() -> None:
    assert J.default_spec("widgets") is None


def test_parse_metric_flag() -> None:
    s = J.parse_metric_flag("latency_ms:lower:3%")
    assert (s.direction, s.allowance, s.kind, s.critical, s.tails) == (
        "lower", 0.03, "location", True, (0.95, 0.99))
    s = J.parse_metric_flag("tokens_per_s:higher:2.5%:noncritical")
    assert (s.direction, s.allowance, s.kind, s.critical) == ("higher", 0.025, "run", False)
    s = J.parse_metric_flag("errors:lower:0.5%")
    assert (s.kind, s.allowance) == ("rate", 0.005)
    assert J.parse_metric_flag("latency_ms:lower:notails").tails == ()


@pytest.mark.parametrize("bad", ["latency_ms", "latency_ms:up:5%", "x:lower:5", "x:lower:5%:bogus",
                                 "a b:lower:5%"])
def test_parse_metric_flag_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        J.parse_metric_flag(bad)


def test_judgement_is_deterministic_and_json_ready() -> None:
    rng = np.random.default_rng(1)
    c = {"latency_ms": list(rng.lognormal(2.3, 0.2, 3000))}
    b = {"latency_ms": list(rng.lognormal(2.3, 0.2, 3000))}
    one, two = J.judge(c, b).as_dict(), J.judge(c, b).as_dict()
    assert one == two
    assert {"verdict", "metrics", "baseline_source", "low_confidence", "reason"} <= set(one)


def test_non_positive_samples_use_an_additive_shift() -> None:
    rng = np.random.default_rng(2)
    c = {"queue_delta_ms": list(rng.normal(0.0, 1.0, 2000) + 10)}
    c["queue_delta_ms"][:5] = [-1.0] * 5
    b = {"queue_delta_ms": list(rng.normal(0.0, 1.0, 2000) + 10)}
    j = J.judge(c, b, [J.MetricSpec("queue_delta_ms", "lower", 0.05, tails=(0.95,))])
    assert j.verdict == "pass", j.reason


def test_choose_baseline_prefers_same_time() -> None:
    same = {"throughput": [1.0, 2.0]}
    hist = {"throughput": [3.0]}
    assert J.choose_baseline(same, hist) == (same, "same-time")
    assert J.choose_baseline({}, hist) == (hist, "history")
    assert J.choose_baseline(None, {}) is None


def test_history_baseline_is_flagged() -> None:
    j = J.judge({"throughput": [1.0, 1.0, 1.0]}, {"throughput": [1.0, 1.0, 1.0]},
                baseline_source="history")
    assert j.low_confidence and "lower confidence" in j.reason
