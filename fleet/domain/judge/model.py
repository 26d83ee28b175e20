"""The judge's vocabulary: metric specs, settings, verdicts, and the limits below which an
interval means little (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

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




def count(values: Sequence[float] | None) -> int:
    return 0 if values is None else len(values)


def clean(values: Iterable[float] | None) -> NDArray[np.float64]:
    """The finite values, as an array (NaN and inf are no measurement)."""
    if values is None:
        return np.empty(0)
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=float)
    out: NDArray[np.float64] = arr[np.isfinite(arr)]
    return out
