"""The utilization check of the canary judge: did the candidate's GPUs do the work? (pure)

Latency and throughput can stay within bounds while the work moved off the GPU: an inference
runtime that lost its CUDA provider computes on the CPU, a small model hides the difference, and
every dashboard stays green. So every benchmark gate also judges what NVML saw during the run
(`fleet/bench/gpu_util.py` samples it on each benchmarked host):

    gpu_util_pct      SM utilization %, mean over the host's GPUs per tick      critical
    gpu_mem_util_pct  memory-controller utilization %                           not critical
    pcie_rx_mbps      PCIe MB/s into the GPUs (where NVML has it)               not critical
    pcie_tx_mbps      PCIe MB/s out of the GPUs                                 not critical

Each is a non-inferiority check on the candidate's mean against the baseline's: higher is better,
and the candidate may use up to `allowance` (default 50%) less than the baseline, a wide margin
on purpose, since a faster release legitimately keeps its GPUs busy for less time; a GPU that
idles while serving is 90-100% down. The interval is Welch's t interval on the difference of the
per-tick means, relative to the baseline mean (ticks are not independent: the interval is
somewhat optimistic, the margin is what protects against that).

An interval too wide to decide (it straddles the allowance: per-tick figures swing with the phase
a tick lands in, and a short benchmark has few ticks) passes when the candidate's mean is within
half the allowance of the baseline's (-25% by default): that is no sign of idle GPUs, and noise
around "no change" must not pause a rollout. Further down it stays inconclusive for GPU
utilization and is ignored ("nodata") for the non-critical figures. An idle candidate has no
such interval: its samples are all near 0, so the interval sits far below the allowance and fails.

Never a silent pass when data is missing (GPU utilization; the non-critical metrics are "nodata",
shown with their reason and ignored):
    one side has samples, the other none   inconclusive (NVML unreadable on that side?)
    the baseline itself is idle            inconclusive: an idle baseline cannot show a drop
    neither side has samples               nothing added, unless `required` (JudgeConfig
                                           .require_utilization): inconclusive
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from fleet.domain.judge.model import (
    MIN_SAMPLES,
    JudgeConfig,
    MetricSpec,
    MetricVerdict,
    Verdict,
    clean,
)
from fleet.domain.judge.rule import decide_shift, pct

GPU_UTIL = "gpu_util_pct"
UTIL_ALLOWANCE = 0.5
# metric -> (label in reasons, critical, the baseline mean below which it is "idle")
UTILIZATION: dict[str, tuple[str, bool, float]] = {
    GPU_UTIL: ("GPU utilization", True, 1.0),
    "gpu_mem_util_pct": ("GPU memory-controller utilization", False, 1.0),
    "pcie_rx_mbps": ("PCIe throughput into the GPUs", False, 0.1),
    "pcie_tx_mbps": ("PCIe throughput out of the GPUs", False, 0.1),
}


def is_utilization(name: str) -> bool:
    return name in UTILIZATION


def utilization_spec(name: str, allowance: float = UTIL_ALLOWANCE) -> MetricSpec:
    """The spec of a utilization metric: higher is better, run level, a wide allowance."""
    return MetricSpec(name, "higher", allowance, critical=UTILIZATION[name][1], kind="run")


def _unit(name: str) -> str:
    return "%" if name.endswith("_pct") else " MB/s"


def judge_utilization(spec: MetricSpec, canary: Sequence[float] | None,
                      baseline: Sequence[float] | None,
                      config: JudgeConfig | None = None) -> MetricVerdict:
    """One utilization metric of the candidate against its baseline (see the module doc)."""
    cfg = config or JudgeConfig()
    label, _, floor = UTILIZATION.get(spec.name, (spec.name, spec.critical, 1.0))
    c, b = clean(canary), clean(baseline)
    unit = _unit(spec.name)
    head = f"{label} ({spec.name})"
    v = MetricVerdict(spec.name, "run", "inconclusive", spec.critical, "higher", spec.allowance,
                      len(c), len(b))
    if not len(c) or not len(b):
        missing = "candidate" if not len(c) else "baseline"
        have = b if not len(c) else c
        other = f"; {'baseline' if not len(c) else 'candidate'} {np.mean(have):.1f}{unit}" \
            if len(have) else ""
        if not len(c) and not len(b):
            missing, other = "candidate or baseline", ""
        if not spec.critical:
            return _with(v, f"{head}: nodata: no {missing} samples{other}; ignored (not "
                            "critical)", verdict="nodata")
        return _with(v, f"{head}: inconclusive: no {missing} samples (NVML not readable "
                        f"there?){other}: cannot tell whether the GPUs do the work")
    mc, mb = float(np.mean(c)), float(np.mean(b))
    figures = f"candidate {mc:.1f}{unit} vs baseline {mb:.1f}{unit}"
    need = cfg.min_samples.get("run", MIN_SAMPLES["run"])
    if min(len(c), len(b)) < need:
        return _with(v, f"{head}: inconclusive: {figures}, n={len(c)}/{len(b)}, need >= "
                        f"{need} samples per side", mc, mb)
    if mb < floor:
        if not spec.critical:
            return _with(v, f"{head}: nodata: {figures}: the baseline is near 0 (below "
                            f"{floor:g}{unit}); ignored (not critical)", mc, mb, "nodata")
        return _with(v, f"{head}: inconclusive: {figures}: the baseline is idle too (below "
                        f"{floor:g}{unit}), so a drop cannot be seen; benchmark under load", mc, mb)
    d, lo, hi = _welch_difference(c, b, cfg.confidence)
    shift, lo, hi = d / mb, lo / mb, hi / mb
    verdict, why = decide_shift("higher", spec.allowance, lo, hi)
    if verdict == "inconclusive":
        verdict, why = _noisy(spec, shift, why)
    reason = (f"{head}: {verdict}: {figures} (mean of n={len(c)}/{len(b)} samples), shift "
              f"{pct(shift)} [{pct(lo)}, {pct(hi)}] {why}")
    if verdict == "fail":
        reason += ": the candidate's GPUs idle while serving" if spec.name == GPU_UTIL else ""
    return MetricVerdict(spec.name, "run", verdict, spec.critical, "higher", spec.allowance,
                         len(c), len(b), canary=mc, baseline=mb, shift=shift, low=lo, high=hi,
                         reason=reason)


def _noisy(spec: MetricSpec, shift: float, why: str) -> tuple[Verdict, str]:
    """An interval too wide to decide (see the module doc): a point estimate within half the
    allowance passes, noted; further down it stays inconclusive (GPU utilization) or is ignored
    (the non-critical figures)."""
    if shift >= -spec.allowance / 2:
        return "pass", (f"{why}, but the candidate's mean is within half of it "
                        f"({pct(-spec.allowance / 2)}): no sign of idle GPUs")
    if not spec.critical:
        return "nodata", f"{why}; too noisy to judge, ignored (not critical)"
    return "inconclusive", why


def _with(v: MetricVerdict, reason: str, mc: float | None = None,
          mb: float | None = None, verdict: Verdict = "inconclusive") -> MetricVerdict:
    return MetricVerdict(v.metric, v.kind, verdict, v.critical, v.direction, v.allowance,
                         v.n_canary, v.n_baseline, canary=mc, baseline=mb, reason=reason)


def _welch_difference(c: NDArray[np.float64], b: NDArray[np.float64],
                      confidence: float) -> tuple[float, float, float]:
    """mean(c) - mean(b) and its Welch t interval (a point interval when both are constant)."""
    d = float(c.mean() - b.mean())
    if c.var() == 0 and b.var() == 0:
        return d, d, d
    ci = stats.ttest_ind(c, b, equal_var=False).confidence_interval(confidence)
    lo, hi = float(ci.low), float(ci.high)
    if math.isnan(lo) or math.isnan(hi):
        return d, -math.inf, math.inf
    return d, lo, hi


def utilization_checks(canary: Mapping[str, Sequence[float]],
                       baseline: Mapping[str, Sequence[float]],
                       specs: Mapping[str, MetricSpec],
                       config: JudgeConfig | None = None,
                       required: bool = False) -> list[MetricVerdict]:
    """Every utilization metric measured on either side, judged; with `required`, GPU
    utilization measured on neither side is an inconclusive check of its own."""
    names = [n for n in UTILIZATION if n in canary or n in baseline]
    out = [judge_utilization(specs.get(n) or utilization_spec(n), canary.get(n),
                             baseline.get(n), config) for n in names]
    if required and GPU_UTIL not in names:
        spec = specs.get(GPU_UTIL) or utilization_spec(GPU_UTIL)
        out.append(judge_utilization(spec, None, None, config))
    return out
