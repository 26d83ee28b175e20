"""`fleet history migrate|events|hosts` with the global --db option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleet.cli.app import app
from fleet.errors import BadInput, ExitCode
from fleet.history import add_snapshot, open_history, record_event, utcnow
from fleet.history.migrate import head_revision

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.db"
    with open_history(str(path)) as h:
        record_event(h, "rollout.start", "pool h100", "canary wave", {"wave": 0}, actor="alice")
        record_event(h, "quarantine", "gpu01", "xid 79", actor="bob")
        add_snapshot(h, "gpu01", taken_at=utcnow(), source="nvml", pool="h100",
                     gpu_model="H100", gpus=[{"gpu_index": i} for i in range(8)])
    return path


def test_migrate_creates_a_private_database(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    r = runner.invoke(app, ["--db", str(path), "history", "migrate"])
    assert r.exit_code == 0, r.output
    assert f"upgraded empty -> {head_revision()}" in r.output
    assert path.stat().st_mode & 0o777 == 0o600
    r = runner.invoke(app, ["--db", str(path), "history", "migrate"])
    assert r.exit_code == 0 and f"already at {head_revision()}" in r.output


def test_events_json_has_stable_keys(db: Path) -> None:
    r = runner.invoke(app, ["--db", str(db), "history", "events", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [e["kind"] for e in doc["events"]] == ["quarantine", "rollout.start"]
    assert set(doc["events"][0]) == {"id", "at", "actor", "kind", "subject", "message", "data"}
    assert doc["events"][1]["data"] == {"wave": 0}
    assert doc["events"][0]["at"].endswith("+00:00")


def test_events_filters(db: Path) -> None:
    r = runner.invoke(app, ["--db", str(db), "history", "events", "--json", "--kind", "quarantine",
                            "--limit", "5"])
    assert [e["actor"] for e in json.loads(r.stdout)["events"]] == ["bob"]


def test_events_env_var_and_human_table(db: Path) -> None:
    r = runner.invoke(app, ["history", "events"], env={"FLEET_DB": str(db), "COLUMNS": "200"})
    assert r.exit_code == 0
    assert "rollout.start" in r.output and "alice" in r.output


def test_hosts_json(db: Path) -> None:
    r = runner.invoke(app, ["--db", str(db), "history", "hosts", "--json"])
    [host] = json.loads(r.stdout)["hosts"]
    assert host["name"] == "gpu01" and host["gpu_count"] == 8 and host["pool"] == "h100"
    assert set(host) == {"name", "pool", "gpu_model", "gpu_count", "labels", "first_seen",
                         "last_seen"}


def test_reports_do_not_create_a_database(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    r = runner.invoke(app, ["--db", str(path), "history", "events"])
    assert isinstance(r.exception, BadInput)
    assert not path.exists()


def test_exit_codes_at_the_process_boundary(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("--db", str(tmp_path / "missing.db"), "history", "hosts")
    assert r.returncode == ExitCode.BAD_INPUT and "Traceback" not in r.stderr
    r = fleet_cli("--db", "postgresql+psycopg://u:pw@127.0.0.1:1/x", "history", "hosts")
    assert r.returncode == ExitCode.INCOMPLETE and "Traceback" not in r.stderr
    assert "pw@" not in r.stderr
