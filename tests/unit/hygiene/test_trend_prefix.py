"""The samples before the trend window condensed to the last one (fleet.domain.trend_prefix):
the analysis of the condensed rows is the analysis of every row, to the bit, on generated series
with resets, board swaps (and back), missed weeks, NULL counters and rollups."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.domain.matrix.models import Thresholds
from fleet.domain.retention import expand_all, roll_up
from fleet.domain.trend_prefix import board_marker, condensed
from fleet.domain.trends import SERIES_FIELDS, WEEK_S, XID, TrendSettings, analyze_gpu
from fleet.history.retention import with_rollups
from tests.unit.history.test_retention import NOW, gen_series

DAY = 86400.0
TH = Thresholds(ecc_corrected_per_week_max=50)
COUNTERS = SERIES_FIELDS[2:XID]


def wild_series(seed: int, weeks: int = 30) -> list[tuple[Any, ...]]:
    """Harsher than gen_series: any counter unreadable alone, for a while or for good, boards
    swapped and swapped back, UUIDs unreadable, weeks without a probe, several probes at the
    same instant."""
    rnd = random.Random(seed)
    vals = {c: rnd.randint(0, 100) for c in COUNTERS}
    dead = set(rnd.choice([(), ("retired_sbe", "retired_dbe", "retired_pending"),  # per model
                           ("remapped_corrected", "remapped_uncorrected"),
                           tuple(c for c in COUNTERS if c.startswith("ecc"))]))
    flaky = {c: rnd.random() * 0.3 if rnd.random() < 0.2 else 0.0 for c in COUNTERS}
    boards = ["GPU-x", "GPU-y", None]
    uuid = rnd.choice(boards[:2])
    rows: list[tuple[Any, ...]] = []
    boot = 0
    t = NOW - weeks * WEEK_S
    while t < NOW + DAY:
        t += rnd.choice([0.0, 0.5, 1.0, 3.0, 7.0, 7.0, 7.0, 16.0]) * DAY
        if rnd.random() < 0.08:
            uuid = rnd.choice(boards)
            if rnd.random() < 0.5:
                vals = dict.fromkeys(COUNTERS, 0)
        boot += rnd.random() < 0.1  # a reboot (read or not: the boot id can be unreadable)
        row: dict[str, Any] = {"t": t, "uuid": uuid}
        for c in COUNTERS:
            if c == "boot_id":
                vals[c] = f"boot-{boot}"
                row[c] = None if rnd.random() < 0.05 else vals[c]
                continue
            if c.endswith(("pending", "failure")):
                vals[c] = rnd.random() < 0.1
            elif rnd.random() < 0.1:
                vals[c] = rnd.randint(0, 5)  # a reset
            else:
                vals[c] += rnd.choice([0, 0, 1, 3, 40])
            row[c] = None if c in dead or rnd.random() < flaky[c] else vals[c]
        row["xid_counts"] = ({str(rnd.choice([13, 48, 79])): rnd.randint(1, 3)}
                             if rnd.random() < 0.1 else "{}")
        rows.append(tuple(row[f] for f in SERIES_FIELDS))
    return rows


def report(rows: list[Any], now: float, s: TrendSettings) -> dict[str, Any]:
    return analyze_gpu("h", "p", 0, rows, now=now, thresholds=TH, settings=s).as_dict()


def check(rows: list[tuple[Any, ...]], now: float, s: TrendSettings, split: float,
          cut: float | None = None) -> bool:
    """Analysis of everything vs the condensed rows, the way the reader builds them: rollups
    up to `cut` (when given), raw rows up to `split` condensed. True when condensing applied."""
    old = expand_all(roll_up([r for r in rows if r[0] <= cut])) if cut is not None else []
    raw = [r for r in rows if cut is None or r[0] > cut]
    full = with_rollups(old, list(raw))
    pre = [r for r in raw if r[0] <= split]
    if not pre:
        return False
    short = condensed(old, pre[0], pre[-1], raw[len(pre):], start=now - s.window_weeks * WEEK_S,
                      same=len(pre) == 1)
    if short is None:
        return False
    assert report(short, now, s) == report(full, now, s)
    return True


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9), k=st.integers(1, 6), shift=st.floats(0, 6.5),
       back=st.floats(0, 10), wild=st.booleans())
def test_condensed_rows_read_exactly_as_all_rows(seed: int, k: int, shift: float, back: float,
                                                 wild: bool) -> None:
    rows = (wild_series(seed) if wild else
            gen_series(seed, weeks=20, per_day=1.0, swap=seed % 3 == 0, reset_share=0.3))
    now = NOW + shift * DAY
    s = TrendSettings(window_weeks=k, min_weeks=min(3, k))
    start = now - k * WEEK_S
    check(rows, now, s, start - back * DAY)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9), raw_weeks=st.integers(5, 15), wild=st.booleans())
def test_condensed_after_rollups_reads_exactly_as_all_rows(seed: int, raw_weeks: int,
                                                           wild: bool) -> None:
    rows = wild_series(seed) if wild else gen_series(seed, weeks=20, swap=True)
    s = TrendSettings()
    start = NOW - s.window_weeks * WEEK_S
    check(rows, NOW, s, start - DAY, cut=NOW - raw_weeks * WEEK_S)


def test_condensing_applies_to_most_series_and_refuses_the_hard_ones() -> None:
    """Not vacuous: most generated GPUs condense; the wild ones often need their rows."""
    s = TrendSettings()
    start = NOW - 4 * WEEK_S
    tame = sum(check(gen_series(i, weeks=20, reset_share=0.3), NOW, s, start) for i in range(40))
    wild = sum(check(wild_series(i), NOW, s, start) for i in range(80))
    assert tame >= 30
    assert 5 <= wild <= 75


def _row(t: float, uuid: str | None, **kv: Any) -> tuple[Any, ...]:
    d: dict[str, Any] = dict.fromkeys(SERIES_FIELDS)
    d.update(t=t, uuid=uuid, xid_counts="{}", **kv)
    return tuple(d[f] for f in SERIES_FIELDS)


def test_a_counter_unreadable_at_the_last_sample_needs_the_rows_in_between() -> None:
    start = NOW - 4 * WEEK_S
    rows = [_row(start - 3 * WEEK_S, "G", aer_corrected=10),
            _row(start - 2 * WEEK_S, "G", aer_corrected=500),  # remembered through the gap
            _row(start - WEEK_S, "G", aer_corrected=None),
            _row(start + DAY, "G", aer_corrected=520)]
    assert condensed([], rows[0], rows[2], rows[3:], start=start) is None
    # 20 more than the remembered 500, over the 8 days from the last sample before the window
    assert report(rows, NOW, TrendSettings())["aer_corrected_weekly"][0] == pytest.approx(2.5)
    naive = [board_marker(rows[0]), rows[2], rows[3]]  # what condensing would have read
    assert report(naive, NOW, TrendSettings())["aer_corrected_weekly"][0] == 0
    # the window never reads the counter: condensing is exact
    quiet = [*rows[:3], _row(start + DAY, "G", aer_corrected=None)]
    short = condensed([], quiet[0], quiet[2], quiet[3:], start=start)
    assert short is not None and len(short) == 3
    assert report(short, NOW, TrendSettings()) == report(quiet, NOW, TrendSettings())


def test_a_board_that_started_in_between_needs_the_rows_in_between() -> None:
    start = NOW - 4 * WEEK_S
    rows = [_row(start - 3 * WEEK_S, "old", aer_corrected=900),
            _row(start - 2 * WEEK_S, "new", aer_corrected=1),
            _row(start - WEEK_S, "new", aer_corrected=2),
            _row(start + DAY, "new", aer_corrected=30)]
    assert condensed([], rows[0], rows[2], rows[3:], start=start) is None
    # swapped again inside the window: nothing before it counts, condensing is exact
    again = [*rows, _row(start + 2 * DAY, "newer", aer_corrected=0)]
    short = condensed([], again[0], again[2], again[3:], start=start)
    assert short is not None
    assert report(short, NOW, TrendSettings()) == report(again, NOW, TrendSettings())


def test_first_and_last_must_precede_the_window() -> None:
    start = NOW - 4 * WEEK_S
    r = _row(start + 1, "G")
    with pytest.raises(ValueError):
        condensed([], r, r, [], start=start, same=True)


def test_wild_series_condense_across_swaps() -> None:
    """The swap cases are exercised where condensing applies (not only refused)."""
    s = TrendSettings()
    start = NOW - 4 * WEEK_S
    swapped = 0
    for i in range(300):
        rows = wild_series(i)
        pre = [r for r in rows if r[0] <= start]
        if len({r[1] for r in rows}) > 1 and pre and check(rows, NOW, s, start):
            swapped += 1
    assert swapped >= 10


def test_analyze_pauses_the_collector_and_restores_it() -> None:
    import gc

    from fleet.domain.trends import analyze

    seen: list[bool] = []

    def series() -> Any:
        seen.append(gc.isenabled())
        yield ("h", "p", 0, ""), wild_series(1, weeks=6)

    assert gc.isenabled()
    analyze(series(), now=NOW, thresholds=TH)
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        analyze(series(), now=NOW, thresholds=TH)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
