"""What the history answers without SQLAlchemy or Alembic, for `fleet probe`'s start-up.

Importing `fleet.history` loads SQLAlchemy, sqlmodel and the models (about 0.3 s of CPU). The
probe needs one thing from the history before it can be sent, each host's kernel-log cursor, and
that one read is done here with the stdlib's sqlite3 when the history is a SQLite file whose
schema is at the head the migration files name; anything else (a server URL, a file not yet
created or migrated, any SQLite error) says None and the caller takes the ordinary path. The rest
of the history is loaded while the hosts run the probe.

Outside the `fleet.history` package on purpose: importing anything in it runs its `__init__`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path

_VERSIONS = Path(__file__).resolve().parent / "history" / "migrations" / "versions"
_REVISION = re.compile(r"^revision\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]\s*$", re.M)
_DOWN = re.compile(r"^down_revision\s*(?::[^=]*)?=\s*(.+?)\s*$", re.M)
_ONE = re.compile(r"^(None|['\"]([^'\"]+)['\"])$")
_CHUNK = 500  # host names per query (SQLite's bound-parameter limit is 999 on old builds)


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
            THEN json_extract(s.facts, '$.kernel_log.cursor') END
FROM hosts AS h
JOIN snapshots AS s ON s.host_id = h.id
JOIN (SELECT host_id, max(taken_at) AS taken_at FROM snapshots WHERE reachable = 1
      GROUP BY host_id) AS newest
  ON newest.host_id = s.host_id AND newest.taken_at = s.taken_at
WHERE h.name IN ({names})
ORDER BY h.name, s.id DESC
"""


def sqlite_cursors(db: str, hosts: Sequence[str]) -> dict[str, str | None] | None:
    """Each host's kernel-log cursor as `fleet.jobs.record.kernel_cursors` reads it, or None
    when `db` is not a SQLite file at the schema head (read-only: nothing is created)."""
    if "://" in db or not db.strip():
        return None
    path = Path(db).expanduser()
    head = file_head()
    if head is None or not path.is_file():
        return None
    out: dict[str, str | None] = dict.fromkeys(hosts)
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        if [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")] != [head]:
            return None
        names = list(hosts)
        for i in range(0, len(names), _CHUNK):
            part = names[i:i + _CHUNK]
            seen: set[str] = set()
            sql = _CURSORS.format(names=",".join("?" * len(part)))
            for name, _id, cursor in conn.execute(sql, part):
                if name not in seen:
                    seen.add(name)
                    out[name] = cursor if isinstance(cursor, str) else None
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return out
