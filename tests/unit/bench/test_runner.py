"""The synthetic runner's pure parts: DCGM parsing, the command source, source selection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.bench import runner

DATA = Path(__file__).resolve().parents[2] / "data" / "bench"


def test_dcgm_pass_with_metrics_and_skips() -> None:
    res = runner.parse_dcgm_diag((DATA / "dcgm_pass.json").read_text())
    assert res["verdict"] == "pass", res["errors"]
    assert res["samples"]["dcgm_pcie_gbps"] == [25.31, 24.90]


def test_dcgm_pass_with_errors_inside_is_not_a_pass() -> None:
    res = runner.parse_dcgm_diag((DATA / "dcgm_pass_with_errors.json").read_text())
    assert res["verdict"] == "fail"
    assert any("PASS with errors inside" in e and "row remapping" in e for e in res["errors"])


def test_dcgm_v4_failure() -> None:
    res = runner.parse_dcgm_diag((DATA / "dcgm_fail_v4.json").read_text())
    assert res["verdict"] == "fail"
    assert any("Persistence mode" in e for e in res["errors"])


@pytest.mark.parametrize("text", ["", "Error: unable to connect to host engine", "{}", "[1]"])
def test_dcgm_unreadable_could_not_measure(text: str) -> None:
    assert runner.parse_dcgm_diag(text)["verdict"] == "could not measure"


def _fake(outputs: list[tuple[int, str]]):
    calls = iter(outputs)

    def run(argv, **kw):
        rc, out = next(calls)
        return subprocess.CompletedProcess(argv, rc, out, "")
    return run


def test_command_source_collects_numeric_fields_per_run() -> None:
    doc = {"benchmark": "synthetic", "ok": True, "samples": 75, "throughput": 100.0,
           "latency_ms_p50": 4.0, "driver": "550.54.15", "release": "r550"}
    res = runner.run_command(["fleet-lab-bench"], repeats=2,
                             runner=_fake([(0, json.dumps(doc))] * 2))
    assert res["verdict"] == "measured"
    assert res["samples"] == {"throughput": [100.0, 100.0], "latency_ms_p50": [4.0, 4.0]}
    assert res["details"]["release"] == "r550"


def test_command_ok_false_is_a_failed_run() -> None:
    bad = json.dumps({"ok": False, "error": "NVMLError: Driver/library version mismatch"})
    res = runner.run_command(["x"], repeats=1, runner=_fake([(2, bad)]))
    assert res["verdict"] == "fail"
    assert "mismatch" in res["errors"][0]


def test_missing_command_could_not_measure() -> None:
    def run(argv, **kw):
        raise FileNotFoundError(argv[0])
    assert runner.run_command(["nope"], runner=run)["verdict"] == "could not measure"


def test_nothing_usable_could_not_measure() -> None:
    def no_cuda(**kw):
        return runner._result("cuda", "could not measure", errors=["torch: not importable"])
    res = runner.run("auto", None, which=lambda name: None, cuda=no_cuda)
    assert (res["source"], res["verdict"]) == ("none", "could not measure")
    assert "dcgmi: not installed" in res["errors"]


def test_the_shipped_file_runs_standalone() -> None:
    out = subprocess.run([sys.executable, str(Path(runner.__file__)), "--command",
                          f"{sys.executable} -c 'print(\"{{\\\"tflops\\\": 1.5}}\")'",
                          "--repeats", "2"], capture_output=True, text=True, timeout=60)
    doc = json.loads(out.stdout)
    assert doc["samples"] == {"tflops": [1.5, 1.5]}, out.stderr


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_dcgm_waits_longer_than_nvidia_says_each_level_takes(level: int) -> None:
    # NVIDIA's typical durations: level 1 seconds, 2 about 2 min, 3 about 15 min, 4 longer than 3
    seen: dict[str, object] = {}

    def fake(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        seen.update(argv=argv, timeout=kw["timeout"])
        return subprocess.CompletedProcess(argv, 0, (DATA / "dcgm_pass.json").read_text(), "")

    assert runner.run_dcgm(level, runner=fake)["verdict"] == "pass"
    assert seen["argv"] == ["dcgmi", "diag", "-r", str(level), "-j"]
    typical = {1: 60, 2: 120, 3: 15 * 60, 4: 30 * 60}[level]
    assert float(seen["timeout"]) >= 3 * typical  # type: ignore[arg-type]


def test_dcgm_timeout_is_could_not_measure_not_a_pass() -> None:
    def fake(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(argv, float(kw["timeout"]))  # type: ignore[arg-type]

    res = runner.run_dcgm(3, runner=fake)
    assert res["verdict"] == "could not measure" and "timed out" in res["errors"][0]
