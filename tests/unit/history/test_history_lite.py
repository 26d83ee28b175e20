"""The stdlib writer `fleet probe` uses on a SQLite history stores what the ORM stores.

The same probe results are written both ways, each into its own history at the schema head with
the same earlier rows, and every table is compared row for row (ids included). Then the cases
where it must step aside (nothing written) or fail whole.
"""

from __future__ import annotations

import sqlite3
import types
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fleet.domain.checks import run_checks
from fleet.domain.facts import HostFacts
from fleet.errors import CouldNotComplete
from fleet.history import add_snapshot, latest_snapshots, list_events, open_history
from fleet.history.lite import (
    FINDING_COLUMNS,
    GPU_COLUMNS,
    EventRow,
    ProbeRow,
    sqlite_record_probe,
)
from fleet.history.models import FindingBase, GpuSampleBase
from fleet.jobs.probe import ProbeResult, _lite_row, _record
from tests.unit.probe.test_checks import EXP, gpu, healthy

T0 = datetime(2026, 11, 2, 8, 30, tzinfo=UTC)
EVENT = EventRow("probe", "all", "probed 4 host(s), 2 unreachable", {"hosts": ["a", "b"]})


def _facts(hostname: str, **gpu0: Any) -> HostFacts:
    data = healthy(gpus=[gpu(0, **gpu0), gpu(1, retired_pages_pending=True)])
    data["identity"]["hostname"] = hostname
    data["kernel_log"] = {"source": "journal", "cursor": f"s={hostname};i=9", "events": [
        {"kind": "xid", "xid": 79, "pci": "0000:19:00.0", "line": 1, "text": "Xid 79"},
        {"kind": "xid", "xid": 79, "pci": "0000:19:00.0", "line": 2, "text": "Xid 79"},
        {"kind": "xid", "xid": 13, "pci": "0000:19:00.0", "line": 3, "text": "Xid 13"},
    ]}
    return HostFacts.model_validate(data)


def _results() -> list[ProbeResult]:
    """A known host again (moves forward, changes pool), a new one with a failing GPU, a known
    host now unreachable and a new unreachable one."""
    sick = _facts("new", ecc_volatile_uncorrected=3, remapped_rows_failure=True)
    well = _facts("known")
    return [
        ProbeResult("known", "h100", True, None, well, run_checks(well, EXP)),
        ProbeResult("new", None, True, None, sick, run_checks(sick, EXP)),
        ProbeResult("gone", "a100", False, "connect timed out"),
        ProbeResult("never", None, False, "no route to host"),
    ]


def _history_with_earlier_rows(path: Path) -> None:
    with open_history(str(path)) as h:
        add_snapshot(h, "known", taken_at=T0 - timedelta(days=7), source="nvml",
                     facts={"x": 1}, pool="old-pool", gpu_model="H100", gpus=[{"gpu_index": 0}])
        add_snapshot(h, "gone", taken_at=T0 - timedelta(days=1), source="nvml", pool="a100")


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {n: conn.execute(f"SELECT * FROM {n} ORDER BY 1").fetchall() for n in names}
    finally:
        conn.close()


def _normalised(tables: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """Times taken from the clock at write (the event's, a new unreachable host's first and
    last seen) differ between two writes: checked to be recent, then blanked."""
    out = dict(tables)
    out["events"] = [(*r[:1], "<now>", *r[2:]) for r in tables["events"]]
    hosts = []
    for r in tables["hosts"]:
        if r[1] == "never":
            assert datetime.fromisoformat(r[6]).replace(tzinfo=UTC) > T0
            r = (*r[:6], "<now>", "<now>")
        hosts.append(r)
    out["hosts"] = hosts
    return out


def test_stdlib_writer_stores_what_the_orm_stores(tmp_path: Path) -> None:
    orm, lite = tmp_path / "orm.db", tmp_path / "lite.db"
    for p in (orm, lite):
        _history_with_earlier_rows(p)
    results = _results()
    with open_history(str(orm)) as h:
        _record(results, h, T0, EVENT)
    orm_ids = [r.snapshot for r in results]
    ids = sqlite_record_probe(str(lite), [_lite_row(r) for r in _results()], taken_at=T0,
                              event=EVENT)
    assert ids == orm_ids
    want, got = _tables(orm), _tables(lite)
    assert len(want["findings"]) > 5 and len(want["gpu_samples"]) == 5  # 1 earlier + 2 + 2
    assert any(r[-1] != "{}" for r in want["gpu_samples"])  # xid counts were written
    assert _normalised(got) == _normalised(want)
    with open_history(str(lite)) as h:  # and the ORM reads them back as its own
        snaps = {host.name: (host, snap) for host, snap in latest_snapshots(h)}
        host, snap = snaps["known"]
        assert (host.pool, host.gpu_count, snap.taken_at) == ("h100", 2, T0)
        assert snaps["gone"][0].last_seen == T0 - timedelta(days=1)  # unreachable: not moved
        assert [e.kind for e in list_events(h)] == ["probe"]


def test_columns_follow_the_models() -> None:
    def spec(model: type[BaseModel]) -> list[tuple[str, Any, bool]]:
        out = []
        for name, info in model.model_fields.items():
            hint, required = info.annotation, True
            if isinstance(hint, types.UnionType):  # `X | None`
                (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
                required = False
            out.append((name, typing.get_origin(hint) or hint, required))
        return out

    assert list(GPU_COLUMNS) == spec(GpuSampleBase)
    assert list(FINDING_COLUMNS) == spec(FindingBase)


def test_steps_aside_without_writing(tmp_path: Path) -> None:
    row = ProbeRow("a", "none", False, {"error": "x"})

    def write(db: str) -> list[int] | None:
        return sqlite_record_probe(db, [row], taken_at=T0, event=EVENT)

    db = tmp_path / "h.db"
    with open_history(str(db)):
        pass
    assert write(f"sqlite:///{db}") is None  # URLs take the ordinary path
    assert write(str(tmp_path / "missing.db")) is None
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "junk.db").write_text("not a database")
    assert write(str(tmp_path / "junk.db")) is None
    assert (tmp_path / "junk.db").read_text() == "not a database"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE alembic_version SET version_num = 'older'")
    conn.commit()
    conn.close()
    assert write(str(db)) is None  # not at head: the ORM path migrates first
    assert _tables(db)["snapshots"] == []


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _history_with_earlier_rows(db)
    before = _tables(db)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TRIGGER no_boom BEFORE INSERT ON findings WHEN NEW.check_id = 'boom' "
                 "BEGIN SELECT RAISE(ABORT, 'boom refused'); END")
    conn.commit()
    conn.close()
    rows = [ProbeRow("known", "nvml", True, {}, findings=[{"check_id": "fine", "severity": "ok"}]),
            ProbeRow("new", "nvml", True, {}, findings=[{"check_id": "boom", "severity": "ok"}])]
    with pytest.raises(CouldNotComplete, match="boom refused") as err:
        sqlite_record_probe(str(db), rows, taken_at=T0, event=EVENT)
    assert str(db) in str(err.value)
    after = _tables(db)
    assert {k: v for k, v in after.items() if k != "sqlite_sequence"} == {
        k: v for k, v in before.items() if k != "sqlite_sequence"}


def test_wrong_values_are_refused_before_the_transaction(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _history_with_earlier_rows(db)
    before = _tables(db)
    for bad in ({"gpu_index": True}, {"gpu_index": 0, "ecc_corrected_volatile": "3"},
                {"gpu_index": 0, "bogus": 1}, {}):
        with pytest.raises(ValueError):
            sqlite_record_probe(str(db), [ProbeRow("known", "nvml", True, {}, gpus=[bad])],
                                taken_at=T0, event=EVENT)
    with pytest.raises(ValueError, match="naive"):
        sqlite_record_probe(str(db), [], taken_at=T0.replace(tzinfo=None), event=EVENT)
    assert _tables(db) == before
