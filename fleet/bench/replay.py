#!/usr/bin/env python3
"""fleet replay client: replay a workload trace open loop, print one JSON document of results.

Shipped to hosts and run with the host's python3 (3.9+), so the network between the controller
and the host does not pollute latency; stdlib only. The controller imports the same file
(`fleet.bench.replay`) for its pure parts (trace parsing, the schedule, the summary).

    python3 replay.py --trace FILE --endpoint http://127.0.0.1:8000 [--rate-scale F]
                      [--warmup S] [--slo-ms MS] [--timeout S] [--max-connections N]
    python3 replay.py --trace FILE --command 'CMD ARGS...'      # one process per request

The trace (JSON lines, documented in docs/benchmarks.md): one request per line,
`{"t": 0.125, "method": "POST", "path": "/infer", "body": {...}, "expect_bytes": 512}`; `t` is
the arrival offset in seconds from the trace start; `body` is a string or JSON value, or
`body_file` names a file next to the trace; `expect_bytes` is optional. An optional first line
`{"fleet_trace": 1, ...}` carries metadata.

Open loop: request i is due at start + t_i / rate_scale whatever happened to earlier requests,
and its latency is measured from that *intended* time (no coordinated omission: a stalled server
makes the following requests slow, not fewer). Requests due during the warm-up are sent but not
measured. A run whose achieved send rate misses the target by more than 2% (and its send span the
intended one by more than 20 ms) is invalid (the client could not keep up), not slow.

HTTP mode is one thread with a select() loop over keep-alive connections (select takes a
microsecond timeout; epoll rounds to milliseconds): no thread hand-off and no lock between the
timer and the send. Requests due are sent before any response is read; during the run the cyclic
GC is off and the timer slack is 1 ns. What is left of the schedule error is the OS running the
process late, the same for a bare timer on that CPU (benchmarks/replay_rate.py measures both).
No busy-wait: a spinning client takes the CPU from the server it measures. Command mode uses a
thread pool.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import errno
import gc
import heapq
import json
import math
import os
import random
import re
import selectors
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

RATE_TOLERANCE = 0.02  # achieved vs target send rate
SEND_SPAN_FLOOR_S = 0.02
"""A send-span miss below this is scheduler jitter, not a client falling behind: on a short
trace (6 requests in 0.25 s) one 5 ms late first send is already a 2% rate miss."""
MAX_SAMPLES = 200000  # per-request samples returned for the judge
SELECT_FD_LIMIT = 900  # select() handles fds < 1024


class TraceError(ValueError):
    """Bad trace lines: `problems` is a list of (line number, field, message)."""

    def __init__(self, source, problems):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(
            "{}:{}: {}{}".format(source, line, (field + ": ") if field else "", msg)
            for line, field, msg in problems))


# --- the trace ----------------------------------------------------------------------------------

def parse_trace(lines, source="trace", base_dir=None):
    """Requests from JSON lines, sorted by arrival (stable); TraceError lists every bad line.

    Each request is a dict: t (float), method, path, body (bytes or None), headers (dict),
    expect_bytes (int or None).
    """
    out, problems = [], []
    for no, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text:
            continue
        try:
            doc = json.loads(text)
        except ValueError as exc:
            problems.append((no, None, f"not JSON: {exc}"))
            continue
        if not isinstance(doc, dict):
            problems.append((no, None, "expected a JSON object"))
            continue
        if "fleet_trace" in doc and "t" not in doc:
            continue  # the metadata line
        req, errs = _request(doc, base_dir)
        problems += [(no, f, m) for f, m in errs]
        if not errs:
            out.append(req)
    if problems:
        raise TraceError(source, problems)
    out.sort(key=lambda r: r["t"])
    return out


# What goes onto the wire is held to HTTP's own grammar (RFC 9110/9112): a CR, LF or other
# control character in a method, path or header would let a trace smuggle a second request or
# header into the service under test.
_METHOD = re.compile(r"[A-Z]{1,16}")
_PATH = re.compile(r"/[!-~]{0,8191}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
_HEADER_VALUE = re.compile(r"[\t -~\x80-\xff]{0,8192}")


def _request(doc, base_dir):
    errs = []
    t = doc.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        errs.append(("t", "arrival offset in seconds (a number >= 0) is required"))
    method = doc.get("method", "POST" if ("body" in doc or "body_file" in doc) else "GET")
    if not isinstance(method, str) or not _METHOD.fullmatch(method):
        errs.append(("method", "expected an HTTP method such as GET or POST (A-Z, 1-16)"))
    path = doc.get("path", "/")
    if not isinstance(path, str) or not _PATH.fullmatch(path):
        errs.append(("path", "expected a path starting with /, of visible ASCII (no spaces or "
                             "control characters), at most 8192 characters"))
    body = None
    if "body" in doc and "body_file" in doc:
        errs.append(("body", "give body or body_file, not both"))
    elif "body" in doc:
        b = doc["body"]
        body = (b if isinstance(b, str) else json.dumps(b, separators=(",", ":"))).encode()
    elif "body_file" in doc:
        ref = doc["body_file"]
        if not isinstance(ref, str) or os.path.isabs(ref) or ".." in ref.split("/"):
            errs.append(("body_file", "expected a relative path inside the trace's directory"))
        else:
            try:
                with open(os.path.join(base_dir or ".", ref), "rb") as f:
                    body = f.read()
            except OSError as exc:
                errs.append(("body_file", f"cannot read: {exc.strerror}"))
    expect = doc.get("expect_bytes")
    if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int)
                               or expect < 0):
        errs.append(("expect_bytes", "expected a whole number of bytes >= 0"))
    headers = doc.get("headers", {})
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and _HEADER_NAME.fullmatch(k)
            and _HEADER_VALUE.fullmatch(v) for k, v in headers.items()):
        errs.append(("headers", "expected an object of header names (RFC 9110 tokens) and "
                                "values without CR, LF or other control characters"))
    req = {"t": float(t) if not errs else 0.0, "method": method, "path": path, "body": body,
           "headers": headers if isinstance(headers, dict) else {}, "expect_bytes": expect}
    return req, errs


def load_trace(path, data=None):
    """The trace at `path` ("-" for stdin), or shipped inline as zlib+base64 `data`."""
    if data is not None:
        import base64
        import zlib

        text = zlib.decompress(base64.b64decode(data)).decode("utf-8")
        return parse_trace(text.splitlines(), "<inline trace>")
    if path == "-":
        return parse_trace(sys.stdin.read().splitlines(), "<stdin>")
    with open(path, encoding="utf-8") as f:
        return parse_trace(f.read().splitlines(), path, os.path.dirname(os.path.abspath(path)))


def poisson_trace(rate, duration, seed=0, path="/", method="GET"):
    """Synthetic open-loop trace: Poisson arrivals at `rate`/s for `duration` s (deterministic)."""
    rnd = random.Random(seed)
    t, out = 0.0, []
    while True:
        t += rnd.expovariate(rate)
        if t >= duration:
            return out
        out.append({"t": round(t, 6), "method": method, "path": path, "body": None,
                    "headers": {}, "expect_bytes": None})


def schedule(requests, rate_scale=1.0, warmup=0.0, duration=None):
    """[(due offset in s, request index, measured)]: pure, so the same trace gives the same plan.

    Offsets are relative to the first arrival, divided by `rate_scale` (2.0 = twice as fast);
    requests due before `warmup` (scaled seconds) are sent but not measured; `duration` cuts the
    plan (scaled seconds).
    """
    if rate_scale <= 0:
        raise ValueError("rate scale must be > 0")
    if not requests:
        return []
    t0 = requests[0]["t"]
    plan = []
    for i, r in enumerate(requests):
        due = (r["t"] - t0) / rate_scale
        if duration is not None and due > duration:
            break
        plan.append((due, i, due >= warmup))
    return plan


# --- summary ------------------------------------------------------------------------------------

def quantile(sorted_values, q):
    """The q-quantile by the inverted CDF (an observed value, like the judge's)."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def summarize(records, slo_ms=None, tolerance=RATE_TOLERANCE):
    """Metrics of the measured records and whether the run is valid.

    A record: {"intended", "sent" (None if never sent), "done", "ok", "error"}; times in seconds
    on one monotonic clock. "conn_wait": due while every connection was busy, so its schedule
    error is the server's backlog (`connection_waits` counts them; raise --max-connections).
    """
    rec = [r for r in records if r.get("measured", True)]
    n = len(rec)
    ok = [r for r in rec if r["ok"]]
    lat = sorted((r["done"] - r["intended"]) * 1000.0 for r in ok)
    sched = sorted((r["sent"] - r["intended"]) * 1000.0 for r in rec if r["sent"] is not None)
    out = {"requests": n, "ok": len(ok), "errors": n - len(ok),
           "error_rate": (n - len(ok)) / n if n else None}
    for q in (0.5, 0.9, 0.95, 0.99):
        out["latency_ms_p%g" % (q * 100)] = quantile(lat, q)
    out["latency_ms_mean"] = sum(lat) / len(lat) if lat else None
    out["latency_ms_max"] = lat[-1] if lat else None
    out["schedule_error_ms_p50"] = quantile(sched, 0.5)
    out["schedule_error_ms_p99"] = quantile(sched, 0.99)
    out["schedule_error_ms_max"] = sched[-1] if sched else None
    out["connection_waits"] = sum(1 for r in rec if r.get("conn_wait"))
    valid, why = True, None
    if n < 2:
        valid, why = False, "fewer than 2 measured requests"
        target = achieved = None
    else:
        intended = [r["intended"] for r in rec]
        sent = [r["sent"] for r in rec if r["sent"] is not None]
        span = max(intended) - min(intended)
        target = (n - 1) / span if span > 0 else None
        achieved = ((len(sent) - 1) / (max(sent) - min(sent))
                    if len(sent) >= 2 and max(sent) > min(sent) else None)
        if len(sent) < n:
            valid, why = False, f"{n - len(sent)} request(s) never sent"
        elif (target and achieved and abs(achieved / target - 1) > tolerance
              and abs((max(sent) - min(sent)) - span) > SEND_SPAN_FLOOR_S):
            miss = (achieved / target - 1) * 100
            valid, why = False, (f"achieved send rate {achieved:.1f}/s misses the target "
                                 f"{target:.1f}/s by {miss:.1f}% (> {tolerance * 100:g}%): "
                                 "the client could not keep up")
    out["target_rps"], out["achieved_rps"] = target, achieved
    window = (max(r["done"] for r in rec) - min(r["intended"] for r in rec)) if rec else 0
    out["throughput_rps"] = len(ok) / window if window > 0 else None
    out["slo_ms"] = slo_ms
    if slo_ms is not None:
        good = sum(1 for v in lat if v <= slo_ms)
        out["goodput_rps"] = good / window if window > 0 else None
    samples = {"latency_ms": [round(v, 4) for v in lat[:MAX_SAMPLES]],
               "errors": [0.0 if r["ok"] else 1.0 for r in rec[:MAX_SAMPLES]]}
    for key in ("throughput_rps", "goodput_rps"):
        if out.get(key) is not None:
            samples[key] = [round(out[key], 4)]
    return {"suite": "replay", "valid": valid, "invalid_reason": why, "metrics": out,
            "samples": samples}


# --- HTTP engine --------------------------------------------------------------------------------

def _request_bytes(req, host_header):
    body = req["body"] or b""
    lines = ["{} {} HTTP/1.1".format(req["method"], req["path"]), "Host: " + host_header,
             "User-Agent: fleet-replay", "Accept: */*"]
    for k, v in req["headers"].items():
        lines.append(f"{k}: {v}")
    if body or req["method"] in ("POST", "PUT", "PATCH"):
        if not any(k.lower() == "content-type" for k in req["headers"]):
            lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class _Response:
    """Incremental HTTP/1.x response parser: Content-Length, chunked, or until close."""

    def __init__(self):
        self.buf = b""
        self.status = None
        self.keep_alive = True
        self.length = None
        self.chunked = False
        self.head_end = None
        self.body_len = None

    def feed(self, data):
        """Add bytes; True when the response is complete."""
        self.buf += data
        if self.head_end is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            self.head_end = end + 4
            head = self.buf[:end].decode("latin-1").split("\r\n")
            parts = head[0].split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
                raise ValueError(f"bad status line {head[0][:60]!r}")
            self.status = int(parts[1])
            fields = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                fields[k.strip().lower()] = v.strip()
            conn = fields.get("connection", "").lower()
            self.keep_alive = (conn != "close") and (parts[0] != "HTTP/1.0" or conn == "keep-alive")
            self.chunked = "chunked" in fields.get("transfer-encoding", "").lower()
            if "content-length" in fields and not self.chunked:
                self.length = int(fields["content-length"])
            elif not self.chunked and (self.status in (204, 304) or 100 <= self.status < 200):
                self.length = 0
            elif not self.chunked:
                self.keep_alive = False  # body runs until the server closes
        body = self.buf[self.head_end:]
        if self.length is not None:
            if len(body) >= self.length:
                self.body_len = self.length
                return True
            return False
        if self.chunked:
            return self._chunked_done(body)
        return False

    def _chunked_done(self, body):
        pos, total = 0, 0
        while True:
            eol = body.find(b"\r\n", pos)
            if eol < 0:
                return False
            size = int(body[pos:eol].split(b";")[0].strip() or b"0", 16)
            if size == 0:
                if body.find(b"\r\n\r\n", eol) < 0 and not body.endswith(b"\r\n", eol):
                    return False
                self.body_len = total
                return True
            if len(body) < eol + 2 + size + 2:
                return False
            total += size
            pos = eol + 2 + size + 2

    def eof(self):
        """The server closed: complete only for a body delimited by the close."""
        if self.head_end is not None and self.length is None and not self.chunked:
            self.body_len = len(self.buf) - self.head_end
            return True
        return False


class _Conn:
    def __init__(self, sock, reused=False):
        self.sock = sock
        self.connecting = True
        self.out = b""
        self.rid = None
        self.resp = None
        self.reused = reused
        self.writing = True  # registered for EVENT_WRITE too


def _new_socket(addr):
    family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setblocking(False)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rc = s.connect_ex(addr)
    if rc not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK):
        s.close()
        raise OSError(rc, os.strerror(rc))
    return s


@contextlib.contextmanager
def _on_time():
    """While replaying: no cyclic GC pause (records hold no cycles; refcounting frees them), and
    on Linux a 1 ns timer slack instead of 50 us, so select() wakes when asked."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    slack = _set_timer_slack(1)
    try:
        yield
    finally:
        if slack is not None:
            _set_timer_slack(slack)
        if was_enabled:
            gc.enable()


def _set_timer_slack(ns):
    """prctl(PR_SET_TIMERSLACK) for this thread; the previous value, None where unsupported."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        old = libc.prctl(30, 0, 0, 0, 0)  # PR_GET_TIMERSLACK
        if old <= 0 or libc.prctl(29, ctypes.c_ulong(ns), 0, 0, 0) != 0:  # PR_SET_TIMERSLACK
            return None
        return old
    except (ImportError, OSError, AttributeError):
        return None


def run_http(requests, plan, endpoint, timeout=30.0, max_connections=256, lead=0.05,
             clock=time.monotonic):
    """Replay `plan` against `endpoint`; one record per planned request.

    The schedule comes first: after each wake-up the requests now due are sent before any
    response is read, and again before sleeping. Timeouts come off a heap, so a loop turn costs
    the same with 2 or 256 requests in flight.
    """
    url = urlsplit(endpoint)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"endpoint must be http://HOST[:PORT] (got {endpoint!r})")
    addr = (socket.getaddrinfo(url.hostname, url.port or 80, type=socket.SOCK_STREAM)[0][4][:2])
    prefix = url.path.rstrip("/")
    host_header = url.netloc
    payload = {}
    for _, i, _ in plan:
        if i not in payload:
            r = dict(requests[i])
            r["path"] = prefix + r["path"]
            payload[i] = _request_bytes(r, host_header)
    max_connections = min(max_connections, SELECT_FD_LIMIT)
    sel = selectors.SelectSelector()  # microsecond timeouts; see the module docstring
    records = {}
    idle, conns = [], set()
    pending = collections.deque()  # request indexes due but not yet on a connection, oldest first
    on_conn = {}  # request index -> the connection carrying it
    expiry = []  # heap of (intended + timeout, request index)
    retried = set()
    state = {"k": 0, "done": 0}
    total = len(plan)

    def finish(i, ok, error=None, nbytes=None, status=None):
        r = records[i]
        r["done"], r["ok"], r["error"], r["status"] = clock(), ok, error, status
        want = requests[i]["expect_bytes"]
        if ok and want is not None and nbytes != want:
            r["ok"], r["error"] = False, f"response size {nbytes}, expected {want}"
        on_conn.pop(i, None)
        state["done"] += 1

    def close(c):
        if c in conns:
            conns.discard(c)
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(c.sock)
            c.sock.close()
        if c in idle:
            idle.remove(c)

    def start_on(c, i):
        c.rid, c.resp, c.out = i, _Response(), payload[i]
        on_conn[i] = c
        if records[i]["sent"] is None:
            records[i]["sent"] = clock()
        if not c.connecting:
            _write(c)
        if c.out or c.connecting:
            sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
            c.writing = True

    def _write(c):
        try:
            n = c.sock.send(c.out)
            c.out = c.out[n:]
        except (BlockingIOError, InterruptedError):
            pass

    def fail_conn(c, error):
        i = c.rid
        close(c)
        if i is not None and records[i]["done"] is None:
            if c.reused and i not in retried and not (c.resp and c.resp.buf):
                retried.add(i)  # a kept-alive connection the server had closed: once more
                on_conn.pop(i, None)
                pending.appendleft(i)
                return
            finish(i, False, error)

    def send_due():
        now, k = clock(), state["k"]
        first = k
        while k < total and start + plan[k][0] <= now:
            due, i, measured = plan[k]
            records[i] = {"index": i, "intended": start + due, "sent": None, "done": None,
                          "ok": False, "error": None, "status": None, "measured": measured}
            heapq.heappush(expiry, (start + due + timeout, i))
            pending.append(i)
            k += 1
        state["k"] = k
        while pending and (idle or len(conns) < max_connections):
            i = pending.popleft()
            if idle:
                start_on(idle.pop(), i)
                continue
            try:
                c = _Conn(_new_socket(addr))
            except OSError as exc:
                records[i]["sent"] = records[i]["sent"] or clock()
                finish(i, False, f"connect: {exc.strerror}")
                continue
            conns.add(c)
            sel.register(c.sock, selectors.EVENT_WRITE, c)
            start_on(c, i)
        for n, i in enumerate(reversed(pending)):  # due now, every connection busy
            if n >= k - first:
                break
            records[i]["conn_wait"] = True

    def next_expiry():
        while expiry and records[expiry[0][1]]["done"] is not None:
            heapq.heappop(expiry)
        return expiry[0][0] if expiry else None

    def expire(now):
        while expiry and expiry[0][0] < now:
            _, i = heapq.heappop(expiry)
            if records[i]["done"] is not None:
                continue
            c = on_conn.get(i)
            if c is not None:
                close(c)
                finish(i, False, f"timeout after {timeout:g}s")
            else:
                pending.remove(i)
                finish(i, False, f"timeout after {timeout:g}s waiting for a connection")

    def handle(c, mask):
        if c.connecting and mask & selectors.EVENT_WRITE:
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                fail_conn(c, f"connect: {os.strerror(err)}")
                return
            c.connecting = False
        if c.out and mask & selectors.EVENT_WRITE:
            try:
                _write(c)
            except OSError as exc:
                fail_conn(c, f"send: {exc.strerror}")
                return
        if c.writing and not c.out and not c.connecting:
            sel.modify(c.sock, selectors.EVENT_READ, c)
            c.writing = False
        if not mask & selectors.EVENT_READ:
            return
        try:
            data = c.sock.recv(262144)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            fail_conn(c, f"recv: {exc.strerror}")
            return
        if c.rid is None:  # an idle connection closed by the server
            close(c)
            return
        try:
            complete = c.resp.feed(data) if data else c.resp.eof()
        except ValueError as exc:
            fail_conn(c, f"bad response: {exc}")
            return
        if not data and not complete:
            fail_conn(c, "connection closed before the response ended")
            return
        if complete:
            i, resp = c.rid, c.resp
            ok = resp.status is not None and resp.status < 400
            c.rid, c.resp = None, None
            finish(i, ok, None if ok else f"HTTP {resp.status}", resp.body_len, resp.status)
            if resp.keep_alive and data:
                c.reused = True
                idle.append(c)
            else:
                close(c)

    with _on_time():
        start = clock() + lead
        while state["done"] < total:
            send_due()
            now = clock()
            k = state["k"]
            wait = (start + plan[k][0] - now) if k < total else 0.05
            deadline = next_expiry()
            if deadline is not None:
                wait = min(wait, deadline - now)
            events = sel.select(max(0.0, wait)) if conns else (time.sleep(max(0.0, wait)) or [])
            send_due()  # the schedule before the responses
            for key, mask in events:
                if key.data in conns:  # not closed by an earlier event of this turn
                    handle(key.data, mask)
            expire(clock())
    for c in list(conns):
        close(c)
    sel.close()
    return [records[i] for _, i, _ in plan]


# --- command engine -----------------------------------------------------------------------------

def run_command(requests, plan, argv, timeout=30.0, workers=16, lead=0.05, clock=time.monotonic):
    """One process per request (`argv`, the body on stdin); success is exit status 0."""
    records = {}

    def one(i, intended):
        r = records[i]
        r["sent"] = clock()
        try:
            p = subprocess.run(argv, input=requests[i]["body"] or b"", capture_output=True,
                               timeout=timeout)
            ok, n = p.returncode == 0, len(p.stdout)
            err = None if ok else f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            ok, err, n = False, f"timeout after {timeout:g}s", None
        except OSError as exc:
            ok, err, n = False, f"cannot run: {exc.strerror}", None
        r["done"] = clock()
        want = requests[i]["expect_bytes"]
        if ok and want is not None and n != want:
            ok, err = False, f"output size {n}, expected {want}"
        r["ok"], r["error"] = ok, err

    start = clock() + lead
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for due, i, measured in plan:
            delay = start + due - clock()
            if delay > 0:
                time.sleep(delay)
            records[i] = {"index": i, "intended": start + due, "sent": None, "done": None,
                          "ok": False, "error": None, "measured": measured}
            pool.submit(one, i, start + due)
    return [records[i] for _, i, _ in plan]


# --- entry point --------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog="replay.py", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help="JSON-lines trace file, or - for stdin")
    src.add_argument("--trace-data", help="the trace inline: zlib-compressed, base64-encoded")
    target = ap.add_mutually_exclusive_group(required=True)
    target.add_argument("--endpoint", help="http://HOST[:PORT][/PREFIX]")
    target.add_argument("--command", help="run per request, the body on stdin")
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=0.0, help="seconds not measured")
    ap.add_argument("--duration", type=float, default=None, help="stop after (scaled) seconds")
    ap.add_argument("--slo-ms", type=float, default=None, help="latency SLO for goodput")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--max-connections", type=int, default=256)
    ap.add_argument("--workers", type=int, default=16, help="command mode concurrency")
    ap.add_argument("--no-samples", action="store_true", help="omit per-request samples")
    args = ap.parse_args(argv)
    try:
        requests = load_trace(args.trace, args.trace_data)
        plan = schedule(requests, args.rate_scale, args.warmup, args.duration)
        if not plan:
            raise ValueError("the trace has no requests")
        if args.endpoint:
            records = run_http(requests, plan, args.endpoint, args.timeout, args.max_connections)
        else:
            records = run_command(requests, plan, shlex.split(args.command), args.timeout,
                                  args.workers)
    except (OSError, ValueError) as exc:
        print(json.dumps({"suite": "replay", "valid": False, "error": str(exc)}))
        return 2
    result = summarize(records, args.slo_ms)
    errors = {}
    for r in records:
        if r["error"]:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    result["error_kinds"] = dict(sorted(errors.items(), key=lambda kv: -kv[1])[:10])
    result["rate_scale"] = args.rate_scale
    if args.no_samples:
        result.pop("samples")
    print(json.dumps(result, sort_keys=True))
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
