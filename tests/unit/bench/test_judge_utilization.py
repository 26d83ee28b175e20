"""The judge's third measurement: GPU utilization (fleet/domain/judge/utilization.py), golden
numbers.

A candidate whose GPUs idle while serving fails even when its latency is within bounds; missing
utilization on one side is inconclusive, never a silent pass.
"""

from __future__ import annotations

import pytest

from fleet.domain.judge import JudgeConfig, MetricSpec, default_spec, judge, parse_metric_flag
from fleet.domain.judge.utilization import judge_utilization, utilization_spec

LAT = MetricSpec("latency_ms", "lower", 0.05, kind="location")  # no tail checks: short lists
BASE_LAT = [10.0 + 0.01 * (i % 7) for i in range(40)]
SAME_LAT = [10.0 + 0.01 * ((i + 3) % 7) for i in range(40)]
BUSY = [62.0, 58.0, 65.0, 60.0, 61.0, 59.0, 63.0, 60.0]  # mean 61.0
IDLE = [0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0]  # mean 0.5
LESS = [48.0, 45.0, 50.0, 47.0, 49.0, 46.0, 48.0, 47.0]  # mean 47.5


def test_idle_gpus_fail_the_candidate_although_latency_is_within_bounds() -> None:
    j = judge({"latency_ms": SAME_LAT, "gpu_util_pct": IDLE},
              {"latency_ms": BASE_LAT, "gpu_util_pct": BUSY}, [LAT])
    lat, util = j.metrics
    assert lat.verdict == "pass"
    assert util.verdict == "fail" and util.critical
    assert (util.canary, util.baseline) == (0.5, 61.0)
    assert round(util.shift, 4) == round(0.5 / 61 - 1, 4) == -0.9918
    assert j.verdict == "fail"
    assert j.reason == (
        "GPU utilization (gpu_util_pct): fail: candidate 0.5% vs baseline 61.0% (mean of n=8/8 "
        "samples), shift -99.2% [-102.3%, -96.0%] beyond -50% allowance: the candidate's GPUs "
        "idle while serving")


def test_a_release_that_keeps_the_gpus_busy_for_less_time_passes() -> None:
    """A faster release legitimately lowers utilization: 22% less is within the 50% margin."""
    j = judge({"latency_ms": SAME_LAT, "gpu_util_pct": LESS},
              {"latency_ms": BASE_LAT, "gpu_util_pct": BUSY}, [LAT])
    assert j.verdict == "pass", j.reason
    assert j.metrics[1].reason == (
        "GPU utilization (gpu_util_pct): pass: candidate 47.5% vs baseline 61.0% (mean of n=8/8 "
        "samples), shift -22.1% [-25.6%, -18.6%] within -50% allowance")


def test_utilization_is_judged_even_when_only_specified_metrics_are_asked() -> None:
    j = judge({"latency_ms": SAME_LAT, "gpu_util_pct": IDLE},
              {"latency_ms": BASE_LAT, "gpu_util_pct": BUSY}, [LAT], only_specified=True)
    assert [m.metric for m in j.metrics] == ["latency_ms", "gpu_util_pct"]
    assert j.verdict == "fail"


@pytest.mark.parametrize("canary,baseline,side", [
    ({"latency_ms": SAME_LAT}, {"latency_ms": BASE_LAT, "gpu_util_pct": BUSY}, "candidate"),
    ({"latency_ms": SAME_LAT, "gpu_util_pct": BUSY}, {"latency_ms": BASE_LAT}, "baseline"),
])
def test_utilization_missing_on_one_side_is_inconclusive(canary, baseline, side) -> None:
    j = judge(canary, baseline, [LAT])
    assert j.verdict == "inconclusive", j.reason
    assert f"GPU utilization (gpu_util_pct): inconclusive: no {side} samples" in j.reason
    assert "61.0%" in j.reason


def test_utilization_measured_nowhere_is_inconclusive_when_required() -> None:
    c, b = {"latency_ms": SAME_LAT}, {"latency_ms": BASE_LAT}
    assert judge(c, b, [LAT]).verdict == "pass"  # samples of a CPU service: nothing to add
    j = judge(c, b, [LAT], config=JudgeConfig(require_utilization=True))
    assert j.verdict == "inconclusive"
    assert "no candidate or baseline samples" in j.reason


def test_an_idle_baseline_cannot_show_a_drop() -> None:
    j = judge({"gpu_util_pct": IDLE}, {"gpu_util_pct": [0.0, 0.5, 0.0, 1.0, 0.0]})
    assert j.verdict == "inconclusive"
    assert "the baseline is idle too" in j.reason and "candidate 0.5% vs baseline 0.3%" in j.reason


def test_non_critical_figures_never_fail_the_canary_alone() -> None:
    """PCIe and memory-controller figures: a drop makes the gate inconclusive; their absence
    on one side is shown and ignored."""
    j = judge({"gpu_util_pct": BUSY, "pcie_rx_mbps": [10.0, 11.0, 9.0, 10.0]},
              {"gpu_util_pct": BUSY, "pcie_rx_mbps": [100.0, 101.0, 99.0, 100.0],
               "gpu_mem_util_pct": [30.0, 31.0, 29.0]})
    verdicts = {m.metric: m.verdict for m in j.metrics}
    assert verdicts == {"gpu_util_pct": "pass", "gpu_mem_util_pct": "nodata",
                        "pcie_rx_mbps": "fail"}
    assert j.verdict == "inconclusive"
    assert "PCIe throughput into the GPUs (pcie_rx_mbps): fail: candidate 10.0 MB/s vs " \
           "baseline 100.0 MB/s" in j.reason


def test_too_few_ticks_are_inconclusive() -> None:
    v = judge_utilization(utilization_spec("gpu_util_pct"), [0.0, 0.0], [60.0, 61.0])
    assert v.verdict == "inconclusive" and "need >= 3 samples per side" in v.reason


def test_names_and_flags() -> None:
    spec = default_spec("gpu_util_pct")
    assert spec is not None and (spec.direction, spec.kind, spec.allowance, spec.critical) == (
        "higher", "run", 0.5, True)
    assert default_spec("pcie_tx_mbps").critical is False  # type: ignore[union-attr]
    flag = parse_metric_flag("gpu_util_pct:higher:30%")
    j = judge({"gpu_util_pct": LESS}, {"gpu_util_pct": BUSY}, [flag])
    assert j.verdict == "pass"
    assert "within -30% allowance" in j.metrics[0].reason


# per-tick figures of a short lab benchmark: busy and idle phases, ~40% on average
NOISY_BASE = [0.0, 90.0, 10.0, 80.0, 0.0, 70.0, 40.0, 5.0, 85.0, 5.0]  # mean 38.5
NOISY_SAME = [85.0, 0.0, 75.0, 5.0, 60.0, 10.0, 0.0, 90.0, 40.0, 5.0]  # mean 37.0
NOISY_HALF = [40.0, 0.0, 35.0, 0.0, 30.0, 5.0, 0.0, 45.0, 20.0, 0.0]  # mean 17.5


def test_a_noisy_interval_around_no_change_passes_noted() -> None:
    """Wide intervals are what a short benchmark's ticks give: with the candidate's mean within
    half the allowance (-3.9% here) there is no sign of idle GPUs, so the gate is not paused."""
    v = judge_utilization(utilization_spec("gpu_util_pct"), NOISY_SAME, NOISY_BASE)
    assert v.low is not None and v.low < -0.5 < (v.high or 0)  # the interval straddles -50%
    assert v.verdict == "pass", v.reason
    assert "straddles -50% allowance, but the candidate's mean is within half of it (-25.0%)" \
        in v.reason


def test_a_noisy_drop_beyond_half_the_allowance_is_not_passed() -> None:
    """A -55% point estimate on a straddling interval: GPU utilization stays inconclusive (a
    human looks), the non-critical figures are shown and ignored."""
    v = judge_utilization(utilization_spec("gpu_util_pct"), NOISY_HALF, NOISY_BASE)
    assert v.shift is not None and v.shift < -0.25
    assert v.high is not None and v.high > -0.5  # not a clear drop either
    assert v.verdict == "inconclusive", v.reason
    p = judge_utilization(utilization_spec("pcie_rx_mbps"), NOISY_HALF, NOISY_BASE)
    assert p.verdict == "nodata" and "too noisy to judge, ignored (not critical)" in p.reason
