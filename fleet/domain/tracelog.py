"""Access logs to replay traces (pure): nginx `combined` (optionally + $request_time) or JSON lines.

Arrival offsets are seconds from the first request. nginx logs the time a request *ended*, to
the second: when the line ends with `$request_time` the arrival is the end minus it; requests
logged in the same second are spread evenly across it (deterministic). JSON-lines logs name the
time in `time`, `timestamp`, `ts`, `@timestamp` or `start_time` (ISO 8601 or epoch seconds), the
request in `method` + `path`/`uri`/`url` or `request` ("GET /x HTTP/1.1"), and optionally
`status`, `bytes`/`body_bytes_sent`/`size`, `request_time`/`duration`, `body`.

Every value is checked for physical sense, with the line and the field: a timestamp is finite,
not before 1970 and not after 9999; a duration is finite and >= 0; a size is >= 0; a status is an
HTTP status (100-599). A NaN time would sort anywhere and a negative one would stretch the trace.
"""

from __future__ import annotations

import json
import math
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
_LAST_EPOCH = 253402300799.0  # 9999-12-31T23:59:59Z
Bad = tuple[str | None, str]  # (field, message) of a line that cannot be read


@dataclass(frozen=True)
class LogRequest:
    line: int
    start: float  # epoch seconds
    method: str
    path: str
    status: int | None = None
    size: int | None = None
    body: Any = None


# The replay client's grammar (fleet/bench/replay.py, shipped whole, keeps its own copy): what
# goes into a trace goes onto the wire, so a method or path with a CR, LF, space or other
# control character (request smuggling into the service under test) is refused here, by line.
_METHOD = re.compile(r"[A-Z]{1,16}")
_PATH = re.compile(r"/[!-~]{0,8191}")


def _bad_request(method: str, path: str) -> Bad | None:
    if not _METHOD.fullmatch(method):
        return "method", f"{method[:40]!r} is not an HTTP method (A-Z, 1-16 letters)"
    if not _PATH.fullmatch(path):
        return "path", (f"{path[:60]!r} is not a request path: it must start with / and be "
                        "visible ASCII (no spaces or control characters), at most 8192 long")
    return None


_PROTOCOL = re.compile(r"HTTP/[0-9](?:\.[0-9])?")


def _parse_request_line(text: str) -> tuple[str, str] | None:
    """`METHOD /path[ HTTP/x.y]`, split at single spaces only: a path with a space, a tab or
    another separator Python's split() knows (0x1c-0x1f, NEL) is refused, never cut short into
    another request."""
    parts = text.split(" ")
    if (2 <= len(parts) <= 3 and parts[0].isalpha() and parts[1].startswith("/")
            and (len(parts) == 2 or _PROTOCOL.fullmatch(parts[2]))):
        return parts[0].upper(), parts[1]
    return None


def _bad_time(start: float, what: str) -> str | None:
    """Why `start` (epoch seconds) is not a time a request could have arrived, or None."""
    if not math.isfinite(start):
        return f"{what} is not a finite number"
    if start < 0:
        return f"{what} is before 1970 (a negative timestamp)"
    if start > _LAST_EPOCH:
        return f"{what} is after the year 9999"
    return None


def _bad_status(status: int | None) -> str | None:
    return None if status is None or 100 <= status <= 599 else (
        f"{status} is not an HTTP status (100-599)")


def parse_nginx(line_no: int, text: str) -> LogRequest | Bad:
    m = _NGINX.match(text)
    if not m:
        return None, "not an nginx combined log line"
    req = _parse_request_line(m["request"])
    if req is None:
        return "request", f"{m['request'][:40]!r} is not 'METHOD /path PROTOCOL'"
    try:
        end = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    except ValueError:
        return "time", f"{m['time']!r} is not dd/Mon/yyyy:HH:MM:SS +zzzz"
    rt = float(m["rt"]) if m["rt"] else 0.0
    why = _bad_time(end - rt, f"{m['time']!r}" + (f" minus the request time {rt:g} s" if rt
                                                   else ""))
    if why:
        return ("request_time" if rt else "time"), why
    status = int(m["status"])
    why = _bad_status(status)
    if why:
        return "status", why
    bad = _bad_request(req[0], req[1])
    if bad:
        return bad
    return LogRequest(line_no, end - rt, req[0], req[1], status,
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


def parse_json_line(line_no: int, text: str) -> LogRequest | Bad:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(doc, dict):
        return None, "expected a JSON object"
    key = next((k for k in _TIME_KEYS if k in doc), None)
    start = _epoch(doc[key]) if key else None
    if start is None:
        return key, f"no usable time ({', '.join(_TIME_KEYS)})"
    why = _bad_time(start, repr(doc[key]))
    if why:
        return key, why
    method, path = doc.get("method"), next((doc[k] for k in _PATH_KEYS if k in doc), None)
    if path is None and isinstance(doc.get("request"), str):
        parsed = _parse_request_line(doc["request"])
        if parsed is None:
            return "request", f"{doc['request'][:40]!r} is not 'METHOD /path PROTOCOL'"
        method, path = parsed
    if not isinstance(path, str) or not path.startswith("/"):
        return None, "no request path (path, uri, url or request)"
    dkey = next((k for k in _DURATION_KEYS if isinstance(doc.get(k), int | float)
                 and not isinstance(doc.get(k), bool)), None)
    dur = float(doc[dkey]) if dkey else 0.0
    if dkey and not (math.isfinite(dur) and dur >= 0):
        return dkey, f"{doc[dkey]!r}: a duration is a finite number of seconds >= 0"
    if key == "start_time":
        dur = 0.0
    why = _bad_time(start - dur, f"{doc[key]!r} minus the duration {dur:g} s")
    if why:
        return dkey, why
    skey = next((k for k in _BYTES_KEYS if isinstance(doc.get(k), int)
                 and not isinstance(doc.get(k), bool)), None)
    size: int | None = doc[skey] if skey else None
    if size is not None and size < 0:
        return skey, f"{size}: a size in bytes cannot be negative"
    status = doc.get("status") if isinstance(doc.get("status"), int) else None
    why = _bad_status(status)
    if why:
        return "status", why
    if method is not None and not isinstance(method, str):
        return "method", f"{method!r} is not an HTTP method"
    verb, target = (method or "GET").upper(), path  # never cut at a space: refused whole
    bad = _bad_request(verb, target)
    if bad:
        return bad
    return LogRequest(line_no, start - dur, verb, target, status, size, doc.get("body"))


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
        if isinstance(got, tuple):
            problems.append(Problem(source, no, got[0], got[1]))
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
