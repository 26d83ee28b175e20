"""The live gate's judgement of one model (fleet.domain.live_gate), the judge on counts, and
the matrix's `rollout.gates.live` section."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleet.domain.judge import JudgeConfig, MetricSpec, judge_counts, judge_metric
from fleet.domain.live_gate import LiveSide, judge_model, live_verdict, tail_need
from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.rollout_settings import GateSettings

LIVE = LiveGateSettings(enabled=True, family="triton")
CFG = JudgeConfig()


def _side(p95: float, p99: float, *, requests: float = 50_000, errors: float | None = 50,
          queue: float = 1.2, per_gpu: float = 25.0, hosts: int = 2, steps: int = 10,
          kinds: frozenset[str] = frozenset({"gpu"}), **kw: object) -> LiveSide:
    """Per host and step values within +-2% of the given quantiles (ms) and requests/s/GPU."""
    def vals(x: float) -> list[float]:
        return [x * (1 + 0.01 * ((i * 3) % 5 - 2)) for i in range(hosts * steps)]
    return LiveSide(tuple(f"h{i}" for i in range(hosts)), {0.95: vals(p95), 0.99: vals(p99)},
                    vals(queue), requests, errors, throughput=vals(per_gpu), unit_kinds=kinds,
                    **kw)  # type: ignore[arg-type]


def test_same_serving_passes() -> None:
    v = judge_model("resnet", _side(20, 31), _side(20, 31), LIVE, errors_exported=True)
    assert v.verdict == "pass", v.reason
    assert {m.metric for m in v.metrics} == {"latency_ms:p95", "latency_ms:p99", "queue_ms:p95",
                                             "throughput_per_gpu", "error_rate"}


def test_less_throughput_per_gpu_pauses_naming_the_metric() -> None:
    v = judge_model("resnet", _side(20, 31, per_gpu=15), _side(20, 31, per_gpu=25), LIVE,
                    errors_exported=True)
    assert v.verdict == "inconclusive"  # not critical: the load balancer decides it too
    assert "throughput_per_gpu: fail" in v.reason and "mean 15 vs 25" in v.reason
    more = judge_model("resnet", _side(20, 31, per_gpu=40), _side(20, 31), LIVE,
                       errors_exported=True)
    assert more.verdict == "pass", more.reason  # higher is better


def test_throughput_needs_the_judges_runs_and_the_traffic() -> None:
    few = judge_model("m", _side(20, 31, hosts=1, steps=2), _side(20, 31), LIVE,
                      errors_exported=True)
    by = {m.metric: m for m in few.metrics}
    assert by["throughput_per_gpu"].verdict == "inconclusive"
    assert "throughput_per_gpu: inconclusive" in few.reason and few.verdict == "inconclusive"
    quiet = judge_model("m", _side(20, 31, requests=150, errors=0, per_gpu=0.01),
                        _side(20, 31), LIVE, errors_exported=True)
    assert quiet.verdict == "inconclusive" and "too little traffic" in quiet.reason
    assert "throughput_per_gpu" not in {m.metric for m in quiet.metrics}


def test_throughput_unknown_or_counted_differently_could_not_measure() -> None:
    unknown = _side(20, 31, missing=("throughput per GPU: h1: GPU count unknown",))
    v = judge_model("m", unknown, _side(20, 31), LIVE, errors_exported=True)
    assert v.verdict == "error" and "canary: throughput per GPU: h1: GPU count unknown" in \
        v.reason
    empty = judge_model("m", _side(20, 31, per_gpu=float("nan")), _side(20, 31), LIVE,
                        errors_exported=True)
    assert empty.verdict == "error", empty.reason
    mixed = judge_model("m", _side(20, 31, kinds=frozenset({"mig"})), _side(20, 31), LIVE,
                        errors_exported=True)
    assert mixed.verdict == "error"
    assert "the canary hosts count MIG instances, the baseline hosts whole GPUs" in mixed.reason


def test_p99_sixty_percent_slower_fails_naming_model_and_metric() -> None:
    v = judge_model("llama", _side(20, 31 * 1.6), _side(20, 31), LIVE, errors_exported=True)
    assert v.verdict == "fail"
    assert v.reason.startswith("model llama: fail: latency_ms:p99: fail")
    assert "latency_ms:p95" not in v.reason


def test_more_errors_fail() -> None:
    v = judge_model("m", _side(20, 31, errors=1500), _side(20, 31, errors=50), LIVE,
                    errors_exported=True)
    assert v.verdict == "fail" and "error_rate: fail: errors 1500/50000 vs 50/50000" in v.reason


def test_slower_queue_only_pauses() -> None:
    v = judge_model("m", _side(20, 31, queue=3.0), _side(20, 31), LIVE, errors_exported=True)
    assert v.verdict == "inconclusive" and "queue_ms:p95: fail" in v.reason


def test_too_little_traffic_for_p99_is_inconclusive_even_when_equal() -> None:
    v = judge_model("m", _side(20, 31, requests=600, errors=0), _side(20, 31), LIVE,
                    errors_exported=True)
    assert v.verdict == "inconclusive"
    assert "latency_ms:p99: inconclusive: too little traffic, 600/50000 requests, p99 needs " \
           ">= 1000 per side" in v.reason
    assert tail_need(0.95) == 200 and tail_need(0.99) == 1000


def test_unmeasured_signals_could_not_measure() -> None:
    gone = _side(20, 31, missing=("latency p99: Prometheus at http://p unreachable",))
    v = judge_model("m", gone, _side(20, 31), LIVE, errors_exported=True)
    assert v.verdict == "error" and "could not measure: canary: latency p99" in v.reason
    no_counts = judge_model("m", _side(20, 31, requests=None), _side(20, 31), LIVE,
                            errors_exported=True)
    assert no_counts.verdict == "error" and "request counts" in no_counts.reason
    no_errors = judge_model("m", _side(20, 31, errors=None), _side(20, 31), LIVE,
                            errors_exported=True)
    assert no_errors.verdict == "error" and "error counts" in no_errors.reason


def test_a_family_without_error_counter_says_so() -> None:
    v = judge_model("m", _side(20, 31, errors=None), _side(20, 31, errors=None), LIVE,
                    errors_exported=False)
    assert v.verdict == "pass" and "error rate not judged" in v.reason


def test_gate_is_the_worst_model_and_nothing_is_could_not_measure() -> None:
    good = judge_model("a", _side(20, 31), _side(20, 31), LIVE, errors_exported=True)
    bad = judge_model("b", _side(40, 62), _side(20, 31), LIVE, errors_exported=True)
    verdict, reason = live_verdict([good, bad])
    assert verdict == "fail" and reason.startswith("model b:") and "model a" not in reason
    assert live_verdict([])[0] == "error"


def test_judge_counts_matches_judge_rate_on_the_same_outcomes() -> None:
    spec = MetricSpec("errors", "lower", 0.002, kind="rate")
    by_counts = judge_counts(spec, 3, 5000, 2, 4000, CFG)
    by_samples = judge_metric(spec, [1.0] * 3 + [0.0] * 4997, [1.0] * 2 + [0.0] * 3998, CFG)[0]
    assert (by_counts.verdict, by_counts.low, by_counts.high) == (
        by_samples.verdict, by_samples.low, by_samples.high)
    assert judge_counts(spec, 0, 0, 1, 10, CFG).verdict == "nodata"
    assert judge_counts(spec, 11, 10, 1, 10, CFG).verdict == "inconclusive"


def test_matrix_section_defaults_and_bad_values() -> None:
    gates = GateSettings.model_validate({"live": {"enabled": True, "models": ["llama-3:8b"]}})
    assert gates.live.host_label == "instance" and gates.live.family == "vllm"
    assert gates.live.window_s(bake_minutes=2) == 300  # at least 5 minutes
    assert GateSettings().live.enabled is False
    for bad in ({"host_label": "in-stance"}, {"family": "onnx"}, {"models": ["a b"]},
                {"quantiles": [0.4]}, {"enabled": "yes"}, {"port": 9090}):
        with pytest.raises(ValidationError):
            LiveGateSettings.model_validate(bad)
