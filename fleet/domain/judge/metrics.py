"""One metric judged by its kind: location, tail, rate or run (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from fleet.domain.judge.model import (
    MIN_SAMPLES,
    TAIL_EVENTS,
    JudgeConfig,
    Kind,
    MetricSpec,
    MetricVerdict,
    clean,
)
from fleet.domain.judge.rule import decide_shift, pct
from fleet.domain.judge.stats import (
    bootstrap_quantile_ratio,
    hodges_lehmann,
    newcombe_interval,
    order_stat_index,
    welch_log_interval,
)


def _g(v: float) -> str:
    return f"{v:.4g}"




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
              f"shift {pct(shift)} [{pct(lo)}, {pct(hi)}] {why}")
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
    qc = float(np.sort(c)[order_stat_index(len(c), q)])
    qb = float(np.sort(b)[order_stat_index(len(b), q)])
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
              f"ratio {pct(shift)} [{pct(lo)}, {pct(hi)}] {why}")
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
    return judge_counts(spec, int(c.sum()), len(c), int(b.sum()), len(b), cfg)


def judge_counts(spec: MetricSpec, kc: int, nc: int, kb: int, nb: int,
                 cfg: JudgeConfig | None = None) -> MetricVerdict:
    """A rate metric from counts: `kc` of `nc` canary requests (`kb` of `nb` baseline ones)
    were errors (successes for a `higher` metric). What `judge_rate` does with 0/1 samples,
    for sources that count requests instead of listing them (a Prometheus counter)."""
    cfg = cfg or JudgeConfig()
    v = _base(spec, "rate", spec.name, nc, nb, spec.allowance)
    if not nc or not nb:
        return _nodata(v)
    if not (0 <= kc <= nc and 0 <= kb <= nb):
        return replace(v, verdict="inconclusive",
                       reason=f"{spec.name}: inconclusive: counts out of range "
                              f"({kc}/{nc} vs {kb}/{nb})")
    need = cfg.min_samples.get("rate", MIN_SAMPLES["rate"])
    if min(nc, nb) < need:
        return _too_few(v, need)
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
              f"shift {pct(shift)} [{pct(lo)}, {pct(hi)}] {why}")
    return replace(v, verdict=verdict, canary=mc, baseline=mb, shift=shift, low=lo, high=hi,
                   reason=reason)


def judge_metric(spec: MetricSpec, canary: Iterable[float] | None,
                 baseline: Iterable[float] | None,
                 config: JudgeConfig | None = None) -> list[MetricVerdict]:
    """Every check of one metric: its main check, then one per tail quantile."""
    cfg = config or JudgeConfig()
    c, b = clean(canary), clean(baseline)
    if spec.kind == "rate":
        return [judge_rate(spec, c, b, cfg)]
    if spec.kind == "run":
        return [judge_run(spec, c, b, cfg)]
    if spec.kind == "tail":
        return [judge_tail(spec, q, c, b, cfg) for q in spec.tails or (0.99,)]
    return [judge_location(spec, c, b, cfg)] + [judge_tail(spec, q, c, b, cfg)
                                                for q in spec.tails]

