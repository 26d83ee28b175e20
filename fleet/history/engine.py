"""Open the history database: SQLite by default, any SQLAlchemy URL otherwise.

SQLite needs care to be safe with several writers (packages-and-style.md §5, verified there):
WAL so readers never block the writer, foreign keys (off by default), a busy timeout, and
`BEGIN IMMEDIATE` for write transactions: pysqlite's default deferred BEGIN loses
read-modify-write updates between processes. Read-only sessions use a plain deferred BEGIN so that
reports do not queue behind the write lock.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, make_url
from sqlalchemy.engine import URL
from sqlmodel import Session

from fleet.errors import BadInput, CouldNotComplete

BUSY_TIMEOUT_S = 30
_READ_ONLY = "fleet_read_only"


@dataclass
class History:
    """An open history database. Use `write()` / `read()` for short transactions."""

    engine: Engine
    url: URL

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

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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


def open_history(url_or_path: str, *, migrate: bool = True) -> History:
    """Open (creating if needed) the history and bring its schema to the latest migration."""
    url = parse_target(url_or_path)
    engine = _sqlite_engine(url) if url.get_backend_name() == "sqlite" else _server_engine(url)
    history = History(engine=engine, url=url)
    try:
        _probe_connection(history)
        if migrate:
            from fleet.history.migrate import upgrade_if_needed

            upgrade_if_needed(history)
    except BaseException:
        engine.dispose()
        raise
    return history


def _sqlite_file(url: URL) -> str | None:
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return db


def _create_private_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would honour the umask, often 0644)."""
    if not path.parent.is_dir():
        raise BadInput.single(f"directory {path.parent} does not exist", file=str(path),
                              field="--db")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return  # another process won the race, or it existed: leave its mode alone
    except OSError as e:
        raise CouldNotComplete(f"cannot create history database {path}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _sqlite_engine(url: URL) -> Engine:
    path = _sqlite_file(url)
    if path is not None:
        _create_private_file(Path(path))
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
    try:
        yield
    except exc.OperationalError as e:
        raise CouldNotComplete(
            f"history database {history.display_url}: {_first_line(e.orig or e)}"
        ) from e
    except exc.DatabaseError as e:
        if history.dialect == "sqlite" and "not a database" in str(e.orig):
            raise CouldNotComplete(
                f"history database {history.display_url}: file is not a SQLite database"
            ) from e
        raise


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
