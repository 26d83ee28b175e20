"""Prometheus HTTP API answers, parsed into series or an explicit failure (pure).

The API answers `{"status": "success", "data": {"resultType": "vector" | "matrix" | "scalar",
"result": [...]}}` or `{"status": "error", "errorType": ..., "error": ...}`; sample values are
strings ("0.25", "NaN", "+Inf"). A failed query, an answer of another shape and an answer with
no finite value all say why they could not measure: none of them reads as a value of zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

MAX_SERIES = 10_000  # more series than a gate asks for means a wrong query: refused


@dataclass(frozen=True)
class Series:
    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]  # (unix time, value), non-finite values dropped

    def values(self) -> list[float]:
        return [v for _t, v in self.points]


@dataclass(frozen=True)
class QueryResult:
    """One query's outcome. `error` is set when it could not be answered; `series` may be
    empty when it was answered with no data (which `measured` also refuses)."""

    query: str
    series: tuple[Series, ...] = ()
    error: str | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def measured(self) -> bool:
        return self.ok and any(s.points for s in self.series)

    def why_not(self) -> str:
        """Why this result measures nothing ("" when it does)."""
        if self.error is not None:
            return self.error
        if not self.series:
            return "no series matched"
        if not self.measured:
            return "only NaN or infinite values"
        return ""

    def by_label(self, label: str) -> dict[str, list[float]]:
        """Finite values per value of `label` (series without it are left out)."""
        out: dict[str, list[float]] = {}
        for s in self.series:
            key = s.labels.get(label)
            if key is not None and s.points:
                out.setdefault(key, []).extend(s.values())
        return out


class MetricsSource(Protocol):
    """What the live gate asks of Prometheus (`fleet.prometheus.PrometheusSource`; a test
    serves recorded answers)."""

    def instant(self, query: str, at: datetime | None = None) -> QueryResult: ...

    def range(self, query: str, start: datetime, end: datetime,
              step_s: float) -> QueryResult: ...


def failed(query: str, error: str) -> QueryResult:
    return QueryResult(query, (), error)


def _value(pair: Any) -> tuple[float, float] | None:
    """One `[time, "value"]` pair; None when it is not finite (NaN from a quantile of an empty
    window, +Inf from a quantile in the open bucket)."""
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        raise ValueError(f"expected [time, value], got {pair!r:.80}")
    t, text = pair
    if not isinstance(t, int | float) or not isinstance(text, str):
        raise ValueError(f"expected [number, string], got {pair!r:.80}")
    v = float(text)
    return (float(t), v) if math.isfinite(v) else None


def _series(item: Any, kind: str) -> Series:
    if not isinstance(item, Mapping):
        raise ValueError("a result item is not an object")
    labels = item.get("metric", {})
    if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError("a result item's metric is not a label set")
    raw = [item.get("value")] if kind == "vector" else item.get("values")
    if not isinstance(raw, list):
        raise ValueError(f"a {kind} item has no {'value' if kind == 'vector' else 'values'}")
    points = tuple(p for p in (_value(r) for r in raw) if p is not None)
    return Series(dict(labels), points)


def parse_response(query: str, body: Any, *, http_status: int = 200) -> QueryResult:
    """The API's decoded JSON body as a result (never raises on a bad body: says so)."""
    if not isinstance(body, Mapping):
        return failed(query, f"HTTP {http_status}: the answer is not a JSON object")
    status = body.get("status")
    if status == "error" or http_status >= 400:
        kind = body.get("errorType") or f"HTTP {http_status}"
        return failed(query, f"query error ({kind}): {str(body.get('error', 'no message'))[:300]}")
    if status != "success":
        return failed(query, f"unexpected status {status!r:.40}")
    data = body.get("data")
    warnings = tuple(str(w)[:200] for w in body.get("warnings") or ())
    if not isinstance(data, Mapping):
        return failed(query, "the answer has no data")
    kind = data.get("resultType")
    result = data.get("result")
    try:
        if kind == "scalar":
            point = _value(result)
            return QueryResult(query, (Series({}, (point,) if point else ()),), None, warnings)
        if kind not in ("vector", "matrix") or not isinstance(result, list):
            return failed(query, f"unexpected result type {kind!r:.40}")
        if len(result) > MAX_SERIES:
            return failed(query, f"{len(result)} series, more than {MAX_SERIES}: refused")
        return QueryResult(query, tuple(_series(i, kind) for i in result), None, warnings)
    except (ValueError, TypeError) as exc:
        return failed(query, f"malformed answer: {exc}")
