"""PromQL built per metric family (fleet.domain.promql)."""

from __future__ import annotations

import pytest

from fleet.domain.promql import (
    FAMILY,
    count_query,
    family,
    host_regex,
    models_query,
    quantile_query,
    rate_query,
)


def test_vllm_latency_quantile_is_histogram_quantile_per_host() -> None:
    q = quantile_query(FAMILY["vllm"], "latency", 0.99, model="llama", hosts=["gpu-02", "gpu-01"],
                       host_label="instance", rate_window_s=300)
    assert q == ('histogram_quantile(0.99, sum by (le, instance) '
                 '(rate(vllm:e2e_request_latency_seconds_bucket{instance=~"(gpu\\\\-01|gpu\\\\-02)'
                 '(:[0-9]+)?",model_name="llama"}[300s])))')


def test_vllm_queue_uses_the_queue_histogram() -> None:
    q = quantile_query(FAMILY["vllm"], "queue", 0.95, model="m", hosts=["h"], host_label="host",
                       rate_window_s=60)
    assert "vllm:request_queue_time_seconds_bucket{" in q and "sum by (le, host)" in q


def test_tgi_has_no_model_label() -> None:
    q = quantile_query(FAMILY["tgi"], "latency", 0.95, model="ignored", hosts=["h"],
                       host_label="instance", rate_window_s=60)
    assert "tgi_request_duration_bucket{" in q and "ignored" not in q
    assert models_query(FAMILY["tgi"], hosts=["h"], host_label="instance") is None


def test_triton_quantile_reads_the_summary_with_any_trailing_zeros() -> None:
    q = quantile_query(FAMILY["triton"], "latency", 0.99, model="resnet", hosts=["h"],
                       host_label="instance", rate_window_s=60)
    assert q == ('max by (instance) (nv_inference_request_summary_us{instance=~"(h)(:[0-9]+)?",'
                 'model="resnet",quantile=~"0\\\\.990*"})')
    assert "nv_inference_queue_summary_us" in quantile_query(
        FAMILY["triton"], "queue", 0.5, model="r", hosts=["h"], host_label="instance",
        rate_window_s=60)


def test_triton_requests_add_the_success_and_failure_sums() -> None:
    q = count_query(FAMILY["triton"], "requests", model="resnet", hosts=["h"],
                    host_label="instance", window_s=600)
    ok = ('sum by (instance) (increase(nv_inference_request_success{instance=~"(h)(:[0-9]+)?",'
          'model="resnet"}[600s]))')
    bad = ok.replace("_success", "_failure")
    assert q == f"{ok} + {bad} or {ok} or {bad}"
    errors = count_query(FAMILY["triton"], "errors", model="resnet", hosts=["h"],
                         host_label="instance", window_s=600)
    assert errors is not None and errors.startswith(
        "sum by (instance) (increase(nv_inference_request_failure{")


def test_requests_per_second_per_host_for_the_throughput() -> None:
    q = rate_query(FAMILY["vllm"], model="llama", hosts=["h"], host_label="host",
                   rate_window_s=60)
    assert q == ('sum by (host) (rate(vllm:e2e_request_latency_seconds_count{'
                 'host=~"(h)(:[0-9]+)?",model_name="llama"}[60s]))')
    triton = rate_query(FAMILY["triton"], model="r", hosts=["h"], host_label="instance",
                        rate_window_s=60)
    assert triton == count_query(FAMILY["triton"], "requests", model="r", hosts=["h"],
                                 host_label="instance", window_s=60
                                 ).replace("increase(", "rate(")  # type: ignore[union-attr]


def test_vllm_exports_no_error_counter() -> None:
    assert count_query(FAMILY["vllm"], "errors", model="m", hosts=["h"], host_label="instance",
                       window_s=60) is None
    assert count_query(FAMILY["vllm"], "requests", model="m", hosts=["h"],
                       host_label="instance", window_s=60) is not None


def test_model_and_host_values_are_quoted_never_spliced() -> None:
    q = quantile_query(FAMILY["vllm"], "latency", 0.5, model='a"}or vector(1)#', hosts=["h"],
                       host_label="instance", rate_window_s=60)
    assert 'model_name="a\\"}or vector(1)#"' in q


def test_host_regex_escapes_and_allows_a_port() -> None:
    assert host_regex(["a.b", "a.b"]) == "(a\\.b)(:[0-9]+)?"
    with pytest.raises(ValueError):
        host_regex([])


@pytest.mark.parametrize("bad", ["in-stance", "1host", "a b", ""])
def test_a_bad_label_name_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="label name"):
        quantile_query(FAMILY["vllm"], "latency", 0.5, model="m", hosts=["h"], host_label=bad,
                       rate_window_s=60)


def test_unknown_family_and_quantile_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown metric family"):
        family("onnx")
    with pytest.raises(ValueError, match="quantile"):
        quantile_query(FAMILY["vllm"], "latency", 1.0, model="m", hosts=["h"],
                       host_label="instance", rate_window_s=60)


def test_units_convert_to_milliseconds() -> None:
    assert FAMILY["vllm"].to_ms("latency", 0.72) == pytest.approx(720.0)
    assert FAMILY["triton"].to_ms("queue", 2500.0) == pytest.approx(2.5)
