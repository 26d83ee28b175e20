"""The lab model server's background traffic and metrics (fleet/lab/serving.py), run off the lab
on a fake clock, the `slow-serving` fault, and the lab Prometheus's scrape config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fleet.errors import BadInput
from fleet.lab import faults, prom_service
from fleet.lab.model import LabState, plan_hosts
from fleet.lab.perf import _COMMON, MODEL_SERVER_SCRIPT
from fleet.lab.serving import MODEL_NAMES, SERVING_CODE

SAMPLE = re.compile(r'^([A-Za-z0-9_:]+)\{([^}]*)\} (\S+)$')


def server(tmp: Path, driver: str = "595.58.03", state: str = "",
           healthy: bool = True) -> tuple[Any, list[float]]:
    """A `Serving` of the host code with its files in `tmp` and a clock the test moves."""
    (tmp / "driver.conf").write_text(f"driver_version={driver}\nperf_factor=1.0\n")
    (tmp / "state").write_text(state)
    ns: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUSIM_DRIVER_FILE", str(tmp / "driver.conf"))
        mp.setenv("GPUSIM_STATE", str(tmp / "state"))
        exec(compile(_COMMON + SERVING_CODE, "serving", "exec"), ns)  # noqa: S102
    ns["nvml_error"] = (lambda: None) if healthy else (lambda: "NVMLError: Driver Not Loaded")
    clock = [1000.0]
    return ns["Serving"](clock=lambda: clock[0], seed=7), clock


def serve(srv: Any, clock: list[float], seconds: float) -> dict[tuple[str, str], float]:
    for _ in range(int(seconds * 4)):
        clock[0] += 0.25
        srv.tick()
    out = {}
    for line in srv.render().splitlines():
        m = SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def p99(samples: dict[tuple[str, str], float], model: str) -> float:
    return samples[("nv_inference_request_summary_us",
                    f'model="{model}",version="1",quantile="0.99"')]


def test_both_models_are_served_and_exported_triton_and_vllm_style(tmp_path: Path) -> None:
    srv, clock = server(tmp_path)
    s = serve(srv, clock, 10)
    for model in MODEL_NAMES:
        tl = f'model="{model}",version="1"'
        assert s[("nv_inference_request_success", tl)] == 2000  # 200 per second
        assert s[("nv_inference_request_failure", tl)] == 0
        assert s[("nv_model_load_duration_secs", tl)] > 1
        vl = f'model_name="{model}"'
        count = s[("vllm:e2e_request_latency_seconds_count", vl)]
        assert s[("vllm:e2e_request_latency_seconds_bucket", vl + ',le="+Inf"')] == count == 2000
        assert s[("vllm:request_queue_time_seconds_count", vl)] == 2000
        assert s[("vllm:time_to_first_token_seconds_count", vl)] == 2000
    # the response cache is exported for resnet50 only
    hits = {k[1] for k in s if k[0] == "nv_cache_num_hits_per_model"}
    assert hits == {'model="resnet50",version="1"'}
    assert 10 < p99(s, "resnet50") / 1000 < 20 and 400 < p99(s, "llama-3-8b") / 1000 < 800


def test_slow_serving_slows_its_model_on_its_branch_only(tmp_path: Path) -> None:
    fault = faults.parse(["slow-serving:branch=595,model=llama-3-8b,factor=1.6"])[0]
    state = "".join(f"{k}={v}\n" for k, v in faults.effects(fault, plan_hosts(1, "netns")[0])
                    .set.items())
    for d in "abc":
        (tmp_path / d).mkdir()
    base = serve(*server(tmp_path / "a"), 20)
    slow = serve(*server(tmp_path / "b", state=state), 20)
    other = serve(*server(tmp_path / "c", driver="580.95.05", state=state), 20)
    assert 1.45 < p99(slow, "llama-3-8b") / p99(base, "llama-3-8b") < 1.75
    assert 0.9 < p99(slow, "resnet50") / p99(base, "resnet50") < 1.1
    assert 0.9 < p99(other, "llama-3-8b") / p99(base, "llama-3-8b") < 1.1


def test_without_nvml_every_request_fails(tmp_path: Path) -> None:
    srv, clock = server(tmp_path, healthy=False)
    s = serve(srv, clock, 2)
    tl = 'model="resnet50",version="1"'
    assert s[("nv_inference_request_failure", tl)] == 400
    assert s[("nv_inference_request_success", tl)] == 0


def test_a_late_tick_catches_up_at_most_five_seconds(tmp_path: Path) -> None:
    srv, clock = server(tmp_path)
    clock[0] += 60  # the thread starved for a minute on a loaded machine
    srv.tick()
    s = serve(srv, clock, 0)
    assert s[("nv_inference_request_success", 'model="resnet50",version="1"')] == 1000


def test_the_model_server_script_compiles() -> None:
    compile(MODEL_SERVER_SCRIPT, "model_server.py", "exec")


def test_slow_serving_spec() -> None:
    host = plan_hosts(1, "netns")[0]
    assert faults.effects(faults.parse(["slow-serving"])[0], host).set == {
        "serving.slow.*": "any:1.6"}
    with pytest.raises(BadInput) as err:
        faults.parse(["slow-serving:model=$(id)", "slow-serving:factor=0",
                      "slow-serving:branch=r595"])
    assert len(err.value.problems) == 3


def test_the_lab_prometheus_scrapes_every_host_labelled_with_its_name() -> None:
    state = LabState(mode="netns", hosts=plan_hosts(3, "netns"), repo_url="", matrix="",
                     release=None, run_dir="/run/x", base_key="", created="")
    conf = prom_service.config(state)
    static = conf["scrape_configs"][0]["static_configs"]  # type: ignore[index]
    assert [(s["targets"], s["labels"]["host"]) for s in static] == [
        (["10.77.0.11:8000"], "h1"), (["10.77.0.12:8000"], "h2"), (["10.77.0.13:8000"], "h3")]
