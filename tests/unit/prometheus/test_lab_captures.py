"""fleet's live gate and weekly serving section on a real Prometheus's answers to fleet's own
queries, on the lab's serving traffic (tests/data/prometheus/lab, captured by
`tests.unit.prometheus.labcapture`): h2 serves llama-3-8b 1.6 times slower (slow-serving on
driver 595), h5 is its baseline, both serve 200 requests/s per model on 8 GPUs.

Replayed by path and form: a query fleet builds differently today finds no answer and measures
nothing, so these tests fail until the fixtures are captured again."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from fleet.domain.live_gate import judge_model
from fleet.domain.promql import family
from fleet.domain.serving_units import Units
from fleet.jobs.hygiene_serving import serving_section
from fleet.jobs.rollout.livegate import measure_side, models_to_judge
from tests.unit.prometheus.fixtures import captured, replay, source
from tests.unit.prometheus.labcapture import (
    BAD_QUERY,
    BASELINE,
    CANARY,
    GPUS,
    SAME_LABELSET,
    SLOW_MODEL,
    lab_matrix,
    live_settings,
    refs,
)

UNITS: dict[str, Units | str] = {h: Units(GPUS, "gpu", "inventory") for h in (CANARY, BASELINE)}


def _now(cap: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(cap["meta"]["captured_at"])


def _judged(fam_name: str) -> tuple[dict[str, Any], list[str]]:
    """Each model's verdict and sides, from the live gate's own code on the capture."""
    cap = captured(f"live-{fam_name}")
    seen: list[str] = []
    fam, live = family(fam_name), live_settings(fam_name)
    end = _now(cap)
    start = end - timedelta(seconds=cap["meta"]["window_s"])
    out: dict[str, Any] = {}
    with source(replay(cap["exchanges"], seen)) as src:
        models, why = models_to_judge(src, fam, live, [CANARY], end)
        assert models, why
        for model in models:
            c = measure_side(src, fam, live, model, [CANARY], start, end, UNITS)
            b = measure_side(src, fam, live, model, [BASELINE], start, end, UNITS)
            out[str(model)] = (judge_model(str(model), c, b, live,
                                           errors_exported=fam.errors is not None), c, b)
    assert len(seen) == len(cap["exchanges"])  # every captured answer asked for, none more
    return out, seen


@pytest.mark.parametrize("fam_name", ["triton", "vllm"])
def test_the_live_gate_fails_the_slowed_model_only(fam_name: str) -> None:
    judged, _seen = _judged(fam_name)
    assert sorted(judged) == ["llama-3-8b", "resnet50"]
    slow, c, b = judged[SLOW_MODEL]
    assert slow.verdict == "fail", slow.reason
    assert slow.reason.startswith(f"model {SLOW_MODEL}: fail: latency_ms:p95: fail")
    assert not c.missing and not b.missing, (c.missing, b.missing)
    p99 = {m.metric: m for m in slow.metrics}["latency_ms:p99"]
    assert 1.4 < p99.canary / p99.baseline < 1.8, p99  # the fault's 1.6
    assert 450 < p99.baseline < 800, p99  # llama-3-8b: 420 ms median, sigma 0.1, + queue
    fast, c, b = judged["resnet50"]
    assert fast.verdict == "pass", fast.reason
    assert len(c.latency[0.99]) >= 3 and len(b.latency[0.99]) >= 3  # one per step


@pytest.mark.parametrize("fam_name", ["triton", "vllm"])
def test_throughput_per_gpu_and_counts_from_real_counters(fam_name: str) -> None:
    judged, seen = _judged(fam_name)
    for model, (v, c, b) in judged.items():
        tput = {m.metric: m for m in v.metrics}["throughput_per_gpu"]
        # 200 requests/s per model per host, on 8 GPUs, a 10 % allowance
        assert tput.verdict == "pass", (model, tput.reason)
        assert 23 < tput.canary < 27 and 23 < tput.baseline < 27, tput
        assert c.unit_kinds == frozenset({"gpu"})
        assert c.requests is not None and 3600 < c.requests < 4400  # 20 s at 200/s
        if fam_name == "triton":
            assert c.errors == 0 and b.errors == 0
            assert {m.metric for m in v.metrics} >= {"error_rate", "queue_ms:p95"}
        else:
            assert c.errors is None and "error rate not judged" in v.reason
    assert any("(rate(" in q for q in seen)


def test_the_weekly_section_reads_the_lab_capture() -> None:
    for fam_name in ("triton", "vllm"):
        cap = captured(f"weekly-{fam_name}")
        with source(replay(cap["exchanges"])) as src:
            doc = serving_section(src, lab_matrix(fam_name), refs(), [], now=_now(cap))
        assert doc["status"] == "measured" and doc["problems"] == [], doc
        (pool,) = doc["pools"]
        models = {m["model"]: m for m in pool["models"]}
        assert sorted(models) == ["llama-3-8b", "resnet50"]
        for m in models.values():
            lat = m["latency_ms"]["this_week"]
            assert 0 < lat["p50"] < lat["p95"] <= lat["p99"], m
            assert m["latency_ms"]["last_week"]["p99"] is None  # the server started today
            assert {d["host"] for d in m["density"]} == {CANARY, BASELINE}
            assert all(d["requests_per_gpu"] > 0 for d in m["density"])
        density = {d["host"]: d for d in models[SLOW_MODEL]["density"]}
        assert 1.4 < density[CANARY]["p99_ms"] / density[BASELINE]["p99_ms"] < 1.8, density
        if fam_name == "triton":  # load time and the response cache: Triton exports them
            assert 2.2 < models["resnet50"]["load_s"]["max"] < 2.6  # 2.4 s +-5 %
            assert 9.0 < models[SLOW_MODEL]["load_s"]["max"] < 10.0  # 9.5 s +-5 %
            assert 0.65 < models["resnet50"]["cache_hit_rate"] < 0.75  # 70 % hits
            assert models[SLOW_MODEL]["cache_hit_rate"] is None
        else:
            assert models["resnet50"]["load"] == "not exported by vllm"


def _answers() -> dict[str, Any]:
    return {e["form"]["query"]: e for e in captured("answers")["exchanges"]}


def test_errors_empty_and_nan_answers_measure_nothing() -> None:
    answers = _answers()
    with source(replay(list(answers.values()))) as src:
        bad = src.instant(BAD_QUERY, _now(captured("answers")))
        same = src.instant(SAME_LABELSET, _now(captured("answers")))
        empty_q, nan_q = [q for q in answers if q not in (BAD_QUERY, SAME_LABELSET)]
        empty = src.instant(empty_q, _now(captured("answers")))
        nan = src.instant(nan_q, _now(captured("answers")))
    assert answers[BAD_QUERY]["http_status"] == 400 and not bad.ok
    assert "query error (bad_data)" in bad.why_not() and "unclosed left parenthesis" in \
        bad.why_not()
    assert answers[SAME_LABELSET]["http_status"] == 422 and not same.ok
    assert "query error (execution): vector cannot contain metrics with the same labelset" in \
        same.why_not()
    assert empty.ok and not empty.measured and empty.why_not() == "no series matched"
    # h9 serves nothing: Triton's summary exports NaN, which is no value; h5's is one
    assert nan.ok and set(nan.by_label("host")) == {BASELINE}
    assert len(nan.series) == 2 and 10_000 < nan.by_label("host")[BASELINE][0] < 25_000


def test_the_captures_say_where_they_came_from() -> None:
    for name in ("live-triton", "live-vllm", "weekly-triton", "weekly-vllm", "answers"):
        meta = captured(name)["meta"]
        assert meta["prometheus"].startswith("prometheus, version 2."), meta
        assert meta["hosts"][CANARY]["state"] == f"serving.slow.{SLOW_MODEL}=595:1.6"
