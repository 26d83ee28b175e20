"""`fleet bench compare` and `fleet bench trace-from-log` at the process boundary."""

from __future__ import annotations

import json
import random
from pathlib import Path

from fleet.errors import ExitCode


def _write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _lat(median: float, n: int, seed: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.lognormvariate(0, 0.1) * median for _ in range(n)]


def test_compare_pass_json(tmp_path: Path, fleet_cli) -> None:
    c = _write(tmp_path / "c.json", {"latency_ms": _lat(10, 2000, 1), "throughput": [100, 101, 99]})
    b = _write(tmp_path / "b.json",
               {"latency_ms": _lat(10, 2000, 2), "throughput": [100, 100, 100.5]})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b, "--json")
    assert r.returncode == ExitCode.OK, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "pass"
    assert [m["metric"] for m in doc["metrics"]] == [
        "latency_ms", "latency_ms:p95", "latency_ms:p99", "throughput"]
    assert all(m["reason"] and m["verdict"] == "pass" for m in doc["metrics"])


def test_compare_fail_exits_1(tmp_path: Path, fleet_cli) -> None:
    c = _write(tmp_path / "c.json", {"latency_ms": _lat(13, 500, 1)})
    b = _write(tmp_path / "b.json", {"latency_ms": _lat(10, 500, 2)})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b,
                  "--metric", "latency_ms:lower:5%:notails")
    assert r.returncode == ExitCode.PROBLEMS
    assert "fail" in r.stderr


def test_compare_inconclusive_is_not_success(tmp_path: Path, fleet_cli) -> None:
    c = _write(tmp_path / "c.json", {"throughput": [100, 90]})
    b = _write(tmp_path / "b.json", {"throughput": [100, 101]})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b, "--json")
    assert r.returncode == ExitCode.INCOMPLETE
    assert json.loads(r.stdout)["verdict"] == "inconclusive"


def test_compare_nodata(tmp_path: Path, fleet_cli) -> None:
    c = _write(tmp_path / "c.json", {})
    b = _write(tmp_path / "b.json", {})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b, "--json")
    assert r.returncode == ExitCode.INCOMPLETE
    assert json.loads(r.stdout)["verdict"] == "nodata"


def test_compare_bad_input_names_file_and_field(tmp_path: Path, fleet_cli) -> None:
    c = _write(tmp_path / "c.json", {"latency_ms": [1, "x"], "throughput": 5})
    b = _write(tmp_path / "b.json", {})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b)
    assert r.returncode == ExitCode.BAD_INPUT
    assert "latency_ms[1]" in r.stderr and "throughput" in r.stderr
    assert "Traceback" not in r.stderr
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b, "--metric", "x:up")
    assert r.returncode == ExitCode.BAD_INPUT and "--metric[0]" in r.stderr


NGINX = [
    '10.0.0.1 - - [10/Oct/2024:13:55:36 +0000] "GET /infer?q=1 HTTP/1.1" 200 512 "-" "curl/8"',
    '10.0.0.2 - - [10/Oct/2024:13:55:36 +0000] "POST /infer HTTP/1.1" 200 128 "-" "curl/8"',
    '10.0.0.1 - - [10/Oct/2024:13:55:38 +0000] "GET /health HTTP/1.1" 503 12 "-" "curl/8" 0.500',
]


def test_trace_from_nginx_log(tmp_path: Path, fleet_cli) -> None:
    log = tmp_path / "access.log"
    log.write_text("\n".join(NGINX) + "\n")
    r = fleet_cli("bench", "trace-from-log", str(log), "--expect-size")
    assert r.returncode == 0, r.stderr
    trace = [json.loads(line) for line in r.stdout.splitlines()]
    assert trace == [
        {"t": 0.0, "method": "GET", "path": "/infer?q=1", "expect_bytes": 512},
        {"t": 0.5, "method": "POST", "path": "/infer", "expect_bytes": 128},
        {"t": 1.5, "method": "GET", "path": "/health", "expect_bytes": 12},
    ]
    out = tmp_path / "t.jsonl"
    r = fleet_cli("bench", "trace-from-log", str(log), "--only-ok", "-o", str(out))
    assert r.returncode == 0 and len(out.read_text().splitlines()) == 2


def test_trace_from_jsonl_log_and_bad_lines(tmp_path: Path, fleet_cli) -> None:
    log = tmp_path / "app.jsonl"
    log.write_text("\n".join([
        json.dumps({"timestamp": "2024-10-10T13:55:36.250Z", "method": "POST", "path": "/v1/x",
                    "body": {"prompt": "a"}, "status": 200}),
        json.dumps({"ts": 1728568536.0, "request": "GET /v1/y HTTP/1.1"}),
        "garbage",
        json.dumps({"method": "GET", "path": "/z"}),
    ]) + "\n")
    r = fleet_cli("bench", "trace-from-log", str(log))
    assert r.returncode == ExitCode.BAD_INPUT
    assert "app.jsonl:3" in r.stderr and "app.jsonl:4" in r.stderr
    r = fleet_cli("bench", "trace-from-log", str(log), "--skip-bad")
    assert r.returncode == 0
    trace = [json.loads(line) for line in r.stdout.splitlines()]
    assert trace == [{"t": 0.0, "method": "GET", "path": "/v1/y"},
                     {"t": 0.25, "method": "POST", "path": "/v1/x", "body": {"prompt": "a"}}]
