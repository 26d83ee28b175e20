"""The weekly benchmark on the simulated fleet (issue 13 §8): sized by what the judge needs, a
healthy pool passes and a regressed one fails; too few samples stays inconclusive and says how
many it needed; the dcgmi level reaches the benchmark's parameters."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.errors import ExitCode
from fleet.history import History, open_history
from fleet.jobs.hygiene import HygieneReport, run_hygiene
from fleet.sim import SimFleet

ROOT = Path(__file__).resolve().parents[3]
START = dt.datetime(2025, 9, 1, 6, tzinfo=dt.UTC)
WEEK = dt.timedelta(weeks=1)


def _matrix(**hygiene: Any) -> Matrix:
    m = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    if hygiene:
        m = Matrix.model_validate({**m.model_dump(), "hygiene": hygiene})
    return m


class Recording:
    """The simulated fleet, remembering the parameters of every benchmark call."""

    def __init__(self, sim: SimFleet) -> None:
        self.sim = sim
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> Any:
        self.calls.append((list(hosts), dict(params or {})))
        return self.sim.benchmark(hosts, suite, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sim, name)


def _releases() -> tuple[str, str]:
    """Two releases the drift audit accepts: h100 runs the first (the one slowed), a100 the
    second, so slowing one release slows one pool."""
    first, second = (r.name for r in _matrix().allowed_releases()[:2])
    return first, second


def _fleet() -> SimFleet:
    slow, other = _releases()
    return SimFleet.build(_matrix(), pools={"h100": 4, "a100": 4}, seed=3,
                          start={"h100": slow, "a100": other})


@pytest.fixture
def history(tmp_path: Path) -> Iterator[History]:
    with open_history(str(tmp_path / "fleet.db")) as h:
        yield h


def _weeks(backend: Any, history: History, matrix: Matrix, weeks: int,
           **kw: Any) -> list[HygieneReport]:
    return [run_hygiene(backend, backend.scheduler(), history, matrix, now=START + w * WEEK,
                        actor="test", **kw) for w in range(weeks)]


def test_healthy_pools_pass_and_a_slowed_pool_fails(history: History) -> None:
    sim = _fleet()
    matrix = _matrix()
    reports = _weeks(sim, history, matrix, 3)
    first = {b.pool: b for b in reports[0].benchmarks}
    assert {b.verdict for b in first.values()} == {"nodata"}  # no baseline yet
    for r in reports[1:]:
        by = {b.pool: b for b in r.benchmarks}
        assert {p: b.verdict for p, b in by.items()} == {"a100": "pass", "h100": "pass"}, \
            {p: b.reason for p, b in by.items()}
        assert r.exit_code == ExitCode.OK
        s = by["h100"].samples
        assert s is not None and s["mode"] == "auto" and s["needed"] == 1917
        assert s["had"] >= 1917 and s["baseline"] >= 1917
    sim.release_perf[_releases()[0]] = 0.85  # h100's release now 15% slower on every host
    report = run_hygiene(sim, sim.scheduler(), history, matrix, now=START + 3 * WEEK,
                         actor="test")
    by = {b.pool: b for b in report.benchmarks}
    assert by["a100"].verdict == "pass", by["a100"].reason
    assert by["h100"].verdict == "fail", by["h100"].reason
    assert "tflops: fail" in by["h100"].reason and "latency_ms: fail" in by["h100"].reason
    assert report.exit_code == ExitCode.PROBLEMS
    assert any(p.startswith("pool h100: synthetic benchmark regressed")
               for p in report.problems())
    doc = report.as_dict()["benchmarks"]
    h100 = next(b for b in doc if b["pool"] == "h100")
    assert {c["check"]: c["need"] for c in h100["samples"]["checks"]}["latency_ms:p99"] == 1000


def test_too_few_samples_stays_inconclusive_and_names_the_count(history: History) -> None:
    sim = _fleet()
    reports = _weeks(sim, history, _matrix(), 2, bench_samples=100)
    for b in reports[1].benchmarks:
        assert b.verdict == "inconclusive", b.reason
        assert "too few samples" in b.reason
        assert "errors needs 1917 per side, had 100/100" in b.reason
        assert "latency_ms:p99 needs 1000 per side" in b.reason
        assert b.samples is not None and b.samples["mode"] == "fixed"
        assert b.samples["had"] == 100 and b.samples["needed"] == 1917


def test_the_matrix_sets_samples_and_caps_auto(history: History) -> None:
    fixed = Recording(_fleet())
    _weeks(fixed, history, _matrix(benchmark={"samples": 300}), 1)
    assert {p["samples"] for _h, p in fixed.calls} == {150}  # 300 per side over 2 hosts
    capped = Recording(_fleet())
    reports = _weeks(capped, history, _matrix(benchmark={"max_samples": 500}), 2)
    for b in reports[1].benchmarks:
        assert b.samples is not None and b.samples["had"] <= 502
        assert b.verdict == "inconclusive" and "needs 1917 per side" in b.reason


def test_auto_tops_up_once_then_asks_for_the_need_up_front(history: History) -> None:
    rec = Recording(_fleet())
    _weeks(rec, history, _matrix(), 2)
    asked = [(hosts[0].split("-")[0], p.get("samples")) for hosts, p in rec.calls]
    # week 1, no baseline: the pool's default, then one top-up to what this week's metrics need
    # ((1917 - 100) / 2 hosts); week 2: sized from the baseline before the run, no top-up
    assert asked == [("a100", None), ("a100", 909), ("h100", None), ("h100", 909),
                     ("a100", 959), ("h100", 959)]


@pytest.mark.parametrize("setting,override,expect", [(None, None, 1), (3, None, 3), (3, 2, 2)])
def test_dcgm_level_from_the_matrix_and_the_option(history: History, setting: int | None,
                                                   override: int | None, expect: int) -> None:
    rec = Recording(_fleet())
    matrix = _matrix(dcgm_diag_level=setting) if setting else _matrix()
    _weeks(rec, history, matrix, 1, dcgm_level=override)
    assert rec.calls and {p["dcgm_level"] for _h, p in rec.calls} == {expect}
