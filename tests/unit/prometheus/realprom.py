"""A real Prometheus (Debian's `prometheus` binary) scraping a tiny serving exporter, for tests.

`ServingExporter` is an HTTP server that exports Triton-style and vLLM-style metrics for two
models, as if each model served `rps` requests per second since the exporter started: every
counter grows linearly with time and every bucket is a fixed share of the count, so any rate
window gives the same bucket shares and `histogram_quantile` has one exact answer
(`expected_quantile`), however late or irregular the scrapes are on a loaded machine.

`RealPrometheus` starts the binary on a free loopback port with a temporary storage directory
and a 1 s scrape interval, and waits (polling, with a generous deadline) until every target has
been scraped often enough for a rate. Capture the recorded API answers in tests/data/prometheus
with `python -m tests.unit.prometheus.realprom tests/data/prometheus`.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PROMETHEUS = "prometheus"
LATENCY_BOUNDS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # seconds; then +Inf
LATENCY_CDF = (0.10, 0.50, 0.90, 0.97, 0.995, 0.999, 1.0)  # share of requests <= each bound
QUEUE_BOUNDS = (0.001, 0.005, 0.01, 0.05, 0.1)
QUEUE_CDF = (0.30, 0.80, 0.95, 0.999, 1.0)
SUMMARY_US = {0.5: 9000.0, 0.9: 15000.0, 0.95: 20000.0, 0.99: 31000.0}  # Triton p-quantiles
QUEUE_SUMMARY_US = {0.5: 400.0, 0.9: 900.0, 0.95: 1200.0, 0.99: 2500.0}


def prometheus_binary() -> str | None:
    return shutil.which(PROMETHEUS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expected_quantile(q: float, bounds: tuple[float, ...], cdf: tuple[float, ...],
                      factor: float = 1.0) -> float:
    """What `histogram_quantile` answers for these buckets (linear within the bucket the rank
    falls in, from 0 for the first bucket), the bounds scaled by `factor`."""
    lower, below = 0.0, 0.0
    for b, c in zip(bounds, cdf, strict=True):
        if c >= q:
            return (lower + (b * factor - lower) * (q - below) / (c - below))
        lower, below = b * factor, c
    raise ValueError("quantile beyond the last finite bucket")


@dataclass
class ModelTraffic:
    rps: float = 50.0
    factor: float = 1.0  # latency scale (a slow release: > 1)
    error_share: float = 0.01
    failure_reason: bool = True  # Triton's failure counter carries `reason` (older ones do not)
    summary_nan: bool = False  # an empty summary window: Triton exports NaN quantiles


@dataclass
class HostTraffic:
    """What one host's servers export: a vLLM model and a Triton model."""

    vllm: dict[str, ModelTraffic] = field(default_factory=lambda: {"llama": ModelTraffic()})
    triton: dict[str, ModelTraffic] = field(default_factory=lambda: {"resnet": ModelTraffic()})


def _num(v: float) -> str:
    return repr(float(v))


def exposition(traffic: HostTraffic, elapsed_s: float) -> str:
    """The text format a scrape at `elapsed_s` seconds after start returns."""
    lines: list[str] = []
    for base, bounds, cdf, help_ in (
            ("vllm:e2e_request_latency_seconds", LATENCY_BOUNDS, LATENCY_CDF, "e2e latency"),
            ("vllm:request_queue_time_seconds", QUEUE_BOUNDS, QUEUE_CDF, "queue time")):
        lines += [f"# HELP {base} {help_}", f"# TYPE {base} histogram"]
        for model, t in sorted(traffic.vllm.items()):
            n = t.rps * elapsed_s
            lab = f'model_name="{model}"'
            for b, c in zip(bounds, cdf, strict=True):
                lines.append(f'{base}_bucket{{{lab},le="{b * t.factor:g}"}} {_num(n * c)}')
            lines.append(f'{base}_bucket{{{lab},le="+Inf"}} {_num(n)}')
            lines.append(f"{base}_sum{{{lab}}} {_num(n * bounds[1] * t.factor)}")
            lines.append(f"{base}_count{{{lab}}} {_num(n)}")
    for name, what in (("nv_inference_request_success", "successful"),
                       ("nv_inference_request_failure", "failed")):
        lines += [f"# HELP {name} Number of {what} inference requests",
                  f"# TYPE {name} counter"]
        for model, t in sorted(traffic.triton.items()):
            n = t.rps * elapsed_s
            share = t.error_share if what == "failed" else 1 - t.error_share
            extra = ',reason="BACKEND"' if what == "failed" and t.failure_reason else ""
            lines.append(f'{name}{{model="{model}",version="1"{extra}}} {_num(n * share)}')
    for name, table in (("nv_inference_request_summary_us", SUMMARY_US),
                        ("nv_inference_queue_summary_us", QUEUE_SUMMARY_US)):
        lines += [f"# HELP {name} Summary of latencies (us)", f"# TYPE {name} summary"]
        for model, t in sorted(traffic.triton.items()):
            n = t.rps * elapsed_s
            lab = f'model="{model}",version="1"'
            for q, us in table.items():
                value = "NaN" if t.summary_nan else _num(us * t.factor)
                lines.append(f'{name}{{{lab},quantile="{q:g}"}} {value}')
            lines.append(f"{name}_sum{{{lab}}} {_num(n * table[0.5] * t.factor)}")
            lines.append(f"{name}_count{{{lab}}} {_num(n)}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """`/metrics` from `render()` on a free loopback port, in a thread (one per lab host)."""

    def __init__(self, render: Callable[[], str]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                body = render().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ServingExporter(MetricsServer):
    """One host's traffic table as its exposition, on a server of its own."""

    def __init__(self, traffic: HostTraffic) -> None:
        self.traffic = traffic
        self.started = time.monotonic()
        super().__init__(lambda: exposition(self.traffic, time.monotonic() - self.started))


class RealPrometheus:
    """Debian's prometheus on a free port, scraping `targets` (host label -> exporter port)
    every second; `url` once `wait_ready` returned."""

    def __init__(self, targets: dict[str, int], *, binary: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fleet-prom-"))
        self.targets = targets
        static = [{"targets": [f"{'localhost' if i % 2 else '127.0.0.1'}:{port}"],
                   "labels": {"host": host}}
                  for i, (host, port) in enumerate(sorted(targets.items()))]
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                             "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": "serving", "static_configs": static}]}
        (self.dir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.ready_s: float | None = None
        self.answering_s: float | None = None

    def _get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=5) as resp:
            return json.loads(resp.read()) if path.startswith("/api") else resp.read()

    def wait_ready(self, *, samples: int = 4, deadline_s: float = 60.0) -> float:
        """Until the server answers and every target has `samples` scrapes in store; returns the
        seconds since start (raises with the server's log past the deadline)."""
        end = time.monotonic() + deadline_s
        want = len(self.targets)
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            try:
                got = self._get("/api/v1/query", query=f"count_over_time(up[1m]) >= {samples}")
                if self.answering_s is None:
                    self.answering_s = time.monotonic() - self.started
                if len(got["data"]["result"]) >= want:
                    self.ready_s = time.monotonic() - self.started
                    return self.ready_s
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        self.stop()
        log = (self.dir / "prometheus.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"prometheus not ready within {deadline_s:g} s "
                           f"(exit {self.proc.returncode}): {log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def capture(out: Path) -> None:
    """Record real API answers (the fixtures of tests/unit/prometheus) from a real server."""
    from datetime import UTC, datetime, timedelta

    from fleet.domain.promql import FAMILY, count_query, models_query, quantile_query, rate_query

    binary = prometheus_binary()
    if binary is None:
        raise SystemExit("no prometheus binary: apt-get install prometheus")
    hosts = {"gpu-01": HostTraffic(vllm={"llama": ModelTraffic(factor=2.0),
                                         "mistral": ModelTraffic()}),
             "gpu-02": HostTraffic()}
    exporters = {h: ServingExporter(t) for h, t in hosts.items()}
    prom = RealPrometheus({h: e.port for h, e in exporters.items()}, binary=binary)
    try:
        prom.wait_ready(samples=6)
        both = sorted(hosts)
        vllm, triton = FAMILY["vllm"], FAMILY["triton"]
        now = datetime.now(UTC)
        asks = {
            "vllm-p99-instant": ("/api/v1/query", quantile_query(
                vllm, "latency", 0.99, model="llama", hosts=both, host_label="host",
                rate_window_s=5)),
            "vllm-p95-range": ("/api/v1/query_range", quantile_query(
                vllm, "latency", 0.95, model="llama", hosts=both, host_label="host",
                rate_window_s=2)),
            "vllm-rate-range": ("/api/v1/query_range", rate_query(
                vllm, model="llama", hosts=both, host_label="host", rate_window_s=2)),
            "triton-p99-instant": ("/api/v1/query", quantile_query(
                triton, "latency", 0.99, model="resnet", hosts=both, host_label="host",
                rate_window_s=5)),
            "triton-requests-instant": ("/api/v1/query", count_query(
                triton, "requests", model="resnet", hosts=both, host_label="host",
                window_s=5)),
            "vllm-models-instant": ("/api/v1/query", models_query(
                vllm, hosts=both, host_label="host")),
            "no-series-instant": ("/api/v1/query", quantile_query(
                vllm, "latency", 0.99, model="no-such-model", hosts=both, host_label="host",
                rate_window_s=5)),
            "bad-query-error": ("/api/v1/query", "histogram_quantile(0.99, sum by (le) ("),
        }
        out.mkdir(parents=True, exist_ok=True)
        for name, (path, query) in asks.items():
            assert query is not None
            form: dict[str, str] = {"query": query}
            if path.endswith("range"):
                form |= {"start": f"{(now - timedelta(seconds=4)).timestamp():.3f}",
                         "end": f"{now.timestamp():.3f}", "step": "1s"}
            req = urllib.request.Request(f"{prom.url}{path}",
                                         data=urllib.parse.urlencode(form).encode())
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as err:
                status, body = err.code, err.read()
            record = {"query": query, "path": path, "http_status": status,
                      "body": json.loads(body)}
            (out / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
            print(f"{name}: HTTP {status}", file=sys.stderr)
    finally:
        prom.stop()
        for e in exporters.values():
            e.close()


if __name__ == "__main__":
    capture(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/prometheus"))
