"""`fleet demo`: the story runs end to end with the real engine, tells exactly what it should,
the same way every time, and leaves its report and database behind."""

from __future__ import annotations

import json
import sqlite3
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.demo_cmd import MARKER, write_hygiene_reports
from fleet.domain.matrix.loader import load_matrix
from fleet.errors import ExitCode
from fleet.jobs import demo as D
from fleet.jobs.demo import DemoResult, Step, run_demo

PATHS = ("folder", "matrix", "db", "sim_state", "report", "reports")


def _story(result: DemoResult | dict[str, Any]) -> dict[str, Any]:
    """The summary without the paths (they name the folder)."""
    doc = result.summary() if isinstance(result, DemoResult) else dict(result)
    for key in PATHS:
        doc.pop(key, None)
    doc["baseline"] = {k: v for k, v in doc["baseline"].items() if k != "report"}
    return doc


def _check_story(doc: dict[str, Any]) -> None:
    assert doc["ok"] is True and doc["problems"] == []
    assert [(r["release"], r["outcome"]) for r in doc["rollouts"]] == [
        (D.CANDIDATE_A, "rolled_back"), (D.CANDIDATE_B, "completed")]
    a, b = doc["rollouts"]
    assert a["failed_wave"]["pool"] == "h100-canary" and a["waves_done"] == 0
    replay = {m["metric"]: m["shift"] for m in a["failed_wave"]["metrics"]
              if m["suite"] == "replay"}
    assert replay["throughput_rps"] == pytest.approx(-0.25, abs=0.02)
    assert b["waves_done"] == b["waves"] and b["hosts"] == {"done": sum(D.POOLS.values())}
    assert doc["quarantined"] == sorted(D.ECC_HOSTS)
    assert doc["drift"] == [D.DRIFT_HOST]
    assert doc["baseline"]["conformant"] == doc["baseline"]["hosts"] == 64
    assert doc["baseline"]["problems"] == 0
    inc = doc["incident"]
    assert inc["pool"] == D.INCIDENT_POOL and inc["verified"] is True
    assert inc["to"] == [D.GOLDEN] and inc["on"] == {D.GOLDEN: D.POOLS[D.INCIDENT_POOL]}
    assert [s["number"] for s in doc["steps"]] == [1, 2, 3, 4, 5]
    assert all(s["ok"] and s["commands"] for s in doc["steps"])


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoResult, list[Step]]:
    steps: list[Step] = []
    result = run_demo(tmp_path_factory.mktemp("demo"), reporter=write_hygiene_reports,
                      on_step=steps.append)
    return result, steps


def test_the_story_goes_as_told(told: tuple[DemoResult, list[Step]]) -> None:
    result, steps = told
    _check_story(result.summary())
    assert [s.number for s in steps] == [1, 2, 3, 4, 5]  # told as it went, chapter by chapter


def test_it_leaves_a_report_a_database_and_a_valid_matrix(
        told: tuple[DemoResult, list[Step]]) -> None:
    result, _ = told
    assert result.report is not None and result.report.suffix == ".html"
    html = result.report.read_text()
    assert D.DRIFT_HOST in html and all(h in html for h in D.ECC_HOSTS)
    assert (result.folder / "reports" / "latest.html").is_file()
    with sqlite3.connect(result.db) as db:
        rollouts = db.execute("select release, status from rollouts order by id").fetchall()
    assert rollouts == [(D.CANDIDATE_A, "rolled_back"), (D.CANDIDATE_B, "completed")]
    loaded = load_matrix(result.matrix, today=date.today())  # raises BadInput when invalid
    # the demo's story is set in September 2025: today its R570 and R575 releases have ended
    assert [w.message for w in loaded.warnings if "reached end of life" not in w.message] == []
    assert {D.GOLDEN, D.CANDIDATE_A, D.CANDIDATE_B} == {r.name for r in loaded.matrix.releases}
    assert [p for p, s in loaded.matrix.pools.items() if s.canary] == ["h100-canary"]
    assert json.loads(result.sim_state.read_text())["format"] == 1


@pytest.mark.slow
def test_deterministic(told: tuple[DemoResult, list[Step]], tmp_path: Path) -> None:
    again = run_demo(tmp_path / "again", reporter=write_hygiene_reports)
    assert _story(again) == _story(told[0])
    first = json.loads((told[0].folder / "reports" / "latest.json").read_text())
    second = json.loads((tmp_path / "again" / "reports" / "latest.json").read_text())
    assert first == second


# ---------------------------------------------------------------- the real entry point
@pytest.mark.slow
def test_cli_json_summary(fleet_cli, tmp_path: Path) -> None:
    folder = tmp_path / "kept"
    r = fleet_cli("demo", "--json", "--keep", str(folder))
    assert r.returncode == ExitCode.OK, r.stderr
    doc = json.loads(r.stdout)
    _check_story(_story(doc))
    assert Path(doc["db"]) == folder / "fleet.db" and Path(doc["db"]).is_file()
    assert Path(doc["report"]).is_file() and doc["report"].endswith(".html")
    assert (folder / MARKER).is_file()
    assert "Traceback" not in r.stderr
    for text in ("HTML report", "database", "fleet rollout start", "fleet rollback"):
        assert text in r.stderr
    again = fleet_cli("demo", "--json", "--keep", str(folder))  # its own folder: reused
    assert again.returncode == ExitCode.OK, again.stderr
    assert _story(json.loads(again.stdout)) == _story(doc)


def test_cli_refuses_a_folder_it_did_not_make(fleet_cli, tmp_path: Path) -> None:
    (tmp_path / "fleet.db").write_text("somebody's history")
    r = fleet_cli("demo", "--keep", str(tmp_path))
    assert r.returncode == ExitCode.BAD_INPUT
    assert "not empty" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "fleet.db").read_text() == "somebody's history"


def test_cli_lab_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--lab` without root: exit 2 saying what to run; with another lab up: exit 3."""
    import os

    from fleet.cli import demo_cmd
    from fleet.errors import BadInput, CouldNotComplete
    from fleet.jobs import demo_lab

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BadInput) as bad:
        demo_cmd._lab_preflight()
    assert bad.value.exit_code == ExitCode.BAD_INPUT and "sudo" in str(bad.value)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(demo_lab, "bridge_exists", lambda: True)
    with pytest.raises(CouldNotComplete) as busy:
        demo_cmd._lab_preflight()
    assert busy.value.exit_code == ExitCode.INCOMPLETE and "fleetbr0" in str(busy.value)
