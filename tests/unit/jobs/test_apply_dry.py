"""`pin_hosts(dry=True)`: each host's package, hold and pin-file changes, whether it would drain
and reboot, and nothing done: no pin, no drain, no event, no history needed."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.history import list_events, open_history
from fleet.jobs.apply import pin_hosts
from fleet.sim import Latency, SimClock, SimFleet
from fleet.sim.state import save_fleet

POOL = "h100"
ROOT = Path(__file__).resolve().parents[3]
CANARY = "h100-canary"  # its golden release is the candidate the h100 hosts are not on


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix


def rig(matrix: Matrix) -> tuple[SimFleet, SimClock, list[str]]:
    clock = SimClock()
    fleet = SimFleet.build(matrix, None, 0, pools={POOL: 3}, clock=clock,
                           latency=Latency.zero())
    return fleet, clock, [h.name for h in fleet.hosts()]


def state_of(fleet: SimFleet, tmp_path: Path) -> str:
    path = tmp_path / "state.json"
    save_fleet(fleet, path)
    return path.read_text()


def test_dry_run_lists_every_change_and_acts_on_nothing(matrix: Matrix, tmp_path: Path) -> None:
    fleet, clock, names = rig(matrix)
    sched = fleet.scheduler()
    before = state_of(fleet, tmp_path)
    out = pin_hosts(fleet, None, matrix, dict.fromkeys(names, matrix.golden_for(CANARY)),
                    now=clock, dry=True, scheduler=sched, sleep=clock.advance)
    assert {r.outcome for r in out} == {"would_change"}
    r = out[0]
    assert r.change is not None and r.change.reboot
    wanted = {p.name: p.version for p in matrix.golden_for(CANARY).packages("debian")}
    moved = {c.package: c.after for c in r.change.packages if c.after is not None}
    assert moved and all(wanted[p] == v for p, v in moved.items())
    assert all(c.before is not None for c in r.change.packages if c.kind == "remove")
    # the packages it installs new are not held yet: the dry run says it holds them
    new = {c.package for c in r.change.packages if c.kind == "install"}
    assert new <= {h.package for h in r.change.holds if h.action == "hold"}
    assert r.drain_through == sched.name and not r.drained
    doc = r.as_dict()
    assert {"changes", "holds", "pin_files", "reboot_reason", "drain_through"} <= set(doc)
    assert doc["reboot_reason"].startswith("kernel module changes with")
    assert state_of(fleet, tmp_path) == before  # no pin, no reboot
    assert not [c for c in sched.calls if c[0] in ("drain", "undrain")]  # no drain


def test_drift_by_hand_is_listed_not_an_empty_would_change(matrix: Matrix,
                                                           tmp_path: Path) -> None:
    fleet, clock, names = rig(matrix)
    rel = matrix.golden_for(CANARY)
    with open_history(str(tmp_path / "h.db")) as history:
        pin_hosts(fleet, history, matrix, {names[0]: rel}, now=clock, sleep=clock.advance)
        driver = next(p for p in rel.packages("debian") if p.component == "driver")
        fleet.drift(names[0], driver.name, driver.version, held=False)
        out = pin_hosts(fleet, history, matrix, {names[0]: rel}, now=clock, dry=True)
        events = len(list_events(history))
        (r,) = out
        assert r.outcome == "would_change" and r.changes == []
        assert r.change is not None
        assert [(h.package, h.action) for h in r.change.holds] == [(driver.name, "hold")]
        assert r.change.lines() == [f"hold {driver.name} at {driver.version} (apt-mark)"]
        again = pin_hosts(fleet, history, matrix, {names[0]: rel}, now=clock, dry=True)
        assert len(list_events(history)) == events  # a dry run records nothing
    assert again[0].outcome == "would_change"  # and changed nothing


def test_a_host_on_its_release_has_nothing_to_change(matrix: Matrix) -> None:
    fleet, clock, names = rig(matrix)
    current = fleet.installed_release(names[0])
    assert current is not None
    (r,) = pin_hosts(fleet, None, matrix, {names[0]: matrix.release(current)}, now=clock,
                     dry=True)
    assert r.outcome == "unchanged" and r.change is not None and not r.change.changed
    assert r.drain_through is None


def test_unreachable_hosts_are_never_nothing_to_change(matrix: Matrix) -> None:
    fleet, clock, names = rig(matrix)
    fleet.inject(names[1], unreachable=True)
    out = pin_hosts(fleet, None, matrix, dict.fromkeys(names, matrix.golden_for(CANARY)),
                    now=clock, dry=True)
    by = {r.host: r for r in out}
    assert by[names[1]].outcome == "unreachable" and by[names[1]].change is None
    assert by[names[0]].outcome == "would_change"


def test_a_real_run_needs_a_history(matrix: Matrix) -> None:
    fleet, clock, names = rig(matrix)
    with pytest.raises(ValueError, match="needs a history"):
        pin_hosts(fleet, None, matrix, {names[0]: matrix.golden_for(CANARY)}, now=clock)
