"""Retention rules (fleet.domain.retention): a year's trend read from weekly rollups plus recent
raw samples is the trend read from the raw samples alone (property test on generated series)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.domain.matrix.models import Thresholds
from fleet.domain.retention import (
    RetentionPolicy,
    WeeklyRollup,
    expand,
    expand_all,
    roll_up,
    week_of,
)
from fleet.domain.trends import SERIES_FIELDS, WEEK_S, TrendSettings, analyze_gpu

DAY = 86400.0
NOW = 2_900 * WEEK_S  # a week boundary (2025-07): the trend's weeks are the rollups' weeks
YEAR = TrendSettings(window_weeks=52)
TH = Thresholds()
CUMULATIVE = ("ecc_corrected_volatile", "ecc_uncorrected_volatile", "ecc_corrected_aggregate",
              "ecc_uncorrected_aggregate", "retired_sbe", "retired_dbe", "remapped_corrected",
              "remapped_uncorrected", "pcie_replay", "aer_corrected", "aer_nonfatal", "aer_fatal")

UNREADABLE_TOGETHER = (("ecc_corrected_volatile", "ecc_uncorrected_volatile"),
                       ("ecc_corrected_aggregate", "ecc_uncorrected_aggregate"),
                       ("retired_sbe", "retired_dbe"),
                       ("remapped_corrected", "remapped_uncorrected"),
                       ("pcie_replay",), ("aer_corrected", "aer_nonfatal", "aer_fatal"))


def gen_series(seed: int, *, weeks: int = 53, per_day: float = 1.0, hot: bool = False,
               swap: bool = False, reset_share: float = 0.1) -> list[tuple[Any, ...]]:
    """One GPU's samples over `weeks` weeks before NOW: cumulative counters with random growth
    (bursts when `hot`), resets at a week's first sample (a weekly maintenance window) and at
    random reboots,
    Xid deltas, occasional unreadable counters, a board swap halfway when `swap`."""
    rnd = random.Random(seed)
    vals = dict.fromkeys(CUMULATIVE, 0)
    rates = {c: rnd.choice([0, 0, 1, 5, 50]) * (20 if hot and rnd.random() < 0.3 else 1)
             for c in CUMULATIVE}
    rows: list[tuple[Any, ...]] = []
    t = NOW - weeks * WEEK_S
    uuid = "GPU-a"
    boot = 0
    last_week = None
    while True:
        t += rnd.uniform(0.2, 2.0) * DAY / per_day
        if t > NOW:
            break
        w = week_of(t)
        new_week = w != last_week
        last_week = w
        if swap and uuid == "GPU-a" and t > NOW - weeks * WEEK_S / 2 and new_week:
            uuid, vals = "GPU-b", dict.fromkeys(CUMULATIVE, 0)
        reboot = rnd.random() < reset_share / 2  # any time: volatile ECC, AER, replay restart
        boot += reboot
        for c in CUMULATIVE:
            if new_week and rnd.random() < reset_share and c.endswith("volatile") or (
                    new_week and rnd.random() < reset_share / 2 and c.startswith(("aer", "pcie"))
            ) or reboot and c.endswith("volatile") or reboot and c.startswith(("aer", "pcie")):
                vals[c] = 0
            if rnd.random() < 0.4:
                vals[c] += rnd.randint(0, rates[c] * 3)
        row: dict[str, Any] = {"t": t, "uuid": uuid, **vals,
                               "boot_id": None if rnd.random() < 0.02 else f"boot-{boot}"}
        for group in UNREADABLE_TOGETHER:
            if rnd.random() < 0.02:
                for c in group:
                    row[c] = None  # could not be read this time (one query reads the group)
        row["retired_pending"] = rnd.random() < 0.05
        row["remapped_pending"] = rnd.random() < 0.05
        row["remapped_failure"] = hot and rnd.random() < 0.02
        xids = {}
        if rnd.random() < (0.2 if hot else 0.03):
            xids[str(rnd.choice([13, 31, 43, 48, 79, 94, 999]))] = rnd.randint(1, 4)
        row["xid_counts"] = xids
        rows.append(tuple(row[f] for f in SERIES_FIELDS))
    return rows


def pruned(rows: list[tuple[Any, ...]], policy: RetentionPolicy, now: float) -> \
        list[tuple[Any, ...]]:
    """What the history holds after a prune at `now`: expanded rollups, then recent raw rows."""
    cut = policy.raw_cutoff(now)
    old = [r for r in rows if r[0] <= cut]
    return expand_all(roll_up(old)) + [r for r in rows if r[0] > cut]


def trend(rows: list[tuple[Any, ...]], now: float = NOW) -> dict[str, Any]:
    return analyze_gpu("h1", "p", 0, rows, now=now, thresholds=TH, settings=YEAR).as_dict()


def assert_same_trend(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Every weekly figure (to float rounding: the sums add in another order) and every flag's
    kind, severity and quarantine proposal: the verdicts, and more."""
    exact = ("uuid", "weeks_with_data", "latest", "xid_by_class_weekly", "xid_counts",
             "severity")
    assert {k: a[k] for k in exact} == {k: b[k] for k in exact}
    for k in ("ecc_corrected_weekly", "aer_corrected_weekly", "pcie_replay_weekly"):
        assert a[k] == pytest.approx(b[k], abs=0.002), k
    assert a["ecc_uncorrected_new"] == pytest.approx(b["ecc_uncorrected_new"], abs=0.002)
    assert a["ecc_corrected_slope"] == pytest.approx(b["ecc_corrected_slope"], abs=0.002)
    verdict = [(f["kind"], f["severity"], f["quarantine"]) for f in a["flags"]]
    assert verdict == [(f["kind"], f["severity"], f["quarantine"]) for f in b["flags"]]
    for fa, fb in zip(a["flags"], b["flags"], strict=True):
        assert (fa["value"] is None) == (fb["value"] is None)
        if fb["value"] is not None:
            assert fa["value"] == pytest.approx(fb["value"], rel=1e-9, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9), per_day=st.sampled_from([0.15, 1.0, 3.0]),
       hot=st.booleans(), swap=st.booleans(), raw_weeks=st.integers(1, 26))
def test_a_year_from_rollups_reads_as_from_raw(seed: int, per_day: float, hot: bool,
                                               swap: bool, raw_weeks: int) -> None:
    rows = gen_series(seed, per_day=per_day, hot=hot, swap=swap)
    policy = RetentionPolicy(raw_weeks=raw_weeks, rollup_weeks=None)
    after = pruned(rows, policy, NOW)
    old = [r for r in rows if r[0] <= policy.raw_cutoff(NOW)]
    assert len(roll_up(old)) <= len({week_of(r[0]) for r in old}) * (2 if swap else 1)
    assert_same_trend(trend(after), trend(rows))


def test_hot_series_flags_survive_pruning() -> None:
    """The equality above is not vacuous: generated hot series do raise flags."""
    kinds: set[str] = set()
    for seed in range(30):
        rows = gen_series(seed, per_day=3.0, hot=True)
        t = trend(pruned(rows, RetentionPolicy(raw_weeks=4), NOW))
        assert_same_trend(t, trend(rows))
        kinds |= {f["kind"] for f in t["flags"]}
    assert {"xid", "ecc_uncorrectable", "remapped_rows_growing"} <= kinds


def test_unaligned_now_keeps_recent_weeks_and_verdicts() -> None:
    """Trend weeks that straddle rollup weeks: growth inside a rolled-up week is spread over
    its first-to-last sample instead of when it happened, so older weekly figures move a little;
    the weeks still held raw are exact, and these GPUs' verdicts stay but one (below)."""
    now = NOW + 3.5 * DAY
    raw_weeks = 8
    for seed in range(20):
        rows = gen_series(seed, per_day=2.0, hot=seed % 2 == 0)
        a = trend(pruned(rows, RetentionPolicy(raw_weeks=raw_weeks), now), now)
        b = trend(rows, now)
        assert a["weeks_with_data"] == b["weeks_with_data"]
        assert a["latest"] == b["latest"]
        recent = slice(-(raw_weeks - 1), None)
        for k in ("ecc_corrected_weekly", "aer_corrected_weekly", "pcie_replay_weekly"):
            assert a[k][recent] == pytest.approx(b[k][recent], abs=0.002)
        # a warning-class Xid's "n in one week" counts per trend week: rolled-up Xids sit at the
        # week's last sample, so that one verdict can move between straddling trend weeks
        def verdicts(t: dict[str, Any]) -> list[tuple[str, str]]:
            return [(f["kind"], f["severity"]) for f in t["flags"]
                    if (f["kind"], f["severity"]) != ("xid", "warn")]
        assert verdicts(a) == verdicts(b)


def test_rollup_keeps_first_last_count_and_xid_sums() -> None:
    rows = [r for r in gen_series(7, weeks=1, per_day=4.0) if week_of(r[0]) == week_of(NOW)]
    (ru,) = roll_up(rows)
    assert ru.count == len(rows) and ru.t_first == rows[0][0] and ru.t_last == rows[-1][0]
    assert ru.first == list(rows[0][2:-1]) and ru.last == list(rows[-1][2:-1])
    xid_total = sum(sum(x.values()) for x in (r[-1] for r in rows))
    assert sum(ru.xid_counts.values()) == xid_total
    assert ru.end_known == [v if v is not None else ru.end_known[i]
                            for i, v in enumerate(rows[-1][2:-1])]
    assert len(expand(ru)) <= 4 + len(ru.breaks)


def test_a_reset_inside_a_week_still_counts_its_growth() -> None:
    """100 -> 180, reset to 5, -> 30: the week grew 80 + 5 + 25, plus half of the 10 from the
    last week's 90 (that interval straddles the boundary), as the raw rows say."""
    def row(t: float, v: int) -> tuple[Any, ...]:
        d: dict[str, Any] = dict.fromkeys(SERIES_FIELDS)
        d.update(t=t, uuid="G", ecc_corrected_volatile=v, xid_counts={})
        return tuple(d[f] for f in SERIES_FIELDS)
    w0 = NOW - 2 * WEEK_S
    rows = [row(w0 - DAY, 90), row(w0 + DAY, 100), row(w0 + 3 * DAY, 180),
            row(w0 + 4 * DAY, 5), row(w0 + 6 * DAY, 30), row(NOW - DAY, 30)]
    old = [r for r in rows if r[0] <= NOW - WEEK_S]
    after = expand_all(roll_up(old)) + rows[-1:]
    assert_same_trend(trend(after), trend(rows))
    assert trend(rows)["ecc_corrected_weekly"][-2] == 115


def test_late_sample_merges_into_its_week() -> None:
    rows = [r for r in gen_series(3, weeks=1, per_day=4.0) if week_of(r[0]) == week_of(NOW)]
    a, b = roll_up(rows[: len(rows) // 2]), roll_up(rows[len(rows) // 2:])
    both: WeeklyRollup = b[0].merged(a[0])
    assert both == roll_up(rows)[0]


def test_policy_cutoffs_are_whole_weeks_and_checked() -> None:
    p = RetentionPolicy(raw_weeks=13, rollup_weeks=104)
    now = NOW + 2.5 * DAY
    assert p.raw_cutoff(now) == NOW - 13 * WEEK_S
    assert p.rollup_cutoff_week(now) == week_of(NOW - 104 * WEEK_S) + 1
    assert RetentionPolicy(raw_weeks=2, rollup_weeks=None).rollup_cutoff_week(now) is None
    with pytest.raises(ValueError, match="rollup_weeks"):
        RetentionPolicy(raw_weeks=13, rollup_weeks=4)
    with pytest.raises(ValueError, match="raw_weeks"):
        RetentionPolicy(raw_weeks=0)
