"""History retention: which GPU samples to fold into weekly rollups, which rollups to expire.

Pure: rows in, rollups and cut-offs out, `now` passed in. The history adapter
(`fleet.history.retention`) runs it inside one write transaction.

Why weekly rollups keep first, last and max per counter. The trend analysis
(`fleet.domain.trends.analyze_gpu`) reads cumulative counters as differences between readings
(a drop is a reset, so the growth is the new value), Xid counts as per-probe deltas, and the
latest row for the pending/failure booleans. A week of samples therefore reduces to:
- the first reading and its time (the growth from the previous week is credited from there);
- the last reading and its time (the growth into the next week starts there);
- the maximum of each counter (so one reset inside the week still counts its growth: first ->
  max, then max -> last reads as a reset);
- the summed Xid counts and the sample count.
`expand` turns a rollup back into at most three sample rows that `analyze_gpu` reads exactly as
it reads the raw week when the trend's weeks line up with the rollup weeks (weeks end on the
epoch week grid, as `week_of` defines) and each counter resets at most once a week. When the
trend's weeks do not line up, growth inside a rolled-up week is credited to that week's end
instead of being spread over the days it happened; totals over whole weeks do not change.

Weeks are epoch-aligned and half-open on the left, like the trend buckets: week w covers
(w * WEEK_S, (w + 1) * WEEK_S].
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.trends import SERIES_FIELDS, UUID, WEEK_S, XID, T

COUNTERS: tuple[str, ...] = SERIES_FIELDS[2:XID]
"""The columns a rollup keeps first/last/max of (everything between the UUID and the Xids)."""
_FIRST_COUNTER = 2
MAX_ROW_OFFSET_S = 0.001
"""The max row sits this long before the last row (inside the week, after every real sample)."""


@dataclass(frozen=True)
class RetentionPolicy:
    """Raw samples kept `raw_weeks` whole weeks; rollups `rollup_weeks` (None: forever)."""

    raw_weeks: int = 13
    rollup_weeks: int | None = 104

    def __post_init__(self) -> None:
        if self.raw_weeks < 1:
            raise ValueError(f"raw_weeks must be at least 1, got {self.raw_weeks}")
        if self.rollup_weeks is not None and self.rollup_weeks < self.raw_weeks:
            raise ValueError(f"rollup_weeks ({self.rollup_weeks}) must be at least raw_weeks "
                             f"({self.raw_weeks}): rollups replace raw samples, never precede "
                             "them")

    def raw_cutoff(self, now: float) -> float:
        """Raw samples at or before this epoch time are rolled up and deleted.

        A week boundary, so only whole weeks are rolled up, and at least `raw_weeks` weeks
        before `now`.
        """
        return math.floor((now - self.raw_weeks * WEEK_S) / WEEK_S) * WEEK_S

    def rollup_cutoff_week(self, now: float) -> int | None:
        """Rollups of weeks below this index are deleted; None keeps them forever."""
        if self.rollup_weeks is None:
            return None
        return math.floor((now - self.rollup_weeks * WEEK_S) / WEEK_S)


def week_of(t: float) -> int:
    """The epoch week of a sample at `t`: week w covers (w weeks, w+1 weeks]."""
    return math.ceil(t / WEEK_S) - 1


@dataclass
class WeeklyRollup:
    """One GPU board's samples of one week, reduced to what the trend analysis reads."""

    week: int
    uuid: str | None
    t_first: float
    t_last: float
    count: int
    first: list[Any]
    last: list[Any]
    max: list[Any]
    xid_counts: dict[str, int] = field(default_factory=dict)
    first_known: list[Any] | None = None
    """Each counter's first reading in the week where the first sample could not read it (None
    when the first sample read them all): a GPU's very first week starts counting there."""

    def known_first(self) -> list[Any]:
        fk = self.first_known or [None] * len(self.first)
        return [f if f is not None else k for f, k in zip(self.first, fk, strict=True)]

    def merged(self, other: WeeklyRollup) -> WeeklyRollup:
        """Both rollups as one (a sample written late into a week already rolled up)."""
        a, b = (self, other) if self.t_first <= other.t_first else (other, self)
        xid = dict(a.xid_counts)
        for k, v in b.xid_counts.items():
            xid[k] = xid.get(k, 0) + v
        late = b if b.t_last >= a.t_last else a
        known = [x if x is not None else y
                 for x, y in zip(a.known_first(), b.known_first(), strict=True)]
        return WeeklyRollup(
            week=a.week, uuid=a.uuid, t_first=a.t_first, t_last=late.t_last,
            count=a.count + b.count, first=list(a.first), last=list(late.last),
            max=[_max(x, y) for x, y in zip(a.max, b.max, strict=True)], xid_counts=xid,
            first_known=known if known != a.first else None)


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _xid(raw: Any) -> dict[str, int]:
    if not raw or raw == "{}":
        return {}
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {str(k): int(v) for k, v in dict(raw).items()}


def roll_up(rows: Iterable[Sequence[Any]]) -> list[WeeklyRollup]:
    """One GPU's samples (trend tuples, oldest first) as weekly rollups, one per week and board."""
    out: dict[tuple[int, str | None], WeeklyRollup] = {}
    for r in rows:
        t = float(r[T])
        key = (week_of(t), r[UUID])
        counters = list(r[_FIRST_COUNTER:XID])
        cur = out.get(key)
        if cur is None:
            out[key] = WeeklyRollup(week=key[0], uuid=r[UUID], t_first=t, t_last=t, count=1,
                                    first=counters, last=list(counters), max=list(counters),
                                    xid_counts=_xid(r[XID]))
            continue
        one = WeeklyRollup(week=key[0], uuid=r[UUID], t_first=t, t_last=t, count=1,
                           first=counters, last=list(counters), max=list(counters),
                           xid_counts=_xid(r[XID]))
        out[key] = cur.merged(one)
    return sorted(out.values(), key=lambda x: (x.t_first, x.t_last))


def expand(rollup: WeeklyRollup) -> list[tuple[Any, ...]]:
    """A rollup as sample rows (trend tuples, oldest first) that the trend analysis reads."""
    xid = json.dumps(rollup.xid_counts, sort_keys=True) if rollup.xid_counts else "{}"
    first = (rollup.t_first, rollup.uuid, *rollup.first, "{}")
    if rollup.count == 1 or rollup.t_last == rollup.t_first:
        return [(*first[:-1], xid)]
    rows: list[tuple[Any, ...]] = [first]
    if rollup.first_known is not None:
        rows.append((rollup.t_first + MAX_ROW_OFFSET_S, rollup.uuid, *rollup.known_first(),
                     "{}"))
    # booleans are states, not counters: the max row carries the last row's states
    peak = [last if isinstance(last, bool) else m
            for m, last in zip(rollup.max, rollup.last, strict=True)]
    if peak != rollup.last and peak != rollup.first:
        t_peak = max(rollup.t_first, rollup.t_last - MAX_ROW_OFFSET_S)
        rows.append((t_peak, rollup.uuid, *peak, "{}"))
    rows.append((rollup.t_last, rollup.uuid, *rollup.last, xid))
    return rows


def expand_all(rollups: Iterable[WeeklyRollup]) -> list[tuple[Any, ...]]:
    """Every rollup of one GPU as sample rows, oldest first."""
    rows: list[tuple[Any, ...]] = []
    for r in sorted(rollups, key=lambda x: (x.t_first, x.t_last)):
        rows.extend(expand(r))
    return rows


@dataclass(frozen=True)
class PrunePlan:
    """What one prune does, computed before any row moves (also what `--dry` reports)."""

    raw_cutoff: float
    rollup_cutoff_week: int | None


def plan(policy: RetentionPolicy, now: float) -> PrunePlan:
    return PrunePlan(policy.raw_cutoff(now), policy.rollup_cutoff_week(now))
