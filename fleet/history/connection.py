"""An open history database and its errors: what the engine (opening) and the migrations
(upgrading) both use, so neither imports the other's module for it.

`History` wraps the SQLAlchemy engine with short write and read transactions; `translate_errors`
turns a database failure into `CouldNotComplete` naming the database (password masked).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, exc
from sqlalchemy.engine import URL
from sqlmodel import Session

from fleet.errors import CouldNotComplete

READ_ONLY = "fleet_read_only"
"""Execution option of a read-only session: a plain deferred BEGIN (`fleet.history.engine`)."""


@dataclass
class History:
    """An open history database. Use `write()` / `read()` for short transactions."""

    engine: Engine
    url: URL
    created: Path | None = None
    """The SQLite file this open created (None when it existed, or for a server): removed
    again when the command fails before anything was recorded (`__exit__`)."""

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def display_url(self) -> str:
        """The URL with any password masked, for messages."""
        return self.url.render_as_string(hide_password=True)

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction (BEGIN IMMEDIATE on SQLite), committed on success.

        Keep it short: never hold it across SSH, sleeps or other slow work.
        """
        with translate_errors(self), Session(self.engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only transaction: does not take SQLite's write lock."""
        ro = self.engine.execution_options(**{READ_ONLY: True})
        with translate_errors(self), Session(ro, expire_on_commit=False) as s, s.begin():
            yield s

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> History:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_rest: object) -> None:
        self.close()
        if exc_type is not None:
            self.discard_if_empty()

    def discard_if_empty(self) -> None:
        """Remove the file this open created when it holds no record (a command that failed on
        bad input, after opening the history, leaves no database behind)."""
        path, self.created = self.created, None
        if path is None or not path.exists():
            return
        try:
            empty = holds_nothing(path)
        except sqlite3.Error:
            return
        if empty:
            for leftover in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))):
                leftover.unlink(missing_ok=True)


def holds_nothing(path: Path) -> bool:
    """Whether a SQLite file has no row in any table but alembic's revision."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version'")]
        return not any(conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in tables)
    finally:
        conn.close()


def sqlite_file(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


@contextmanager
def translate_errors(history: History) -> Iterator[None]:
    """Database failures become `CouldNotComplete` naming the URL (password masked)."""
    file = sqlite_file(history.url) if history.dialect == "sqlite" else None
    try:
        yield
    except exc.DatabaseError as e:  # OperationalError included
        reason = _first_line(e.orig or e)
        if file is not None and any(m in reason for m in _DAMAGED):
            raise CouldNotComplete(
                f"history database {file} is damaged or not a SQLite database ({reason}): "
                "restore it from a backup, or move it away and give --db another file",
                file=file, field="--db") from e
        if isinstance(e, exc.OperationalError):
            raise CouldNotComplete(f"history database {history.display_url}: {reason}",
                                   file=file, field="--db") from e
        raise


_DAMAGED = ("not a database", "malformed", "disk image", "file is encrypted", "corrupt")
"""SQLite's words for a file it cannot read as a database (truncated, overwritten, another
file): reported naming the file, never as an internal error."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
