"""Open the history database: SQLite by default, any SQLAlchemy URL otherwise.

SQLite needs care to be safe with several writers (packages-and-style.md §5, verified there):
WAL so readers never block the writer, foreign keys (off by default), a busy timeout, and
`BEGIN IMMEDIATE` for write transactions: pysqlite's default deferred BEGIN loses
read-modify-write updates between processes. Read-only sessions use a plain deferred BEGIN so that
reports do not queue behind the write lock.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, make_url, text
from sqlalchemy.engine import URL
from sqlmodel import Session

from fleet.errors import BadInput, CouldNotComplete
from fleet.history_lite import BUSY_TIMEOUT_S, file_head

_READ_ONLY = "fleet_read_only"


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
        ro = self.engine.execution_options(**{_READ_ONLY: True})
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
            empty = _holds_nothing(path)
        except sqlite3.Error:
            return
        if empty:
            for leftover in (path, *(Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal"))):
                leftover.unlink(missing_ok=True)


def parse_target(url_or_path: str) -> URL:
    """A plain path means a SQLite file; anything with `://` is a SQLAlchemy URL."""
    text = url_or_path.strip()
    if not text:
        raise BadInput.single("empty database path or URL", field="--db")
    if "://" not in text:
        path = Path(text).expanduser()
        return URL.create("sqlite", database=str(path))
    try:
        return make_url(text)
    except exc.ArgumentError as e:
        raise BadInput.single(f"not a database URL: {e}", field="--db") from None


CREATE_HINT = ("create it with `fleet history migrate --db {path}`, or run a command that records "
               "something (`fleet probe -i INVENTORY`)")


def open_history(url_or_path: str, *, migrate: bool = True, create: bool = True) -> History:
    """Open the history and bring its schema to the latest migration.

    `create=False` is for commands that only read (reports, `check`, `status`): a SQLite file
    that does not exist is bad input naming the path and how to create it, and nothing is
    created. With `create=True` a new file is made; it is removed again if the command fails
    before recording anything (see `History.__exit__`).
    """
    url = parse_target(url_or_path)
    created: Path | None = None
    if url.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url)  # no I/O yet: connections are made on first use
        path = _sqlite_file(url)
        if path is not None:
            created = _check_sqlite_path(Path(path), create=create)
    else:
        engine = _server_engine(url)
    history = History(engine=engine, url=url, created=created)
    try:
        _probe_connection(history)
        if migrate and not at_head(history):
            from fleet.history.migrate import upgrade_if_needed

            upgrade_if_needed(history)
    except BaseException:
        engine.dispose()
        history.discard_if_empty()
        raise
    return history


def _check_sqlite_path(path: Path, *, create: bool) -> Path | None:
    """Refuse what cannot be a history file; create a new one (0600) when allowed. Returns the
    path when this call created it."""
    if path.is_dir():
        raise BadInput.single("a directory, not a history database file: give a file path "
                              "(fleet.db) or a database URL", file=str(path), field="--db")
    if path.exists():
        return None
    if not create:
        raise BadInput.single("no history database here yet: " + CREATE_HINT.format(path=path),
                              file=str(path), field="--db")
    return path if _create_private_file(path) else None


def _holds_nothing(path: Path) -> bool:
    """Whether a SQLite file has no row in any table but alembic's revision."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version'")]
        return not any(conn.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in tables)
    finally:
        conn.close()


def at_head(history: History) -> bool:
    """Whether the database is already at the migrations' head (cheap; False when unsure)."""
    head = file_head()
    if head is None:
        return False
    try:
        ro = history.engine.execution_options(**{_READ_ONLY: True})  # no write lock
        with ro.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except exc.SQLAlchemyError:
        return False  # a new database: no alembic_version table yet
    return [r[0] for r in rows] == [head]


def _sqlite_file(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def _create_private_file(path: Path) -> bool:
    """Create the database file 0600 before SQLite does (it would honour the umask, often 0644).
    True when this call created it."""
    if not path.parent.is_dir():
        raise BadInput.single(f"directory {path.parent} does not exist", file=str(path),
                              field="--db")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False  # another process won the race, or it existed: leave its mode alone
    except OSError as e:
        raise CouldNotComplete(f"cannot create history database {path}: {e.strerror}",
                               file=str(path), field="--db") from None
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


def _sqlite_engine(url: URL) -> Engine:
    path = _sqlite_file(url)
    try:
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
    except (exc.ArgumentError, exc.NoSuchModuleError) as e:
        raise BadInput.single(f"cannot use database URL: {e}", field="--db") from None

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # SQLAlchemy's begin event emits BEGIN itself
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")  # before WAL: it may wait
            cur.execute("PRAGMA foreign_keys=ON")
            if path is not None:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(_READ_ONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _server_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if url.get_backend_name() == "postgresql" and url.get_driver_name() in ("psycopg", "psycopg2"):
        connect_args["connect_timeout"] = 10
    try:
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except exc.NoSuchModuleError:
        raise BadInput.single(
            f"unsupported database URL scheme {url.drivername!r} "
            "(use a path, sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)", field="--db"
        ) from None
    except (exc.ArgumentError, ImportError) as e:
        raise BadInput.single(f"cannot use database URL: {e}", field="--db") from None


def _probe_connection(history: History) -> None:
    with translate_errors(history), history.engine.connect():
        pass


@contextmanager
def translate_errors(history: History) -> Iterator[None]:
    """Database failures become `CouldNotComplete` naming the URL (password masked)."""
    file = _sqlite_file(history.url) if history.dialect == "sqlite" else None
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
