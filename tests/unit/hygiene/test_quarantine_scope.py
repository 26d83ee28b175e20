"""Which hosts quarantine may take, and how much of a pool (issue 31, defects 3 and 12).

Only hosts of the inventory, inside the selection, are proposed or drained; a host sent to RMA
(gone from the inventory) with an old flag in the history neither trips the breaker nor gets
drained. A pool too small for automatic quarantine keeps one fault for a human without a
"mass faults" alert.
"""

from __future__ import annotations

from pathlib import Path

from fleet.domain.quarantine import propose
from fleet.domain.trend_report import HostTrend
from fleet.history import open_history
from fleet.jobs.hygiene import run_hygiene
from tests.unit.hygiene.fakes import (
    NOW,
    WEEK,
    FakeBackend,
    FakeHost,
    FakeScheduler,
    example_matrix,
    fleet,
    record_week,
)


def _seed_rma(tmp_path: Path, pool_size: int) -> tuple[list[FakeHost], list[FakeHost], object]:
    """Three weeks of history; the last week two boards fail row remapping and are sent to RMA
    (removed from the inventory); one real fault this week on h100-03."""
    m = example_matrix()
    hosts = fleet(m, {"h100": pool_size})
    by = {h.name: h for h in hosts}
    gone = {f"h100-{pool_size - 2:02d}", f"h100-{pool_size - 1:02d}"}
    history = open_history(str(tmp_path / "h.db"))
    for w in range(3):
        if w == 2:
            for n in gone:
                by[n].counters[0]["remapped_rows_failure"] = True
        record_week(history, hosts, NOW - (3 - w) * WEEK)
    by["h100-03"].counters[1]["ecc_aggregate_uncorrected"] = 3
    return hosts, [h for h in hosts if h.name not in gone], history


def test_hosts_gone_from_the_inventory_do_not_trip_the_breaker(tmp_path: Path) -> None:
    _all, inventory, history = _seed_rma(tmp_path, 20)
    sched = FakeScheduler()
    rep = run_hygiene(FakeBackend(inventory), sched, history, example_matrix(), now=NOW,
                      judge=None, benchmark=False, apply_quarantine=True)  # type: ignore[arg-type]
    names = {h.name for h in inventory}
    assert {p.host for p in rep.quarantine.proposals} == {"h100-03"}
    assert not rep.quarantine.tripped
    assert sched.drained == ["h100-03"]  # the real fault is quarantined
    assert set(sched.drained) <= names


def test_hosts_gone_from_the_inventory_are_never_drained(tmp_path: Path) -> None:
    _all, inventory, history = _seed_rma(tmp_path, 40)
    sched = FakeScheduler()
    rep = run_hygiene(FakeBackend(inventory), sched, history, example_matrix(), now=NOW,
                      judge=None, benchmark=False, apply_quarantine=True)  # type: ignore[arg-type]
    assert {p.host for p in rep.quarantine.proposals} == {"h100-03"}
    assert sched.drained == ["h100-03"]


def test_hosts_outside_the_selection_are_never_proposed(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 20})
    history = open_history(str(tmp_path / "h.db"))
    record_week(history, hosts, NOW - WEEK)
    hosts[15].counters[0]["remapped_rows_failure"] = True  # outside the selection
    record_week(history, hosts, NOW - WEEK / 2)
    sched = FakeScheduler()
    rep = run_hygiene(FakeBackend(hosts), sched, history, m, now=NOW, judge=None,
                      benchmark=False, apply_quarantine=True,
                      hosts=[h.name for h in hosts[:10]])
    assert rep.quarantine.proposals == []
    assert sched.drained == []


def _one_fault(pool: str, size: int) -> list[HostTrend]:
    from fleet.domain.trend_report import GpuTrend, TrendFlag

    flag = TrendFlag(kind="remap_failure", severity="fail", message="row remapping failed",
                     quarantine=True)
    gpu = GpuTrend(host=f"{pool}-00", pool=pool, gpu_index=0, uuid=None, flags=[flag])
    return [HostTrend(f"{pool}-00", pool, [gpu])]


def test_one_fault_in_a_small_pool_is_no_mass_fault() -> None:
    plan = propose(_one_fault("tiny", 6), {"tiny": 6}, max_share=0.1)
    assert plan.tripped == [] and plan.alerts() == []
    assert [p.decision for p in plan.proposals] == ["deferred"]  # kept for a human
    assert plan.to_apply() == []


def test_two_faults_in_a_small_pool_still_trip_the_breaker() -> None:
    trends = _one_fault("tiny", 6) + [
        HostTrend("tiny-01", "tiny", _one_fault("tiny", 6)[0].gpus)]
    plan = propose(trends, {"tiny": 6}, max_share=0.1)
    assert [b.pool for b in plan.tripped] == ["tiny"] and plan.alerts()
