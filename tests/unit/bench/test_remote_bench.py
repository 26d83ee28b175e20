"""Shipping the benchmarks: argument validation, the inline commands, results to samples."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

import pytest

from fleet.remote import bench
from fleet.remote.inline import inline_python_command


def test_inline_command_runs_the_script_with_quoted_args(tmp_path) -> None:
    script = tmp_path / "s.py"
    script.write_text("import sys, json; print(json.dumps(sys.argv[1:]))")
    cmd = inline_python_command(script, ["a b", "'; rm -rf /", "--x"])
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["a b", "'; rm -rf /", "--x"]


@pytest.mark.parametrize("params", [
    {"source": "bogus"}, {"repeats": 0}, {"repeats": "3"}, {"command": "a\nb"},
])
def test_synthetic_params_are_validated(params: dict) -> None:
    with pytest.raises(ValueError):
        bench.synthetic_args(params)


@pytest.mark.parametrize("params", [
    {"endpoint": "https://x"}, {"endpoint": "http://x; reboot"}, {"rate_scale": 0},
    {"warmup": float("nan")},
])
def test_replay_params_are_validated(params: dict) -> None:
    with pytest.raises(ValueError):
        bench.replay_args(params)


def test_synthetic_command_runs_here() -> None:
    cmd = inline_python_command(bench.RUNNER, bench.synthetic_args(
        {"source": "command", "command": "echo '{\"throughput\": 3}'", "repeats": 2}))
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    doc = bench.parse_result(out.stdout.splitlines())
    assert bench.to_samples("h", doc).value == {"throughput": [3.0, 3.0]}


def test_replay_inline_trace_runs_here() -> None:
    trace = b"\n".join(json.dumps({"t": i * 0.05}).encode() for i in range(6))
    args = ["--trace-data", bench.trace_payload(trace),
            *bench.replay_args({"command": "true"})]
    out = subprocess.run(inline_python_command(bench.REPLAY, args), shell=True,
                         capture_output=True, text=True)
    res = bench.to_samples("h", bench.parse_result(out.stdout.splitlines()))
    assert res.ok and res.value is not None and res.value["errors"] == [0.0] * 6


@pytest.mark.parametrize("doc,why", [
    ({"suite": "synthetic", "verdict": "could not measure", "errors": ["dcgmi: none"]},
     "could not measure"),
    ({"suite": "synthetic", "verdict": "fail", "errors": ["PASS with errors inside"]},
     "benchmark failed"),
    ({"suite": "replay", "valid": False, "invalid_reason": "could not keep up"},
     "invalid replay"),
    ({}, "printed nothing"),
])
def test_unusable_results_are_failures_with_a_reason(doc: dict, why: str) -> None:
    res = bench.to_samples("h", doc)
    assert not res.ok and why in (res.error or "")


def test_unreachable_hosts_are_reported_without_running(monkeypatch) -> None:
    conn = SimpleNamespace(state=None, hosts=[], unreachable={"h1": "timed out"}, active=[])
    got = bench.run_benchmarks(conn, None, "synthetic", {"source": "auto"})
    assert not got["h1"].ok and not got["h1"].reachable and got["h1"].error == "timed out"
    with pytest.raises(ValueError):
        bench.run_benchmarks(conn, None, "replay", {})
