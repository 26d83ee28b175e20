"""`fleet hygiene run` options for the weekly benchmark, as users run it: --diag-level and
--bench-samples checked before anything runs (exit 2 naming the option), and the report saying
how many samples each pool's verdict needed and had."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
MATRIX = str(ROOT / "matrices" / "example.yaml")


@pytest.mark.parametrize("option,value", [("--diag-level", "0"), ("--diag-level", "5"),
                                          ("--bench-samples", "0")])
def test_out_of_range_values_are_bad_input_naming_the_option(fleet_cli, tmp_path: Path,
                                                             option: str, value: str) -> None:
    db = tmp_path / "fleet.db"
    r = fleet_cli("--db", str(db), "hygiene", "run", "-m", MATRIX, "--sim", "8", option, value)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert option in r.stderr and "Traceback" not in r.stderr
    j = fleet_cli("--db", str(db), "hygiene", "run", "-m", MATRIX, "--sim", "8", option, value,
                  "--json")
    assert j.returncode == ExitCode.BAD_INPUT
    doc = json.loads(j.stdout)
    assert doc["schema"] == 1 and doc["error"]["where"]["field"] == option
    assert not db.exists()  # refused before anything ran


def test_weekly_runs_pass_and_say_what_they_needed(fleet_cli, tmp_path: Path) -> None:
    db = str(tmp_path / "fleet.db")
    args = ("--db", db, "hygiene", "run", "-m", MATRIX, "--sim", "12", "--diag-level", "2")
    first = fleet_cli(*args, "--json")
    assert first.returncode == ExitCode.OK, first.stderr
    second = fleet_cli(*args, "--json", "--report-dir", str(tmp_path / "rep"))
    assert second.returncode == ExitCode.OK, second.stderr
    benches = json.loads(second.stdout)["benchmarks"]
    assert benches and {b["verdict"] for b in benches} == {"pass"}, \
        [b["reason"] for b in benches]
    for b in benches:
        s = b["samples"]
        assert s["needed"] == 1917 and s["had"] >= 1917 and s["baseline"] >= 1917
        assert {c["check"] for c in s["checks"]} >= {"errors", "latency_ms:p99", "tflops"}
    md = (tmp_path / "rep" / "latest.md").read_text()
    assert "samples per side (week / baseline / needed)" in md and "| 1917 |" in md
    assert 'fleet_hygiene_benchmark_samples{pool="a100",side="needed"} 1917' in (
        tmp_path / "rep" / "fleet_hygiene.prom").read_text()
    text = fleet_cli(*args, "--bench-samples", "100")
    assert text.returncode == ExitCode.OK, text.stderr
    said = " ".join(text.stdout.split())  # the summary is a result: stdout (issue 30)
    assert "inconclusive (samples per side: had 100 this week" in said
    assert "errors needs 1917 per side, had 100/" in said
