"""The canary judge: is the canary worse than its baseline by more than we allow? (pure)

Every metric is judged as a *non-inferiority* test on a confidence interval of its shift, never as
"no significant difference" (Kayenta's failure mode: a noisy, underpowered comparison reads as a
pass). With the shift oriented so that positive means worse and `a` the allowed degradation:

    pass          the interval lies entirely below `a` (and is not wider than `4a`)
    fail          the interval lies entirely above `a`
    inconclusive  anything else, including too few samples
    nodata        one side has no samples; a critical metric with no data fails the canary

How each kind of metric gets its interval (confidence 95% two-sided by default):

    location  per-request samples (latency): Hodges-Lehmann shift of log(canary) - log(baseline)
              with its distribution-free CI (the Mann-Whitney inversion), as a relative change.
    tail      p95/p99 of the same samples: bootstrap CI on the quantile ratio. Mann-Whitney is a
              location test and misses a change only in the tail (Kayenta #780); this catches it.
    rate      per-request 0/1 outcomes (errors): Newcombe's hybrid score CI on the difference of
              proportions with an absolute allowance, plus Fisher's exact p. Zero-heavy counts are
              where rank tests go blind (Kayenta #426); proportions are not.
    run       run-level values (throughput, TFLOP/s, a per-run p99): Welch t CI on the log ratio.

The overall verdict: a critical metric that fails (or has no data) fails the canary; a
non-critical failure or any inconclusive metric makes it inconclusive (pause for a human); it
passes when every judged metric passes; "nodata" when nothing could be judged at all.

Deterministic: the bootstrap uses a seeded generator. No I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

Direction = Literal["lower", "higher"]
Kind = Literal["location", "tail", "rate", "run"]
Verdict = Literal["pass", "fail", "inconclusive", "nodata"]
BaselineSource = Literal["same-time", "history"]

VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "inconclusive", "nodata")

# Below these counts an interval means little; the metric is inconclusive, never a pass.
MIN_SAMPLES: dict[Kind, int] = {"location": 20, "tail": 0, "rate": 20, "run": 3}
TAIL_EVENTS = 10  # a tail quantile needs at least this many samples beyond it: n * (1 - q) >= 10
WIDTH_FACTOR = 4.0  # an interval wider than WIDTH_FACTOR * allowance never passes
MIN_WIDTH = 0.01  # ... nor, for a zero allowance, wider than this
_EXACT_PAIRS = 4_000_000  # up to this many pairwise differences, compute them all


@dataclass(frozen=True)
class MetricSpec:
    """How to judge one metric.

    `allowance` is relative (0.05 = 5% worse allowed) except for `rate` metrics, where it is
    absolute (0.001 = 0.1 percentage point more errors). `tails` adds a `tail` check per quantile.
    """

    name: str
    direction: Direction = "lower"
    allowance: float = 0.05
    critical: bool = True
    kind: Kind = "location"
    tails: tuple[float, ...] = ()
    tail_allowance: float = 0.10

    def __post_init__(self) -> None:
        if self.direction not in ("lower", "higher"):
            raise ValueError(f"{self.name}: direction must be lower or higher")
        if not 0 <= self.allowance < (1 if self.kind == "rate" else 10):
            raise ValueError(f"{self.name}: allowance {self.allowance} out of range")
        if any(not 0.5 <= q < 1 for q in self.tails):
            raise ValueError(f"{self.name}: tail quantiles must be in [0.5, 1)")


@dataclass(frozen=True)
class JudgeConfig:
    confidence: float = 0.95
    resamples: int = 4000  # bootstrap replicates for tails
    seed: int = 0
    min_samples: Mapping[str, int] = field(
        default_factory=lambda: {str(k): v for k, v in MIN_SAMPLES.items()})
    # GPU utilization measured on neither side: inconclusive instead of judged without it
    require_utilization: bool = False


@dataclass(frozen=True)
class MetricVerdict:
    """One check of one metric: the numbers behind the verdict, and a one-line reason."""

    metric: str  # "latency_ms", or "latency_ms:p99" for a tail check
    kind: Kind
    verdict: Verdict
    critical: bool
    direction: Direction
    allowance: float
    n_canary: int
    n_baseline: int
    canary: float | None = None  # the statistic compared: median, quantile, mean or rate
    baseline: float | None = None
    shift: float | None = None  # canary vs baseline: relative (rate: absolute difference)
    low: float | None = None  # confidence interval of the shift
    high: float | None = None
    p_value: float | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "kind": self.kind, "verdict": self.verdict,
            "critical": self.critical, "direction": self.direction,
            "allowance": self.allowance, "n_canary": self.n_canary,
            "n_baseline": self.n_baseline, "canary": _num(self.canary),
            "baseline": _num(self.baseline), "shift": _num(self.shift),
            "interval": [_num(self.low), _num(self.high)], "p_value": _num(self.p_value),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    metrics: list[MetricVerdict]
    baseline_source: BaselineSource = "same-time"
    reason: str = ""

    @property
    def low_confidence(self) -> bool:
        """A history baseline differs in time (load, neighbours, thermals) from the canary."""
        return self.baseline_source == "history"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "reason": self.reason,
            "baseline_source": self.baseline_source, "low_confidence": self.low_confidence,
            "metrics": [m.as_dict() for m in self.metrics],
        }


def _num(v: float | None) -> float | None:
    if v is None or math.isnan(v):
        return None
    return float(v) if math.isfinite(v) else (math.inf if v > 0 else -math.inf)


# --- defaults by name ---------------------------------------------------------------------------

_RATE = re.compile(r"(^|[_.-])(errors?|err|fail(ed|ures?)?|timeouts?)([_.-]|$)", re.I)
_HIGHER = re.compile(
    r"throughput|goodput|tflops|gflops|flops|bandwidth|gbps|gb_?s|tb_?s|rps|qps|"
    r"per_s(ec)?|tokens?_s|ops|speed|score", re.I)
_LOWER = re.compile(r"latency|lat_|_ms|_us|_ns|_s$|seconds|duration|time|ttft|tpot|itl|wait",
                    re.I)
_SUMMARY = re.compile(r"[_.-](p\d{1,3}(\.\d+)?|mean|median|avg|max|min)$", re.I)


def default_spec(name: str) -> MetricSpec | None:
    """The spec a metric gets from its name alone, or None when its direction is unknowable.

    Errors: per-request 0/1 outcomes, at most 0.2 percentage point more. Throughput-like: higher
    is better, run level, 5%. Latency-like: lower is better, 5% on the median and 10% on p95/p99;
    a per-run summary (`latency_ms_p99`, `_mean`) is a run-level value and gets no tail checks.
    GPU utilization and PCIe throughput (`fleet.domain.judge_util`): higher, run level, 50%.
    """
    from fleet.domain import judge_util

    if judge_util.is_utilization(name):
        return judge_util.utilization_spec(name)
    if _RATE.search(name):
        return MetricSpec(name, "lower", 0.002, kind="rate")
    if _HIGHER.search(name):
        return MetricSpec(name, "higher", 0.05, kind="run")
    if _LOWER.search(name):
        if _SUMMARY.search(name):
            return MetricSpec(name, "lower", 0.05, kind="run")
        return MetricSpec(name, "lower", 0.05, kind="location", tails=(0.95, 0.99))
    return None


_FLAG = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]{1,128}):(?P<dir>lower|higher)"
    r"(:(?P<allow>\d+(\.\d+)?)%)?(?P<opts>(:(critical|noncritical|notails|run|location|rate))*)$")


def parse_metric_flag(text: str) -> MetricSpec:
    """`NAME:lower|higher[:ALLOWANCE%][:noncritical][:notails][:run|location|rate]`.

    The kind and tails default from the name; for a rate metric the percentage is absolute
    (`errors:lower:0.5%` allows 0.5 percentage point more errors). ValueError when malformed.
    """
    m = _FLAG.fullmatch(text.strip())
    if not m:
        raise ValueError(
            f"expected NAME:lower|higher[:ALLOWANCE%][:noncritical][:notails], got {text!r}")
    name = m["name"]
    base = default_spec(name) or MetricSpec(name)
    opts = {o for o in (m["opts"] or "").split(":") if o}
    kind: Kind = base.kind
    for k in ("run", "location", "rate"):
        if k in opts:
            kind = k
    allowance = float(m["allow"]) / 100 if m["allow"] is not None else (
        base.allowance if kind == base.kind else (0.002 if kind == "rate" else 0.05))
    tails = base.tails if kind == "location" and "notails" not in opts else ()
    if kind == "location" and not base.tails and "notails" not in opts and m["dir"] == "lower":
        tails = (0.95, 0.99)
    return MetricSpec(name, m["dir"], allowance,  # type: ignore[arg-type]
                      critical="noncritical" not in opts, kind=kind, tails=tails,
                      tail_allowance=max(base.tail_allowance, 2 * allowance))


# --- statistics ---------------------------------------------------------------------------------

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


def _order_stat_index(n: int, q: float) -> int:
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
    k = _order_stat_index(n, q) + 1
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
    qc, qb = cs[_order_stat_index(len(cs), q)], bs[_order_stat_index(len(bs), q)]
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


# --- judging ------------------------------------------------------------------------------------

def decide_shift(spec_dir: Direction, allowance: float, lo: float, hi: float,
            relative: bool = True) -> tuple[Verdict, str]:
    """Non-inferiority on an interval of the (signed, natural) shift; public because the sample
    sizing (sample_size.py) searches with the very rule the judge applies."""
    if math.isnan(lo) or math.isnan(hi):
        return "inconclusive", "no interval"
    worse_lo, worse_hi = (lo, hi) if spec_dir == "lower" else (-hi, -lo)
    limit = max(WIDTH_FACTOR * allowance, MIN_WIDTH)
    if worse_lo > allowance:
        return "fail", f"beyond {_fmt_allow(allowance, relative, spec_dir)} allowance"
    if worse_hi < allowance:
        if hi - lo > limit:
            return "inconclusive", (f"interval wider than {_pct(limit, signed=False)}: "
                                    "too noisy to pass")
        return "pass", f"within {_fmt_allow(allowance, relative, spec_dir)} allowance"
    return "inconclusive", f"straddles {_fmt_allow(allowance, relative, spec_dir)} allowance"


def _pct(v: float, signed: bool = True) -> str:
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    s = f"{v * 100:+.1f}%" if signed else f"{v * 100:.1f}%"
    return s.replace("+0.0%", "0.0%").replace("-0.0%", "0.0%")


def _fmt_allow(a: float, relative: bool, direction: Direction) -> str:
    sign = "+" if direction == "lower" else "-"
    return f"{sign}{a * 100:g}%" if relative else f"{sign}{a * 100:g} pp"


def _g(v: float) -> str:
    return f"{v:.4g}"


def _count(values: Sequence[float] | None) -> int:
    return 0 if values is None else len(values)


def _clean(values: Iterable[float] | None) -> NDArray[np.float64]:
    if values is None:
        return np.empty(0)
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    out: NDArray[np.float64] = arr[np.isfinite(arr)]
    return out


def _base(spec: MetricSpec, kind: Kind, name: str, nc: int, nb: int,
          allowance: float) -> MetricVerdict:
    return MetricVerdict(name, kind, "nodata", spec.critical, spec.direction, allowance, nc, nb)


def _too_few(v: MetricVerdict, need: int, what: str = "") -> MetricVerdict:
    return replace(v, verdict="inconclusive",
                   reason=f"{v.metric}: inconclusive: n={v.n_canary}/{v.n_baseline}, "
                          f"need >= {need} per side{what}")


def _nodata(v: MetricVerdict) -> MetricVerdict:
    side = "canary" if v.n_canary == 0 else "baseline"
    if v.n_canary == 0 and v.n_baseline == 0:
        side = "canary or baseline"
    effect = "fails the canary (critical)" if v.critical else "ignored (not critical)"
    return replace(v, verdict="nodata",
                   reason=f"{v.metric}: nodata: no {side} samples; {effect}")


def _relative(spec: MetricSpec, c: NDArray[np.float64], b: NDArray[np.float64],
              log_fn: Any, add_fn: Any) -> tuple[float, float, float]:
    """A shift as a relative change: in log space when all samples are positive."""
    if (c > 0).all() and (b > 0).all():
        d, lo, hi = log_fn(c, b)
        return math.expm1(d), _expm1(lo), _expm1(hi)
    scale = abs(float(np.median(b)))
    if scale == 0:
        return math.nan, math.nan, math.nan
    d, lo, hi = add_fn(c, b)
    return d / scale, lo / scale, hi / scale


def _expm1(v: float) -> float:
    return math.expm1(v) if math.isfinite(v) else (math.inf if v > 0 else -1.0)


def judge_location(spec: MetricSpec, c: NDArray[np.float64], b: NDArray[np.float64],
                   cfg: JudgeConfig) -> MetricVerdict:
    v = _base(spec, "location", spec.name, len(c), len(b), spec.allowance)
    if not len(c) or not len(b):
        return _nodata(v)
    need = cfg.min_samples.get("location", MIN_SAMPLES["location"])
    if min(len(c), len(b)) < need:
        return _too_few(v, need)
    conf = cfg.confidence

    def hl(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[float, float, float]:
        return hodges_lehmann(x, y, conf)

    shift, lo, hi = _relative(spec, c, b, lambda x, y: hl(np.log(x), np.log(y)), hl)
    mc, mb = float(np.median(c)), float(np.median(b))
    # Non-inferiority p: H0 "worse by at least the allowance", by Mann-Whitney on shifted data.
    p = _noninferiority_p(spec, c, b)
    verdict, why = decide_shift(spec.direction, spec.allowance, lo, hi)
    reason = (f"{spec.name}: {verdict}: n={len(c)}/{len(b)}, median {_g(mc)} vs {_g(mb)}, "
              f"shift {_pct(shift)} [{_pct(lo)}, {_pct(hi)}] {why}")
    return replace(v, verdict=verdict, canary=mc, baseline=mb, shift=shift, low=lo, high=hi,
                   p_value=p, reason=reason)


def _noninferiority_p(spec: MetricSpec, c: NDArray[np.float64],
                      b: NDArray[np.float64]) -> float | None:
    if not ((c > 0).all() and (b > 0).all()):
        return None
    lc, lb = np.log(c), np.log(b)
    if spec.direction == "lower":
        res = stats.mannwhitneyu(lc - math.log1p(spec.allowance), lb, alternative="less",
                                 method="asymptotic")
    else:
        res = stats.mannwhitneyu(lc - math.log1p(-min(spec.allowance, 0.99)), lb,
                                 alternative="greater", method="asymptotic")
    return float(res.pvalue)


def judge_tail(spec: MetricSpec, q: float, c: NDArray[np.float64], b: NDArray[np.float64],
               cfg: JudgeConfig) -> MetricVerdict:
    label = f"p{q * 100:g}"
    a = spec.tail_allowance
    v = _base(spec, "tail", f"{spec.name}:{label}", len(c), len(b), a)
    if not len(c) or not len(b):
        return _nodata(v)
    need = max(cfg.min_samples.get("tail", 0), math.ceil(TAIL_EVENTS / (1 - q) - 1e-9))
    if min(len(c), len(b)) < need:
        return _too_few(v, need, f" to judge {label}")
    qc = float(np.sort(c)[_order_stat_index(len(c), q)])
    qb = float(np.sort(b)[_order_stat_index(len(b), q)])
    positive = bool((c > 0).all() and (b > 0).all())
    if not positive and qb == 0:
        return replace(v, verdict="inconclusive", canary=qc, baseline=qb,
                       reason=f"{v.metric}: inconclusive: baseline {label} is 0, no ratio")
    d, lo, hi = bootstrap_quantile_ratio(c, b, q, confidence=cfg.confidence,
                                         resamples=cfg.resamples, seed=cfg.seed, log=positive)
    if positive:
        shift, lo, hi = math.expm1(d), math.expm1(lo), math.expm1(hi)
    else:
        shift, lo, hi = d / abs(qb), lo / abs(qb), hi / abs(qb)
    verdict, why = decide_shift(spec.direction, a, lo, hi)
    reason = (f"{v.metric}: {verdict}: n={len(c)}/{len(b)}, {label} {_g(qc)} vs {_g(qb)}, "
              f"ratio {_pct(shift)} [{_pct(lo)}, {_pct(hi)}] {why}")
    return replace(v, verdict=verdict, canary=qc, baseline=qb, shift=shift, low=lo, high=hi,
                   reason=reason)


def judge_rate(spec: MetricSpec, c: NDArray[np.float64], b: NDArray[np.float64],
               cfg: JudgeConfig) -> MetricVerdict:
    v = _base(spec, "rate", spec.name, len(c), len(b), spec.allowance)
    if not len(c) or not len(b):
        return _nodata(v)
    for side in (c, b):
        if not np.isin(side, (0.0, 1.0)).all():
            return replace(v, verdict="inconclusive",
                           reason=f"{spec.name}: inconclusive: a rate metric needs per-request "
                                  "0/1 outcomes, got other values")
    need = cfg.min_samples.get("rate", MIN_SAMPLES["rate"])
    if min(len(c), len(b)) < need:
        return _too_few(v, need)
    kc, kb = int(c.sum()), int(b.sum())
    nc, nb = len(c), len(b)
    if spec.direction == "higher":  # a success rate: judge the failures instead
        kc, kb = nc - kc, nb - kb
    d, lo, hi = newcombe_interval(kc, nc, kb, nb, cfg.confidence)
    p = float(stats.fisher_exact([[kc, nc - kc], [kb, nb - kb]], alternative="greater").pvalue)
    verdict, why = decide_shift("lower", spec.allowance, lo, hi, relative=False)
    what = "errors" if spec.direction == "lower" else "misses"
    reason = (f"{spec.name}: {verdict}: {what} {kc}/{nc} vs {kb}/{nb}, "
              f"difference {d * 100:+.2f} pp [{lo * 100:+.2f}, {hi * 100:+.2f}] {why} "
              f"(Fisher p={p:.2g})")
    return replace(v, verdict=verdict, canary=kc / nc, baseline=kb / nb, shift=d, low=lo,
                   high=hi, p_value=p, reason=reason)


def judge_run(spec: MetricSpec, c: NDArray[np.float64], b: NDArray[np.float64],
              cfg: JudgeConfig) -> MetricVerdict:
    v = _base(spec, "run", spec.name, len(c), len(b), spec.allowance)
    if not len(c) or not len(b):
        return _nodata(v)
    need = cfg.min_samples.get("run", MIN_SAMPLES["run"])
    if min(len(c), len(b)) < need:
        return _too_few(v, need, " (runs)")

    def welch_add(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[float, float, float]:
        d = float(x.mean() - y.mean())
        if x.var() == 0 and y.var() == 0:
            return d, d, d
        ci = stats.ttest_ind(x, y, equal_var=False).confidence_interval(cfg.confidence)
        return d, float(ci.low), float(ci.high)

    shift, lo, hi = _relative(
        spec, c, b, lambda x, y: welch_log_interval(x, y, cfg.confidence), welch_add)
    mc, mb = float(np.mean(c)), float(np.mean(b))
    verdict, why = decide_shift(spec.direction, spec.allowance, lo, hi)
    reason = (f"{spec.name}: {verdict}: runs={len(c)}/{len(b)}, mean {_g(mc)} vs {_g(mb)}, "
              f"shift {_pct(shift)} [{_pct(lo)}, {_pct(hi)}] {why}")
    return replace(v, verdict=verdict, canary=mc, baseline=mb, shift=shift, low=lo, high=hi,
                   reason=reason)


def judge_metric(spec: MetricSpec, canary: Iterable[float] | None,
                 baseline: Iterable[float] | None,
                 config: JudgeConfig | None = None) -> list[MetricVerdict]:
    """Every check of one metric: its main check, then one per tail quantile."""
    cfg = config or JudgeConfig()
    c, b = _clean(canary), _clean(baseline)
    if spec.kind == "rate":
        return [judge_rate(spec, c, b, cfg)]
    if spec.kind == "run":
        return [judge_run(spec, c, b, cfg)]
    if spec.kind == "tail":
        return [judge_tail(spec, q, c, b, cfg) for q in spec.tails or (0.99,)]
    return [judge_location(spec, c, b, cfg)] + [judge_tail(spec, q, c, b, cfg)
                                                for q in spec.tails]


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
    either side measured it, `only_specified` or not (`fleet.domain.judge_util`): it is the third
    measurement of every gate, next to latency and throughput.
    """
    from fleet.domain import judge_util

    by_name = dict(specs) if isinstance(specs, Mapping) else {s.name: s for s in specs or ()}
    names = list(by_name) if only_specified else sorted(
        set(canary) | set(baseline) | set(by_name))
    cfg = config or JudgeConfig()
    results: list[MetricVerdict] = []
    for name in names:
        if judge_util.is_utilization(name):
            continue
        spec = by_name.get(name) or default_spec(name)
        nc, nb = _count(canary.get(name)), _count(baseline.get(name))
        if spec is None:
            results.append(MetricVerdict(
                name, "location", "inconclusive", False, "lower", 0.0, nc, nb,
                reason=f"{name}: inconclusive: no direction known for this name; "
                       "configure it (NAME:lower|higher:ALLOWANCE%)"))
            continue
        results.extend(judge_metric(spec, canary.get(name), baseline.get(name), config))
    results += judge_util.utilization_checks(canary, baseline, by_name, cfg,
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
