"""`fleet demo`'s weekly hygiene runs judge every pool's benchmark (issue 13 §8): before the
benchmark was sized by what the judge needs, every pool was inconclusive every week."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.cli.demo_cmd import write_hygiene_reports
from fleet.jobs.demo import run_demo


def test_demo_weekly_benchmarks_pass(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "demo", reporter=write_hygiene_reports)
    reports = sorted((result.folder / "reports").glob("hygiene-*.json"))
    assert len(reports) == 2
    first, last = (json.loads(p.read_text())["benchmarks"] for p in reports)
    assert {b["verdict"] for b in first} == {"nodata"}  # the first run starts the baseline
    assert len(last) == 4 and {b["verdict"] for b in last} == {"pass"}, \
        {b["pool"]: b["reason"] for b in last}
    assert all(b["samples"]["had"] >= b["samples"]["needed"] == 1917 for b in last)
    html = (result.folder / "reports" / "latest.html").read_text()
    assert "Samples each judged check needed and had" in html
