"""The intervals behind the judge's verdicts: Hodges-Lehmann with its Mann-Whitney interval,
a bootstrap of quantile ratios, Newcombe's interval on proportions, Welch's t on log ratios (pure,
seeded)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray
from scipy import stats

_EXACT_PAIRS = 4_000_000  # up to this many pairwise differences, compute them all


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(1 - (1 - confidence) / 2))


def _kth_pairwise(x: NDArray[np.float64], y: NDArray[np.float64], ks: Sequence[int]) -> list[float]:
    """The k-th smallest (1-based) of the m*n differences x_i - y_j, without forming them all.

    x and y are sorted. Bisection on the value with a vectorised count, O((m + n) log) per step;
    small inputs are computed exactly.
    """
    m, n = len(x), len(y)
    if m * n <= _EXACT_PAIRS:
        d = np.subtract.outer(x, y).ravel()
        kk = sorted({k - 1 for k in ks})
        part = np.partition(d, kk)
        return [float(part[k - 1]) for k in ks]
    total = m * n
    # Bracket each rank from a seeded subsample of pairs, then bisect inside the bracket.
    rng = np.random.default_rng(0)
    sample = np.sort(x[rng.integers(0, m, 200_000)] - y[rng.integers(0, n, 200_000)])
    s_n = len(sample)

    def count_le(d: float) -> int:
        return total - int(np.searchsorted(y, x - d, side="left").sum())

    found: dict[int, float] = {}
    for k in sorted(set(ks)):
        f = k / total
        margin = 6 * math.sqrt(f * (1 - f) / s_n) + 2 / s_n
        lo = float(sample[max(0, math.floor((f - margin) * s_n))])
        hi = float(sample[min(s_n - 1, math.ceil((f + margin) * s_n))])
        if not count_le(lo) < k <= count_le(hi):
            lo, hi = float(x[0] - y[-1]) - 1.0, float(x[-1] - y[0])
        while True:
            mid = (lo + hi) / 2
            if mid in (lo, hi) or hi - lo <= 1e-9 * max(1.0, abs(mid)):
                break
            if count_le(mid) >= k:
                hi = mid
            else:
                lo = mid
        found[k] = hi
    return [found[k] for k in ks]


def hodges_lehmann(x: NDArray[np.float64], y: NDArray[np.float64],
                   confidence: float = 0.95) -> tuple[float, float, float]:
    """Hodges-Lehmann shift of x against y and its Mann-Whitney confidence interval.

    The interval is [d_(C+1), d_(mn-C)] of the ordered pairwise differences with
    C = floor(mn/2 - z * sqrt(mn(m+n+1)/12)) (normal approximation, no tie correction); when
    C < 0 the interval is unbounded. Inputs need not be sorted.
    """
    xs, ys = np.sort(np.asarray(x, float)), np.sort(np.asarray(y, float))
    m, n = len(xs), len(ys)
    mn = m * n
    c = math.floor(mn / 2 - _z(confidence) * math.sqrt(mn * (m + n + 1) / 12))
    # The median of an even count is the mean of the two middle values; for large inputs
    # they are indistinguishable and one search is enough.
    ks = [(mn + 1) // 2, mn // 2 + 1] if mn <= _EXACT_PAIRS else [(mn + 1) // 2] * 2
    if c >= 0:
        ks += [c + 1, mn - c]
    vals = _kth_pairwise(xs, ys, ks)
    est = (vals[0] + vals[1]) / 2
    if c < 0:
        return est, -math.inf, math.inf
    return est, vals[2], vals[3]


def order_stat_index(n: int, q: float) -> int:
    """0-based index of the q-quantile by the inverted CDF (numpy's `inverted_cdf`)."""
    return min(n - 1, max(0, math.ceil(q * n) - 1))


def _boot_order_stat(sorted_x: NDArray[np.float64], q: float, rng: np.random.Generator,
                     resamples: int) -> NDArray[np.float64]:
    """Bootstrap replicates of the q-quantile without drawing whole resamples.

    The k-th smallest of n draws from the empirical distribution is x_(ceil(U n)) with
    U ~ Beta(k, n - k + 1) (the quantile transform of a uniform order statistic), so this is the
    exact bootstrap distribution at O(resamples) cost instead of O(resamples * n).
    """
    n = len(sorted_x)
    k = order_stat_index(n, q) + 1
    u = rng.beta(k, n - k + 1, size=resamples)
    idx = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    return sorted_x[idx]


def bootstrap_quantile_ratio(
    canary: NDArray[np.float64], baseline: NDArray[np.float64], q: float, *,
    confidence: float = 0.95, resamples: int = 4000, seed: int = 0, log: bool = True,
) -> tuple[float, float, float]:
    """log(q-quantile(canary) / q-quantile(baseline)) and its percentile bootstrap CI.

    With `log=False` the plain difference of the quantiles instead (for non-positive samples).
    Quantiles are order statistics (numpy's `inverted_cdf`). Seeded: same inputs, same interval.
    """
    rng = np.random.default_rng(seed)
    cs, bs = np.sort(canary), np.sort(baseline)
    qc, qb = cs[order_stat_index(len(cs), q)], bs[order_stat_index(len(bs), q)]
    rc = _boot_order_stat(cs, q, rng, resamples)
    rb = _boot_order_stat(bs, q, rng, resamples)
    if log:
        point, diff = math.log(qc) - math.log(qb), np.log(rc) - np.log(rb)
    else:
        point, diff = float(qc - qb), rc - rb
    alpha = 1 - confidence
    lo, hi = np.quantile(diff, [alpha / 2, 1 - alpha / 2])
    return float(point), float(lo), float(hi)


def newcombe_interval(k1: int, n1: int, k2: int, n2: int,
                      confidence: float = 0.95) -> tuple[float, float, float]:
    """p1 - p2 and Newcombe's hybrid score interval (method 10), from scipy's Wilson intervals."""
    p1, p2 = k1 / n1, k2 / n2
    ci1 = stats.binomtest(k1, n1).proportion_ci(confidence, method="wilson")
    ci2 = stats.binomtest(k2, n2).proportion_ci(confidence, method="wilson")
    d = p1 - p2
    lo = d - math.sqrt((p1 - ci1.low) ** 2 + (ci2.high - p2) ** 2)
    hi = d + math.sqrt((ci1.high - p1) ** 2 + (p2 - ci2.low) ** 2)
    return d, lo, hi


def welch_log_interval(canary: NDArray[np.float64], baseline: NDArray[np.float64],
                       confidence: float = 0.95) -> tuple[float, float, float]:
    """mean(log canary) - mean(log baseline) and its Welch t interval."""
    a, b = np.log(canary), np.log(baseline)
    d = float(a.mean() - b.mean())
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    se2 = va / len(a) + vb / len(b)
    if se2 == 0:
        return d, d, d
    res = stats.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(confidence)
    return d, float(ci.low), float(ci.high)

