"""The weekly hygiene job end to end on a fake fleet with a seeded history.

Known offenders (corrected ECC rising on two GPUs, one uncorrectable error, one AER storm, Xid 79
twice) must be flagged and nothing else; healthy noise (a few corrected errors a week, AER
trickles, application Xids, reboots that reset the volatile and AER counters) flags nothing; the
circuit breaker holds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from fleet.domain.facts import HostFacts, KernelLog
from fleet.domain.ports import AdminState
from fleet.errors import ExitCode
from fleet.history import list_events, list_quarantines, open_history
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

OFFENDERS = {("h100-03", 2), ("a100-07", 5), ("h100-05", 0), ("a100-11", 3), ("h100-09", 6)}


def _noise(hosts: list[FakeHost], rng: random.Random, week: int) -> None:
    for h in hosts:
        reboot = rng.random() < 0.05
        for i, c in enumerate(h.counters):
            n = rng.choice((0, 0, 0, 1, 2, 5))
            c["ecc_aggregate_corrected"] += n
            c["ecc_volatile_corrected"] = 0 if reboot else c["ecc_volatile_corrected"] + n
            c["pcie_replay_counter"] = 0 if reboot else c["pcie_replay_counter"] + rng.randint(0, 2)
            h.aer[i] = 0 if reboot else h.aer[i] + rng.randint(0, 3)
            if rng.random() < 0.02:
                h.xids[i][13] = h.xids[i].get(13, 0) + 1  # application fault: not hardware


def _offend(by: dict[str, FakeHost], week: int) -> None:
    for name, gpu in (("h100-03", 2), ("a100-07", 5)):
        c = by[name].counters[gpu]
        c["ecc_aggregate_corrected"] += 50 * 2 ** week  # 50, 100, 200, 400, 800, 1600...
    if week == 3:
        by["h100-05"].counters[0]["ecc_aggregate_uncorrected"] += 1
        by["h100-09"].xids[6][79] = 1
    if week == 4:
        by["h100-09"].xids[6][79] = 1
    if week == 5:
        by["a100-11"].aer[3] += 5000


def seeded(tmp_path: Path, offenders: bool = True, weeks: int = 6):
    matrix = example_matrix()
    hosts = fleet(matrix, {"h100": 30, "a100": 30})
    by = {h.name: h for h in hosts}
    rng = random.Random(8)
    history = open_history(str(tmp_path / "h.db"))
    for w in range(weeks):
        _noise(hosts, rng, w)
        if offenders:
            _offend(by, w - (weeks - 6))
        if w < weeks - 1:
            record_week(history, hosts, NOW - (weeks - 1 - w) * WEEK)
    return matrix, hosts, by, history


def flagged(report) -> set[tuple[str, int]]:
    return {(g.host, g.gpu_index) for g in report.trends.flagged()}


def test_known_offenders_flagged_exactly(tmp_path: Path) -> None:
    matrix, hosts, by, history = seeded(tmp_path)
    sched = FakeScheduler()
    report = run_hygiene(FakeBackend(hosts), sched, history, matrix, now=NOW, judge=None)
    assert flagged(report) == OFFENDERS
    kinds = {(g.host, g.gpu_index): {f.kind for f in g.flags} for g in report.trends.flagged()}
    assert kinds[("h100-03", 2)] == {"ecc_corrected_rising", "ecc_corrected_rate"}
    assert kinds[("a100-07", 5)] == {"ecc_corrected_rising", "ecc_corrected_rate"}
    assert kinds[("h100-05", 0)] == {"ecc_uncorrectable"}
    assert kinds[("a100-11", 3)] == {"aer_correctable_storm"}
    assert kinds[("h100-09", 6)] == {"xid"}
    assert report.trends.gpus[0].weeks_with_data == 4
    assert {p.host for p in report.quarantine.proposals} == {h for h, _ in OFFENDERS}
    assert all(p.decision == "quarantine" for p in report.quarantine.proposals)
    assert not report.quarantine.tripped
    assert sched.drained == []  # proposals only without --apply-quarantine
    assert report.exit_code == ExitCode.PROBLEMS
    assert all(d.conformant for d in report.drift)


def test_healthy_noise_flags_nothing(tmp_path: Path) -> None:
    matrix, hosts, _by, history = seeded(tmp_path, offenders=False)
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW,
                         judge=None)
    assert flagged(report) == set()
    assert report.quarantine.proposals == []
    assert report.exit_code == ExitCode.OK, report.problems()


def test_apply_drains_and_records(tmp_path: Path) -> None:
    matrix, hosts, _by, history = seeded(tmp_path)
    sched = FakeScheduler()
    sched.states["h100-05"] = AdminState("drained", "RMA ticket 42", by_fleet=False)
    report = run_hygiene(FakeBackend(hosts), sched, history, matrix, now=NOW,
                         apply_quarantine=True, judge=None)
    assert sorted(sched.drained) == ["a100-07", "a100-11", "h100-03", "h100-09"]
    applied = {a.host: a for a in report.applied}
    assert applied["h100-05"].applied and not applied["h100-05"].drained_by_fleet
    open_rows = {h.name for _q, h in list_quarantines(history)}
    assert open_rows == {h for h, _ in OFFENDERS}
    kinds = [e.kind for e in list_events(history, limit=100)]
    assert kinds.count("quarantine.open") == 5
    # a second run proposes nothing new: they are already quarantined
    again = run_hygiene(FakeBackend(hosts), sched, history, matrix, now=NOW + WEEK, judge=None)
    assert {p.decision for p in again.quarantine.proposals} <= {"already_quarantined"}
    assert sorted(sched.drained) == ["a100-07", "a100-11", "h100-03", "h100-09"]


def test_circuit_breaker_holds(tmp_path: Path) -> None:
    """A 'fault' on 10 of 30 hosts (a broken monitor) trips the breaker: nothing is drained."""
    matrix, hosts, by, history = seeded(tmp_path, offenders=False)
    for i in range(10):
        by[f"a100-{i:02d}"].counters[1]["ecc_aggregate_uncorrected"] += 3
    sched = FakeScheduler()
    report = run_hygiene(FakeBackend(hosts), sched, history, matrix, now=NOW,
                         apply_quarantine=True, judge=None)
    assert [b.pool for b in report.quarantine.tripped] == ["a100"]
    assert {p.decision for p in report.quarantine.proposals} == {"held_by_breaker"}
    assert sched.drained == [] and report.applied == []
    assert list_quarantines(history) == []
    assert any("circuit breaker tripped in pool a100" in p for p in report.problems())
    assert [e.kind for e in list_events(history, kind="hygiene.breaker")] == ["hygiene.breaker"]


def test_breaker_budget_counts_open_quarantines(tmp_path: Path) -> None:
    matrix, hosts, by, history = seeded(tmp_path, offenders=False)
    for i in range(3):  # exactly the limit (floor(10% of 30) = 3): no trip
        by[f"h100-{i:02d}"].counters[0]["ecc_aggregate_uncorrected"] += 1
    from fleet.history import open_quarantine
    open_quarantine(history, "h100-29", reason="by hand", opened_by="ops", at=NOW - WEEK)
    sched = FakeScheduler()
    report = run_hygiene(FakeBackend(hosts), sched, history, matrix, now=NOW,
                         apply_quarantine=True, judge=None)
    assert not report.quarantine.tripped
    decisions = sorted(p.decision for p in report.quarantine.proposals)
    assert decisions == ["deferred", "quarantine", "quarantine"]
    assert len(sched.drained) == 2


def test_drift_fails_closed(tmp_path: Path) -> None:
    matrix, hosts, by, history = seeded(tmp_path, offenders=False)
    by["h100-01"].reachable = False
    by["h100-02"].held = False
    by["a100-03"].kmod = "570.133.20"  # three-way mismatch: old module still loaded
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW,
                         judge=None)
    bad = {d.host: d for d in report.non_conformant}
    assert set(bad) == {"h100-01", "h100-02", "a100-03"}
    assert str(bad["h100-01"].differences[0]).startswith("reachable: have no, want yes")
    assert report.exit_code == ExitCode.PROBLEMS
    assert not any(p.host in bad for p in report.quarantine.proposals)


@pytest.mark.parametrize("factor,verdict", [(1.0, "pass"), (0.7, "fail")])
def test_benchmark_regression_per_pool(tmp_path: Path, factor: float, verdict: str) -> None:
    pytest.importorskip("scipy")
    matrix, hosts, _by, history = seeded(tmp_path, offenders=False)
    for w in range(4, 0, -1):  # four weeks of baseline
        run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW - w * WEEK)
    report = run_hygiene(FakeBackend(hosts, bench={"h100": factor}), FakeScheduler(), history,
                         matrix, now=NOW)
    by_pool = {b.pool: b for b in report.benchmarks}
    assert by_pool["a100"].verdict == "pass"
    assert by_pool["h100"].verdict == verdict
    assert (report.exit_code == ExitCode.PROBLEMS) == (verdict == "fail")


def test_each_probe_resumes_the_kernel_log_where_the_last_stopped(tmp_path: Path) -> None:
    """Without cursors an Xid logged once would be counted again every week until a reboot."""
    matrix, hosts, by, history = seeded(tmp_path, offenders=False, weeks=1)
    backend, scheduler = FakeBackend(hosts), FakeScheduler()
    cursor = "file:4242:1000"
    original = FakeHost.facts

    def with_cursor(self: FakeHost) -> HostFacts:
        facts = original(self)
        return facts.model_copy(update={"kernel_log": KernelLog(source="file", cursor=cursor)})

    FakeHost.facts = with_cursor  # type: ignore[method-assign]
    try:
        run_hygiene(backend, scheduler, history, matrix, now=NOW)
        run_hygiene(backend, scheduler, history, matrix, now=NOW + WEEK)
    finally:
        FakeHost.facts = original  # type: ignore[method-assign]
    first, second = backend.since[0], backend.since[1]
    assert set((first or {}).values()) == {None}
    assert second == {h.name: cursor for h in hosts}


def test_unprobed_hosts_are_never_conformant(tmp_path: Path) -> None:
    """Unreachable, reachable but not probed (no python3), and not answered at all: none of
    them counts as conformant, none is benchmarked as healthy."""
    from fleet.domain.ports import HostResult

    matrix, hosts, by, history = seeded(tmp_path, offenders=False, weeks=1)
    for h in hosts:
        h.reachable = h.pool != "h100"

    class Partial(FakeBackend):
        def probe(self, names, *, since=None):  # type: ignore[no-untyped-def]
            out = super().probe(names, since=since)
            out["a100-01"] = HostResult("a100-01", None, ok=False, reachable=True,
                                        error="python3: not found")
            del out["a100-02"]
            return out

    report = run_hygiene(Partial(hosts), FakeScheduler(), history, matrix, now=NOW,
                         judge=None)
    bad = {d.host for d in report.non_conformant}
    assert {h.name for h in hosts if h.pool == "h100"} | {"a100-01", "a100-02"} <= bad
    assert report.summary()["drift"]["conformant"] == len(hosts) - len(bad)
    assert report.exit_code == ExitCode.PROBLEMS
    benched = {h for b in report.benchmarks for h in b.hosts}
    assert not benched & bad
    assert next(b for b in report.benchmarks if b.pool == "h100").verdict == "skipped"
