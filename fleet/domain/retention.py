"""History retention: which GPU samples to fold into weekly rollups, which rollups to expire.

Pure: rows in, rollups and cut-offs out, `now` passed in. The history adapter
(`fleet.history.retention`) runs it inside one write transaction.

Why weekly rollups keep what they keep. The trend analysis (`fleet.domain.trends.analyze_gpu`)
reads cumulative counters as differences between readings (a drop is a reset, so the growth is
the new value; unreadable values are skipped, the last readable one remembered), Xid counts as
per-probe deltas, and the latest row for the pending/failure booleans. A week of one board's
samples therefore reduces to:
- the first sample (growth from the previous week is credited from there) and the first
  readable value of each counter the first sample could not read;
- around each reset the trend would read inside the week, the state just before it and the
  sample that reset (usually none: a reboot or driver reload resets volatile ECC, AER and replay);
- each counter's last readable value at the end of the week and the last sample (a counter's
  first, last and maximum readings in the week, with its resets, come down to these);
- the summed Xid counts and the sample count.
`expand` turns a rollup back into these few sample rows, and `analyze_gpu` reads them exactly as
it reads the raw week when the trend's weeks line up with the rollup weeks (weeks end on the
epoch week grid, as `week_of` defines). When they do not line up, growth inside a rolled-up
week is credited over its first-to-last sample instead of when it happened, and its Xids at its
last sample; totals over whole weeks do not change. A sample written late into a week already
rolled up is merged (`WeeklyRollup.merged`): exact totals unless a reset falls in between.

Weeks are epoch-aligned and half-open on the left, like the trend buckets: week w covers
(w * WEEK_S, (w + 1) * WEEK_S].
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    REM_FAIL,
    REM_PEND,
    REM_U,
    REPLAY,
    RET_DBE,
    RET_PEND,
    RET_SBE,
    SERIES_FIELDS,
    UUID,
    WEEK_S,
    XID,
    T,
)
from fleet.domain.trends import PAIR_OF as _PAIR_OF
from fleet.domain.trends import SINCE_BOOT as _SINCE_BOOT

COUNTERS: tuple[str, ...] = SERIES_FIELDS[2:XID]
"""The columns a rollup keeps first/last/max of (everything between the UUID and the Xids)."""
_FIRST_COUNTER = 2


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


_SINGLE = (ECC_CV, ECC_UV, ECC_CA, ECC_UA, AER_C, REPLAY, RET_DBE)
_PAIRS = ((RET_SBE, RET_DBE), (REM_C, REM_U), (AER_NF, AER_F))
_BOOLS = (RET_PEND, REM_PEND, REM_FAIL)
State = dict[int, Any]
"""The trend's view of a GPU: each counter's last readable value, by SERIES_FIELDS index, and
at `_TAG + index` the boot it was read in."""
_TAG = 1000


def _sum2(a: Any, b: Any) -> Any:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def _drops(state: State, r: Sequence[Any]) -> bool:
    """Whether the trend reads a reset at row `r` (its comparisons, including pair sums), or
    a drop (a lifetime counter's credits nothing), or a new boot (the counters since boot
    restart, even where they climb past their old value)."""
    for i in _SINCE_BOOT:
        if _readable(r, i) and state.get(_TAG + i) != r[BOOT]:
            return True  # read in another boot than remembered (or the first time)
    for i in _SINGLE:
        if r[i] is not None and state.get(i) is not None and r[i] < state[i]:
            return True
    for a, b in _PAIRS:
        now_s, before = _sum2(r[a], r[b]), _sum2(state.get(a), state.get(b))
        if now_s is not None and before is not None and now_s < before:
            return True
    return False


def _readable(r: Sequence[Any], i: int) -> bool:
    """Whether the trend reads (and remembers) column `i` of row `r`: a part of a summed
    counter only with its other part."""
    return r[i] is not None and (i not in _PAIR_OF or r[_PAIR_OF[i]] is not None)


def _filled(state: State, r: Sequence[Any]) -> list[Any]:
    """Counters of `r` where the trend would use its remembered value for unreadable ones."""
    return [r[i] if i in _BOOLS or i == BOOT or _readable(r, i) else
            None if i in _SINCE_BOOT and state.get(_TAG + i) != r[BOOT] else state.get(i)
            for i in range(_FIRST_COUNTER, XID)]


def padded(values: Sequence[Any], width: int = len(COUNTERS)) -> list[Any]:
    """A stored rollup list from before the boot id was kept (one column short): the boot
    unknown (None), as the samples it came from had it."""
    out = list(values)
    if len(out) == width - 1:
        out.insert(BOOT - _FIRST_COUNTER, None)
    return out


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
    end_known: list[Any]
    """Each counter's last readable value at the end of the week (the trend's memory)."""
    xid_counts: dict[str, int] = field(default_factory=dict)
    first_known: list[Any] | None = None
    """Each counter's first readable value in the week, kept when the first sample could not
    read some counter (a GPU's very first week starts counting there)."""
    breaks: list[list[Any]] = field(default_factory=list)
    """Around each reset the trend reads inside the week: [t, *counters] of the state just
    before it and of the sample that reset, so growth before and after a reset both count."""

    def merged(self, other: WeeklyRollup) -> WeeklyRollup:
        """Both rollups as one (a sample written late into a week already rolled up). Exact for
        the week's totals when no reset falls between the two; approximate otherwise."""
        a, b = (self, other) if self.t_first <= other.t_first else (other, self)
        xid = dict(a.xid_counts)
        for k, v in b.xid_counts.items():
            xid[k] = xid.get(k, 0) + v
        late = b if b.t_last >= a.t_last else a
        known = [x if x is not None else y for x, y in zip(_known(a), _known(b), strict=True)]
        return WeeklyRollup(
            week=a.week, uuid=a.uuid, t_first=a.t_first, t_last=late.t_last,
            count=a.count + b.count, first=list(a.first), last=list(late.last),
            end_known=[y if y is not None else x
                       for x, y in zip((a if late is b else b).end_known, late.end_known,
                                       strict=True)],
            xid_counts=xid, first_known=known if known != a.first else None,
            breaks=sorted(a.breaks + b.breaks, key=lambda x: x[0]))


def _known(r: WeeklyRollup) -> list[Any]:
    fk = r.first_known or [None] * len(r.first)
    return [f if f is not None else k for f, k in zip(r.first, fk, strict=True)]


def _xid(raw: Any) -> dict[str, int]:
    if not raw or raw == "{}":
        return {}
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {str(k): int(v) for k, v in dict(raw).items()}


def _week_rollup(rows: Sequence[Sequence[Any]], state: State) -> WeeklyRollup:
    """One week of one board (rows oldest first); `state` is updated to the week's end."""
    r0 = rows[0]
    first = list(r0[_FIRST_COUNTER:XID])
    breaks: list[list[Any]] = []
    xid: dict[str, int] = {}
    seen: dict[int, Any] = {}
    seen_in: dict[int, Any] = {}
    known_before = {k for k, v in state.items() if v is not None}
    for i, r in enumerate(rows):
        if i > 0 and (_drops(state, r) or r[BOOT] != rows[i - 1][BOOT] or any(
                _readable(r, k) and state.get(k) is None and r[BOOT] != r0[BOOT]
                for k in _SINCE_BOOT)):
            breaks.append([float(rows[i - 1][T]), *_filled(state, rows[i - 1])])
            if i < len(rows) - 1:
                breaks.append([float(r[T]), *r[_FIRST_COUNTER:XID]])
        for k in range(_FIRST_COUNTER, XID):
            if _readable(r, k):
                state[k] = r[k]
                state[_TAG + k] = r[BOOT]
                seen.setdefault(k, r[k])
                seen_in.setdefault(k, r[BOOT])
        for k2, v in _xid(r[XID]).items():
            xid[k2] = xid.get(k2, 0) + v
    # only counters the trend has never read (a board's first week) need their first reading;
    # the others' growth reaches the later rows from the remembered value
    # (a counter since boot first read in another boot than the first sample's is read at
    # its break instead: one row carries one boot)
    first_known = [seen.get(k) if first[k - _FIRST_COUNTER] is None and k not in known_before
                   and k != BOOT and (k not in _SINCE_BOOT or seen_in.get(k) == r0[BOOT])
                   else first[k - _FIRST_COUNTER] for k in range(_FIRST_COUNTER, XID)]
    last = rows[-1]
    return WeeklyRollup(
        week=week_of(float(r0[T])), uuid=r0[UUID], t_first=float(r0[T]), t_last=float(last[T]),
        count=len(rows), first=first, last=list(last[_FIRST_COUNTER:XID]),
        end_known=_filled(state, last), xid_counts=xid,
        first_known=first_known if first_known != first else None, breaks=breaks)


def roll_up(rows: Iterable[Sequence[Any]]) -> list[WeeklyRollup]:
    """One GPU's samples (trend tuples, oldest first) as weekly rollups, one per week and board."""
    out: list[WeeklyRollup] = []
    state: State = {}
    week: list[Sequence[Any]] = []
    for r in rows:
        swapped = bool(week) and r[UUID] != week[0][UUID]
        if week and (swapped or week_of(float(r[T])) != week_of(float(week[0][T]))):
            out.append(_week_rollup(week, state))
            week = []
            if swapped:
                state = {}  # a new board: the trend starts its series afresh
        week.append(r)
    if week:
        out.append(_week_rollup(week, state))
    return out


def expand(rollup: WeeklyRollup) -> list[tuple[Any, ...]]:
    """A rollup as sample rows (trend tuples, oldest first) that the trend analysis reads."""
    xid = json.dumps(rollup.xid_counts, sort_keys=True) if rollup.xid_counts else "{}"
    u = rollup.uuid
    if rollup.count == 1:
        return [(rollup.t_first, u, *rollup.first, xid)]
    rows: list[tuple[Any, ...]] = [(rollup.t_first, u, *rollup.first, "{}")]
    if rollup.first_known is not None:
        rows.append((rollup.t_first, u, *_known(rollup), "{}"))
    rows.extend((b[0], u, *b[1:], "{}") for b in rollup.breaks)
    if rollup.end_known != rollup.last:
        rows.append((rollup.t_last, u, *rollup.end_known, "{}"))
    rows.append((rollup.t_last, u, *rollup.last, xid))
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
