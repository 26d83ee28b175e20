"""`fleet probe`'s history reads and writes without SQLAlchemy or Alembic, on a SQLite file.

Importing `fleet.history` loads SQLAlchemy, sqlmodel and the models: about 0.3 s of CPU, a third
of what `fleet probe` spent on the controller, and its ORM writes took another 0.08 s after the
last host answered. The probe needs two things from the history: each host's kernel-log cursor
before the probe is sent (`sqlite_cursors`), and one transaction that stores every host's
snapshot, counters, findings and the event afterwards (`sqlite_record_probe`). Both are done here
with the stdlib's sqlite3 when the history is a SQLite file whose schema is at the head the
migration files name; anything else (a server URL, a file not yet created or migrated, a file
SQLite cannot read) says None before anything is written, and the caller takes the ordinary path.

The rows written are the ORM's, column for column and byte for byte (datetimes as SQLAlchemy's
SQLite dialect stores them, JSON as `json.dumps`): tests/unit/history/test_history_lite.py writes
the same probe both ways and compares every table.

Outside the `fleet.history` package on purpose: importing anything in it runs its `__init__`.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.errors import CouldNotComplete

_VERSIONS = Path(__file__).resolve().parent / "migrations" / "versions"
_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]\s*$", re.M)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]*)?=\s*(.+?)\s*$", re.M)
_ONE = re.compile(r"^(None|['\"]([^'\"]+)['\"])$")
_CHUNK = 500  # host names per query (SQLite's bound-parameter limit is 999 on old builds)
BUSY_TIMEOUT_S = 30
"""How long a writer waits for another's transaction (the ORM engine uses the same)."""


def file_head() -> str | None:
    """The head revision read from the migration files without importing alembic (about 80 ms
    of every command that opens the history); None when the files are anything but one plain
    chain (a merge, a branch, a shape not recognised): alembic then decides."""
    revisions: set[str] = set()
    downs: set[str] = set()
    try:
        files = sorted(_VERSIONS.glob("*.py"))
        for f in files:
            src = f.read_text()
            rev, down = _REVISION.findall(src), _DOWN.findall(src)
            if not rev and not down:
                continue  # __init__.py and helpers
            if len(rev) != 1 or len(down) != 1:
                return None
            m = _ONE.fullmatch(down[0])
            if m is None:
                return None  # a tuple: a merge revision
            revisions.add(rev[0])
            if m.group(2):
                downs.add(m.group(2))
    except OSError:
        return None
    heads = revisions - downs
    return heads.pop() if len(heads) == 1 and downs <= revisions else None


# The newest reachable snapshot of each host, ties to the higher id: the same rows as
# `fleet.history.store.latest_snapshots(reachable_only=True)` (tests/unit/history compare them).
_CURSORS = """
SELECT h.name, s.id,
       CASE WHEN json_type(s.facts, '$.kernel_log.cursor') = 'text'
            THEN json_extract(s.facts, '$.kernel_log.cursor') END,
       json_type(s.facts, '$.kernel_log') = 'object'
FROM hosts AS h
JOIN snapshots AS s ON s.host_id = h.id
JOIN (SELECT host_id, max(taken_at) AS taken_at FROM snapshots WHERE reachable = 1
      GROUP BY host_id) AS newest
  ON newest.host_id = s.host_id AND newest.taken_at = s.taken_at
WHERE h.name IN ({names})
ORDER BY h.name, s.id DESC
"""
# A host whose newest reachable snapshot holds no kernel-log read (a probe that reached the host
# and failed, an imported capture) keeps the cursor of the newest one that does: the next probe
# reads from there, never the whole boot again (`fleet.jobs.record.kernel_cursors` alike).
_CURSOR_BEFORE = """
SELECT CASE WHEN json_type(s.facts, '$.kernel_log.cursor') = 'text'
            THEN json_extract(s.facts, '$.kernel_log.cursor') END
FROM snapshots AS s JOIN hosts AS h ON h.id = s.host_id
WHERE h.name = ? AND s.reachable = 1 AND json_type(s.facts, '$.kernel_log') = 'object'
ORDER BY s.taken_at DESC, s.id DESC LIMIT 1
"""


def _sqlite_file(db: str) -> tuple[Path, str] | None:
    """The file `db` names and the schema head, when `db` is a plain path to an existing file
    and the migration files are one plain chain (else the ordinary path decides)."""
    if "://" in db or not db.strip():
        return None
    path = Path(db).expanduser()
    head = file_head() if path.is_file() else None
    return (path, head) if head is not None else None


def _at_head(conn: sqlite3.Connection, head: str) -> bool:
    return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")] == [head]


def sqlite_cursors(db: str, hosts: Sequence[str]) -> dict[str, str | None] | None:
    """Each host's kernel-log cursor as `fleet.jobs.record.kernel_cursors` reads it, or None
    when `db` is not a SQLite file at the schema head (read-only: nothing is created)."""
    found = _sqlite_file(db)
    if found is None:
        return None
    path, head = found
    out: dict[str, str | None] = dict.fromkeys(hosts)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                               timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error:
        return None
    try:
        if not _at_head(conn, head):
            return None
        names = list(hosts)
        for i in range(0, len(names), _CHUNK):
            part = names[i:i + _CHUNK]
            seen: set[str] = set()
            sql = _CURSORS.format(names=",".join("?" * len(part)))
            for name, _id, cursor, has_log in conn.execute(sql, part):
                if name not in seen:
                    seen.add(name)
                    out[name] = cursor if isinstance(cursor, str) else None
                    if not has_log:
                        row = conn.execute(_CURSOR_BEFORE, (name,)).fetchone()
                        out[name] = row[0] if row and isinstance(row[0], str) else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return out


# The columns of `fleet.history.models.GpuSampleBase` and `FindingBase`, in order, with the types
# their values must have (None allowed unless marked required). A test compares them with the
# models, so a migration that changes either fails it until this is updated.
GPU_COLUMNS: tuple[tuple[str, type, bool], ...] = (
    ("gpu_index", int, True), ("uuid", str, False), ("pci_bus_id", str, False),
    ("ecc_corrected_volatile", int, False), ("ecc_uncorrected_volatile", int, False),
    ("ecc_corrected_aggregate", int, False), ("ecc_uncorrected_aggregate", int, False),
    ("retired_sbe", int, False), ("retired_dbe", int, False), ("retired_pending", bool, False),
    ("remapped_corrected", int, False), ("remapped_uncorrected", int, False),
    ("remapped_pending", bool, False), ("remapped_failure", bool, False),
    ("pcie_replay", int, False), ("aer_corrected", int, False), ("aer_nonfatal", int, False),
    ("aer_fatal", int, False), ("boot_id", str, False), ("xid_counts", dict, True),
)
FINDING_COLUMNS: tuple[tuple[str, type, bool], ...] = (
    ("check_id", str, True), ("severity", str, True), ("gpu_index", int, False),
    ("message", str, True), ("remediation", str, False), ("details", dict, True),
)
_DEFAULTS: dict[str, Any] = {"message": "", "xid_counts": {}, "details": {}}


@dataclass(frozen=True)
class ProbeRow:
    """One host's probe as `fleet.history.add_snapshot` takes it (`gpus` and `findings` are
    `fleet.domain.snapshot_rows` rows)."""

    host: str
    source: str
    reachable: bool
    facts: Mapping[str, Any]
    pool: str | None = None
    gpu_model: str | None = None
    driver_nvml: str | None = None
    driver_kmod: str | None = None
    gpus: Sequence[Mapping[str, Any]] = ()
    findings: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class EventRow:
    kind: str
    subject: str
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)


def os_actor() -> str:
    """The human behind this process: SUDO_USER when root via sudo, else the login name (the
    actor of every event; `fleet.history.events` uses this one)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid:{os.getuid()}"
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user and os.getuid() == 0 and sudo_user != user:
        return sudo_user
    return user


def require_aware(value: dt.datetime, name: str = "time") -> dt.datetime:
    """Naive datetimes are a bug in the caller: refuse them before they reach the database
    (the history layer's writers and this one's)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (UTC), got naive {value.isoformat()}")
    return value.astimezone(dt.UTC)


def _stored_time(value: dt.datetime) -> str:
    """A datetime as SQLAlchemy's SQLite dialect stores sqlmodel's `UTCDateTime`: UTC, no
    offset, always six digits of microseconds."""
    return require_aware(value).strftime("%Y-%m-%d %H:%M:%S.%f")


def _checked(row: Mapping[str, Any], columns: tuple[tuple[str, type, bool], ...],
             what: str) -> list[Any]:
    """The row's values in column order; a wrong type or a missing required value is a bug in
    the caller, refused before the transaction opens (as the ORM's models refuse it)."""
    unknown = set(row) - {name for name, _, _ in columns}
    if unknown:
        raise ValueError(f"{what}: unknown column(s) {sorted(unknown)}")
    out: list[Any] = []
    for name, kind, required in columns:
        value = row.get(name, _DEFAULTS.get(name))
        if value is None and not required:
            out.append(None)
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{what}: {name} must be {kind.__name__}, got {value!r}")
        out.append(json.dumps(value) if kind is dict else value)
    return out


@contextmanager
def _writing(path: Path, head: str) -> Iterator[sqlite3.Connection | None]:
    """One `BEGIN IMMEDIATE` transaction on `path` with the ORM engine's pragmas, committed when
    the block ends and rolled back when it raises; None (nothing opened) when the file is not a
    SQLite history in WAL mode at the schema head."""
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:
        conn = None
    if conn is None or not _begin_at_head(conn, head):
        if conn is not None:
            conn.close()
        yield None
        return
    try:
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise CouldNotComplete(f"history database {path}: {e}", file=str(path),
                                   field="--db") from e
    finally:
        conn.close()


def _begin_at_head(conn: sqlite3.Connection, head: str) -> bool:
    """Set the pragmas and open the write transaction; False (rolled back) when the file is
    not a history at the head in WAL mode, or not a database at all: the ordinary path then
    migrates it or says what is wrong with it."""
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            return False
        conn.execute("BEGIN IMMEDIATE")
        if _at_head(conn, head):
            return True
        conn.execute("ROLLBACK")
    except sqlite3.DatabaseError:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    return False


def sqlite_record_probe(db: str, rows: Sequence[ProbeRow], *, taken_at: dt.datetime,
                        event: EventRow) -> list[int] | None:
    """Store every host's probe and the event in one transaction, as `fleet probe` does through
    `fleet.history.add_snapshot` and `record_event`; the snapshot ids in `rows` order. None,
    with nothing written, when `db` is not a SQLite file at the schema head: the caller then
    writes through the ORM. A SQLite error while writing rolls everything back and is
    `CouldNotComplete` naming the file."""
    found = _sqlite_file(db)
    if found is None:
        return None
    path, head = found
    taken = _stored_time(taken_at)
    checked = [([_checked(g, GPU_COLUMNS, f"{r.host}: GPU sample") for g in r.gpus],
                [_checked(f, FINDING_COLUMNS, f"{r.host}: finding") for f in r.findings],
                json.dumps(dict(r.facts))) for r in rows]
    event_data = json.dumps(dict(event.data))
    actor = os_actor()
    with _writing(path, head) as conn:
        if conn is None:
            return None
        try:
            ids = [_write_snapshot(conn, r, taken, gpus, findings, facts)
                   for r, (gpus, findings, facts) in zip(rows, checked, strict=True)]
            conn.execute(
                "INSERT INTO events (at, actor, kind, subject, message, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (_stored_time(dt.datetime.now(dt.UTC)), actor, event.kind, event.subject,
                 event.message, event_data))
        except sqlite3.Error as e:
            raise CouldNotComplete(f"history database {path}: {e}", file=str(path),
                                   field="--db") from e
        return ids


def _write_snapshot(conn: sqlite3.Connection, r: ProbeRow, taken: str, gpus: list[list[Any]],
                    findings: list[list[Any]], facts: str) -> int:
    host_id = _upsert_host(conn, r, taken, len(gpus))
    cur = conn.execute(
        "INSERT INTO snapshots (host_id, taken_at, source, reachable, driver_nvml, driver_kmod, "
        "driver_package, release, facts) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, ?)",
        (host_id, taken, r.source, r.reachable, r.driver_nvml, r.driver_kmod, facts))
    snap = cur.lastrowid
    assert snap is not None
    names = ", ".join(name for name, _, _ in GPU_COLUMNS)
    conn.executemany(
        f"INSERT INTO gpu_samples ({names}, snapshot_id, host_id, taken_at) "
        f"VALUES ({', '.join('?' * (len(GPU_COLUMNS) + 3))})",
        [[*g, snap, host_id, taken] for g in gpus])
    names = ", ".join(name for name, _, _ in FINDING_COLUMNS)
    conn.executemany(
        f"INSERT INTO findings ({names}, snapshot_id) "
        f"VALUES ({', '.join('?' * (len(FINDING_COLUMNS) + 1))})",
        [[*f, snap] for f in findings])
    return snap


def _upsert_host(conn: sqlite3.Connection, r: ProbeRow, taken: str, gpu_count: int) -> int:
    """`fleet.history.store._upsert_host` as `add_snapshot` calls it: pool and model when
    given, the GPU count when reachable with GPUs, `last_seen` only forward and only when
    reachable; a new host is first and last seen at the probe (or now, when unreachable)."""
    fields: dict[str, Any] = {}
    if r.pool is not None:
        fields["pool"] = r.pool
    if r.gpu_model is not None:
        fields["gpu_model"] = r.gpu_model
    if r.reachable and gpu_count:
        fields["gpu_count"] = gpu_count
    found = conn.execute("SELECT id, last_seen FROM hosts WHERE name = ?", (r.host,)).fetchone()
    if found is None:
        first = taken if r.reachable else _stored_time(dt.datetime.now(dt.UTC))
        row = {"name": r.host, "pool": "", "gpu_model": None, "gpu_count": 0, "labels": "{}",
               "first_seen": first, "last_seen": first} | fields
        cur = conn.execute(f"INSERT INTO hosts ({', '.join(row)}) "
                           f"VALUES ({', '.join('?' * len(row))})", list(row.values()))
        assert cur.lastrowid is not None
        return cur.lastrowid
    host_id, last_seen = found
    if r.reachable and dt.datetime.fromisoformat(taken) > dt.datetime.fromisoformat(last_seen):
        fields["last_seen"] = taken
    if fields:
        conn.execute(f"UPDATE hosts SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
                     [*fields.values(), host_id])
    return int(host_id)
