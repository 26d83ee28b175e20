"""Results on stdout for the commands issue 30 names (`fleet check | grep`, `fleet history
events > f`, `fleet logs parse … | grep Xid`): before, each printed its results on stderr, so a
pipe or a redirect got nothing."""

from __future__ import annotations

from pathlib import Path

from fleet.errors import ExitCode
from tests.unit.cli.conftest import Fleet

LOG = Path(__file__).resolve().parents[2] / "data" / "kernel-logs" / \
    "pasted__mixed-indent-quoted-xid-aer.log"


def test_logs_parse_events_are_on_stdout(fleet_run: Fleet) -> None:
    code, out, err = fleet_run("logs", "parse", str(LOG))
    assert code in (ExitCode.OK, ExitCode.PROBLEMS), err
    assert "Xid" in out
    assert "Xid" not in err


def test_history_events_are_on_stdout(fleet_run: Fleet, demo_db: Path) -> None:
    code, out, err = fleet_run("--db", str(demo_db), "history", "events")
    assert code == ExitCode.OK, err
    assert "quarantine" in out  # the demo quarantines two hosts
    assert "quarantine" not in err


def test_check_results_are_on_stdout(fleet_run: Fleet, demo_db: Path) -> None:
    code, out, err = fleet_run("--db", str(demo_db), "check")
    assert code in (ExitCode.OK, ExitCode.PROBLEMS), err
    assert "quarantined" in out  # "2 host(s) quarantined ...", beside the findings
    assert "fleet hosts --quarantined" in out
