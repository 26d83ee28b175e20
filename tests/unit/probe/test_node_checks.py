"""The node.* checks (issue 23 item 3) on real captures in tests/data/realdata.

Each case loads a real capture, a node profile, and asserts the finding: the GPU, wanted,
found, the fix command. Where no real capture shows the fault (a pending ECC change, a Fabric
Manager on the wrong version, NVLink states: no capture has them), the case edits a real
capture's facts and says so. Unreadable values give unreadable findings, never a pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.checks import (
    CHECKS,
    Expectations,
    Finding,
    canonical_check,
    node_firmware,
    node_links,
    node_mig,
    node_settings,
    run_checks,
)
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.profiles import NodeProfile
from fleet.facts import facts_from_file

DATA = Path(__file__).parents[2] / "data" / "realdata"
XML, QTXT = DATA / "nvidia-smi-xml", DATA / "nvidia-smi-q-text"
H100 = XML / "nvidia-k8s-test-infra__qx-h100.xml"


def node(path: Path, profile: dict[str, Any], facts: HostFacts | None = None) -> list[Finding]:
    f = facts or facts_from_file(path)
    exp = Expectations(profile=NodeProfile.model_validate(profile))
    return [x for x in run_checks(f, exp) if x.check.startswith("node.")
            and x.check != "node.next_boot"]


def ids(found: list[Finding]) -> set[tuple[str, str]]:
    return {(f.check, f.severity.value) for f in found}


def test_matching_profile_gives_no_finding_on_the_h100_capture() -> None:
    profile = {"gpu": {"persistence_mode": True, "ecc": True, "compute_mode": "default",
                       "power_limit_w": "max", "count": 8,
                       "clocks": {"applications": {"memory_mhz": 2619, "graphics_mhz": 1980}}},
               "firmware": {"vbios": {"H100": ["96.00.99.00.01"]}, "gsp": True,
                            "inforom_image": {"H100 80GB": ["G520.0200.00.05"]},
                            "all_equal": True},
               "links": {"pcie": {"H100": {"gen": 5, "width": 16}}}}
    assert node(H100, profile) == []


def test_ecc_off_on_the_a5000_capture() -> None:
    found = node(XML / "telegraf__dual_a5000-v13.xml", {"gpu": {"ecc": True}})
    assert len({f.gpu for f in found}) == 2 and len(found) == 2  # both GPUs, ECC off
    f = found[0]
    assert (f.check, f.severity.value, f.remediation) == ("node.ecc", "fail", "reboot")
    assert (f.evidence["wanted"], f.evidence["found"]) == (True, False)
    assert f.evidence["fix"].startswith(f"nvidia-smi -i {f.gpu} -e 1")


def test_ecc_pending_says_a_reboot_is_due() -> None:
    facts = facts_from_file(H100)  # edited: no capture has pending != current
    facts.gpus[0] = facts.gpus[0].model_copy(update={"ecc_mode_pending": False})
    found = node(H100, {"gpu": {"ecc": True}}, facts)
    assert [(f.check, f.gpu) for f in found] == [("node.ecc_pending", facts.gpus[0].pci_bus_id)]
    assert "reboot is due" in found[0].message and found[0].remediation == "reboot"


def test_persistence_off_on_the_a100_capture() -> None:
    [f] = node(XML / "telegraf__a100-sxm4-v12.xml", {"gpu": {"persistence_mode": True}})
    assert f.check == "node.persistence_mode" and f.evidence["found"] is False
    assert f.evidence["fix"] == "nvidia-smi -i 0000:01:00.0 -pm 1 (or enable nvidia-persistenced)"


def test_compute_mode_power_and_clocks_differ_on_the_h100_capture() -> None:
    found = node(H100, {"gpu": {"compute_mode": "exclusive_process", "power_limit_w": 500,
                                "clocks": {"applications": {"memory_mhz": 2619,
                                                            "graphics_mhz": 1410}}}})
    assert ids(found) == {("node.compute_mode", "warn"), ("node.power_limit", "warn"),
                          ("node.clocks", "warn")}
    assert len(found) == 3 * 8  # every GPU of the host
    fixes = {f.check: f.evidence["fix"] for f in found if f.gpu == "0000:53:00.0"}
    assert fixes == {"node.compute_mode": "nvidia-smi -i 0000:53:00.0 -c EXCLUSIVE_PROCESS",
                     "node.power_limit": "nvidia-smi -i 0000:53:00.0 -pl 500",
                     "node.clocks": "nvidia-smi -i 0000:53:00.0 -ac 2619,1410"}


def test_power_limit_outside_the_gpu_range_fails() -> None:
    found = node(H100, {"gpu": {"power_limit_w": 900}})
    assert ids(found) == {("node.power_limit", "fail")}
    assert "outside this GPU's 200-700 W" in found[0].message


def test_locked_clocks_unreadable_from_a_capture_is_not_a_pass() -> None:
    found = node(H100, {"gpu": {"clocks": {"locked_graphics_mhz": [1410, 1980]}}})
    assert ids(found) == {("node.clocks", "warn")} and len(found) == 8
    assert all(f.evidence["unreadable"] and "not_in_capture" in f.evidence["reason"]
               for f in found)


def test_gpu_count() -> None:
    [f] = node(H100, {"gpu": {"count": 4}})
    assert (f.check, f.severity.value, f.evidence["wanted"], f.evidence["found"]) == (
        "node.gpu_count", "fail", 4, 8)


def _mig(devices: dict[str, int], enabled: bool = True) -> dict[str, Any]:
    return {"mig": {"config": "c", "layout": {"version": "v1", "mig-configs": {"c": [
        {"devices": "all", "mig-enabled": enabled, "mig-devices": devices}]}}}}


def test_mig_mode_off_where_the_profile_wants_it() -> None:
    found = node(H100, _mig({"1g.10gb": 7}))
    assert ids(found) == {("node.mig_mode", "fail")}
    assert "nvidia-mig-parted apply" in found[0].evidence["fix"]


def test_mig_layout_counted_on_the_a100_capture() -> None:
    a100 = XML / "telegraf__a100-sxm4-v12.xml"  # 4 MIG devices, names not in the XML
    [f] = [x for x in node(a100, _mig({"1g.10gb": 7})) if x.check.startswith("node.mig")]
    assert (f.check, f.severity.value, f.evidence["wanted"], f.evidence["found"]) == (
        "node.mig_layout", "fail", 7, 4)
    [u] = [x for x in node(a100, _mig({"1g.20gb": 4})) if x.check.startswith("node.mig")]
    assert u.check == "node.mig_layout" and u.evidence["unreadable"] is True


def test_mig_layout_lost_with_probe_profiles() -> None:
    facts = facts_from_file(H100)  # edited: MIG on, named devices as NVML gives them
    facts.gpus = [g.model_copy(update={"mig_mode_current": True, "mig_mode_pending": True,
                                       "mig_devices": []}) for g in facts.gpus[:1]]
    [f] = node(H100, _mig({"1g.10gb": 2, "3g.40gb": 1}), facts)
    assert f.check == "node.mig_layout" and "lost at every reboot" in f.message


def test_two_vbios_versions_on_the_v100_capture() -> None:
    found = node(QTXT / "thamada-gls__V100_x8__550.127.05.txt", {"firmware": {"all_equal": True}})
    assert ids(found) == {("node.firmware", "warn")}
    assert "2 VBIOS versions" in found[0].message and "nvfwupd" in found[0].evidence["fix"]


def test_gsp_off_and_vbios_not_allowed() -> None:
    found = node(QTXT / "thamada-gls__V100_x8__550.127.05.txt",
                 {"firmware": {"gsp": True, "vbios": {"V100": ["88.00.00.00.00"]}}})
    assert {f.evidence["found"] for f in found if "gsp" in f.facts[0]} == {False}
    assert len([f for f in found if f.facts == ["gpus.vbios_version"]]) == 8


def test_pcie_width_judged_idle_generation_under_load_only() -> None:
    l4 = node(QTXT / "thamada-gls__L4__550.90.07.txt",  # idle, gen 1 of 4, x8 of x16
              {"links": {"pcie": {"L4": {"gen": 4, "width": 16}}}})
    assert [(f.check, f.evidence["found"]) for f in l4] == [("node.pcie", "x8")]
    a10 = node(QTXT / "thamada-gls__A10__550.90.12.txt",  # busy (sw_power_cap), gen 1 of 4
               {"links": {"pcie": {"A10": {"gen": 4, "width": 16}}}})
    assert [(f.check, f.evidence["found"]) for f in a10] == [("node.pcie", "gen 1")]


def test_nvlink_unreadable_from_captures_and_counted_from_probe() -> None:
    assert ids(node(H100, {"links": {"nvlink_active": 18}})) == {("node.nvlink", "warn")}
    facts = facts_from_file(H100)  # edited: NVML link states
    data = facts.to_json_dict()
    data["gpus"] = [{**data["gpus"][0],
                     "nvlink_links": [{"link": i, "active": i != 3} for i in range(18)]}]
    facts = HostFacts.model_validate(data)
    [f] = node(H100, {"links": {"nvlink_active": 18}}, facts)
    assert (f.severity.value, f.evidence["found"], "down: 3" in f.message) == ("fail", 17, True)


def test_fabric_manager() -> None:
    [u] = node(H100, {"links": {"fabric_manager": "required"}})
    assert u.evidence["unreadable"] is True  # no capture carries the service
    data = facts_from_file(H100).to_json_dict()  # edited: a probe's host read
    data["versions"]["driver_kernel_module"] = "580.105.08"
    data["fabric_manager"] = {"running": True, "version": "580.95.05", "service": "active"}
    [f] = node(H100, {"links": {"fabric_manager": "required"}}, HostFacts.model_validate(data))
    assert (f.severity.value, f.evidence["wanted"], f.evidence["found"]) == (
        "fail", "580.105.08", "580.95.05")
    data["fabric_manager"] = {"running": False, "version": "580.105.08", "service": "failed"}
    [g] = node(H100, {"links": {"fabric_manager": "required"}}, HostFacts.model_validate(data))
    assert g.evidence["fix"] == "systemctl enable --now nvidia-fabricmanager"


def test_profile_per_gpu_model_is_picked_by_the_host_gpu() -> None:
    prof = NodeProfile.model_validate({"gpu": {"count": 4}})
    exp = Expectations(profile_by_model={"H100": prof, "A100": NodeProfile()})
    found = [f for f in run_checks(facts_from_file(H100), exp) if f.check == "node.gpu_count"]
    assert len(found) == 1


def test_every_node_check_is_covered_here_and_old_ids_alias() -> None:
    node_ids = {c.id for m in (node_settings, node_mig, node_firmware, node_links)
                for c in m.CHECKS}
    covered = {"node.ecc", "node.ecc_pending", "node.persistence_mode", "node.compute_mode",
               "node.power_limit", "node.clocks", "node.gpu_count", "node.mig_mode",
               "node.mig_layout", "node.firmware", "node.pcie", "node.nvlink",
               "node.fabric_manager"}  # each has a test above
    assert node_ids == covered
    assert node_ids <= {c.id for c in CHECKS}
    assert canonical_check("persistence_mode") == "node.persistence_mode"
    assert canonical_check("mig.mode") == "node.mig_mode"


def test_declared_ecc_off_is_not_an_ecc_mode_failure() -> None:
    a5000 = XML / "telegraf__dual_a5000-v13.xml"  # ECC off on both GPUs
    facts = facts_from_file(a5000)
    assert {f.check for f in run_checks(facts) if f.severity.value == "fail"} >= {"ecc.mode"}
    exp = Expectations(profile=NodeProfile.model_validate({"gpu": {"ecc": False}}))
    assert not [f for f in run_checks(facts, exp) if f.check in ("ecc.mode", "node.ecc")
                and f.severity.value != "ok"]


def test_locked_clocks_seen_through_the_user_defined_clocks_reason() -> None:
    facts = facts_from_file(H100)  # edited: no capture shows -lgc; NVML's reason bit does
    facts.gpus = [facts.gpus[0].model_copy(update={
        "clock_event_reasons": ["applications_clocks_setting"]})]
    want = {"gpu": {"clocks": {"applications": {"memory_mhz": 2619, "graphics_mhz": 1980}}}}
    [f] = node(H100, want, facts)
    assert f.check == "node.clocks" and f.evidence["fix"] == "nvidia-smi -i 0000:53:00.0 -rgc"
