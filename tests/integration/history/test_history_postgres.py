"""The same store on a real PostgreSQL server (FLEET_TEST_PG_URL), one fresh database per test."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import exc, inspect, text
from typer.testing import CliRunner

from fleet.cli.app import app
from fleet.history import (
    add_snapshot,
    count_events,
    get_host,
    gpu_samples,
    list_events,
    open_history,
    record_event,
    upsert_host,
)
from fleet.history.migrate import current_revision, head_revision, schema_diff, upgrade

pytestmark = pytest.mark.postgres

T0 = dt.datetime(2025, 3, 1, 8, 0, tzinfo=dt.UTC)


def test_migrates_to_head_and_matches_models(pg_db: str) -> None:
    with open_history(pg_db) as h:
        assert h.dialect == "postgresql"
        assert current_revision(h) == head_revision()
        assert schema_diff(h) == []  # the `alembic check` equivalent
        cols = {c["name"]: c["type"] for c in inspect(h.engine).get_columns("snapshots")}
        assert type(cols["facts"]).__name__ == "JSONB"
        assert cols["taken_at"].timezone is True  # TIMESTAMP WITH TIME ZONE
        assert upgrade(h) is False


def test_round_trip_and_json_path_query(pg_db: str) -> None:
    cest = dt.timezone(dt.timedelta(hours=2))
    with open_history(pg_db) as h:
        add_snapshot(h, "gpu01", taken_at=T0.astimezone(cest), source="nvml", pool="h100",
                     facts={"kernel": "6.1"},
                     gpus=[{"gpu_index": 0, "uuid": "GPU-a", "xid_counts": {"79": 3}}])
        [sample] = gpu_samples(h, uuid="GPU-a")
        assert sample.taken_at == T0 and sample.taken_at.utcoffset() == dt.timedelta(0)
        with h.read() as s:
            n = s.execute(text("SELECT count(*) FROM gpu_samples "
                               "WHERE (xid_counts->>'79')::int > 2")).scalar()
        assert n == 1


def test_event_log_is_append_only(pg_db: str) -> None:
    with open_history(pg_db) as h:
        record_event(h, "t", "s", "m")
        for stmt in ("UPDATE events SET message = 'x'", "DELETE FROM events",
                     "TRUNCATE events"):
            with pytest.raises(exc.DatabaseError, match="append-only"), h.write() as s:
                s.execute(text(stmt))
        assert count_events(h) == 1


def test_upsert_and_events(pg_db: str) -> None:
    with open_history(pg_db) as h:
        upsert_host(h, "gpu01", pool="h100", labels={"rack": "r1"}, seen_at=T0)
        upsert_host(h, "gpu01", labels={"rack": "r2"}, seen_at=T0 + dt.timedelta(hours=1))
        host = get_host(h, "gpu01")
        assert host is not None and host.labels == {"rack": "r2"} and host.pool == "h100"
        for i in range(3):
            record_event(h, "k", "s", f"m{i}", at=T0 + dt.timedelta(minutes=i))
        assert [e.message for e in list_events(h, limit=2)] == ["m2", "m1"]


def test_cli_against_postgres(pg_db: str) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["--db", pg_db, "history", "migrate"])
    assert r.exit_code == 0, r.output
    with open_history(pg_db) as h:
        record_event(h, "rollback", "pool a100", "incident 42", actor="carol")
    r = runner.invoke(app, ["--db", pg_db, "history", "events", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["events"][0]["actor"] == "carol"
