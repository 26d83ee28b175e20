"""The live gate on the lab's real Prometheus (`fleet lab up --prometheus`, the session lab):
every host's model server serves two models (resnet50, llama-3-8b) under steady background
traffic, Prometheus scrapes them every second, and `matrices/lab.yaml` judges pool h100's
canaries on that traffic (vLLM family, label `host`, 30 s window, 5 s steps).

Pool h100 holds h2 and h5: wave 1 moves one host while the other, still on the old release,
is the same-time baseline; wave 2's baseline is its host before the change. The tests run in
file order, each leaving pool h100 on r580 for the next (the good candidate last: the weekly
serving report then has traffic of both releases). The latencies are
drawn from the release's speed, not timed on the loaded CI machine (fleet/lab/serving.py), and
the slow candidate is 60% slower against a 10% allowance. The benchmark gate is off here: these
tests are about the live gate (the benchmark gate: tests/integration/rollout).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.history.rollouts import subject_of
from fleet.lab import lab
from tests.integration.fleet_cli import fleet

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
POOL_HOSTS = ("h2", "h5")
R595, R580 = "595.58.03", "580.95.05"
SLOW_MODEL = "llama-3-8b"


def write_matrix(path: Path, retries: int = 1, **live: Any) -> Path:
    """matrices/lab.yaml with pool h100's benchmark gate off and `live` over its live gate."""
    doc = yaml.safe_load((ROOT / "matrices" / "lab.yaml").read_text())
    gates = doc["pools"]["h100"]["rollout"]["gates"]
    gates["benchmark"], gates["max_retries"] = False, retries
    gates["live"] = {**gates["live"], **live}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def prom_query(url: str, query: str) -> list[dict[str, Any]]:
    data = urllib.parse.urlencode({"query": query}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=10) as resp:
        return list(json.loads(resp.read())["data"]["result"])


@pytest.fixture(scope="module")
def env(lab_paths, lab_state, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:
    assert sorted(h.name for h in lab_state.hosts if h.pool == "h100") == list(POOL_HOSTS)
    url = lab.status(lab_paths)["prometheus_url"]
    assert url and url.startswith("http://127.0.0.1:"), url
    for name in POOL_HOSTS:
        lab.reset(lab_paths, name)
    # the server has scraped both pool hosts' model servers (a loaded machine: poll, 120 s)
    deadline = time.monotonic() + 120
    query = 'count_over_time(up{job="lab-serving",host=~"h2|h5"}[1m]) >= 5'
    while len(prom_query(url, query)) < 2:
        assert time.monotonic() < deadline, prom_query(url, "up")
        time.sleep(0.5)
    tmp = tmp_path_factory.mktemp("live")
    yield {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(tmp / "fleet.db"),
           "FLEET_MATRIX": str(write_matrix(tmp / "lab.yaml")), "PROM_URL": url,
           "FLEET_INVENTORY": str(ROOT / "inventories" / "lab.py"), "COLUMNS": "200"}
    for name in POOL_HOSTS:
        lab.reset(lab_paths, name)


def pin(env: dict[str, str], release: str) -> None:
    rc, doc = fleet(env, "apply", "-r", release, "-l", "h100")
    assert rc == 0, json.dumps(doc)[-3000:]


def drivers(hosts) -> dict[str, str]:  # noqa: ANN001 - conftest.Host
    out = {}
    for name in POOL_HOSTS:
        hosts[name].close()
        out[name] = hosts[name].nvml().get("driver")
    return out


def live_events(env: dict[str, str], rollout_id: int) -> list[dict[str, Any]]:
    """The live gate's `rollout.gate` events of one rollout, oldest first."""
    with sqlite3.connect(env["FLEET_DB"]) as db:
        rows = db.execute("SELECT data FROM events WHERE kind = 'rollout.gate' AND subject = ? "
                          "ORDER BY id", (subject_of(rollout_id),)).fetchall()
    return [d for d in (json.loads(r[0]) for r in rows) if d.get("gate") == "live"]


def test_the_lab_exports_both_families_for_two_models(env) -> None:
    url = env["PROM_URL"]
    vllm = prom_query(url, 'sum by (model_name) (vllm:e2e_request_latency_seconds_count'
                           '{host="h2"})')
    triton = prom_query(url, 'nv_inference_request_summary_us{host="h2",quantile="0.99"}')
    load = prom_query(url, 'nv_model_load_duration_secs{host="h2"}')
    assert {r["metric"]["model_name"] for r in vllm} == {"resnet50", SLOW_MODEL}, vllm
    assert {r["metric"]["model"] for r in triton} == {"resnet50", SLOW_MODEL}, triton
    assert all(float(r["value"][1]) > 0 for r in load), load


def test_a_candidate_that_slows_one_model_fails_on_it_and_is_rolled_back(
        env, hosts, lab_paths) -> None:
    """`slow-serving` on branch 595: llama-3-8b 60% slower there, resnet50 as fast."""
    pin(env, "r580-cuda13.0")
    try:
        for name in POOL_HOSTS:
            lab.inject(lab_paths, name, [f"slow-serving:branch=595,model={SLOW_MODEL},"
                                         "factor=1.6"])
        rc, doc = fleet(env, "rollout", "start", "--pool", "h100", "--release",
                        "r595-cuda13.2")
    finally:
        for name in POOL_HOSTS:
            lab.reset(lab_paths, name)
    assert rc == 1 and doc["status"] == "rolled_back", doc
    reason = doc["reason"]
    assert "live gate" in reason and f"model {SLOW_MODEL}: fail" in reason, reason
    assert "latency_ms:p99: fail" in reason and "model resnet50" not in reason, reason
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R580)
    (event,) = live_events(env, doc["rollout_id"])
    verdicts = {m["model"]: m["verdict"] for m in event["models"]}
    assert verdicts == {SLOW_MODEL: "fail", "resnet50": "pass"}, event


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_prometheus_unreachable_could_not_measure_pauses(env, hosts, tmp_path) -> None:
    pin(env, "r580-cuda13.0")
    """No retry, a 15 s window: the first measurement could not reach the server."""
    e = {**env, "FLEET_PROMETHEUS_URL": f"http://127.0.0.1:{_closed_port()}",
         "FLEET_MATRIX": str(write_matrix(tmp_path / "m.yaml", retries=0, window_minutes=0.25))}
    rc, doc = fleet(e, "rollout", "start", "--pool", "h100", "--release", "r595-cuda13.2")
    assert rc != 0 and doc["status"] == "paused", doc
    assert "live gate" in doc["reason"] and "could not measure" in doc["reason"], doc["reason"]
    assert "unreachable" in doc["reason"], doc["reason"]
    rc, done = fleet(e, "rollout", "abort", str(doc["rollout_id"]))
    assert rc in (0, 1) and done["status"] in ("aborted", "rolled_back"), done


def test_a_good_candidate_passes_the_live_gate(env, hosts) -> None:
    pin(env, "r580-cuda13.0")
    rc, doc = fleet(env, "rollout", "start", "--pool", "h100", "--release", "r595-cuda13.2")
    assert rc == 0 and doc["status"] == "completed", doc
    assert drivers(hosts) == dict.fromkeys(POOL_HOSTS, R595)
    events = live_events(env, doc["rollout_id"])
    assert [e["verdict"] for e in events] == ["pass", "pass"], events
    first, second = events
    assert first["baseline_source"] == "same-time" and second["baseline_source"] == \
        "before-change", events
    assert {m["model"] for m in first["models"]} == {"resnet50", SLOW_MODEL}
    # throughput per GPU: the lab serves 200 requests/s per model per host, on 8 H100s each
    for m in first["models"]:
        tput = {c["metric"]: c for c in m["metrics"]}["throughput_per_gpu"]
        assert tput["verdict"] == "pass", m
        assert 20 < tput["canary"] < 30 and 20 < tput["baseline"] < 30, tput
    assert first["units"][first["canary_hosts"][0]] == "8 GPUs (facts)", first["units"]


def test_the_weekly_serving_section_reads_the_lab(env, tmp_path) -> None:
    """`fleet hygiene run` against the same Prometheus (inventory data prometheus_url), pool h100
    read as Triton (summaries, load time, response cache): per-model p95/p99 for both models
    and the cold start, in the JSON and the HTML report."""
    matrix = write_matrix(tmp_path / "m.yaml", family="triton")
    e = {**env, "FLEET_MATRIX": str(matrix)}
    t0 = time.monotonic()
    rc, doc = fleet(e, "hygiene", "run", "--no-benchmark", "-l", "h100", "--report-dir",
                    str(tmp_path / "report"))
    took = time.monotonic() - t0
    assert rc in (0, 1), doc
    serving = doc["serving"]
    assert serving["status"] == "measured", serving
    (pool,) = serving["pools"]
    assert pool["pool"] == "h100" and pool["family"] == "triton", pool
    models = {m["model"]: m for m in pool["models"]}
    assert set(models) == {"resnet50", SLOW_MODEL}, models
    for m in models.values():
        lat = m["latency_ms"]["this_week"]
        assert m["status"] == "measured" and 0 < lat["p95"] <= lat["p99"], m
        assert m["load_s"]["max"] > 1 and m["load_s"]["hosts"] == 2, m
        assert {d["host"] for d in m["density"]} == set(POOL_HOSTS), m
    assert 0.5 < models["resnet50"]["cache_hit_rate"] < 0.9, models["resnet50"]
    assert models[SLOW_MODEL]["cache_hit_rate"] is None
    html = (tmp_path / "report" / "latest.html").read_text()
    assert html.index('<section id="act">') < html.index("<h2>Serving per model")
    assert SLOW_MODEL in html[html.index("<h2>Serving per model"):]
    print(f"hygiene with serving: {took:.1f} s, {serving['queries']} queries")
