"""The reports say how many samples each pool's benchmark verdict needed and had (issue 13 §8):
Markdown and HTML tables per check, a Prometheus family that parses strictly, and reports made
before the counts existed still render."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.history import open_history
from fleet.jobs.hygiene import run_hygiene
from fleet.reports import render_html, render_json, render_markdown, render_prometheus
from fleet.sim import SimFleet
from tests.unit.hygiene.test_reports import parse_exposition

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    sim = SimFleet.build(matrix, pools={"h100": 3, "a100": 3}, seed=5)
    start = dt.datetime(2025, 9, 1, 6, tzinfo=dt.UTC)
    with open_history(str(tmp_path_factory.mktemp("r") / "fleet.db")) as h:
        run_hygiene(sim, sim.scheduler(), h, matrix, now=start, actor="t")
        r = run_hygiene(sim, sim.scheduler(), h, matrix, now=start + dt.timedelta(weeks=1),
                        actor="t", bench_samples=300)
    doc: dict[str, Any] = json.loads(render_json(r.as_dict()))
    return doc


def test_markdown_and_html_tables(report: dict[str, Any]) -> None:
    md = render_markdown(report)
    assert "| a100 | a100-00001, a100-00002 | inconclusive | 300 / 1918 / 1917 |" in md
    assert "| a100 | errors | inconclusive | 1917 | 300 | 1918 |" in md
    assert "| h100 | latency_ms:p99 | inconclusive | 1000 | 300 | 1918 |" in md
    html = render_html(report)
    assert "<td>300 / 1918 / 1917</td>" in html
    assert "Newcombe&#x27;s upper bound" in html  # rule text escaped


def test_prometheus_samples_family(report: dict[str, Any]) -> None:
    fam = parse_exposition(render_prometheus(report))
    got = dict(fam["fleet_hygiene_benchmark_samples"])
    assert got['{pool="h100",side="this_week"}'] == 300
    assert got['{pool="h100",side="baseline"}'] == 1918
    assert got['{pool="h100",side="needed"}'] == 1917


def test_reports_without_sample_counts_still_render(report: dict[str, Any]) -> None:
    old = {**report, "benchmarks": [{k: v for k, v in b.items() if k != "samples"}
                                    for b in report["benchmarks"]]}
    assert "Samples each judged check" not in render_markdown(old)
    assert "Samples each judged check" not in render_html(old)
    assert "fleet_hygiene_benchmark_samples" not in render_prometheus(old)
