"""The replay client: trace parsing, the open-loop schedule, the summary, and live replays."""

from __future__ import annotations

import ctypes
import gc
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleet.bench import replay


def test_trace_errors_name_every_bad_line() -> None:
    lines = ['{"t": 0, "path": "/a"}', "not json", '{"t": -1}', '{"t": 1, "path": "x"}',
             '{"t": 2, "body": "a", "body_file": "b"}', '{"t": 3, "expect_bytes": 1.5}']
    with pytest.raises(replay.TraceError) as err:
        replay.parse_trace(lines, "t.jsonl")
    assert [(line, field) for line, field, _ in err.value.problems] == [
        (2, None), (3, "t"), (4, "path"), (5, "body"), (6, "expect_bytes")]
    assert "t.jsonl:3: t:" in str(err.value)


def test_trace_bodies_methods_and_metadata(tmp_path: Path) -> None:
    (tmp_path / "b.json").write_text('{"prompt": "hi"}')
    lines = ['{"fleet_trace": 1, "name": "x"}', '{"t": 0.5, "body": {"a": 1}}',
             '{"t": 0.25, "path": "/infer", "body_file": "b.json", "expect_bytes": 12}']
    reqs = replay.parse_trace(lines, base_dir=str(tmp_path))
    assert [r["t"] for r in reqs] == [0.25, 0.5]  # sorted by arrival
    assert reqs[0]["body"] == b'{"prompt": "hi"}' and reqs[0]["method"] == "POST"
    assert reqs[1]["body"] == b'{"a":1}'


def test_schedule_is_deterministic_scaled_and_marks_warmup() -> None:
    reqs = replay.poisson_trace(100, 2.0, seed=7)
    again = replay.poisson_trace(100, 2.0, seed=7)
    assert reqs == again
    plan = replay.schedule(reqs, rate_scale=2.0, warmup=0.25)
    assert plan == replay.schedule(again, rate_scale=2.0, warmup=0.25)
    t0 = reqs[0]["t"]
    for (due, i, measured) in plan:
        assert due == pytest.approx((reqs[i]["t"] - t0) / 2.0)
        assert measured == (due >= 0.25)
    assert plan[-1][0] < 1.0  # twice as fast: 2 s of trace in 1 s
    assert replay.schedule(reqs, duration=0.5)[-1][0] <= 0.5


def _rec(intended: float, sent: float, done: float, ok: bool = True) -> dict:
    return {"intended": intended, "sent": sent, "done": done, "ok": ok, "error": None}


def test_summary_latency_from_intended_time_and_goodput() -> None:
    recs = [_rec(i * 0.01, i * 0.01, i * 0.01 + 0.005) for i in range(100)]
    recs[50] = _rec(0.5, 0.5, 0.6)  # a stall: 100 ms
    s = replay.summarize(recs, slo_ms=50)
    m = s["metrics"]
    assert s["valid"]
    assert m["latency_ms_p50"] == pytest.approx(5.0)
    assert m["latency_ms_max"] == pytest.approx(100.0)
    assert m["goodput_rps"] < m["throughput_rps"]
    assert len(s["samples"]["latency_ms"]) == 100 and s["samples"]["errors"] == [0.0] * 100


def test_a_client_that_falls_behind_is_invalid_not_slow() -> None:
    # sends drift to 5% later than intended by the end
    recs = [_rec(i * 0.01, i * 0.0105, i * 0.0105 + 0.001) for i in range(200)]
    s = replay.summarize(recs)
    assert not s["valid"] and "could not keep up" in s["invalid_reason"]


def test_scheduler_jitter_on_a_short_trace_is_not_falling_behind() -> None:
    # 6 requests in 0.25 s, the first sent 6 ms late (a busy host): a 2.4% rate miss, 6 ms of span
    recs = [_rec(i * 0.05, i * 0.05 + (0.006 if i == 0 else 0.0), i * 0.05 + 0.007)
            for i in range(6)]
    assert replay.summarize(recs)["valid"]
    # the same trace sent 30 ms late by its end: behind by more than jitter explains
    recs = [_rec(i * 0.05, i * 0.056, i * 0.056 + 0.001) for i in range(6)]
    s = replay.summarize(recs)
    assert not s["valid"] and "could not keep up" in s["invalid_reason"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/slow"):
            time.sleep(0.05)
        if self.path.startswith("/hang"):
            time.sleep(1.5)
        code = 500 if self.path.startswith("/err") else 200
        body = b'{"ok": true}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


class _Http10Handler(_Handler):
    protocol_version = "HTTP/1.0"  # like the lab's model server: one connection per request


@pytest.fixture(params=[_Handler, _Http10Handler], ids=["keepalive", "http10"])
def server(request: pytest.FixtureRequest):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), request.param)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_live_replay(server: str) -> None:
    reqs = [{"t": i * 0.005, "method": "GET", "path": "/err" if i % 10 == 3 else "/ok",
             "body": None, "headers": {}, "expect_bytes": 12 if i % 10 != 5 else 3}
            for i in range(100)]
    plan = replay.schedule(reqs, warmup=0.05)
    recs = replay.run_http(reqs, plan, server, timeout=5)
    s = replay.summarize(recs)
    assert s["valid"], s
    assert s["metrics"]["requests"] == 90  # 10 in the warm-up
    assert s["metrics"]["errors"] == 18  # 9 HTTP 500 + 9 size mismatches
    assert {r["error"] for r in recs if r["error"]} == {"HTTP 500",
                                                        "response size 12, expected 3"}


def test_a_stalled_server_counts_in_latency(server: str) -> None:
    reqs = [{"t": i * 0.01, "method": "GET", "path": "/slow", "body": None, "headers": {},
             "expect_bytes": None} for i in range(20)]
    recs = replay.run_http(reqs, replay.schedule(reqs), server, timeout=5)
    lat = [r["done"] - r["intended"] for r in recs]
    assert min(lat) >= 0.05


def _timer_slack_ns() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    return int(ctypes.CDLL(None).prctl(30, 0, 0, 0, 0))  # PR_GET_TIMERSLACK


def test_timeouts_fire_on_time_in_flight_and_waiting_for_a_connection(server: str) -> None:
    # one connection allowed: the first request hangs on it, the other two wait for it
    reqs = [{"t": 0.0, "method": "GET", "path": "/hang", "body": None, "headers": {},
             "expect_bytes": None} for _ in range(3)]
    slack, gc_enabled = _timer_slack_ns(), gc.isenabled()
    recs = replay.run_http(reqs, replay.schedule(reqs), server, timeout=0.3, max_connections=1)
    assert [r["error"] for r in recs] == ["timeout after 0.3s"] + [
        "timeout after 0.3s waiting for a connection"] * 2
    assert all(0.3 <= r["done"] - r["intended"] < 0.45 for r in recs), recs
    assert recs[0]["sent"] is not None and recs[1]["sent"] is None
    # the two due while the one connection was busy are counted as such
    assert [bool(r.get("conn_wait")) for r in recs] == [False, True, True]
    assert replay.summarize(recs)["metrics"]["connection_waits"] == 2
    # the replay's quiet settings (no GC pauses, 1 ns timer slack) end with it
    assert gc.isenabled() == gc_enabled and _timer_slack_ns() == slack


def test_unreachable_endpoint_is_errors_not_a_crash() -> None:
    reqs = replay.poisson_trace(50, 0.2, seed=1)
    recs = replay.run_http(reqs, replay.schedule(reqs), "http://127.0.0.1:9", timeout=1)
    assert recs and all(not r["ok"] for r in recs)


def test_command_mode(tmp_path: Path) -> None:
    reqs = [{"t": i * 0.02, "method": "POST", "path": "/", "body": b"abc", "headers": {},
             "expect_bytes": 3} for i in range(5)]
    recs = replay.run_command(reqs, replay.schedule(reqs), ["cat"], timeout=5)
    assert all(r["ok"] for r in recs), recs


def test_main_prints_one_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"t": i * 0.1}) for i in range(10)))
    rc = replay.main(["--trace", str(trace), "--command", "true"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["valid"] and doc["metrics"]["requests"] == 10
