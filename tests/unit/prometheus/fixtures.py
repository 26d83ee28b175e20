"""The recorded answers of a real Prometheus (tests/data/prometheus), served to the source."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from fleet.prometheus import PrometheusSource, Target

DATA = Path(__file__).resolve().parents[2] / "data" / "prometheus"


def recorded(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


def serve(answers: Mapping[str, str] | Callable[[str, str], str | None],
          seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    """A transport answering each query with the recorded file `answers[query]` (or what the
    callable returns for (path, query)); an unknown query is a 400, as a real server says."""

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        form = urllib.parse.parse_qs(request.content.decode())
        query = form.get("query", [""])[0]
        name = (answers(request.url.path, query) if callable(answers)
                else answers.get(query))
        if name is None:
            return httpx.Response(400, json={"status": "error", "errorType": "bad_data",
                                             "error": f"no recorded answer for {query!r}"})
        rec = recorded(name)
        return httpx.Response(rec["http_status"], json=rec["body"])

    return httpx.MockTransport(handler)


def captured(name: str) -> dict[str, Any]:
    """A capture of tests/data/prometheus/lab (`labcapture`): `meta` and `exchanges`."""
    data: dict[str, Any] = json.loads((DATA / "lab" / f"{name}.json").read_text())
    return data


def replay(exchanges: list[dict[str, Any]], seen: list[str] | None = None
           ) -> httpx.MockTransport:
    """A transport answering each request whose path and form (but the timeout) match a
    captured exchange with its answer; any other is a 400 naming it, so a query fleet no
    longer sends the way it was captured measures nothing. `seen` collects the queries."""
    def key(path: str, form: Mapping[str, str]) -> tuple[str, ...]:
        return (path, *(f"{k}={v}" for k, v in sorted(form.items()) if k != "timeout"))

    answers = {key(e["path"], e["form"]): e for e in exchanges}

    def handler(request: httpx.Request) -> httpx.Response:
        form = {k: v[0] for k, v in urllib.parse.parse_qs(request.content.decode()).items()}
        if seen is not None:
            seen.append(form.get("query", ""))
        e = answers.get(key(request.url.path, form))
        if e is None:
            return httpx.Response(400, json={"status": "error", "errorType": "bad_data",
                                             "error": f"not captured: {form!r:.300}"})
        return httpx.Response(e["http_status"], json=e["body"])

    return httpx.MockTransport(handler)


def source(transport: httpx.BaseTransport, *, url: str = "http://prom.test:9090",
           **target: Any) -> PrometheusSource:
    return PrometheusSource(Target(url, "--prometheus", **target), transport=transport)


_HOSTS_RE = re.compile(r'=~"\((.*?)\)\(:\[0-9\]\+\)\?"')
_MODEL_RE = re.compile(r'model(?:_name)?="([^"]*)"')
_WINDOW_RE = re.compile(r"\[(\d+)s\]\)\)$")


class FakePrometheus:
    """A Prometheus for the simulated fleet, answering in the recorded answers' own format:
    each host of the query gets the recorded series of `gpu-01` (the slow one: llama's
    latency twice as long) when `slow(host, model)` says so, else `gpu-02`'s. Request counts
    are the recorded ones (50 requests/s over 5 s) scaled to the query's window times
    `traffic`, requests/s the recorded ones (50) times `traffic` and `served(host)`; each
    value varies by up to 2% from step to step and host to host. `down` makes every request a
    refused connection."""

    def __init__(self, slow: Callable[[str, str], bool] = lambda h, m: False, *,
                 traffic: float = 1.0, served: Callable[[str], float] = lambda h: 1.0) -> None:
        self.slow, self.traffic, self.served, self.down = slow, traffic, served, False
        self.queries: list[str] = []

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def source(self) -> PrometheusSource:
        return source(self.transport())

    def _handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        query = urllib.parse.parse_qs(request.content.decode()).get("query", [""])[0]
        self.queries.append(query)
        if query.startswith("count by ("):
            rec = recorded("vllm-models-instant")
            return httpx.Response(200, json=rec["body"])
        match = _HOSTS_RE.search(query)
        hosts = match.group(1).replace("\\\\", "").split("|") if match else []
        model = (_MODEL_RE.findall(query) or [""])[0]
        if request.url.path.endswith("query_range") and "(rate(" in query \
                and query.startswith("sum by ("):  # requests/s: the recorded 50 per second
            name, scale = "vllm-rate-range", self.traffic
        elif request.url.path.endswith("query_range"):
            name, scale = "vllm-p95-range", 1.0
        elif query.startswith("sum by (") and "increase(" in query:
            window = _WINDOW_RE.search(query)
            name = "triton-requests-instant"
            scale = (int(window.group(1)) if window else 5) / 5 * self.traffic
        else:
            name, scale = "vllm-p99-instant", 1.0
        body = recorded(name)["body"]
        by_host = {s["metric"]["host"]: s for s in body["data"]["result"]}
        result = []
        for h in hosts:
            tpl = by_host["gpu-01" if self.slow(h, model) else "gpu-02"]
            share = self.served(h) if name == "vllm-rate-range" else 1.0
            item: dict[str, Any] = {"metric": {"host": h}}
            for key in ("value", "values"):
                if key in tpl:
                    pts = [tpl[key]] if key == "value" else tpl[key]
                    # each step within +-2% of the recorded value, as real traffic varies
                    pts = [[t, repr(float(v) * scale * share
                                    * (1 + 0.01 * ((i * 7 + len(h)) % 5 - 2)))]
                           for i, (t, v) in enumerate(pts)]
                    item[key] = pts[0] if key == "value" else pts
            result.append(item)
        return httpx.Response(200, json={"status": "success", "data": {
            "resultType": body["data"]["resultType"], "result": result}})
