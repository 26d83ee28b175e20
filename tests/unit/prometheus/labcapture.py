"""Capture a real Prometheus's answers to the queries fleet's own code issues, on lab traffic.

Three hosts run the lab model server's traffic code (`fleet.lab.serving.SERVING_CODE`, the code
every lab host runs, with its files in a temporary directory) in this process, each behind its
own `/metrics`: h2 on driver 595 with the `slow-serving:branch=595,model=llama-3-8b,factor=1.6`
fault's state, h5 on driver 580, and h9 serving nothing (`serving.rate=0`: its summaries export
NaN). Debian's `prometheus` scrapes them every second (`realprom.RealPrometheus`, label `host`).
Then fleet's code asks it through a recording httpx transport, so the recorded queries are the
ones fleet sends, not a copy of them:

    live-triton.json, live-vllm.json  the live gate (`models_to_judge`, `measure_side` of canary
                                      h2 and baseline h5) of each family over WINDOW_S
    weekly-triton.json, weekly-vllm.json  the weekly serving section of pool h100 (h2, h5)
    answers.json                      a parse error, an execution error (two series with one
                                      label set), an empty answer, NaN quantiles (h9)

Each file: `meta` (the prometheus version, `captured_at`: the time every query was asked at, the
window, the hosts) and `exchanges`: the API path, the form sent, the HTTP status and the decoded
body as the server sent it. Capture with

    python -m tests.unit.prometheus.labcapture tests/data/prometheus/lab

(about 75 s: the weekly Triton quantile is a subquery at 60 s steps, so it waits until a
minute boundary lies inside the stored data). The unit tests replay them (`fixtures.replay`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.unit.prometheus.realprom import MetricsServer, RealPrometheus, prometheus_binary

WINDOW_S = 20.0
STEP_S = 2
CANARY, BASELINE, IDLE = "h2", "h5", "h9"
POOL = "h100"
SLOW_MODEL = "llama-3-8b"
HOSTS = {CANARY: ("595.58.03", f"serving.slow.{SLOW_MODEL}=595:1.6\n"),
         BASELINE: ("580.95.05", ""),
         IDLE: ("580.95.05", "serving.rate=0\n")}
GPUS = 8  # the lab's H100 hosts
# two series with one label set once increase() drops the name: Prometheus refuses it (the
# query fleet sent before `count_query` added one sum per counter)
SAME_LABELSET = ('sum by (host) (increase({host=~"(h2|h5)(:[0-9]+)?",model="resnet50",'
                 '__name__=~"nv_inference_request_success|nv_inference_request_failure"}[5s]))')
BAD_QUERY = "histogram_quantile(0.99, sum by (le) ("


class LabServer:
    """One host's lab traffic (`Serving` of SERVING_CODE) and its `/metrics`, in threads."""

    def __init__(self, tmp: Path, driver: str, state: str) -> None:
        from fleet.lab.perf import _COMMON
        from fleet.lab.serving import SERVING_CODE

        tmp.mkdir(parents=True)
        (tmp / "driver.conf").write_text(f"driver_version={driver}\nperf_factor=1.0\n")
        (tmp / "state").write_text(state)
        ns: dict[str, Any] = {}
        old = {k: os.environ.get(k) for k in ("GPUSIM_DRIVER_FILE", "GPUSIM_STATE")}
        os.environ["GPUSIM_DRIVER_FILE"] = str(tmp / "driver.conf")
        os.environ["GPUSIM_STATE"] = str(tmp / "state")
        try:
            exec(compile(_COMMON + SERVING_CODE, "serving", "exec"), ns)  # noqa: S102
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        ns["nvml_error"] = lambda: None  # the fake GPUs are healthy here
        self.serving = ns["Serving"]()
        threading.Thread(target=self.serving.run, daemon=True).start()
        self.metrics = MetricsServer(self.serving.render)
        self.port = self.metrics.port

    def close(self) -> None:
        self.metrics.close()


class Recorder(httpx.BaseTransport):
    """A real HTTP transport that keeps every exchange (form sent, status, decoded body)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.exchanges: list[dict[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        body = resp.read()
        resp.close()
        form = {k: v[0] for k, v in urllib.parse.parse_qs(request.content.decode()).items()}
        self.exchanges.append({"path": request.url.path, "form": form,
                               "http_status": resp.status_code, "body": json.loads(body)})
        return httpx.Response(resp.status_code, content=body,
                              headers={"Content-Type": "application/json"})

    def take(self) -> list[dict[str, Any]]:
        out, self.exchanges = self.exchanges, []
        return out


def live_settings(fam: str) -> Any:
    from fleet.domain.matrix.live_settings import LiveGateSettings

    return LiveGateSettings(enabled=True, family=fam, host_label="host",  # type: ignore[arg-type]
                            window_minutes=WINDOW_S / 60, step_seconds=STEP_S)


def lab_matrix(fam: str) -> Any:
    """matrices/lab.yaml with pool h100's servers of family `fam`."""
    from fleet.domain.matrix.loader import load_matrix

    root = Path(__file__).resolve().parents[3]
    matrix = load_matrix(root / "matrices" / "lab.yaml").matrix
    pool = matrix.pools[POOL]
    gates = pool.rollout.gates.model_copy(update={"live": live_settings(fam)})
    ro = pool.rollout.model_copy(update={"gates": gates})
    return matrix.model_copy(update={"pools": {**matrix.pools,
                                               POOL: pool.model_copy(update={"rollout": ro})}})


def refs() -> list[Any]:
    from fleet.domain.ports import HostRef

    return [HostRef(h, pool=POOL, gpu_model="H100", gpu_count=GPUS) for h in (CANARY, BASELINE)]


def _live(rec: Recorder, url: str, fam_name: str, end: datetime) -> list[dict[str, Any]]:
    from fleet.domain.promql import family
    from fleet.jobs.rollout.livegate import measure_side, models_to_judge
    from fleet.prometheus import PrometheusSource, Target

    fam, live = family(fam_name), live_settings(fam_name)
    start = end - timedelta(seconds=WINDOW_S)
    with PrometheusSource(Target(url, "capture"), transport=rec) as src:
        models, _why = models_to_judge(src, fam, live, [CANARY], end)
        for model in models:
            for side in ([CANARY], [BASELINE]):
                measure_side(src, fam, live, model, side, start, end, {})
    return rec.take()


def _weekly(rec: Recorder, url: str, fam_name: str, now: datetime) -> list[dict[str, Any]]:
    from fleet.jobs.hygiene_serving import serving_section
    from fleet.prometheus import PrometheusSource, Target

    with PrometheusSource(Target(url, "capture"), transport=rec) as src:
        serving_section(src, lab_matrix(fam_name), refs(), [], now=now)
    return rec.take()


def _answers(rec: Recorder, url: str, now: datetime) -> list[dict[str, Any]]:
    from fleet.domain.promql import FAMILY, quantile_query
    from fleet.prometheus import PrometheusSource, Target

    with PrometheusSource(Target(url, "capture"), transport=rec) as src:
        src.instant(BAD_QUERY, now)
        src.instant(SAME_LABELSET, now)
        src.instant(quantile_query(FAMILY["vllm"], "latency", 0.99, model="no-such-model",
                                   hosts=[CANARY, BASELINE], host_label="host",
                                   rate_window_s=5), now)
        src.instant(quantile_query(FAMILY["triton"], "latency", 0.99, model="resnet50",
                                   hosts=[IDLE, BASELINE], host_label="host",
                                   rate_window_s=5), now)
    return rec.take()


def capture(out: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        raise SystemExit("no prometheus binary: apt-get install prometheus")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()[0]
    tmp = Path(tempfile.mkdtemp(prefix="fleet-labcapture-"))
    servers = {h: LabServer(tmp / h, drv, st) for h, (drv, st) in HOSTS.items()}
    prom = RealPrometheus({h: s.port for h, s in servers.items()}, binary=binary)
    try:
        prom.wait_ready(samples=3)
        first = time.time()
        # a window of traffic, and a minute boundary inside the data (the weekly subquery)
        boundary = (int(first) // 60 + 1) * 60
        time.sleep(max(WINDOW_S + 2 * STEP_S, boundary + 2 - time.time()))
        now = datetime.now(UTC)
        meta = {"prometheus": version, "captured_at": now.isoformat(),
                "window_s": WINDOW_S, "step_s": STEP_S, "canary": [CANARY],
                "baseline": [BASELINE], "hosts": {h: {"driver": d, "state": s.strip()}
                                                  for h, (d, s) in HOSTS.items()},
                "gpus_per_host": GPUS}
        rec = Recorder()
        files = {f"live-{f}": _live(rec, prom.url, f, now) for f in ("triton", "vllm")}
        files |= {f"weekly-{f}": _weekly(rec, prom.url, f, now) for f in ("triton", "vllm")}
        files["answers"] = _answers(rec, prom.url, now)
        out.mkdir(parents=True, exist_ok=True)
        for name, exchanges in files.items():
            (out / f"{name}.json").write_text(json.dumps(
                {"meta": meta, "exchanges": exchanges}, indent=1) + "\n")
            codes = sorted({e["http_status"] for e in exchanges})
            print(f"{name}: {len(exchanges)} answers, HTTP {codes}", file=sys.stderr)
    finally:
        prom.stop()
        for s in servers.values():
            s.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    capture(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/prometheus/lab"))
