"""Access logs to replay traces (pure): nginx `combined` (optionally + $request_time) or JSON lines.

Arrival offsets are seconds from the first request. nginx logs the time a request *ended*, to
the second: when the line ends with `$request_time` the arrival is the end minus it; requests
logged in the same second are spread evenly across it (deterministic). JSON-lines logs name the
time in `time`, `timestamp`, `ts`, `@timestamp` or `start_time` (ISO 8601 or epoch seconds), the
request in `method` + `path`/`uri`/`url` or `request` ("GET /x HTTP/1.1"), and optionally
`status`, `bytes`/`body_bytes_sent`/`size`, `request_time`/`duration`, `body`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fleet.errors import Problem

_NGINX = re.compile(
    r'^(?P<addr>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) '
    r'(?P<bytes>\d+|-)(?: "[^"]*" "[^"]*")?(?: (?P<rt>\d+(?:\.\d+)?))?.*$')
_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "start_time")
_PATH_KEYS = ("path", "uri", "url")
_BYTES_KEYS = ("bytes", "body_bytes_sent", "size", "response_bytes")
_DURATION_KEYS = ("request_time", "duration")
MAX_PROBLEMS = 50


@dataclass(frozen=True)
class LogRequest:
    line: int
    start: float  # epoch seconds
    method: str
    path: str
    status: int | None = None
    size: int | None = None
    body: Any = None


def _parse_request_line(text: str) -> tuple[str, str] | None:
    parts = text.split()
    if len(parts) >= 2 and parts[0].isalpha() and parts[1].startswith("/"):
        return parts[0].upper(), parts[1]
    return None


def parse_nginx(line_no: int, text: str) -> LogRequest | str:
    m = _NGINX.match(text)
    if not m:
        return "not an nginx combined log line"
    req = _parse_request_line(m["request"])
    if req is None:
        return f"request {m['request'][:40]!r} is not 'METHOD /path PROTOCOL'"
    try:
        end = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    except ValueError:
        return f"time {m['time']!r} is not dd/Mon/yyyy:HH:MM:SS +zzzz"
    rt = float(m["rt"]) if m["rt"] else 0.0
    return LogRequest(line_no, end - rt, req[0], req[1], int(m["status"]),
                      None if m["bytes"] == "-" else int(m["bytes"]))


def _epoch(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v) / (1000.0 if v > 1e11 else 1.0)  # epoch milliseconds too
    if isinstance(v, str):
        try:
            dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return None
        return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    return None


def parse_json_line(line_no: int, text: str) -> LogRequest | str:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(doc, dict):
        return "expected a JSON object"
    key = next((k for k in _TIME_KEYS if k in doc), None)
    start = _epoch(doc[key]) if key else None
    if start is None:
        return f"no usable time ({', '.join(_TIME_KEYS)})"
    method, path = doc.get("method"), next((doc[k] for k in _PATH_KEYS if k in doc), None)
    if path is None and isinstance(doc.get("request"), str):
        parsed = _parse_request_line(doc["request"])
        if parsed:
            method, path = parsed
    if not isinstance(path, str) or not path.startswith("/"):
        return "no request path (path, uri, url or request)"
    dur = next((doc[k] for k in _DURATION_KEYS if isinstance(doc.get(k), int | float)), None)
    if key == "start_time":
        dur = None
    size = next((doc[k] for k in _BYTES_KEYS if isinstance(doc.get(k), int)), None)
    status = doc.get("status") if isinstance(doc.get("status"), int) else None
    return LogRequest(line_no, start - float(dur or 0.0), str(method or "GET").upper(),
                      path.split(" ")[0], status, size, doc.get("body"))


def detect_format(first_line: str) -> str:
    return "jsonl" if first_line.lstrip().startswith("{") else "nginx"


def trace_from_log(lines: Iterable[str], *, fmt: str = "auto", source: str = "log",
                   expect_size: bool = False, only_ok: bool = False,
                   ) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Trace entries (sorted by arrival) and the lines that could not be read."""
    reqs: list[LogRequest] = []
    problems: list[Problem] = []
    for no, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        if fmt == "auto":
            fmt = detect_format(text)
        got = parse_json_line(no, text) if fmt == "jsonl" else parse_nginx(no, text)
        if isinstance(got, str):
            problems.append(Problem(source, no, None, got))
        elif not only_ok or (got.status is None or got.status < 400):
            reqs.append(got)
    if fmt == "nginx":
        reqs = _spread_seconds(reqs)
    reqs.sort(key=lambda r: (r.start, r.line))
    if not reqs:
        return [], problems
    t0 = reqs[0].start
    trace = []
    for r in reqs:
        entry: dict[str, Any] = {"t": round(r.start - t0, 6), "method": r.method, "path": r.path}
        if r.body is not None:
            entry["body"] = r.body
        if expect_size and r.size is not None:
            entry["expect_bytes"] = r.size
        trace.append(entry)
    return trace, problems


def _spread_seconds(reqs: list[LogRequest]) -> list[LogRequest]:
    """nginx times are whole seconds: spread the requests of one second evenly across it."""
    by_second: dict[int, list[LogRequest]] = {}
    for r in reqs:
        by_second.setdefault(int(r.start // 1), []).append(r)
    out = []
    for sec, group in by_second.items():
        group.sort(key=lambda r: (r.start, r.line))
        k = len(group)
        for i, r in enumerate(group):
            frac = r.start - sec
            # whole-second stamps get an even spread; sub-second ones (via request_time) stay
            start = sec + i / k if frac == 0 else r.start
            out.append(LogRequest(r.line, start, r.method, r.path, r.status, r.size, r.body))
    return out
