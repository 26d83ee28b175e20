"""The trend analysis's vocabulary: sample row layout, settings, flags and reports (pure).

Split from `fleet.domain.trends` (the arithmetic and the per-GPU analysis), which re-exports all
of it: readers of the history and the hygiene job only need these shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

WEEK_S = 7 * 24 * 3600.0
CLOCK_SLACK_S = 0.002
"""Samples up to this far after `now` still count as taken at `now` (storage rounding)."""

SERIES_FIELDS: tuple[str, ...] = (
    "t",  # epoch seconds (float)
    "uuid",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "retired_sbe",
    "retired_dbe",
    "retired_pending",
    "remapped_corrected",
    "remapped_uncorrected",
    "remapped_pending",
    "remapped_failure",
    "pcie_replay",
    "aer_corrected",
    "aer_nonfatal",
    "aer_fatal",
    "boot_id",  # the host's boot when sampled: a new one resets the since-boot counters
    "xid_counts",  # JSON text or dict: {"79": 2}
)
"""Column order of one sample row as `analyze_gpu` reads it."""

(T, UUID, ECC_CV, ECC_UV, ECC_CA, ECC_UA, RET_SBE, RET_DBE, RET_PEND, REM_C, REM_U, REM_PEND,
 REM_FAIL, REPLAY, AER_C, AER_NF, AER_F, BOOT, XID) = range(len(SERIES_FIELDS))

Severity = Literal["warn", "fail"]
FlagKind = Literal[
    "ecc_corrected_rate", "ecc_corrected_rising", "ecc_uncorrectable", "retired_pages_growing",
    "retired_pages_limit", "retired_dbe_weekly", "remapped_rows_growing",
    "remapped_rows_limit", "remap_pending", "remap_failure", "pcie_replay_storm",
    "aer_correctable_storm", "aer_uncorrectable", "xid",
]


@dataclass(frozen=True)
class TrendSettings:
    """Shape of a trend (the limits themselves are the matrix's `Thresholds`)."""

    window_weeks: int = 4
    """Weeks the slope and the weekly counts cover."""
    min_weeks: int = 3
    """Weeks with data needed before growth (slope, doubling) is judged."""
    growth_floor_share: float = 0.1
    """Corrected ECC growth is judged only when the latest week reaches this share of
    `ecc_corrected_per_week_max`: noise of a few errors a week never 'doubles' into an alert."""
    doubling_factor: float = 2.0
    """The latest week at or above this multiple of the earlier weeks' mean is 'rising'."""
    relative_slope_min: float = 0.25
    """... or the least-squares slope at or above this share of the window mean per week."""
    aer_min_weekly: int = 100
    """Correctable AER errors a week below which no storm is called, whatever the median."""
    replay_min_weekly: int = 1000
    """PCIe replays a week below which no storm is called, whatever the median."""
    xid_quarantine_repeats: int = 2
    """A failing-class Xid seen this often in the window proposes quarantine."""
    xid_warn_repeats: int = 5
    """A warning-class Xid seen this often in one week is flagged."""

    @property
    def window_s(self) -> float:
        """The window's length: it starts this long before `now`."""
        return self.window_weeks * WEEK_S

    @property
    def lookback_s(self) -> float:
        """How far back to read: the window plus one more week for the baseline sample."""
        return (self.window_weeks + 1) * WEEK_S


@dataclass(frozen=True)
class TrendFlag:
    kind: FlagKind
    severity: Severity
    message: str
    quarantine: bool = False
    """Whether this flag alone justifies proposing quarantine."""
    value: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": self.severity, "message": self.message,
                "quarantine": self.quarantine, "value": self.value, "details": dict(self.details)}


@dataclass
class GpuTrend:
    """One GPU's weekly picture over the window; `flags` empty means healthy."""

    host: str
    pool: str
    gpu_index: int
    uuid: str | None
    platform: str = ""
    weeks_with_data: int = 0
    ecc_corrected_weekly: list[float] = field(default_factory=list)
    ecc_corrected_slope: float = 0.0
    ecc_uncorrected_new: float = 0.0
    aer_corrected_weekly: list[float] = field(default_factory=list)
    replay_weekly: list[float] = field(default_factory=list)
    xid_by_class_weekly: dict[str, list[int]] = field(default_factory=dict)
    xid_counts: dict[int, int] = field(default_factory=dict)
    latest: dict[str, Any] = field(default_factory=dict)
    flags: list[TrendFlag] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.host} GPU {self.gpu_index}"

    @property
    def severity(self) -> str:
        if any(f.severity == "fail" for f in self.flags):
            return "fail"
        return "warn" if self.flags else "ok"

    def score(self) -> float:
        """Ranking for 'worst GPUs': failures first, then by corrected ECC last week."""
        rank = {"fail": 2, "warn": 1, "ok": 0}[self.severity]
        last = self.ecc_corrected_weekly[-1] if self.ecc_corrected_weekly else 0.0
        return rank * 1e12 + len(self.flags) * 1e9 + last

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "pool": self.pool, "gpu_index": self.gpu_index,
            "uuid": self.uuid, "platform": self.platform,
            "weeks_with_data": self.weeks_with_data, "severity": self.severity,
            "ecc_corrected_weekly": [round(v, 3) for v in self.ecc_corrected_weekly],
            "ecc_corrected_slope": round(self.ecc_corrected_slope, 3),
            "ecc_uncorrected_new": self.ecc_uncorrected_new,
            "aer_corrected_weekly": [round(v, 3) for v in self.aer_corrected_weekly],
            "pcie_replay_weekly": [round(v, 3) for v in self.replay_weekly],
            "xid_by_class_weekly": self.xid_by_class_weekly,
            "xid_counts": {str(k): v for k, v in sorted(self.xid_counts.items())},
            "latest": self.latest,
            "flags": [f.as_dict() for f in self.flags],
        }


@dataclass
class HostTrend:
    host: str
    pool: str
    gpus: list[GpuTrend] = field(default_factory=list)

    @property
    def flags(self) -> list[tuple[int, TrendFlag]]:
        return [(g.gpu_index, f) for g in self.gpus for f in g.flags]

    @property
    def severity(self) -> str:
        sev = {g.severity for g in self.gpus}
        return "fail" if "fail" in sev else "warn" if "warn" in sev else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "severity": self.severity,
                "flags": [{"gpu_index": i, **f.as_dict()} for i, f in self.flags]}


@dataclass
class TrendReport:
    now: float
    settings: TrendSettings
    gpus: list[GpuTrend]
    medians: dict[str, dict[str, float]]
    """Per platform: median weekly AER corrected and PCIe replay (the storm baselines)."""

    def hosts(self) -> list[HostTrend]:
        by: dict[str, HostTrend] = {}
        for g in self.gpus:
            h = by.get(g.host)
            if h is None:
                h = by[g.host] = HostTrend(g.host, g.pool)
            h.gpus.append(g)
        return [by[k] for k in sorted(by)]

    def flagged(self) -> list[GpuTrend]:
        return [g for g in self.gpus if g.flags]

    def worst(self, n: int = 10) -> list[GpuTrend]:
        return sorted(self.flagged(), key=lambda g: (-g.score(), g.host, g.gpu_index))[:n]

    def pool_weekly(self) -> dict[str, dict[str, list[float]]]:
        """Per pool, the weekly sums of corrected ECC, AER corrected and Xid (for the charts)."""
        k = self.settings.window_weeks
        out: dict[str, dict[str, list[float]]] = {}
        for g in self.gpus:
            p = out.setdefault(g.pool, {"ecc_corrected": [0.0] * k, "aer_corrected": [0.0] * k,
                                        "xid": [0.0] * k})
            for key, series in (("ecc_corrected", g.ecc_corrected_weekly),
                                ("aer_corrected", g.aer_corrected_weekly)):
                for i, v in enumerate(series):
                    p[key][i] += v
            for weekly in g.xid_by_class_weekly.values():
                for i, v in enumerate(weekly):
                    p["xid"][i] += v
        return {k2: out[k2] for k2 in sorted(out)}
