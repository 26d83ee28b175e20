"""Benchmark samples, access logs and replay traces are checked for physical sense (issue 13).

Golden files in tests/data/bench/physical: each input has `<input>.expected` beside it, one line
per problem (`line: field: message`) that reading the input must report, in order. Regenerate with
FLEET_REGEN_GOLDEN=1 and review the diff by eye; a new regression is a new file.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from fleet.domain.bench_samples import check_samples, read_samples, value_problem
from fleet.domain.tracelog import trace_from_log
from fleet.errors import BadInput, ExitCode, Problem

DATA = Path(__file__).resolve().parents[2] / "data" / "bench" / "physical"
REGEN = os.environ.get("FLEET_REGEN_GOLDEN") == "1"


def _lines(problems: list[Problem]) -> str:
    return "".join(f"{p.line}: {p.field}: {p.message}\n" for p in problems)


def _golden(path: Path, problems: list[Problem]) -> None:
    expected = path.with_name(path.name + ".expected")
    text = _lines(problems)
    if REGEN or not expected.exists():
        expected.write_text(text)
        if not REGEN:
            pytest.fail(f"wrote new golden {expected.name}; review it and rerun")
    assert text == expected.read_text()


def _problems_of(path: Path) -> list[Problem]:
    if path.name.startswith("access__"):
        with path.open() as f:
            return trace_from_log(f, source=path.name)[1]
    if path.name.startswith("trace__"):
        from fleet.cli.bench_cmd import _read_trace

        with pytest.raises(BadInput) as err:
            _read_trace(path)
        return err.value.problems
    return read_samples(path.read_text(), path.name)[1]


INPUTS = sorted(p for p in DATA.iterdir() if not p.name.endswith(".expected"))


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: p.name)
def test_nonsense_is_refused_with_line_and_field(path: Path) -> None:
    problems = _problems_of(path)
    assert problems and all(p.line is not None or p.field for p in problems)
    _golden(path, problems)


def _write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def _lat(n: int, seed: int) -> list[float]:
    rnd = random.Random(seed)
    return [rnd.lognormvariate(0, 0.1) * 10 for _ in range(n)]


@pytest.mark.parametrize("name", [
    "samples__negative-and-zero-latency.json", "samples__negative-throughput.json",
    "samples__nan-and-infinity.json", "runner-output__many-negative-latencies.json"])
def test_compare_refuses_nonsense_samples(tmp_path: Path, fleet_cli, name: str) -> None:
    baseline = _write(tmp_path / "b.json", {"latency_ms": _lat(200, 2)})
    for canary, base in ((str(DATA / name), baseline), (baseline, str(DATA / name))):
        r = fleet_cli("bench", "compare", "--canary", canary, "--baseline", base)
        assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
        first = (DATA / (name + ".expected")).read_text().splitlines()[0]
        line, field, _ = first.split(": ", 2)
        assert f"{name}:{line}: {field}:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_zero_throughput_and_zero_wait_are_judged_not_refused(tmp_path: Path, fleet_cli) -> None:
    """A dead canary serving nothing is a result (it fails), and a wait can be nothing."""
    c = _write(tmp_path / "c.json", {"throughput_rps": [0.0, 0.0, 0.0],
                                     "latency_ms": _lat(200, 1), "queue_wait_ms": [0.0] * 200})
    b = _write(tmp_path / "b.json", {"throughput_rps": [100.0, 101.0, 99.5],
                                     "latency_ms": _lat(200, 2), "queue_wait_ms": [0.0] * 200})
    r = fleet_cli("bench", "compare", "--canary", c, "--baseline", b)
    assert r.returncode == ExitCode.PROBLEMS, r.stdout + r.stderr


def test_value_rules_follow_what_the_name_measures() -> None:
    assert value_problem("latency_ms", 0.001) is None
    assert value_problem("latency_ms", 0) and value_problem("ttft_s", -1)
    assert value_problem("latency_ms", 0, zero_latency=True) is None
    assert value_problem("latency_ms", -1, zero_latency=True)
    assert value_problem("queue_wait_ms", 0) is None and value_problem("queue_wait_ms", -1)
    assert value_problem("throughput_rps", 0) is None and value_problem("throughput_rps", -0.1)
    assert value_problem("score", -3) is None
    assert value_problem("errors", 1) is None and value_problem("errors", -1)
    assert value_problem("my_metric", -7) is None  # unknown quantity: finite is all we know
    assert value_problem("my_metric", float("nan")) and value_problem("my_metric", True)


def test_lines_are_found_in_any_layout() -> None:
    text = '{"a_ms": [1, 2,\n\n 3, -4], "b -5 \\" -6": [8],\n "c_ms": [\n-7]}'
    _, problems = read_samples(text, "f.json")
    assert [(p.line, p.field) for p in problems] == [(3, "a_ms[3]"), (5, "c_ms[0]")]


def test_host_samples_with_nonsense_are_could_not_measure() -> None:
    from fleet.remote.bench import to_samples

    doc = {"suite": "replay", "valid": True,
           "samples": {"latency_ms": [1.5, -0.2, 2.0], "errors": [0.0, 0.0, 0.0]}}
    res = to_samples("h1", doc)
    assert not res.ok and res.error and "latency_ms[1]" in res.error
    doc["samples"] = {"latency_ms": [0.0, 1.5], "throughput_rps": [float("nan")]}
    res = to_samples("h1", doc)
    assert not res.ok and res.error and "throughput_rps[0]" in res.error
    assert check_samples({"latency_ms": [0.0, 1.5]}) == []  # a host may round to 0
    doc["samples"] = {"latency_ms": [1.5, 2.5], "errors": [0.0, 1.0]}
    assert to_samples("h1", doc).ok


def test_trace_from_log_refuses_nan_and_negative_timestamps(fleet_cli) -> None:
    for name in ("access__nan-negative-timestamps.jsonl", "access__before-1970.log"):
        r = fleet_cli("bench", "trace-from-log", str(DATA / name))
        assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
        for want in (DATA / (name + ".expected")).read_text().splitlines():
            line, field, _ = want.split(": ", 2)
            assert f"{name}:{line}: {field}:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_trace_from_log_skip_bad_keeps_only_sane_requests(fleet_cli) -> None:
    r = fleet_cli("bench", "trace-from-log", str(DATA / "access__nan-negative-timestamps.jsonl"),
                  "--skip-bad")
    assert r.returncode == ExitCode.OK, r.stderr
    trace = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["path"] for e in trace] == ["/v1/a", "/v1/k"]
    assert all(0 <= e["t"] < 10 for e in trace)
