"""The live gate on the simulated fleet, its Prometheus answering in a real server's recorded
format (tests/data/prometheus): a slow model fails the canary and rolls it back, a good release
passes, and an unreachable or missing Prometheus, or too little traffic, pauses the rollout."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostRef
from tests.conftest import run_fleet
from tests.unit.prometheus.fixtures import FakePrometheus
from tests.unit.rollout.helpers import Rig, Wrap

CANARY = "h100-canary"
TARGET = "r595-cuda13.2"
OLD = "r580-cuda13.0"


def _live(matrix: Matrix, **live: Any) -> Matrix:
    """The matrix with the canary pool's live gate on (vLLM metrics, host label `host`)."""
    pool = matrix.pools[CANARY]
    settings = LiveGateSettings(enabled=True, family="vllm", host_label="host", **live)
    gates = pool.rollout.gates.model_copy(update={"live": settings})
    ro = pool.rollout.model_copy(update={"gates": gates})
    pools = {**matrix.pools, CANARY: pool.model_copy(update={"rollout": ro})}
    return matrix.model_copy(update={"pools": pools})


def _rig(matrix: Matrix, tmp_path: Path, **live: Any) -> Rig:
    return Rig(_live(matrix, **live), tmp_path, pools={CANARY: 3})


def _live_gates(rig: Rig, rid: int) -> list[dict[str, Any]]:
    return [e.data for e in rig.events(rid)
            if e.kind == "rollout.gate" and e.data.get("gate") == "live"]


def test_a_slow_model_fails_the_live_gate_and_is_rolled_back(matrix: Matrix,
                                                              tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    prom = FakePrometheus(lambda host, model: model == "llama"
                          and rig.fleet.installed_release(host) == TARGET)
    res = rig.start(engine=rig.engine(live_source=prom.source()))
    assert res.status == "rolled_back", res.reason
    assert "live gate" in res.reason and "model llama" in res.reason
    assert "latency_ms:p95: fail" in res.reason and "model mistral" not in res.reason
    gate = _live_gates(rig, res.rollout_id)[-1]
    assert gate["verdict"] == "fail" and gate["baseline_source"] == "same-time"
    assert len(gate["canary_hosts"]) == 1 and len(gate["baseline_hosts"]) == 2
    by_model = {m["model"]: m for m in gate["models"]}
    assert by_model["llama"]["verdict"] == "fail" and by_model["mistral"]["verdict"] == "pass"
    assert all(rig.fleet.installed_release(h) == OLD for h in gate["canary_hosts"])
    assert rig.problems(res.rollout_id) == []
    # the history names the model and the metric (`rollout status` shows this reason)
    rollback = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.rollback"]
    assert rollback and "model llama: fail: latency_ms:p95: fail" in rollback[0].message
    # the queries named the canary and the baseline hosts by the matrix's host label
    assert any('host=~"(' in q for q in prom.queries)


def test_a_good_release_passes_the_live_gate(matrix: Matrix, tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    prom = FakePrometheus()
    res = rig.start(engine=rig.engine(live_source=prom.source()))
    assert res.status == "completed", res.reason
    gates = _live_gates(rig, res.rollout_id)
    assert [g["verdict"] for g in gates] == ["pass"] * 3  # three waves of one host
    # the last wave has no host left on the old release: the same hosts before the change
    assert gates[-1]["baseline_source"] == "before-change" and gates[-1]["low_confidence"]
    assert "lower confidence" in gates[-1]["reason"]
    checks = {m["metric"] for m in gates[0]["models"][0]["metrics"]}
    assert checks == {"latency_ms:p95", "latency_ms:p99", "queue_ms:p95", "throughput_per_gpu"}
    # the canary was probed in this rollout (its facts); the baseline not yet (the inventory)
    units = gates[0]["units"]
    assert [units[h] for h in gates[0]["canary_hosts"]] == ["8 GPUs (facts)"]
    assert {units[h] for h in gates[0]["baseline_hosts"]} == {"8 GPUs (inventory)"}
    assert "error rate not judged" in gates[0]["reason"]  # vLLM exports no error counter
    assert all(rig.fleet.installed_release(h) == TARGET for h in gates[0]["canary_hosts"])


def test_unreachable_prometheus_could_not_measure_and_pauses(matrix: Matrix,
                                                             tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    prom = FakePrometheus()
    prom.down = True
    res = rig.start(engine=rig.engine(live_source=prom.source()))
    assert res.status == "paused", res.reason
    assert "live gate inconclusive" in res.reason and "could not measure" in res.reason
    assert "unreachable" in res.reason
    gates = _live_gates(rig, res.rollout_id)
    assert [g["verdict"] for g in gates] == ["error", "error"]  # max_retries: 1
    # the operator passes it by hand: the wave finishes, the next one is measured again
    prom.down = False
    res = rig.engine(live_source=prom.source()).promote(res.rollout_id, reason="dashboards ok")
    promoted = [e for e in rig.events(res.rollout_id) if e.kind == "rollout.promote"]
    assert promoted and promoted[0].data["gate"] == "live"
    assert res.status == "completed", res.reason
    assert [g["verdict"] for g in _live_gates(rig, res.rollout_id)][-1] == "pass"


def test_no_prometheus_configured_pauses(matrix: Matrix, tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    res = rig.start()
    assert res.status == "paused" and "no Prometheus configured" in res.reason, res.reason


@pytest.mark.parametrize("traffic, verdict", [(0.001, "inconclusive")])
def test_too_little_traffic_is_inconclusive(matrix: Matrix, tmp_path: Path, traffic: float,
                                            verdict: str) -> None:
    rig = _rig(matrix, tmp_path, window_minutes=10)
    prom = FakePrometheus(traffic=traffic)  # 50 req/s * 600 s * 0.001 = 30 requests
    res = rig.start(engine=rig.engine(live_source=prom.source()))
    assert res.status == "paused", res.reason
    gate = _live_gates(rig, res.rollout_id)[-1]
    assert gate["verdict"] == verdict
    assert "too little traffic" in gate["reason"] and "p95 needs >= 200" in gate["reason"]


def test_less_throughput_per_gpu_pauses_naming_the_metric(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    prom = FakePrometheus(served=lambda h: 0.6 if rig.fleet.installed_release(h) == TARGET
                          else 1.0)
    res = rig.start(engine=rig.engine(live_source=prom.source()))
    assert res.status == "paused", res.reason
    assert "live gate inconclusive" in res.reason and "throughput_per_gpu: fail" in res.reason
    gate = _live_gates(rig, res.rollout_id)[-1]
    by_metric = {m["metric"]: m for m in gate["models"][0]["metrics"]}
    assert by_metric["throughput_per_gpu"]["verdict"] == "fail"
    assert by_metric["throughput_per_gpu"]["canary"] == pytest.approx(
        0.6 * by_metric["throughput_per_gpu"]["baseline"], rel=0.05)
    assert any(q.startswith("sum by (host) (rate(vllm:e2e_request_latency_seconds_count{")
               for q in prom.queries)
    # `fleet rollout status` says why, naming the model and the metric
    r = run_fleet("--db", str(tmp_path / "history.db"), "rollout", "status",
                  str(res.rollout_id), "--json")
    doc = json.loads(r.stdout)
    assert doc["status"] == "paused" and "model llama" in doc["reason"], r.stdout[-2000:]
    assert "throughput_per_gpu: fail" in doc["reason"]


class _NoGpuCount(Wrap):
    """The fleet, its inventory without `gpu_count`."""

    def hosts(self) -> list[HostRef]:
        return [replace(r, gpu_count=None) for r in self.inner.hosts()]


def test_an_unknown_gpu_count_could_not_measure_never_passes(matrix: Matrix,
                                                            tmp_path: Path) -> None:
    rig = _rig(matrix, tmp_path)
    rig.backend = _NoGpuCount(rig.fleet)
    res = rig.start(engine=rig.engine(live_source=FakePrometheus().source(),
                                      record_snapshots=False))  # no facts either
    assert res.status == "paused", res.reason
    gate = _live_gates(rig, res.rollout_id)[-1]
    assert gate["verdict"] == "error"
    assert "could not measure" in res.reason and "throughput per GPU" in gate["reason"]
    assert "GPU count unknown" in gate["reason"]
