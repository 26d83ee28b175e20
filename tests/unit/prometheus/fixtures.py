"""The recorded answers of a real Prometheus (tests/data/prometheus), served to the source."""

from __future__ import annotations

import json
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


def source(transport: httpx.BaseTransport, *, url: str = "http://prom.test:9090",
           **target: Any) -> PrometheusSource:
    return PrometheusSource(Target(url, "--prometheus", **target), transport=transport)
