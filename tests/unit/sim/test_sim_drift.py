"""Hand-made drift on a simulated host (`SimFleet.drift`), and corrected ECC that rises from
when the fault is set: what the demo's weekly hygiene run needs to see."""

from __future__ import annotations

from pathlib import Path

from fleet.domain.drift import DriftInput, audit_host
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix
from fleet.jobs.reboot_gate import gated_reboot
from fleet.sim import SimFleet, load_fleet, save_fleet

HOST = "a100-00003"


def _facts(fleet: SimFleet, host: str) -> HostFacts:
    facts = fleet.probe([host])[host].value
    assert facts is not None
    return facts


def _packages(facts: HostFacts) -> dict[str, tuple[str, bool]]:
    pk = facts.versions.packages
    assert pk is not None
    return {p.name: (p.version, bool(p.held)) for p in pk.items}


def _drift(matrix: Matrix, fleet: SimFleet, host: str) -> list[str]:
    d = audit_host(DriftInput(host, fleet.state(host)["pool"], True, _facts(fleet, host)), matrix)
    return [str(x) for x in d.differences]


def test_a_drifted_package_is_what_the_probe_and_the_audit_see(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=1)
    assert _drift(matrix, fleet, HOST) == []
    before = _packages(_facts(fleet, HOST))
    assert before["nvidia-container-toolkit"][1] is True  # held by the pin
    installed = fleet.drift(HOST, "nvidia-container-toolkit", "1.18.1")
    assert installed["nvidia-container-toolkit"] == "1.18.1-1"
    after = _packages(_facts(fleet, HOST))
    assert after["nvidia-container-toolkit"] == ("1.18.1-1", True)  # the hold stays
    assert {k: v for k, v in after.items() if k != "nvidia-container-toolkit"} == {
        k: v for k, v in before.items() if k != "nvidia-container-toolkit"}
    diffs = _drift(matrix, fleet, HOST)
    assert len(diffs) == 1 and "have 1.18.1" in diffs[0]
    assert fleet.state(HOST)["drift"] == {"nvidia-container-toolkit": "1.18.1-1"}
    other = "a100-00004"  # only that host drifted
    assert _drift(matrix, fleet, other) == []


def test_unheld_and_removed_packages(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=1)
    fleet.drift(HOST, "datacenter-gpu-manager", None)
    fleet.drift(HOST, "nvidia-container-toolkit", "1.17.3", held=False)
    pk = _packages(_facts(fleet, HOST))
    assert "datacenter-gpu-manager" not in pk
    assert pk["nvidia-container-toolkit"] == ("1.17.3-1", False)
    assert len(_drift(matrix, fleet, HOST)) >= 2


def test_a_pin_puts_the_drifted_package_back(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=1)
    release = matrix.release(fleet.installed_release(HOST) or "")
    assert not fleet.plan([HOST], release)[HOST].value.changed  # type: ignore[union-attr]
    fleet.drift(HOST, "nvidia-container-toolkit", "1.18.1")
    plan = fleet.plan([HOST], release)[HOST].value
    assert plan is not None and plan.changed and not plan.reboot_required
    assert [c.package for c in plan.changes] == ["nvidia-container-toolkit"]
    assert fleet.apply([HOST], release)[HOST].changed
    assert fleet.state(HOST)["drift"] == {}
    assert _drift(matrix, fleet, HOST) == []
    assert not fleet.plan([HOST], release)[HOST].value.changed  # type: ignore[union-attr]


def test_drift_and_ecc_counters_survive_save_and_load(matrix: Matrix, tmp_path: Path) -> None:
    fleet = SimFleet.build(matrix, 40, seed=1)
    fleet.drift(HOST, "nvidia-container-toolkit", "1.18.1", held=False)
    fleet.inject("h100-00002", ecc_rising=100)
    fleet.probe(["h100-00002"])
    path = tmp_path / "sim.json"
    save_fleet(fleet, path)
    back = load_fleet(path, matrix)
    assert back.state(HOST)["drift"] == {"nvidia-container-toolkit": "1.18.1-1"}
    assert _packages(_facts(back, HOST))["nvidia-container-toolkit"] == ("1.18.1-1", False)
    gpus = _facts(back, "h100-00002").gpus
    assert max(g.ecc_aggregate_corrected or 0 for g in gpus) == 200


def test_corrected_ecc_rises_from_when_the_fault_is_set(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=1)
    h = "l40s-00002"
    for _ in range(3):
        fleet.probe([h])  # healthy probes before the fault: no errors counted for them
    totals = []
    for rate in (100, 400, 1600):
        fleet.inject(h, ecc_rising=rate)
        totals.append(max(g.ecc_aggregate_corrected or 0 for g in _facts(fleet, h).gpus))
    assert totals == [100, 500, 2100]  # weekly growth 100, 400, 1600: rising
    # the volatile counter restarts with the driver, the lifetime one not; the pre-reboot
    # gate probes once more before the reboot (one more 1600 for the lifetime counter)
    gated_reboot(fleet, {h: None})
    gpus = _facts(fleet, h).gpus
    assert max(g.ecc_volatile_corrected or 0 for g in gpus) == 1600
    assert max(g.ecc_aggregate_corrected or 0 for g in gpus) == 2100 + 1600 + 1600
