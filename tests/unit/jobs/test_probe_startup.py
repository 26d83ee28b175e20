"""`fleet probe`'s start-up path: cursors read with the stdlib, the matrix and history given late.

The stdlib reader must give exactly what `kernel_cursors` gives through SQLAlchemy, and say None
(so the ordinary path runs) whenever it cannot be sure.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import fleet.remote.probe_fact as probe_fact
from fleet.errors import BadInput
from fleet.history import add_snapshot, latest_snapshots, list_events, open_history
from fleet.history.lite import sqlite_cursors
from fleet.jobs.probe import probe_inventory
from fleet.jobs.record import kernel_cursors
from tests.unit.jobs.test_probe_job import local_probe_lines, write_inventory

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _snap(h: Any, host: str, minutes: int, facts: dict[str, Any], reachable: bool = True) -> None:
    add_snapshot(h, host, taken_at=T0 + timedelta(minutes=minutes), source="nvml",
                 reachable=reachable, facts=facts)


def _cursor(c: Any) -> dict[str, Any]:
    return {"kernel_log": {"cursor": c}}


def test_stdlib_cursors_equal_kernel_cursors(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    names = ["newer", "then-down", "no-log", "not-text", "tie", "log-not-dict", "never"]
    with open_history(db) as h:
        _snap(h, "newer", 0, _cursor("c1"))
        _snap(h, "newer", 5, _cursor("c2"))
        _snap(h, "then-down", 0, _cursor("kept"))
        _snap(h, "then-down", 9, {"error": "unreachable"}, reachable=False)
        _snap(h, "no-log", 0, {})
        _snap(h, "not-text", 0, _cursor(5))
        _snap(h, "tie", 0, _cursor("first"))
        _snap(h, "tie", 0, _cursor("second"))  # same time: the newer row wins
        _snap(h, "log-not-dict", 0, {"kernel_log": "x"})
        _snap(h, "other", 0, _cursor("not asked"))
        expected = kernel_cursors(h, names)
    assert expected == {"newer": "c2", "then-down": "kept", "no-log": None, "not-text": None,
                        "tie": "second", "log-not-dict": None, "never": None}
    assert sqlite_cursors(db, names) == expected
    assert sqlite_cursors(db, []) == {}


def test_a_failed_probe_keeps_the_last_good_cursor(tmp_path: Path) -> None:
    """A probe that reached the host and failed stores no kernel-log read; the next probe goes
    on from the last good cursor instead of reading the whole boot again (issue 31, 6)."""
    db = str(tmp_path / "h.db")
    names = ["failed", "imported", "failed-first"]
    with open_history(db) as h:
        _snap(h, "failed", 0, _cursor("good"))
        _snap(h, "failed", 5, _cursor("better"))
        _snap(h, "failed", 9, {"error": "probe failed: timed out after 120 s"})
        _snap(h, "failed", 12, {"error": "probe failed again"})
        _snap(h, "imported", 0, _cursor("probe"))
        _snap(h, "imported", 3, {"source": "nvidia-smi-xml", "gpus": []})
        _snap(h, "failed-first", 0, {"error": "probe failed"})
        expected = kernel_cursors(h, names)
    assert expected == {"failed": "better", "imported": "probe", "failed-first": None}
    assert sqlite_cursors(db, names) == expected


def test_stdlib_cursors_step_aside_when_unsure(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_history(str(db)) as h:
        _snap(h, "a", 0, _cursor("c"))
    assert sqlite_cursors(str(db), ["a"]) == {"a": "c"}
    assert sqlite_cursors(f"sqlite:///{db}", ["a"]) is None  # URLs take the ordinary path
    assert sqlite_cursors(str(tmp_path / "missing.db"), ["a"]) is None
    assert not (tmp_path / "missing.db").exists()  # nothing created
    (tmp_path / "junk.db").write_text("not a database")
    assert sqlite_cursors(str(tmp_path / "junk.db"), ["a"]) is None
    conn = sqlite3.connect(db)
    conn.execute("UPDATE alembic_version SET version_num = 'older'")
    conn.commit()
    conn.close()
    assert sqlite_cursors(str(db), ["a"]) is None  # not at head: migrate first


def _spy_probe_commands(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    sent: list[str | None] = []
    real = probe_fact.probe_command

    def spy(since: str | None = None, frameworks: bool = True) -> str:
        sent.append(since)
        return real(since, frameworks)

    monkeypatch.setattr(probe_fact, "probe_command", spy)
    return sent


@pytest.mark.parametrize("form", ["path", "url"])
def test_late_history_and_matrix_record_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  form: str) -> None:
    """As `fleet probe` calls it: the cursor of the existing history reaches the probe command
    and everything is recorded. A SQLite file at the schema head is read and written by the
    stdlib writer, the history layer never opened; a history that path cannot be sure of (a
    URL here; a server, or a file not at the head, alike) goes through the history layer,
    opened once, before the probe is sent (the cursors come from it)."""
    inv = write_inventory(tmp_path, local_probe_lines())
    db = str(tmp_path / "h.db") if form == "path" else f"sqlite:///{tmp_path / 'h.db'}"
    with open_history(db) as h:
        _snap(h, "@fake/gpu-01", 0, _cursor("s=abc;i=1"))
    sent = _spy_probe_commands(monkeypatch)
    opened: list[Any] = []

    def history() -> Any:
        opened.append(open_history(db))
        return opened[-1]

    results = probe_inventory(inv, ["h100"], history, now=lambda: T0, frameworks=False,
                              matrix=lambda: None, history_file=db)
    for h in opened:
        h.close()
    assert len(opened) == (0 if form == "path" else 1)
    assert sorted(r.host for r in results) == ["@fake/gpu-01", "@fake/gpu-02"]
    assert sorted(sent, key=str) == [None, "s=abc;i=1"]
    with open_history(db) as h:
        snaps = {host.name: snap for host, snap in latest_snapshots(h)}
        assert snaps["@fake/gpu-02"].taken_at.replace(tzinfo=UTC) == T0
        assert {r.snapshot for r in results} == {s.id for s in snaps.values()}
        assert [e.kind for e in list_events(h)] == ["probe"]


def test_a_bad_matrix_stops_before_the_probe_is_sent(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    inv = write_inventory(tmp_path, local_probe_lines())
    sent = _spy_probe_commands(monkeypatch)

    def matrix() -> None:
        raise BadInput.single("bad matrix", field="releases")

    with pytest.raises(BadInput):
        probe_inventory(inv, ["h100"], lambda: pytest.fail("history opened"), now=lambda: T0,
                        frameworks=False, matrix=matrix, history_file=str(tmp_path / "h.db"))
    assert sent == []
    assert not (tmp_path / "h.db").exists()


def test_fleet_probe_cli_records_twice_and_refuses_a_bad_matrix(tmp_path: Path) -> None:
    """The real command (gevent patched, matrix and checks loaded in its background thread):
    the second run reads and writes the existing file with the stdlib, without SQLAlchemy; a
    bad matrix exits 2 and creates no history."""
    import json

    from tests.conftest import run_fleet

    inv = write_inventory(tmp_path, local_probe_lines())
    db = tmp_path / "h.db"
    blocked = tmp_path / "blocked" / "sqlalchemy"  # the second run must not load the ORM
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('fleet probe loaded SQLAlchemy')\n")
    for env in ({}, {"PYTHONPATH": str(blocked.parent)}):
        done = run_fleet("--db", str(db), "probe", "-i", str(inv), "--limit", "h100",
                         "-m", "matrices/example.yaml", "--no-frameworks", "--json", env=env)
        assert done.returncode in (0, 1), done.stderr
        assert sorted(h["host"] for h in json.loads(done.stdout)["hosts"]) == [
            "@fake/gpu-01", "@fake/gpu-02"]
    with open_history(str(db)) as h:
        assert [e.kind for e in list_events(h)] == ["probe", "probe"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("releases: [\n")
    done = run_fleet("--db", str(tmp_path / "new.db"), "probe", "-i", str(inv), "--limit",
                     "h100", "-m", str(bad), "--no-frameworks", "--json")
    assert done.returncode == 2, done.stderr
    assert "bad.yaml" in done.stdout + done.stderr
    assert not (tmp_path / "new.db").exists()
