"""How many samples per side each judged check needs before the judge can pass it (pure).

The judge (`fleet.domain.judge`) never passes a check on thin evidence: below its minimum counts
a check is inconclusive, a tail quantile needs `TAIL_EVENTS` samples beyond it, and an interval
passes only when it lies below the allowance and is narrower than `WIDTH_FACTOR` times it. This
module turns those rules around: for a metric and what the baseline says about its noise, the
smallest count per side with which a healthy pool (no real shift) passes.

    location  max(the judge's minimum (20), n from the Hodges-Lehmann interval's width:
              Var(shift) = pi/3 * sigma^2 * 2/n on log samples, sigma from the baseline)
    run       max(the judge's minimum (3), n from the Welch interval: Var = sigma^2 * 2/n)
    tail q    max(ceil(TAIL_EVENTS / (1 - q)) (p95: 200, p99: 1000), n from the quantile's
              asymptotic variance q(1-q) / (n phi(z_q)^2) under a log-normal model)
    rate      the smallest n whose Newcombe interval, computed by the judge's own function at the
              baseline's error rate, passes the judge's own decision rule (0 errors against 0
              errors with a 0.2 pp allowance: 1917), and at a non-zero rate at least the normal
              approximation's n for the requested power

"Passes with the requested power" (0.9 by default): the interval's far end must clear the
allowance by (z_conf + z_power) standard errors, as in a non-inferiority sample-size formula.
A check that can never pass (zero allowance, no direction known for its name) needs `None`.
No I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from fleet.domain.judge import (
    MIN_SAMPLES,
    MIN_WIDTH,
    TAIL_EVENTS,
    WIDTH_FACTOR,
    JudgeConfig,
    Kind,
    MetricSpec,
    decide_shift,
    default_spec,
    newcombe_interval,
)

POWER = 0.9
MAX_SEARCH = 10_000_000  # a rate check that needs more than this per side is reported as such


@dataclass(frozen=True)
class CheckNeed:
    """The samples per side one check of the judge needs, and the rule that says so."""

    check: str  # "latency_ms", "latency_ms:p99", "errors": as the judge names its checks
    kind: Kind
    need: int | None  # None: this check can never pass
    rule: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "kind": self.kind, "need": self.need, "rule": self.rule}


@dataclass(frozen=True)
class SamplePlan:
    """Every check's need; `per_side` is what a run must collect for all of them to pass."""

    checks: tuple[CheckNeed, ...]

    @property
    def per_side(self) -> int:
        """The largest finite need (0 when nothing is judged); never-passing checks excluded."""
        return max((c.need for c in self.checks if c.need is not None), default=0)

    @property
    def impossible(self) -> list[CheckNeed]:
        return [c for c in self.checks if c.need is None]

    def need_of(self, check: str) -> CheckNeed | None:
        return next((c for c in self.checks if c.check == check), None)

    def as_dict(self) -> dict[str, Any]:
        return {"per_side": self.per_side, "checks": [c.as_dict() for c in self.checks]}


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(1 - (1 - confidence) / 2))


def _margin(direction: str, allowance: float) -> float:
    """The allowance as a distance in log space on the worse side."""
    if direction == "lower":
        return math.log1p(allowance)
    return -math.log1p(-min(allowance, 0.999999))


def _noise_n(var_factor: float, sigma: float | None, margin: float, limit: float,
             confidence: float, power: float) -> int:
    """n per side such that (z_conf + z_power) * se <= margin and 2 * z_conf * se <= limit,
    with se = sigma * sqrt(var_factor * 2 / n) (equal sides)."""
    if sigma is None or sigma <= 0 or margin <= 0:
        return 0
    zc, zp = _z(confidence), float(stats.norm.ppf(power))
    k = max(((zc + zp) / margin) ** 2, (2 * zc / limit) ** 2)
    return math.ceil(2 * var_factor * sigma ** 2 * k - 1e-9)


def _rate_need(allowance: float, confidence: float, p0: float, power: float,
               minimum: int) -> tuple[int | None, str]:
    if allowance <= 0:
        return None, "a zero allowance never passes a rate"

    def passes(n: int) -> bool:
        k = min(n, round(p0 * n))
        _d, lo, hi = newcombe_interval(k, n, k, n, confidence)
        return decide_shift("lower", allowance, lo, hi, relative=False)[0] == "pass"

    hi_n = max(minimum, 1)
    while not passes(hi_n):
        if hi_n >= MAX_SEARCH:
            return None, f"no count up to {MAX_SEARCH} passes at a {p0:.3%} error rate"
        hi_n = min(hi_n * 2, MAX_SEARCH)
    lo_n = hi_n // 2
    while hi_n - lo_n > 1:  # smallest passing n in (lo_n, hi_n]
        mid = (lo_n + hi_n) // 2
        if passes(mid):
            hi_n = mid
        else:
            lo_n = mid
    n = max(hi_n, minimum)
    if p0 <= 0:
        return n, (f"0 errors against 0 must put Newcombe's upper bound under "
                   f"+{allowance * 100:g} pp: n >= {n}")
    zc, zp = _z(confidence), float(stats.norm.ppf(power))
    approx = math.ceil((zc + zp) ** 2 * 2 * p0 * (1 - p0) / allowance ** 2)
    return max(n, approx), (f"error rate {p0:.3%}: Newcombe's interval under "
                            f"+{allowance * 100:g} pp with power {power:g}")


def check_needs(spec: MetricSpec, config: JudgeConfig | None = None, *,
                sigma: float | None = None, base_rate: float = 0.0,
                power: float = POWER) -> list[CheckNeed]:
    """The need of each check the judge makes of `spec` (its main check, then its tails).

    `sigma`: the standard deviation of log(samples) (None: unknown, the judge's minimum counts
    only); `base_rate`: the baseline's share of failed requests, for a rate metric.
    """
    cfg = config or JudgeConfig()
    mins = cfg.min_samples
    conf = cfg.confidence
    out: list[CheckNeed] = []
    if spec.kind == "rate":
        n, why = _rate_need(spec.allowance, conf, base_rate, power,
                            mins.get("rate", MIN_SAMPLES["rate"]))
        return [CheckNeed(spec.name, "rate", n, why)]
    if spec.kind in ("location", "run"):
        kind: Kind = spec.kind
        minimum = mins.get(kind, MIN_SAMPLES[kind])
        if spec.allowance <= 0:
            out.append(CheckNeed(spec.name, kind, None, "a zero allowance never passes"))
        else:
            limit = max(WIDTH_FACTOR * spec.allowance, MIN_WIDTH)
            factor = math.pi / 3 if kind == "location" else 1.0
            n_noise = _noise_n(factor, sigma, _margin(spec.direction, spec.allowance), limit,
                               conf, power)
            n = max(minimum, n_noise)
            what = "Hodges-Lehmann" if kind == "location" else "Welch"
            sign = "+" if spec.direction == "lower" else "-"
            why = (f"the judge's minimum {minimum}" if n_noise <= minimum else
                   f"{what} interval inside {sign}{spec.allowance * 100:g}% at log sd "
                   f"{sigma:.3g} with power {power:g}")
            out.append(CheckNeed(spec.name, kind, n, why))
    tails = spec.tails if spec.kind != "tail" else (spec.tails or (0.99,))
    for q in tails:
        label = f"{spec.name}:p{q * 100:g}"
        a = spec.tail_allowance
        rule_n = max(mins.get("tail", 0), math.ceil(TAIL_EVENTS / (1 - q) - 1e-9))
        if a <= 0:
            out.append(CheckNeed(label, "tail", None, "a zero allowance never passes"))
            continue
        dens = float(stats.norm.pdf(stats.norm.ppf(q)))
        n_noise = _noise_n(q * (1 - q) / dens ** 2, sigma, _margin(spec.direction, a),
                           max(WIDTH_FACTOR * a, MIN_WIDTH), conf, power)
        n = max(rule_n, n_noise)
        why = (f"n * (1 - {q:g}) >= {TAIL_EVENTS} samples beyond the quantile: n >= {rule_n}"
               if n_noise <= rule_n else
               f"quantile interval inside +{a * 100:g}% at log sd {sigma:.3g} with power "
               f"{power:g}")
        out.append(CheckNeed(label, "tail", n, why))
    return out


def log_sigma(values: Sequence[float] | None) -> float | None:
    """The standard deviation of log(values) (positive, finite ones), or None when unknown."""
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if len(arr) < 3:
        return None
    return float(np.log(arr).std(ddof=1))


def error_rate(values: Sequence[float] | None) -> float:
    """The share of 1s among 0/1 outcomes (0.0 when there are none or they are not 0/1)."""
    if not values:
        return 0.0
    arr = np.asarray(values, dtype=float)
    if not np.isin(arr, (0.0, 1.0)).all():
        return 0.0
    return float(arr.mean())


def plan_samples(names: Iterable[str], *, noise_from: Mapping[str, Sequence[float]] | None = None,
                 specs: Mapping[str, MetricSpec] | None = None,
                 config: JudgeConfig | None = None, power: float = POWER) -> SamplePlan:
    """The need of every check the judge will make of these metrics.

    Each metric gets its spec from `specs`, else from its name as the judge does; its noise (log
    standard deviation, error rate) from `noise_from` (the baseline's samples, usually).
    """
    noise = noise_from or {}
    checks: list[CheckNeed] = []
    for name in sorted(set(names)):
        spec = (specs or {}).get(name) or default_spec(name)
        if spec is None:
            checks.append(CheckNeed(name, "location", None,
                                    "no direction known for this name: the judge never passes it"))
            continue
        values = noise.get(name)
        checks.extend(check_needs(spec, config, sigma=log_sigma(values),
                                  base_rate=error_rate(values) if spec.kind == "rate" else 0.0,
                                  power=power))
    return SamplePlan(tuple(checks))
