"""Pure domain: drift audit cases, trend arithmetic (resets, swaps, missed weeks), breaker."""

from __future__ import annotations

from fleet.domain.drift import DriftInput, audit_host, unattended_excluded
from fleet.domain.matrix.models import Thresholds
from fleet.domain.pinning import unattended_blacklist
from fleet.domain.quarantine import limit_for, propose
from fleet.domain.trends import (
    SERIES_FIELDS,
    WEEK_S,
    HostTrend,
    TrendFlag,
    analyze_gpu,
    counter_delta,
    slope,
)
from fleet.history.store import SERIES_COLUMNS
from tests.unit.hygiene.fakes import FakeHost, example_matrix

M = example_matrix()
NOW = 1_800_000_000.0


def drift_of(h: FakeHost, **kw):
    return audit_host(DriftInput(h.name, h.pool, h.reachable, h.facts() if h.reachable else None,
                                 **kw), M)


def host(pool: str = "h100", **kw) -> FakeHost:
    return FakeHost("gpu-01", pool, M.golden_for(pool), **kw)


def test_conformant_golden_host() -> None:
    d = drift_of(host())
    assert d.conformant and d.release == "r580-cuda13.0" and not d.behind_golden, d.differences


def test_allowed_release_is_conformant_but_behind_golden() -> None:
    d = drift_of(FakeHost("gpu-01", "h100", M.release("r570-cuda12.8")))
    assert d.conformant and d.behind_golden and d.release == "r570-cuda12.8"


def test_wrong_driver() -> None:
    h = host()
    h.kmod = h.lib = "535.183.01"
    h.package_versions = {"nvidia-driver-580-open": "535.183.01-1",
                          "nvidia-utils-580": "535.183.01-1"}
    d = drift_of(h)
    assert not d.conformant and d.release is None
    texts = [str(x) for x in d.differences]
    assert "driver: have 535.183.01, want 580.95.05 (golden r580-cuda13.0; also allowed: " \
           "570.133.20, 595.58.03)" in texts
    assert "driver: have 535.183.01, want 580.95.05 (nvidia-driver-580-open)" in texts


def test_unheld_package() -> None:
    d = drift_of(host(held=False))
    assert not d.conformant
    assert "nvidia-driver-580-open hold: have not held, want held (apt-mark hold)" in [
        str(x) for x in d.differences]


def test_three_way_mismatch() -> None:
    d = drift_of(host(kmod="570.133.20"))
    assert not d.conformant
    assert str(d.differences[0]) == ("driver (three-way): have NVML 580.95.05, kernel module "
                                     "570.133.20, package 580.95.05, want one version (reboot "
                                     "if the package is newer than the loaded module)")


def test_unreachable_fails_closed() -> None:
    h = host()
    h.reachable = False
    d = audit_host(DriftInput(h.name, h.pool, False, None, "ssh: timed out"), M)
    assert not d.conformant
    assert [str(x) for x in d.differences] == ["reachable: have no, want yes (ssh: timed out)"]


def test_unattended_exclusion_checked_when_reported() -> None:
    specs = M.golden_for("h100").packages("debian")
    full = unattended_excluded(unattended_blacklist(specs))
    assert full == {s.name for s in specs}
    assert drift_of(host(), unattended_excluded=full).conformant
    partial = frozenset(full - {"tensorrt"})
    d = drift_of(host(), unattended_excluded=partial)
    assert [str(x) for x in d.differences] == [
        "unattended-upgrades: have not excluded: tensorrt, want excluded"]


def test_unattended_exclusion_read_from_the_probe_or_not_conformant() -> None:
    """Issue 31, defect 12: the probe's upgrade guard is judged; none reported is unverified."""
    h = host()
    h.guard = False  # the probe found no blacklist naming the release's packages
    d = drift_of(h)
    assert not d.conformant
    assert [x.component for x in d.differences] == ["unattended-upgrades"]
    unreported = h.facts().model_copy(update={"upgrade_guard": None})
    d = audit_host(DriftInput(h.name, h.pool, True, unreported), M)
    assert not d.conformant and "not reported" in d.differences[0].have


def test_dnf_automatic_guard_is_judged_on_rhel() -> None:
    from fleet.domain.facts import HostFacts
    from fleet.domain.pinning import with_dnf_automatic_guard

    rel = M.golden_for("h100")
    items = [{"name": s.name, "version": s.version + "-1.el9", "held": True}
             for s in rel.packages("rhel")]

    def facts(guard: object) -> HostFacts:
        doc = host().facts().model_dump(mode="json", by_alias=True)
        doc["versions"]["packages"] = {"manager": "rpm", "items": items}
        doc["upgrade_guard"] = guard
        return HostFacts.model_validate(doc)

    guarded = with_dnf_automatic_guard("[base]\napply_updates = no\n", rel.packages("rhel"))
    ok = audit_host(DriftInput("gpu-01", "h100", True, facts({"dnf_automatic": guarded})), M)
    assert not any(x.component == "dnf-automatic" for x in ok.differences), ok.differences
    bare = audit_host(DriftInput("gpu-01", "h100", True, facts(
        {"dnf_automatic": "[base]\napply_updates = yes\n"})), M)
    assert any(x.component == "dnf-automatic" for x in bare.differences)


def test_blocked_driver_is_drift() -> None:
    h = host()
    h.kmod = h.lib = "580.82.07"
    d = drift_of(h)
    assert any("blocked" in x.detail for x in d.differences)


# ------------------------------------------------------------------------------ trends
def test_series_columns_match() -> None:
    assert ("t", *SERIES_COLUMNS) == SERIES_FIELDS


def row(t: float, **kw: object) -> tuple[object, ...]:
    base = dict.fromkeys(SERIES_FIELDS)
    base.update(t=t, uuid="GPU-1", xid_counts="{}")
    base.update(kw)
    return tuple(base[f] for f in SERIES_FIELDS)


def weeks(values: list[dict[str, object]], start_weeks_ago: int) -> list[tuple[object, ...]]:
    return [row(NOW - (start_weeks_ago - i) * WEEK_S, **v) for i, v in enumerate(values)]


def test_counter_delta_and_slope() -> None:
    assert counter_delta(10, 15) == 5
    assert counter_delta(15, 3) == 3  # reset: it restarted from zero
    assert counter_delta(None, 3) == 0
    assert slope([1, 2, 3, 4]) == 1.0
    assert slope([5]) == 0.0


def test_volatile_counter_reset_is_not_negative() -> None:
    # volatile corrected ECC only (no aggregate), driver reloaded in week 3: 100 -> 4
    vals = [{"ecc_corrected_volatile": v} for v in (0, 50, 100, 4, 10)]
    g = analyze_gpu("h", "p", 0, weeks(vals, 4), now=NOW, thresholds=Thresholds())
    assert g.ecc_corrected_weekly == [50, 50, 4, 6]
    assert not g.flags


def test_aer_reset_after_reboot_does_not_storm_or_go_negative() -> None:
    vals = [{"aer_corrected": v} for v in (0, 10, 20, 1, 3)]
    g = analyze_gpu("h", "p", 0, weeks(vals, 4), now=NOW, thresholds=Thresholds())
    assert g.aer_corrected_weekly == [10, 10, 1, 2]


def test_board_swap_starts_new_series() -> None:
    rows = weeks([{"ecc_corrected_aggregate": v} for v in (0, 900, 5000)], 4)
    rows += [row(NOW - WEEK_S, uuid="GPU-2", ecc_corrected_aggregate=7),
             row(NOW, uuid="GPU-2", ecc_corrected_aggregate=9)]
    g = analyze_gpu("h", "p", 0, rows, now=NOW, thresholds=Thresholds())
    assert g.uuid == "GPU-2" and g.ecc_corrected_weekly == [0, 0, 0, 2]


def test_missed_probe_is_spread_not_doubled() -> None:
    # steady 300/week, but the probe two weeks ago was missed: 600 arrives at once
    rows = [row(NOW - 4 * WEEK_S, ecc_corrected_aggregate=0),
            row(NOW - 3 * WEEK_S, ecc_corrected_aggregate=300),
            row(NOW - 1 * WEEK_S, ecc_corrected_aggregate=900),
            row(NOW, ecc_corrected_aggregate=1200)]
    g = analyze_gpu("h", "p", 0, rows, now=NOW, thresholds=Thresholds())
    assert g.ecc_corrected_weekly == [300, 300, 300, 300]
    assert not g.flags


def test_this_runs_sample_counts_though_storage_rounds_it_past_now() -> None:
    """SQLite's julianday rounds the stored time to the millisecond: the sample the hygiene run
    recorded at `now` reads back up to 0.5 ms later, and must still be this week's (found on
    the lab: the week's whole growth vanished)."""
    rows = weeks([{"ecc_corrected_aggregate": v} for v in (0, 150, 450, 1050)], 4)
    rows.append(row(NOW + 0.00044, ecc_corrected_aggregate=2250))
    g = analyze_gpu("h", "p", 0, rows, now=NOW, thresholds=Thresholds())
    assert [round(v) for v in g.ecc_corrected_weekly] == [150, 300, 600, 1200]
    assert {f.kind for f in g.flags} == {"ecc_corrected_rate", "ecc_corrected_rising"}


def test_rising_ecc_flagged_and_flat_noise_not() -> None:
    rising = weeks([{"ecc_corrected_aggregate": v} for v in (0, 100, 300, 700, 1500)], 4)
    g = analyze_gpu("h", "p", 0, rising, now=NOW, thresholds=Thresholds())
    assert [f.kind for f in g.flags] == ["ecc_corrected_rising"] and g.flags[0].quarantine
    flat = weeks([{"ecc_corrected_aggregate": v} for v in (0, 3, 3, 9, 30)], 4)
    assert not analyze_gpu("h", "p", 0, flat, now=NOW, thresholds=Thresholds()).flags


def test_remap_pending_failure_and_xid() -> None:
    # NVML reads both remapped-row counts in one call: both readable (one part alone is
    # unreadable, see test_trend_resets.py)
    vals = [{"remapped_uncorrected": 0, "remapped_corrected": 0},
            {"remapped_uncorrected": 1, "remapped_corrected": 0},
            {"remapped_uncorrected": 1, "remapped_corrected": 0, "remapped_pending": True,
             "remapped_failure": True,
             "xid_counts": '{"79": 1, "13": 4}'}]
    g = analyze_gpu("h", "p", 0, weeks(vals, 2), now=NOW, thresholds=Thresholds())
    kinds = sorted(f.kind for f in g.flags)
    assert kinds == ["remap_failure", "remap_pending", "remapped_rows_growing", "xid"]
    assert g.xid_by_class_weekly == {"application": [0, 0, 0, 4], "hardware": [0, 0, 0, 1]}
    xid = next(f for f in g.flags if f.kind == "xid")
    assert not xid.quarantine  # once: watch; twice or more: quarantine


# ------------------------------------------------------------------------------ breaker
def _trend(name: str, pool: str) -> HostTrend:
    from fleet.domain.trends import GpuTrend

    g = GpuTrend(name, pool, 0, None)
    g.flags.append(TrendFlag("ecc_uncorrectable", "fail", "1 uncorrectable", quarantine=True))
    return HostTrend(name, pool, [g])


def test_breaker_limits() -> None:
    assert limit_for(30, 0.1) == 3 and limit_for(9, 0.1) == 0 and limit_for(10, 0.1) == 1
    plan = propose([_trend(f"a{i}", "a") for i in range(4)], {"a": 30}, max_share=0.1)
    assert plan.tripped and {p.decision for p in plan.proposals} == {"held_by_breaker"}
    plan = propose([_trend(f"a{i}", "a") for i in range(3)], {"a": 30}, max_share=0.1)
    assert not plan.tripped and len(plan.to_apply()) == 3
