"""Open the history database: SQLite by default, any SQLAlchemy URL otherwise.

SQLite needs care to be safe with several writers (packages-and-style.md §5, verified there):
WAL so readers never block the writer, foreign keys (off by default), a busy timeout, and
`BEGIN IMMEDIATE` for write transactions: pysqlite's default deferred BEGIN loses
read-modify-write updates between processes. Read-only sessions use a plain deferred BEGIN so that
reports do not queue behind the write lock.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, exc, make_url, text
from sqlalchemy.engine import URL

from fleet.errors import BadInput, CouldNotComplete
from fleet.history.connection import READ_ONLY, History, sqlite_file, translate_errors
from fleet.history.lite import BUSY_TIMEOUT_S, file_head

__all__ = ["History", "at_head", "file_head", "open_history", "parse_target",
           "translate_errors"]


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
        path = sqlite_file(url)
        if path is not None:
            created = _check_sqlite_path(Path(path), create=create)
    else:
        engine = _server_engine(url)
    history = History(engine=engine, url=url, created=created)
    try:
        _probe_connection(history)
        if migrate and not at_head(history):
            # alembic loads only when the schema is behind (a third of a second of start-up
            # otherwise); `migrate` imports `connection`, never this module
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


def at_head(history: History) -> bool:
    """Whether the database is already at the migrations' head (cheap; False when unsure)."""
    head = file_head()
    if head is None:
        return False
    try:
        ro = history.engine.execution_options(**{READ_ONLY: True})  # no write lock
        with ro.connect() as conn:
            rows = conn.execute(text("SELECT version_num FROM alembic_version")).all()
    except exc.SQLAlchemyError:
        return False  # a new database: no alembic_version table yet
    return [r[0] for r in rows] == [head]


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
    path = sqlite_file(url)
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
        if conn.get_execution_options().get(READ_ONLY):
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


