"""The Prometheus source against a real Prometheus (Debian's `prometheus` binary, no lab, no
root): it scrapes two hosts of a tiny serving exporter every second, and the source's PromQL
returns the quantiles the exporter's buckets imply. Skips only where the binary is missing
(and that fails CI: FLEET_TEST_NO_SKIP, tests/conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from fleet.domain.promql import FAMILY, count_query, models_query, quantile_query
from fleet.domain.serving_week import week_quantile
from fleet.prometheus import PrometheusSource, Target
from tests.unit.prometheus.realprom import (
    LATENCY_BOUNDS,
    LATENCY_CDF,
    QUEUE_BOUNDS,
    QUEUE_CDF,
    SUMMARY_US,
    HostTraffic,
    ModelTraffic,
    RealPrometheus,
    ServingExporter,
    expected_quantile,
    prometheus_binary,
)

HOSTS = {"gpu-01": HostTraffic(vllm={"llama": ModelTraffic(factor=1.6), "mistral": ModelTraffic()},
                               triton={"resnet": ModelTraffic(factor=1.5, error_share=0.05),
                                       "bert": ModelTraffic()}),
         "gpu-02": HostTraffic(vllm={"llama": ModelTraffic(), "mistral": ModelTraffic()},
                               triton={"resnet": ModelTraffic(failure_reason=False),
                                       "bert": ModelTraffic(summary_nan=True)})}
BOTH = sorted(HOSTS)


@pytest.fixture(scope="module")
def prom() -> Iterator[tuple[PrometheusSource, RealPrometheus]]:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("no prometheus binary (apt-get install prometheus; scripts/test does)")
    exporters = {h: ServingExporter(t) for h, t in HOSTS.items()}
    server = RealPrometheus({h: e.port for h, e in exporters.items()}, binary=binary)
    try:
        server.wait_ready(samples=3, deadline_s=90)
        with PrometheusSource(Target(server.url, "test"), timeout_s=30) as source:
            yield source, server
    finally:
        server.stop()
        for e in exporters.values():
            e.close()


def _per_host(source: PrometheusSource, query: str) -> dict[str, float]:
    res = source.instant(query)
    assert res.measured, res.why_not()
    return {h: v[-1] for h, v in res.by_label("host").items()}


def test_histogram_quantiles_per_host_and_model(
        prom: tuple[PrometheusSource, RealPrometheus]) -> None:
    source, server = prom
    print(f"prometheus answering {server.answering_s:.1f} s, every target scraped 3 times "
          f"{server.ready_s:.1f} s after start")
    vllm = FAMILY["vllm"]
    for q in (0.95, 0.99):
        got = _per_host(source, quantile_query(vllm, "latency", q, model="llama", hosts=BOTH,
                                               host_label="host", rate_window_s=5))
        base = expected_quantile(q, LATENCY_BOUNDS, LATENCY_CDF)
        assert got == pytest.approx({"gpu-01": expected_quantile(
            q, LATENCY_BOUNDS, LATENCY_CDF, 1.6), "gpu-02": base}, rel=1e-6)
    queue = _per_host(source, quantile_query(vllm, "queue", 0.95, model="mistral", hosts=BOTH,
                                             host_label="host", rate_window_s=5))
    assert queue == pytest.approx({h: expected_quantile(0.95, QUEUE_BOUNDS, QUEUE_CDF)
                                   for h in BOTH}, rel=1e-6)


def test_summary_quantile_errors_and_requests(
        prom: tuple[PrometheusSource, RealPrometheus]) -> None:
    source, _ = prom
    triton = FAMILY["triton"]
    p99 = _per_host(source, quantile_query(triton, "latency", 0.99, model="resnet", hosts=BOTH,
                                           host_label="host", rate_window_s=5))
    assert p99 == pytest.approx({"gpu-01": SUMMARY_US[0.99] * 1.5, "gpu-02": SUMMARY_US[0.99]})
    window = 5
    req = count_query(triton, "requests", model="resnet", hosts=BOTH, host_label="host",
                      window_s=window)
    err = count_query(triton, "errors", model="resnet", hosts=BOTH, host_label="host",
                      window_s=window)
    assert req is not None and err is not None
    at = datetime.now(UTC)  # both counts over the same window
    n = source.instant(req, at).by_label("host")
    k = source.instant(err, at).by_label("host")
    # 50 requests/s over the window (increase() extrapolates; generous bounds), 5% failed
    assert 0.5 * 50 * window < n["gpu-01"][0] < 2 * 50 * window
    assert k["gpu-01"][0] / n["gpu-01"][0] == pytest.approx(0.05, rel=1e-6)
    # gpu-02's failure counter has the success counter's labels (no `reason`, as Triton before
    # it had one): its requests are counted too, not refused as one label set twice
    assert 0.5 * 50 * window < n["gpu-02"][0] < 2 * 50 * window
    assert k["gpu-02"][0] / n["gpu-02"][0] == pytest.approx(0.01, rel=1e-6)


def test_the_weekly_summary_quantile_leaves_out_empty_windows(
        prom: tuple[PrometheusSource, RealPrometheus]) -> None:
    """gpu-02's bert summary is NaN (no request in its window): the pool's p99 is gpu-01's,
    not NaN (fleet.domain.serving_week, hygiene's serving section)."""
    source, _ = prom
    query = week_quantile(FAMILY["triton"], "latency", 0.99, model="bert", hosts=BOTH,
                          host_label="host", window_s=60, step_s=1)
    res = source.instant(query)
    assert res.measured, (query, res.why_not())
    assert res.series[0].values()[-1] == pytest.approx(SUMMARY_US[0.99])


def test_range_query_and_the_default_host_label(
        prom: tuple[PrometheusSource, RealPrometheus]) -> None:
    source, server = prom
    vllm = FAMILY["vllm"]
    # the default host label: `instance`, as scraped (gpu-02's target is `localhost:PORT`)
    inst = source.instant(quantile_query(vllm, "latency", 0.5, model="llama",
                                         hosts=["localhost"], host_label="instance",
                                         rate_window_s=5))
    assert inst.measured and [s.labels["instance"].split(":")[0] for s in inst.series] == [
        "localhost"]
    end = datetime.now(UTC)
    res = source.range(quantile_query(vllm, "latency", 0.95, model="llama", hosts=BOTH,
                                      host_label="host", rate_window_s=4),
                       end - timedelta(seconds=3), end, 1)
    values = res.by_label("host")
    assert len(values["gpu-01"]) >= 2 and len(values["gpu-02"]) >= 2
    assert values["gpu-01"] == pytest.approx(
        [expected_quantile(0.95, LATENCY_BOUNDS, LATENCY_CDF, 1.6)] * len(values["gpu-01"]))
    models = source.instant(models_query(vllm, hosts=BOTH, host_label="host") or "")
    assert sorted(models.by_label("model_name")) == ["llama", "mistral"]


def test_no_series_and_a_stopped_server_could_not_measure(
        prom: tuple[PrometheusSource, RealPrometheus]) -> None:
    source, _ = prom
    res = source.instant(quantile_query(FAMILY["vllm"], "latency", 0.99, model="nope",
                                        hosts=BOTH, host_label="host", rate_window_s=5))
    assert res.ok and not res.measured
    bad = source.instant("sum by (le) (")
    assert not bad.ok and "bad_data" in bad.why_not()
    gone = Target(f"http://127.0.0.1:{_closed_port()}", "test")
    with PrometheusSource(gone, timeout_s=5) as dead:
        started = time.monotonic()
        res = dead.instant("up")
    assert not res.ok and "unreachable" in res.why_not()
    assert time.monotonic() - started < 30


def _closed_port() -> int:
    from tests.unit.prometheus.realprom import free_port
    return free_port()  # bound then closed: nothing listens there
