"""The trend reader that skips what the analysis would not read: a year's trend at fleet scale.

`iter_gpu_series(..., window_start=...)` lands here. The samples inside the window are read as
the row-by-row reader reads them; of the samples at or before the window's start the database
hands over only each GPU's first and last (index seeks, not a scan), and
`fleet.domain.trend_prefix.condensed` decides whether that is enough for an exact analysis. For
a GPU where it is not (a counter unreadable at the last sample, a board that started in between),
that GPU's samples are read in full. The reports are identical to the row-by-row reader's
(tests/unit/history/test_trend_read.py, tests/integration/history/test_trend_read_postgres.py).

At 10,000 hosts x 8 GPUs x 52 weekly samples the full scan reads 80,000 first/last pairs and
320,000 window rows instead of 4.16 M rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, text

from fleet.domain.trend_prefix import condensed
from fleet.history.lite import require_aware

SPLIT_MARGIN = dt.timedelta(seconds=1)
"""The condensed samples end this long before the window: the readers' epoch times are rounded
(SQLite's julianday to the millisecond), and every condensed sample must read as before it."""

HOSTS_PER_READ = 500
"""Hosts whose samples are read per pair of queries (the first/last pairs are held per slice)."""

Key = tuple[int, int]
Row = tuple[Any, ...]


def _epoch(dialect: str, col: str) -> str:
    if dialect == "sqlite":
        return f"(julianday({col}) - 2440587.5) * 86400.0"
    return f"CAST(EXTRACT(EPOCH FROM {col}) AS DOUBLE PRECISION)"


def _cols(cols: Sequence[str], prefix: str) -> str:
    return ", ".join(f"CAST({prefix}{c} AS TEXT)" if c == "xid_counts" else prefix + c
                     for c in cols)


_GPUS = (
    "WITH RECURSIVE g(h, i) AS ("
    " SELECT id, (SELECT min(gpu_index) FROM gpu_samples WHERE host_id = hosts.id)"
    " FROM hosts WHERE id BETWEEN :lo AND :hi"
    " UNION ALL"
    " SELECT g.h, (SELECT min(gpu_index) FROM gpu_samples"
    "  WHERE host_id = g.h AND gpu_index > g.i) FROM g WHERE g.i IS NOT NULL)"
)
"""The GPUs of hosts lo..hi: a loose index scan, one seek per GPU on the (host, gpu, time)
index, never a read of every sample."""


def _ends_sql(dialect: str, cols: Sequence[str], since: bool) -> str:
    """Each GPU's first and last sample in [since, split]: one row per GPU.

    On PostgreSQL as LATERAL subqueries: joined by id, the planner (which cannot estimate the
    recursive GPU list) hashed the whole sample table twice.
    """
    lo = "AND s.taken_at >= :since " if since else ""
    where = f"s.host_id = g.h AND s.gpu_index = g.i {lo}AND s.taken_at <= :split"
    if dialect != "sqlite":  # every GPU of the slice, with NULLs where none precedes the window
        return (
            f"{_GPUS} SELECT g.h, g.i, f.id, {_epoch(dialect, 'f.taken_at')}, f.uuid,"
            f" b.id, {_epoch(dialect, 'b.taken_at')}, {_cols(cols, 'b.')} FROM g"
            f" LEFT JOIN LATERAL (SELECT s.id, s.taken_at, s.uuid FROM gpu_samples s"
            f"  WHERE {where} ORDER BY s.taken_at, s.id LIMIT 1) f ON true"
            f" LEFT JOIN LATERAL (SELECT * FROM gpu_samples s"
            f"  WHERE {where} ORDER BY s.taken_at DESC, s.id DESC LIMIT 1) b ON true"
            " WHERE g.i IS NOT NULL"
        )
    pick = (f"SELECT s.id FROM gpu_samples s WHERE {where}"
            " ORDER BY s.taken_at {d}, s.id {d} LIMIT 1")
    return (
        f"{_GPUS} SELECT x.h, x.i, f.id, {_epoch(dialect, 'f.taken_at')}, f.uuid,"
        f" b.id, {_epoch(dialect, 'b.taken_at')}, {_cols(cols, 'b.')}"
        f" FROM (SELECT g.h, g.i, ({pick.format(d='ASC')}) AS fid,"
        f"  ({pick.format(d='DESC')}) AS bid FROM g WHERE g.i IS NOT NULL) x"
        " JOIN gpu_samples f ON f.id = x.fid JOIN gpu_samples b ON b.id = x.bid"
    )


def _window_sql(dialect: str, cols: Sequence[str], until: bool) -> str:
    """The samples after the split of hosts lo..hi, in (host, gpu, time) order.

    On PostgreSQL per GPU through LATERAL (index range scans) over the GPUs the first/last query
    found: a plain range query was planned as a scan of the whole table for every slice.
    """
    hi = " AND taken_at <= :until" if until else ""
    if dialect == "sqlite":
        return _rows_sql(dialect, cols, f"host_id BETWEEN :lo AND :hi AND taken_at > :split{hi}")
    return (  # the GPUs the first/last query listed, passed back as two arrays
        f"SELECT g.h, g.i, {_epoch(dialect, 'w.taken_at')}, {_cols(cols, 'w.')}"
        " FROM unnest(CAST(:hs AS integer[]), CAST(:gs AS integer[])) AS g(h, i)"
        " CROSS JOIN LATERAL (SELECT * FROM gpu_samples s WHERE s.host_id = g.h"
        f"  AND s.gpu_index = g.i AND s.taken_at > :split{hi.replace('taken_at', 's.taken_at')}"
        "  OFFSET 0) w"  # a fence: per GPU by the index, never merged into one table scan
        " ORDER BY g.h, g.i, w.taken_at, w.id"
    )


def _rows_sql(dialect: str, cols: Sequence[str], where: str) -> str:
    return (f"SELECT host_id, gpu_index, {_epoch(dialect, 'taken_at')}, {_cols(cols, '')}"
            f" FROM gpu_samples WHERE {where} ORDER BY host_id, gpu_index, taken_at, id")


def iter_condensed(
    conn: Connection,
    dialect: str,
    *,
    names: Mapping[Any, tuple[str, str, str]],
    old: dict[Key, list[Row]],
    cols: Sequence[str],
    window_start: dt.datetime,
    since: dt.datetime | None,
    until: dt.datetime | None,
    batch: int,
) -> Iterator[tuple[tuple[str, str, int, str], list[Row]]]:
    """The series of `fleet.history.store.iter_gpu_series`, samples before the window condensed.

    `names`: host id -> (name, pool, model) of the hosts wanted; `old`: rollup rows per GPU
    (consumed). Runs inside the caller's read transaction.
    """
    from fleet.history.retention import with_rollups

    start = require_aware(window_start, "window_start")
    split = start - SPLIT_MARGIN
    params: dict[str, Any] = {"split": _bind(conn, split)}
    if since is not None:
        params["since"] = _bind(conn, require_aware(since, "since"))
    if until is not None:
        params["until"] = _bind(conn, require_aware(until, "until"))
    start_t = start.timestamp()

    def run(sql: str, values: dict[str, Any]) -> Any:
        """A cursor with fetchmany; SQLite's straight on the DBAPI connection (SQLAlchemy's
        result layer would double the time of a long read)."""
        if dialect == "sqlite":
            cur = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cur.execute(sql, values)
            return cur
        return conn.execution_options(stream_results=True).execute(text(sql), values)

    ends: dict[Key, tuple[Row, Row, bool]] = {}

    def full_prefix(key: Key) -> list[Row]:
        lo = " AND taken_at >= :since" if since is not None else ""
        q = _rows_sql(dialect, cols, f"host_id = :h AND gpu_index = :i{lo} AND taken_at <= :split")
        return [tuple(r[2:]) for r in
                run(q, {**params, "h": key[0], "i": key[1]}).fetchall()]

    def series(key: Key, window: list[Row]) -> list[Row]:
        gpu_old = old.pop(key, None) or []
        e = ends.pop(key, None)
        if e is None:
            return with_rollups(gpu_old, window)
        first, last, same = e
        rows = condensed(gpu_old, first, last, window, start=start_t, same=same)
        if rows is None:
            return with_rollups(gpu_old, full_prefix(key) + window)
        return cast("list[Row]", rows)  # tuples all: the reader's and board_marker's

    def label(key: Key) -> tuple[str, str, int, str]:
        n = names[key[0]]
        return n[0], n[1], key[1], n[2]

    ends_sql = _ends_sql(dialect, cols, since is not None)
    rows_sql = _window_sql(dialect, cols, until is not None)
    plain = dialect == "sqlite"  # rows are tuples already
    ids = sorted(names)
    step = HOSTS_PER_READ
    for c in range(0, len(ids), step):  # a slice of hosts at a time: flat memory
        span = {**params, "lo": ids[c], "hi": ids[min(c + step, len(ids)) - 1]}
        # each GPU's (first sample's time and board, last sample, whether they are one)
        gpus = []
        for r in run(ends_sql, span).fetchall():
            gpus.append((r[0], r[1]))
            if r[0] in names and r[2] is not None:
                ends[(r[0], r[1])] = ((r[3], r[4]), tuple(r[6:]), r[2] == r[5])
        if not plain:
            span["hs"], span["gs"] = [g[0] for g in gpus], [g[1] for g in gpus]
        cursor = run(rows_sql, span)
        key: Key | None = None
        rows: list[Row] = []
        pending = sorted(ends)  # GPUs with samples before the window, in key order
        p = 0
        h = i = None
        while True:
            chunk = cursor.fetchmany(batch)
            if not chunk:
                break
            for r in chunk:
                if r[1] != i or r[0] != h:
                    h, i = r[0], r[1]
                    k = (h, i)
                    if key is not None and key[0] in names:
                        yield label(key), series(key, rows)
                    while p < len(pending) and pending[p] < k:  # no window samples
                        if pending[p] in ends:
                            yield label(pending[p]), series(pending[p], [])
                        p += 1
                    key, rows = k, []
                rows.append(r[2:] if plain else tuple(r[2:]))
        if key is not None and key[0] in names:
            yield label(key), series(key, rows)
        for k in pending[p:]:
            if k in ends:
                yield label(k), series(k, [])
    for k, only_old in sorted(old.items()):
        if k[0] in names:  # every raw sample of this GPU pruned: its rollups alone
            yield label(k), only_old


def _bind(conn: Connection, value: dt.datetime) -> Any:
    """A time as the gpu_samples.taken_at column stores it (text on SQLite)."""
    from fleet.history.models import GpuSample

    col = GpuSample.__table__.c.taken_at  # type: ignore[attr-defined]
    proc = col.type._cached_bind_processor(conn.dialect)
    return proc(value) if proc else value

