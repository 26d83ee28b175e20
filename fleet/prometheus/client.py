"""Instant and range queries over Prometheus's HTTP API (`/api/v1/query`, `/api/v1/query_range`).

One I/O seam: `PrometheusSource` takes an httpx transport, so tests serve recorded answers with
`httpx.MockTransport` and the real test asks a real server. Every failure (connection refused,
a timeout, an HTTP error, a body that is not the API's JSON, one over `MAX_BODY` bytes) comes
back as a `QueryResult` with `error` set, never as an exception and never as data. The query is
sent as a form POST (long selectors do not fit a URL); credentials go in headers only and are
scrubbed from every message.
"""

from __future__ import annotations

import json
from datetime import datetime

import httpx

from fleet.domain.prom_result import QueryResult, failed, parse_response
from fleet.domain.secrets import scrub
from fleet.prometheus.config import Target

MAX_BODY = 32 * 1024 * 1024
TIMEOUT_S = 10.0


def _unix(t: datetime) -> str:
    if t.tzinfo is None:
        raise ValueError("a query time must be timezone-aware (UTC)")
    return f"{t.timestamp():.3f}"


class PrometheusSource:
    """Ask one Prometheus server. `timeout_s` bounds each request (connect and read) and is
    passed to the server as the query's own `timeout` too."""

    def __init__(self, target: Target, *, timeout_s: float = TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.target = target
        self.timeout_s = timeout_s
        creds = target.credentials
        self._secrets = creds.secrets()
        self._client = httpx.Client(
            base_url=target.url, timeout=httpx.Timeout(timeout_s),
            headers={"Accept": "application/json", **creds.headers()},
            auth=creds.basic(), transport=transport, follow_redirects=False,
            trust_env=False)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def instant(self, query: str, at: datetime | None = None) -> QueryResult:
        form = {"query": query, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            form["time"] = _unix(at)
        return self._ask("/api/v1/query", query, form)

    def range(self, query: str, start: datetime, end: datetime, step_s: float) -> QueryResult:
        if end <= start or step_s <= 0:
            return failed(query, f"empty range {start.isoformat()} .. {end.isoformat()} "
                                 f"step {step_s:g}s")
        form = {"query": query, "start": _unix(start), "end": _unix(end),
                "step": f"{step_s:g}s", "timeout": f"{self.timeout_s:g}s"}
        return self._ask("/api/v1/query_range", query, form)

    def _ask(self, path: str, query: str, form: dict[str, str]) -> QueryResult:
        where = f"Prometheus at {self.target.shown_url}"
        try:
            with self._client.stream("POST", path, data=form) as resp:
                body = bytearray()
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY:
                        return failed(query, f"{where}: answer over {MAX_BODY} bytes: refused")
                status = resp.status_code
        except httpx.TimeoutException:
            return failed(query, f"{where}: no answer within {self.timeout_s:g} s")
        except httpx.HTTPError as exc:
            return failed(query, self._scrub(f"{where} unreachable: {type(exc).__name__}: "
                                             f"{exc}"))
        try:
            decoded = json.loads(body)
        except ValueError:
            return failed(query, f"{where}: HTTP {status}, the answer is not JSON")
        result = parse_response(query, decoded, http_status=status)
        if result.error is not None:
            return failed(query, self._scrub(f"{where}: {result.error}"))
        return result

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)
