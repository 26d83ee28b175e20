"""What the trend analysis reads of the samples before its window: a GPU's last one, mostly.

Pure. `fleet.domain.trends.analyze_gpu` reads a sample taken at or before the window's start
(`TrendSettings.window_start(now)`) only to remember each counter's last readable value, the row
the first window sample is compared with, which board the series ends on (a changed UUID starts
a new series) and whether the GPU reports aggregate ECC. A year of weekly samples is 47 rows of
that per GPU; at 10,000 hosts x 8 GPUs, 3.8 M rows the database would hand to Python one by one.

`condensed` replaces those rows by the last of them (and a stand-in for the first one's board)
whenever that provably gives the same analysis, and says None when it cannot tell without the
rows in between: the history reader (`fleet.history.trend_read`) then reads that GPU in full.
It cannot tell when
- a counter the last sample could not read (NULL) is one the window reads: its remembered value
  may come from a sample in between (the groups below: a pair sum reads both counters, and the
  corrected/uncorrected ECC counter in use depends on whether any sample had the aggregate one);
- the series ends on a board that differs from its first sample's and the window never leaves
  that board: the analysis keeps only that board's samples, and where they start is in between;
- weekly rollups (`fleet.domain.retention`) do not all come before the first raw sample (the
  reader then sorts them into the raw samples by time).
Everything else in between is invisible to the analysis; tests/unit/hygiene/test_trend_prefix.py
checks the claim against the row-by-row analysis on generated series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.domain.trends import (
    AER_C,
    AER_F,
    AER_NF,
    BOOT,
    ECC_CA,
    ECC_CV,
    ECC_UA,
    ECC_UV,
    REM_C,
    REM_U,
    REPLAY,
    RET_DBE,
    RET_SBE,
    UUID,
    XID,
    T,
)

Row = Sequence[Any]

REMEMBERED_GROUPS: tuple[tuple[int, ...], ...] = (
    (ECC_CV, ECC_CA), (ECC_UV, ECC_UA), (RET_SBE, RET_DBE), (REM_C, REM_U), (AER_NF, AER_F),
    (AER_C,), (REPLAY,), (BOOT,),
)
"""Counters whose remembered values the window's arithmetic reads together."""


def board_marker(first: Row) -> tuple[Any, ...]:
    """A row with `first`'s time and board and no readable counter: it tells the analysis which
    board the series starts on without changing any remembered value."""
    return (first[T], first[UUID], *([None] * (XID - UUID - 1)), "{}")


def condensed(old: Sequence[Row], first: Row, last: Row, window: Sequence[Row], *,
              start: float, same: bool = False) -> list[Row] | None:
    """Rows `analyze_gpu` reads exactly as old + (every raw sample from `first` to `last`) +
    window, or None when the samples in between are needed.

    `old`: the GPU's rollup rows; `first`, `last`: its first and last raw sample at or before
    `start` (the window's start; `same` when they are one sample); `window`: its raw samples
    after `last`, oldest first.
    """
    if last[T] > start or first[T] > last[T]:
        raise ValueError("first and last must be samples at or before the window start, in order")
    if old and (old[-1][T] > first[T] or any(r[T] > start for r in old)):
        return None  # rollups sorted into the raw samples, or reaching into the window
    cur = window[-1][UUID] if window else last[UUID]
    head = old[0] if old else first
    if cur is not None and head[UUID] != cur and last[UUID] == cur and all(
            r[UUID] == cur for r in window):
        return None  # the current board started somewhere in between
    for group in REMEMBERED_GROUPS:  # loops, not any(): this runs for every GPU of a fleet
        for i in group:
            if last[i] is None:
                break
        else:
            continue
        for r in window:
            for i in group:
                if r[i] is not None:
                    return None  # a remembered value the window reads may come from in between
    rows: list[Row] = list(old)
    if not old and not same:
        rows.append(board_marker(first))
    rows.append(last)
    rows.extend(window)
    return rows
