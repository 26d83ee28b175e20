"""Flags mean one thing everywhere (issue 30): `-p` is `--pool`, options with fixed choices show
them in --help, `quarantine list` and `history events` select hosts with `-l/--limit`, and
`facts import --host` is checked like an inventory's host names."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.history import open_history, open_quarantine, record_event, upsert_host

Fleet = Callable[..., tuple[int, str, str]]  # the fleet_run fixture (conftest.py)
ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "tests" / "data" / "realdata" / "nvidia-smi-xml" / "telegraf__a100-sxm4-v12.xml"


def _options(*cmd: str) -> dict[str, object]:
    """The command's options by their names (the click command typer builds)."""
    import typer

    from fleet.cli.app import build_app

    command: object = typer.main.get_command(build_app())
    for name in cmd:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {o: p for p in command.params for o in p.opts}  # type: ignore[attr-defined]


@pytest.mark.parametrize("cmd", [("probe",), ("hygiene", "run"), ("rollout", "start"),
                                 ("rollout", "plan"), ("rollback",), ("facts", "import"),
                                 ("node-check",), ("quarantine", "list"),
                                 ("history", "events")])
def test_p_is_pool_everywhere(cmd: tuple[str, ...]) -> None:
    opts = _options(*cmd)
    assert "-p" in opts and "--pool" in getattr(opts["-p"], "opts", [])
    if "--partition" in opts:
        assert getattr(opts["--partition"], "opts", []) == ["--partition"]


@pytest.mark.parametrize(("cmd", "option", "shown"), [
    (("probe",), "--via", "ssh|slurm"), (("hygiene", "run"), "--via", "ssh|slurm"),
    (("hygiene", "run"), "--scheduler", "none|slurm|kubernetes"),
    (("rollout", "start"), "--rollback-scope", "wave|all"),
    (("rollout", "start"), "--scheduler", "none|slurm|kubernetes"),
    (("bench", "run"), "--suite", "synthetic|replay"),
    (("bench", "run"), "--source", "auto|command|dcgm|cuda"),
    (("bench", "trace-from-log"), "--format", "auto|nginx|jsonl"),
    (("lab", "up"), "--mode", "netns|loopback"),
    (("quarantine", "release"), "--scheduler", "none|slurm|kubernetes"),
])
def test_fixed_choices_are_shown_in_help(fleet_run: Fleet, cmd: tuple[str, ...], option: str,
                                         shown: str) -> None:
    code, out, err = fleet_run(*cmd, "--help")
    text = out + err
    line = next(ln for ln in text.splitlines() if f" {option} " in ln)
    assert code == 0 and shown in line and "<str>" not in line


def test_a_choice_outside_the_list_is_a_usage_error(fleet_run: Fleet, tmp_path: Path) -> None:
    code, out, _ = fleet_run("--db", str(tmp_path / "h.db"), "hygiene", "run", "-m",
                             str(ROOT / "matrices" / "example.yaml"), "--sim", "4",
                             "--scheduler", "pigeon", "--json")
    assert code == 2 and json.loads(out)["error"]["where"]["field"] == "--scheduler"
    assert not (tmp_path / "h.db").exists()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "h.db"
    now = datetime(2026, 11, 30, tzinfo=UTC)
    with open_history(str(path)) as h:
        for name, pool in (("gpu-01", "h100"), ("gpu-02", "h100"), ("gpu-03", "a100")):
            upsert_host(h, name, pool=pool)
            record_event(h, "test.note", name, f"about {name}", at=now)
            open_quarantine(h, name, reason=f"ecc {name}", opened_by="t", at=now)
        record_event(h, "test.pool", "h100", "about the pool", at=now)
    return path


def test_quarantine_list_selects_with_limit(fleet_run: Fleet, db: Path) -> None:
    code, out, _ = fleet_run("--db", str(db), "quarantine", "list", "-l", "h100", "--json")
    assert code == 0
    assert sorted(q["host"] for q in json.loads(out)["quarantines"]) == ["gpu-01", "gpu-02"]
    code, out, _ = fleet_run("--db", str(db), "quarantine", "list", "--limit", "gpu-03", "-p",
                             "h100", "--json")
    assert sorted(q["host"] for q in json.loads(out)["quarantines"]) == [
        "gpu-01", "gpu-02", "gpu-03"]
    code, out, _ = fleet_run("--db", str(db), "quarantine", "list", "-l", "nosuch", "--json")
    assert code == 2 and json.loads(out)["error"]["where"]["field"] == "--limit"


def test_history_events_selects_with_limit(fleet_run: Fleet, db: Path) -> None:
    code, out, _ = fleet_run("--db", str(db), "history", "events", "-l", "gpu-0[12]", "--json")
    assert code == 0
    assert {e["subject"] for e in json.loads(out)["events"]} == {"gpu-01", "gpu-02"}
    code, out, _ = fleet_run("--db", str(db), "history", "events", "-l", "h100", "--json")
    assert {e["subject"] for e in json.loads(out)["events"]} == {"gpu-01", "gpu-02", "h100"}
    code, out, _ = fleet_run("--db", str(db), "history", "events", "-l", "h10O", "--json")
    assert code == 2 and "h10O" in json.loads(out)["error"]["message"]
    code, out, _ = fleet_run("--db", str(db), "history", "events", "--limit", "2", "--json")
    assert code == 0 and len(json.loads(out)["events"]) == 2  # the old spelling of --last


def test_facts_import_host_is_checked_like_inventory_names(fleet_run: Fleet,
                                                           tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    code, out, _ = fleet_run("--db", str(db), "facts", "import", str(CAPTURE), "--host",
                             "bad host;rm", "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["where"]["field"] == "--host" and "contains ' '" in err["message"]
    assert not db.exists()
