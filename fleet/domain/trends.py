"""Error-counter trends over weeks: ECC, page retirement, row remapping, PCIe replay, AER and Xid.

Pure: sample rows in, flags out, `now` passed in. The weekly hygiene job feeds it from the
history (`fleet.history.store.iter_gpu_series`), which streams one tuple per sample in the column
order of `SERIES_FIELDS`, grouped by GPU and ordered by time. Tuples, not objects: the scale
target is 10,000 hosts x 8 GPUs x 52 weeks in under 10 s.

Counters and resets. Most counters are cumulative: aggregate ECC (InfoROM, lifetime), retired pages
and remapped rows (persistent), volatile ECC and the PCIe replay counter (since driver load), AER
sysfs counters (since boot). A counter since boot read in another boot than its remembered value
(the samples carry the host's boot id), or one that went *down*, was reset: the growth is its new
value (it restarted from zero). A lifetime counter that goes down is a stale reading and credits
nothing; a sum with one part unreadable is unreadable (docs/hygiene.md, "How counter resets are
detected"). A changed GPU UUID at the same host and index means the board was swapped: its
counters start a new series; a board NVML renumbered is followed by UUID (`trend_boards`).
`xid_counts` are already per-probe deltas (the probe reads the kernel log from the previous
cursor), so they are summed, not differenced.

Weeks. The window is the last `window_weeks` weeks before `now`; bucket `window_weeks - 1` is the
most recent. A delta is credited to the weeks its interval overlaps, in proportion, so a missed
weekly probe does not look like a doubling.

Thresholds come from the matrix (`Thresholds`, DCGM / NHC practice, shared/reference/nvidia.md
§3-4); the trend-shape knobs (window, growth floor, doubling factor) are `TrendSettings`.
"""

from __future__ import annotations

import gc
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from fleet.domain.checks.xid import xid_catalog
from fleet.domain.matrix.models import Thresholds
from fleet.domain.trend_boards import follow_boards
from fleet.domain.trend_report import (
    AER_C,
    AER_F,
    AER_NF,
    BOOT,
    CLOCK_SLACK_S,
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
    FlagKind,
    GpuTrend,
    HostTrend,
    Severity,
    T,
    TrendFlag,
    TrendReport,
    TrendSettings,
)

# the vocabulary lives in trend_report; importers of this module find it here too
__all__ = [
    "WEEK_S", "CLOCK_SLACK_S", "SERIES_FIELDS", "Severity", "FlagKind", "TrendSettings",
    "TrendFlag", "GpuTrend", "HostTrend", "TrendReport", "T", "UUID", "ECC_CV", "ECC_UV",
    "ECC_CA", "ECC_UA", "RET_SBE", "RET_DBE", "RET_PEND", "REM_C", "REM_U", "REM_PEND",
    "REM_FAIL", "REPLAY", "AER_C", "AER_NF", "AER_F", "BOOT", "XID", "DEFAULT_SETTINGS",
    "analyze", "SINCE_BOOT", "PAIR_OF",
    "analyze_gpu", "counter_delta", "slope",
]

DEFAULT_SETTINGS = TrendSettings()  # frozen: one shared default

SINCE_BOOT = frozenset((ECC_CV, ECC_UV, REPLAY, AER_C, AER_NF, AER_F))
"""Counters that start again from zero at a boot (AER in sysfs) or a driver load (volatile ECC,
PCIe replay): a new boot id resets them, and so does a drop. The others (aggregate ECC, retired
pages, remapped rows) are lifetime counters: a drop is a stale or foreign reading, never a
reset, and credits nothing."""
PAIR_OF = {RET_SBE: RET_DBE, RET_DBE: RET_SBE, REM_C: REM_U, REM_U: REM_C, AER_NF: AER_F,
           AER_F: AER_NF}
"""The summed counters' parts: a sum is readable only when both parts are, and its parts are
remembered only from such readings (one part unreadable is unreadable, never a reset)."""


# ------------------------------------------------------------------------------ arithmetic
def slope(values: Sequence[float]) -> float:
    """Least-squares slope of values against 0..n-1 (per step); 0 for fewer than two points."""
    n = len(values)
    if n < 2:
        return 0.0
    if not any(values):
        return 0.0  # what the sums below give for all zeros, without them
    ds, den = _slope_x(n)
    ym = sum(values) / n
    num = sum(d * (v - ym) for d, v in zip(ds, values, strict=True))
    return num / den


@cache
def _slope_x(n: int) -> tuple[tuple[float, ...], float]:
    """The x offsets from their mean, and the sum of their squares, for n points."""
    xm = (n - 1) / 2.0
    return tuple(i - xm for i in range(n)), sum((i - xm) ** 2 for i in range(n))


def counter_delta(prev: float | None, cur: float | None, *, since_boot: bool = True,
                  reset: bool = False) -> float:
    """Growth of a cumulative counter between two readings. A counter since boot that was
    `reset` (a new boot) grew by its whole new value, and one that dropped was reset too; a
    lifetime counter that dropped grew by nothing (a stale reading is no reset)."""
    if prev is None or cur is None:
        return 0.0
    if since_boot and reset:
        return cur
    if cur >= prev:
        return cur - prev
    return cur if since_boot else 0.0


def _bucket(t: float, start: float, k: int) -> int:
    """The week of a sample at `t`: bucket i covers (start + i weeks, start + i+1 weeks]."""
    return min(k - 1, max(0, math.ceil((t - start) / WEEK_S) - 1))


def _spread(weekly: list[float], delta: float, t0: float, t1: float, start: float) -> None:
    """Credit `delta` (over (t0, t1]) to the weekly buckets it overlaps, in proportion."""
    if t1 <= start or delta == 0:
        return
    k = len(weekly)
    if t1 < start + k * WEEK_S:  # _bucket, inlined: this runs for every counter that moved
        b1 = math.ceil((t1 - start) / WEEK_S) - 1
        b1 = 0 if b1 < 0 else k - 1 if b1 > k - 1 else b1
    else:
        b1 = k - 1
    if t0 >= start and int((t0 - start) // WEEK_S) == b1:
        weekly[b1] += delta
        return
    span = t1 - t0
    if span <= 0:
        weekly[b1] += delta
        return
    lo = t0 if t0 > start else start
    b = int((lo - start) // WEEK_S)
    if b < 0:
        b = 0
    while b <= b1:
        w0 = start + b * WEEK_S
        w1 = w0 + WEEK_S
        overlap = (t1 if t1 < w1 else w1) - (lo if lo > w0 else w0)
        if overlap > 0:
            weekly[b] += delta * overlap / span
        b += 1


@cache
def _xid_classes() -> dict[int, str]:
    return {i: x.xid_class for i, x in xid_catalog().items()}


def _xid_dict(raw: Any) -> dict[str, int]:
    if not raw:
        return {}
    if isinstance(raw, str):
        if raw == "{}":
            return {}
        raw = json.loads(raw)
    return {str(k): int(v) for k, v in dict(raw).items()}


def _sum2(a: Any, b: Any) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


# ------------------------------------------------------------------------------ one GPU
def analyze_gpu(
    host: str,
    pool: str,
    gpu_index: int,
    rows: Sequence[Sequence[Any]],
    *,
    now: float,
    thresholds: Thresholds,
    settings: TrendSettings = DEFAULT_SETTINGS,
    platform: str = "",
) -> GpuTrend:
    """The weekly picture and per-GPU flags of one GPU's samples (oldest first).

    Fleet-relative flags (AER and replay storms against the platform median) are added by
    `analyze`; this sets the per-GPU ones.
    """
    k = settings.window_weeks
    start = now - k * WEEK_S
    # A swapped board (new UUID) starts a new series: keep only the current board's samples.
    if rows:
        cur_uuid = rows[-1][UUID]
        if cur_uuid is not None and rows[0][UUID] != cur_uuid:
            i = len(rows) - 1
            while i > 0 and rows[i - 1][UUID] == cur_uuid:
                i -= 1
            rows = rows[i:]
    # + CLOCK_SLACK_S: the history's SQLite reader rounds times to the millisecond (julianday), so
    # the sample this very run recorded at `now` can read up to 0.5 ms *after* `now`
    rows = [r for r in rows if r[T] <= now + CLOCK_SLACK_S]
    trend = GpuTrend(host, pool, gpu_index, rows[-1][UUID] if rows else None, platform=platform)
    ecc = [0.0] * k
    ecc_unc = [0.0] * k
    aer = [0.0] * k
    aer_unc = [0.0] * k
    replay = [0.0] * k
    retired = [0.0] * k
    retired_dbe = [0.0] * k
    remapped = [0.0] * k
    xid_weekly: dict[int, list[int]] = {}
    weeks_seen: set[int] = set()
    # Corrected/uncorrected ECC: the lifetime (aggregate) counter when the GPU reports it, since
    # the volatile one resets on every driver reload; volatile otherwise.
    last_row = rows[-1] if rows else None  # the usual witness, checked first
    use_agg_c = (last_row is not None and last_row[ECC_CA] is not None) or any(
        r[ECC_CA] is not None for r in rows)
    use_agg_u = (last_row is not None and last_row[ECC_UA] is not None) or any(
        r[ECC_UA] is not None for r in rows)
    ci = ECC_CA if use_agg_c else ECC_CV
    ui = ECC_UA if use_agg_u else ECC_UV
    singles = ((ci, ecc), (ui, ecc_unc), (AER_C, aer), (REPLAY, replay))
    pairs = ((RET_SBE, RET_DBE, retired), (REM_C, REM_U, remapped), (AER_NF, AER_F, aer_unc))
    remembered = (ci, ui, AER_C, REPLAY, BOOT)
    remembered_pairs = ((RET_SBE, RET_DBE), (REM_C, REM_U), (AER_NF, AER_F))
    prev_counters: Sequence[Any] | None = None  # the previous row's counters
    t0 = 0.0  # ... and its time
    last_known: list[Any] = [None] * XID  # by column: the last readable value
    read_in: list[Any] = [None] * XID  # ... and the boot it was read in (None: unknown)
    for r in rows:
        t = r[T]
        if t > start:
            b = math.ceil((t - start) / WEEK_S) - 1  # _bucket, inlined
            b = 0 if b < 0 else k - 1 if b > k - 1 else b
            weeks_seen.add(b)
            xraw = r[XID]
            if xraw and xraw != "{}":
                for key, n in _xid_dict(xraw).items():
                    xid_weekly.setdefault(int(key), [0] * k)[b] += n
        counters = r[ECC_CV:XID]
        if counters == prev_counters:
            t0 = t  # no counter moved: nothing to credit or remember (the common case)
            continue
        if prev_counters is not None and t > start:
            boot = r[BOOT]
            for idx, bucket in singles:
                before = last_known[idx]
                now_v = r[idx]
                if now_v is not None and before is not None:
                    # a counter since boot read in another boot than its remembered value
                    # restarted from zero in between, whatever it reads now
                    rebooted = boot is not None and read_in[idx] is not None and (
                        boot != read_in[idx])
                    if now_v == before and not rebooted:
                        continue
                    d = counter_delta(before, now_v, since_boot=idx in SINCE_BOOT,
                                      reset=rebooted)
                    if d:
                        _spread(bucket, d, t0, t, start)
            for i1, i2, bucket in pairs:
                a1, a2 = last_known[i1], last_known[i2]
                n1, n2 = r[i1], r[i2]
                if n1 is not None and n2 is not None and a1 is not None and a2 is not None:
                    rebooted = boot is not None and read_in[i1] is not None and (
                        boot != read_in[i1])
                    d = counter_delta(a1 + a2, n1 + n2, since_boot=i1 in SINCE_BOOT,
                                      reset=rebooted)
                    if d:
                        _spread(bucket, d, t0, t, start)
            b_dbe = last_known[RET_DBE]
            n_dbe = r[RET_DBE]
            if n_dbe is not None and b_dbe is not None and r[RET_SBE] is not None and (
                    n_dbe > b_dbe):
                _spread(retired_dbe, n_dbe - b_dbe, t0, t, start)
        for idx in remembered:
            v = r[idx]
            if v is not None:
                last_known[idx] = v
                read_in[idx] = r[BOOT]
        for i1, i2 in remembered_pairs:
            if r[i1] is not None and r[i2] is not None:
                last_known[i1] = r[i1]
                last_known[i2] = r[i2]
                read_in[i1] = read_in[i2] = r[BOOT]
        prev_counters = counters
        t0 = t
    trend.weeks_with_data = len(weeks_seen)
    trend.ecc_corrected_weekly = ecc
    trend.aer_corrected_weekly = aer
    trend.replay_weekly = replay
    trend.ecc_uncorrected_new = sum(ecc_unc)
    classes = _xid_classes()
    by_class: dict[str, list[int]] = {}
    for xid, weekly in xid_weekly.items():
        cls = classes.get(xid, "unknown")
        acc = by_class.setdefault(cls, [0] * k)
        for i, v in enumerate(weekly):
            acc[i] += v
        trend.xid_counts[xid] = sum(weekly)
    trend.xid_by_class_weekly = {c: by_class[c] for c in sorted(by_class)}
    last = rows[-1] if rows else None
    if last is not None:
        trend.latest = {
            "ecc_corrected_aggregate": last[ECC_CA], "ecc_uncorrected_aggregate": last[ECC_UA],
            "ecc_uncorrected_volatile": last[ECC_UV], "retired_sbe": last[RET_SBE],
            "retired_dbe": last[RET_DBE], "retired_pending": last[RET_PEND],
            "remapped_corrected": last[REM_C], "remapped_uncorrected": last[REM_U],
            "remapped_pending": last[REM_PEND], "remapped_failure": last[REM_FAIL],
        }
    th, st = thresholds, settings
    flags = trend.flags

    # ---- corrected ECC: weekly rate and growth
    trend.ecc_corrected_slope = slope(ecc)
    if ecc[-1] > th.ecc_corrected_per_week_max:
        flags.append(TrendFlag(
            "ecc_corrected_rate", "warn",
            f"{ecc[-1]:.0f} corrected ECC errors last week (limit "
            f"{th.ecc_corrected_per_week_max}/week)", quarantine=True, value=ecc[-1]))
    if trend.weeks_with_data >= st.min_weeks:
        floor = th.ecc_corrected_per_week_max * st.growth_floor_share
        earlier = ecc[:-1]
        mean_earlier = sum(earlier) / len(earlier) if earlier else 0.0
        mean_all = sum(ecc) / k
        doubling = ecc[-1] >= st.doubling_factor * max(mean_earlier, 1.0)
        steep = trend.ecc_corrected_slope >= st.relative_slope_min * max(mean_all, 1.0)
        if ecc[-1] >= floor and trend.ecc_corrected_slope > 0 and (doubling or steep):
            ratio = ecc[-1] / mean_earlier if mean_earlier else math.inf
            flags.append(TrendFlag(
                "ecc_corrected_rising", "warn",
                f"corrected ECC rising: {', '.join(f'{v:.0f}' for v in ecc)} per week "
                f"(slope {trend.ecc_corrected_slope:+.0f}/week"
                + (f", x{ratio:.1f} the earlier weeks" if math.isfinite(ratio) else "") + ")",
                quarantine=True, value=trend.ecc_corrected_slope,
                details={"weekly": [round(v, 1) for v in ecc],
                         "ratio": round(ratio, 2) if math.isfinite(ratio) else None}))
    # ---- uncorrectable ECC
    unc_volatile = last[ECC_UV] if last is not None else None
    if trend.ecc_uncorrected_new > th.ecc_uncorrectable_max or (
            unc_volatile is not None and unc_volatile > th.ecc_uncorrectable_max):
        n_unc = max(trend.ecc_uncorrected_new, float(unc_volatile or 0))
        flags.append(TrendFlag(
            "ecc_uncorrectable", "fail",
            f"{n_unc:.0f} uncorrectable ECC error(s) in the last {k} weeks (drain and reset; "
            "field diag if it repeats)", quarantine=True, value=n_unc))
    # ---- page retirement (pre-Ampere)
    if sum(retired) > 0:
        flags.append(TrendFlag(
            "retired_pages_growing", "warn",
            f"{sum(retired):.0f} page(s) retired in the last {k} weeks", value=sum(retired)))
    if last is not None:
        retired_total = _sum2(last[RET_SBE], last[RET_DBE])
        if retired_total is not None and retired_total >= th.retired_pages_limit:
            flags.append(TrendFlag(
                "retired_pages_limit", "fail",
                f"{retired_total} retired pages (limit {th.retired_pages_limit}): RMA triage",
                quarantine=True, value=float(retired_total)))
        dbe = last[RET_DBE]
        if dbe is not None and dbe > th.retired_pages_dbe_max and retired_dbe[-1] > 1:
            flags.append(TrendFlag(
                "retired_dbe_weekly", "fail",
                f"{dbe} DBE retired pages and {retired_dbe[-1]:.0f} new last week (DCGM: more "
                f"than {th.retired_pages_dbe_max} and more than 1 a week)",
                quarantine=True, value=retired_dbe[-1]))
    # ---- row remapping (Ampere+)
    if sum(remapped) > 0:
        flags.append(TrendFlag(
            "remapped_rows_growing", "warn",
            f"{sum(remapped):.0f} row(s) remapped in the last {k} weeks", value=sum(remapped)))
    if last is not None:
        if last[REM_U] is not None and last[REM_U] >= th.remapped_rows_uncorrectable_limit:
            flags.append(TrendFlag(
                "remapped_rows_limit", "fail",
                f"{last[REM_U]} uncorrectable remapped rows (limit "
                f"{th.remapped_rows_uncorrectable_limit}): RMA triage", quarantine=True,
                value=float(last[REM_U])))
        if last[REM_FAIL]:
            flags.append(TrendFlag(
                "remap_failure", "fail" if th.fail_on_remap_failure else "warn",
                "row remapping failure: NVIDIA's RMA criterion (field diag, then RMA)",
                quarantine=True))
        if last[REM_PEND]:
            flags.append(TrendFlag(
                "remap_pending", "fail" if th.fail_on_remap_pending else "warn",
                "row remap pending: reset the GPU at the next window to apply it"))
    # ---- uncorrectable AER on the link
    unc = sum(aer_unc)
    if unc > th.aer_uncorrectable_max:
        flags.append(TrendFlag(
            "aer_uncorrectable", "fail",
            f"{unc:.0f} uncorrectable PCIe AER error(s) in the last {k} weeks (the nvidia driver "
            "cannot recover from them)", quarantine=True, value=unc))
    # ---- Xid by class
    info = xid_catalog()
    for xid in sorted(xid_weekly):
        weekly = xid_weekly[xid]
        x = info.get(xid)
        total = sum(weekly)
        name = f"Xid {xid}" + (f" ({x.name})" if x else "")
        if x is not None and x.severity == "fail":
            flags.append(TrendFlag(
                "xid", "fail",
                f"{name} x{total} in the last {k} weeks ({x.xid_class}; {x.remediation})",
                quarantine=total >= st.xid_quarantine_repeats, value=float(total),
                details={"xid": xid, "class": x.xid_class, "weekly": weekly}))
        elif (x is None or x.severity == "warn") and max(weekly) >= st.xid_warn_repeats:
            flags.append(TrendFlag(
                "xid", "warn", f"{name} x{max(weekly)} in one week",
                value=float(max(weekly)),
                details={"xid": xid, "class": x.xid_class if x else "unknown",
                         "weekly": weekly}))
    return trend


# ------------------------------------------------------------------------------ the fleet
SeriesKey = tuple[str, str, int, str]
"""(host, pool, gpu_index, platform) of one GPU's series (`fleet.domain.trend_boards`)."""


def analyze(
    series: Iterable[tuple[SeriesKey, Sequence[Sequence[Any]]]],
    *,
    now: float,
    thresholds: Thresholds,
    settings: TrendSettings = DEFAULT_SETTINGS,
) -> TrendReport:
    """Per-GPU trends for every series, then the fleet-relative storm flags per platform.

    The cyclic garbage collector is paused while the series are read and analysed: 80,000 GPUs
    make millions of short tuples and lists, none in a cycle, and the collector's full passes
    over them were a tenth of a fleet-wide scan.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        gpus = [
            analyze_gpu(host, pool, idx, rows, now=now, thresholds=thresholds,
                        settings=settings, platform=platform)
            for (host, pool, idx, platform), rows in follow_boards(series, now=now)
        ]
    finally:
        if paused:
            gc.enable()
    medians: dict[str, dict[str, float]] = {}
    by_platform: dict[str, list[GpuTrend]] = defaultdict(list)
    for g in gpus:
        by_platform[g.platform].append(g)
    factor = thresholds.aer_correctable_fleet_factor
    for platform, members in sorted(by_platform.items()):
        aer_med = statistics.median(g.aer_corrected_weekly[-1] for g in members)
        rep_med = statistics.median(g.replay_weekly[-1] for g in members)
        medians[platform or "-"] = {"aer_corrected_weekly": aer_med, "pcie_replay_weekly": rep_med}
        aer_limit = max(factor * aer_med, float(settings.aer_min_weekly))
        rep_limit = max(factor * rep_med, float(settings.replay_min_weekly))
        for g in members:
            a = g.aer_corrected_weekly[-1]
            if a > aer_limit:
                g.flags.append(TrendFlag(
                    "aer_correctable_storm", "warn",
                    f"{a:.0f} correctable AER errors on its link last week, over {factor:g}x "
                    f"the {platform or 'fleet'} median ({aer_med:.0f}): check the slot, riser "
                    "and cable", quarantine=True, value=a,
                    details={"median": aer_med, "limit": aer_limit}))
            r = g.replay_weekly[-1]
            if r > rep_limit:
                g.flags.append(TrendFlag(
                    "pcie_replay_storm", "warn",
                    f"{r:.0f} PCIe replays last week, over {factor:g}x the "
                    f"{platform or 'fleet'} median ({rep_med:.0f})", value=r,
                    details={"median": rep_med, "limit": rep_limit}))
    gpus.sort(key=lambda g: (g.pool, g.host, g.gpu_index))
    return TrendReport(now=now, settings=settings, gpus=gpus, medians=medians)
