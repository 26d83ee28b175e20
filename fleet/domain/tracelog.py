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
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Protocol

from fleet.errors import Problem

_NGINX = re.compile(
    r'^(?P<addr>\S+) \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) '
    r'(?P<bytes>\d+|-)(?: "[^"]*" "[^"]*")?(?: (?P<rt>\d+(?:\.\d+)?))?.*$')
_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "start_time")
_PATH_KEYS = ("path", "uri", "url")
_BYTES_KEYS = ("bytes", "body_bytes_sent", "size", "response_bytes")
_DURATION_KEYS = ("request_time", "duration")
MAX_PROBLEMS = 50
SPILL_EVERY = 1 << 18
"""Requests held in memory (24 bytes each) before they go to the run store as a sorted run."""
RUN_BLOCK = 8192
"""Records read from each run at a time while merging (32 bytes each)."""
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
    end = _nginx_time(m["time"])
    if end is None:
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


@lru_cache(maxsize=1024)
def _nginx_time(text: str) -> float | None:
    """Epoch seconds of nginx's `dd/Mon/yyyy:HH:MM:SS +zzzz`, or None. Cached: the requests of
    one second share the text, and strptime was most of the time trace-from-log took."""
    try:
        return datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z").timestamp()
    except ValueError:
        return None


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


class MemoryStore:
    """Where a TraceBuilder keeps its entries' JSON: memory (tests, small logs). The CLI gives
    it a temporary file instead (fleet.cli.bench_cmd), so request bodies never fill memory."""

    def __init__(self) -> None:
        self._data = bytearray()

    def append(self, data: bytes) -> None:
        self._data += data

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self._data[offset:offset + length])


class EntryStore(Protocol):
    def append(self, data: bytes) -> None: ...
    def read(self, offset: int, length: int) -> bytes: ...


class TraceBuilder:
    """The requests of an access log, kept compact until the trace is written in arrival order.

    A log is read once, line by line (`add`); each request keeps 24 bytes in arrays (its
    arrival, its line, where its entry's JSON ends in the store) and its JSON in the store:
    `bench trace-from-log` held every request as objects, 6x the log (a 116 MB nginx log peaked
    at 700 MB, issue 28). Every `spill_every` requests the arrays are sorted and written to
    `runs` (a second store) as one sorted run, so memory stays bounded whatever the log's
    size; `lines` then merges the runs. Only the first MAX_PROBLEMS bad lines are kept (all
    are counted). The trace (`lines`) is the one `trace_from_log` returned: sorted by arrival
    then line, nginx's whole-second times spread evenly across their second, offsets from the
    first.
    """

    def __init__(self, *, fmt: str = "auto", source: str = "log", expect_size: bool = False,
                 only_ok: bool = False, store: EntryStore | None = None,
                 runs: EntryStore | None = None, spill_every: int = SPILL_EVERY) -> None:
        self.fmt, self.source = fmt, source
        self.expect_size, self.only_ok = expect_size, only_ok
        self.store: EntryStore = store if store is not None else MemoryStore()
        self.runs: EntryStore = runs if runs is not None else MemoryStore()
        self.spill_every = max(1, spill_every)
        self._spilled: list[tuple[int, int]] = []  # (offset in `runs`, records) per run
        self._count = 0
        self.problems: list[Problem] = []
        self.bad = 0
        self._start = array("d")
        self._line = array("q")
        self._end = array("q")
        self._size = 0
        self._run_base = 0  # where the next run's first entry begins in `store`
        self.span = 0.0  # seconds from the first arrival to the last, once `lines` ran

    def __len__(self) -> int:
        return self._count

    def problem(self, problem: Problem) -> None:
        self.bad += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def add(self, no: int, raw: str) -> None:
        """Line `no` of the log (its text, newline or not)."""
        text = raw.strip()
        if not text:
            return
        if self.fmt == "auto":
            self.fmt = detect_format(text)
        got = parse_json_line(no, text) if self.fmt == "jsonl" else parse_nginx(no, text)
        if isinstance(got, tuple):
            self.problem(Problem(self.source, no, got[0], got[1]))
            return
        if self.only_ok and got.status is not None and got.status >= 400:
            return
        entry: dict[str, Any] = {"method": got.method, "path": got.path}
        if got.body is not None:
            entry["body"] = got.body
        if self.expect_size and got.size is not None:
            entry["expect_bytes"] = got.size
        data = json.dumps(entry, separators=(",", ":"))[1:].encode()  # after "{": t goes first
        self.store.append(data)
        self._size += len(data)
        self._start.append(got.start)
        self._line.append(no)
        self._end.append(self._size)
        self._count += 1
        if len(self._start) >= self.spill_every:
            self._spill()

    def _spill(self) -> None:
        """The requests held in the arrays, sorted by (arrival, line), as one run in `runs`."""
        import numpy as np

        n = len(self._start)
        if not n:
            return
        starts = np.frombuffer(self._start, dtype=np.float64)[:n]
        lines = np.frombuffer(self._line, dtype=np.int64)[:n]
        ends = np.frombuffer(self._end, dtype=np.int64)[:n]
        rec = np.empty(n, dtype=_run_record())
        rec["start"], rec["line"], rec["end"] = starts, lines, ends
        rec["begin"][0] = self._run_base
        rec["begin"][1:] = ends[:-1]
        order = np.lexsort((lines, starts))
        offset = sum(k for _, k in self._spilled) * _run_record().itemsize
        self.runs.append(rec[order].tobytes())
        self._spilled.append((offset, n))
        self._run_base = int(ends[-1])
        self._start, self._line, self._end = array("d"), array("q"), array("q")

    def _merged(self) -> Iterator[tuple[float, int, int, int]]:
        """Every spilled run's records merged in (arrival, line) order, read a block at a time."""
        import heapq

        import numpy as np

        def run(offset: int, count: int) -> Iterator[tuple[float, int, int, int]]:
            size = _run_record().itemsize
            for first in range(0, count, RUN_BLOCK):
                k = min(RUN_BLOCK, count - first)
                block = np.frombuffer(self.runs.read(offset + first * size, k * size),
                                      dtype=_run_record())
                yield from zip(block["start"].tolist(), block["line"].tolist(),
                               block["begin"].tolist(), block["end"].tolist(), strict=True)

        return heapq.merge(*(run(o, k) for o, k in self._spilled))

    def _spread(self, merged: Iterator[tuple[float, int, int, int]],
                ) -> Iterator[tuple[float, int, int, int]]:
        """nginx's whole seconds spread across their second, as `_order` does, one second's
        requests at a time (a second's requests are adjacent in arrival order, and stay in it)."""
        group: list[tuple[float, int, int, int]] = []
        sec = None
        for item in _with_end(merged):
            if item is not None and math.floor(item[0]) == sec:
                group.append(item)
                continue
            if group:
                count = len(group)
                spread = [((s + rank / count) if s == sec else s, line, b, e)
                          for rank, (s, line, b, e) in enumerate(group)]
                spread.sort(key=lambda x: (x[0], x[1]))
                yield from spread
            if item is None:
                return
            group, sec = [item], math.floor(item[0])

    def _order(self) -> tuple[Any, Any]:
        """(arrival of each request, the requests' indexes in trace order)."""
        import numpy as np

        n = len(self._start)
        starts = np.frombuffer(self._start, dtype=np.float64)[:n].copy()
        lines = np.frombuffer(self._line, dtype=np.int64)[:n]
        order = np.lexsort((lines, starts))
        if self.fmt == "nginx":  # whole seconds: spread each second's requests across it
            s = starts[order]
            sec = np.floor(s)
            change = np.ones(n, dtype=bool)
            change[1:] = sec[1:] != sec[:-1]
            first = np.flatnonzero(change)
            group = np.cumsum(change) - 1
            rank = np.arange(n) - first[group]
            count = np.diff(np.append(first, n))[group]
            # sub-second arrivals (via request_time) stay where they are
            starts[order] = np.where(s == sec, sec + rank / count, s)
            order = np.lexsort((lines, starts))
        return starts, order

    def lines(self) -> Iterator[str]:
        """The trace, one JSON line (with its newline) per request, in arrival order."""
        if self._spilled:
            yield from self._lines_from_runs()
            return
        if not len(self._start):
            return
        starts, order = self._order()
        t0 = float(starts[order[0]])
        self.span = round(float(starts[order[-1]]) - t0, 6)
        for chunk in range(0, len(order), 65536):
            for i in order[chunk:chunk + 65536].tolist():
                begin = self._end[i - 1] if i else 0
                rest = self.store.read(begin, self._end[i] - begin).decode()
                yield '{"t":' + repr(round(float(starts[i]) - t0, 6)) + "," + rest + "\n"

    def _lines_from_runs(self) -> Iterator[str]:
        self._spill()  # what is left in the arrays: the last run
        merged = self._merged()
        ordered = self._spread(merged) if self.fmt == "nginx" else merged
        t0 = last = None
        for start, _line, begin, end in ordered:
            if t0 is None:
                t0 = start
            last = start
            rest = self.store.read(begin, end - begin).decode()
            yield '{"t":' + repr(round(start - t0, 6)) + "," + rest + "\n"
        if t0 is not None and last is not None:
            self.span = round(last - t0, 6)


@lru_cache(maxsize=1)
def _run_record() -> Any:
    """One request of a spilled run: arrival, line, and its entry's bytes in the store."""
    import numpy as np

    return np.dtype([("start", "<f8"), ("line", "<i8"), ("begin", "<i8"), ("end", "<i8")])


def _with_end(items: Iterator[tuple[float, int, int, int]],
              ) -> Iterator[tuple[float, int, int, int] | None]:
    yield from items
    yield None


def trace_from_log(lines: Iterable[str], *, fmt: str = "auto", source: str = "log",
                   expect_size: bool = False, only_ok: bool = False,
                   ) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Trace entries (sorted by arrival) and the lines that could not be read (the first
    MAX_PROBLEMS): TraceBuilder over `lines`, in memory."""
    builder = TraceBuilder(fmt=fmt, source=source, expect_size=expect_size, only_ok=only_ok)
    for no, raw in enumerate(lines, 1):
        builder.add(no, raw)
    return [json.loads(line) for line in builder.lines()], builder.problems
