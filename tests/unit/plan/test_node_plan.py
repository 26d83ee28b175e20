"""Planning a host's node state (fleet.domain.node_plan): which commands, in which order, what
needs a drain or a reboot, what the boot unit reapplies; unreadable values are never acted on,
firmware is never flashed. GPU facts in the probe's NVML shape (the lab's H100 defaults)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fleet.domain.facts import GpuFacts
from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_facts import NodeTools
from fleet.domain.node_plan import (
    BOOT_SCRIPT,
    BOOT_UNIT,
    MIG_PARTED_FILE,
    boot_state,
    boot_unit,
    plan_node,
)

PROFILE: dict[str, Any] = {
    "gpu": {"persistence_mode": True, "ecc": True, "compute_mode": "default",
            "power_limit_w": "default", "count": 2,
            "clocks": {"applications": {"memory_mhz": 2619, "graphics_mhz": 1980}}},
    "firmware": {"vbios": {"H100": ["96.00.99.00.01"]}},
}
MIG = {"config": "mixed", "layout": {"version": "v1", "mig-configs": {"mixed": [
    {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "3g.40gb": 1}},
    {"devices": [1], "mig-enabled": False}]}}}


def gpu(i: int, **over: Any) -> GpuFacts:
    d: dict[str, Any] = {
        "index": i, "name": "NVIDIA H100 80GB HBM3", "persistence_mode": True,
        "compute_mode": "default", "ecc_mode_current": True, "ecc_mode_pending": True,
        "power_limit_w": 700.0, "power_limit_default_w": 700.0, "power_limit_min_w": 200.0,
        "power_limit_max_w": 700.0, "clocks_applications_graphics_mhz": 1980,
        "clocks_applications_memory_mhz": 2619, "clocks_default_applications_graphics_mhz": 1980,
        "clocks_default_applications_memory_mhz": 2619, "clock_event_reasons": [],
        "mig_mode_current": False, "mig_mode_pending": False, "mig_devices": [],
        "vbios_version": "96.00.99.00.01"}
    d.update(over)
    return GpuFacts.model_validate(d)


def test_a_conformant_host_changes_nothing_and_the_boot_unit_still_holds_its_settings() -> None:
    plan = plan_node([gpu(0), gpu(1)], NodeProfile.model_validate(PROFILE))
    assert plan.steps == [] and not plan.changed and not plan.drain and not plan.reboot
    # a reboot restores the default limit, compute mode and application clocks by itself
    assert not any({"-pl", "-c", "-ac"} & set(c) for c in plan.boot)
    assert ("nvidia-smi", "-i", "1", "-pm", "1") in plan.boot
    assert boot_unit(plan)[BOOT_SCRIPT].splitlines()[3:5] == ["nvidia-smi -pm 1 || rc=1",
                                                              "exit $rc"]  # one for all GPUs


def test_the_boot_unit_reapplies_what_is_not_the_default() -> None:
    prof = NodeProfile.model_validate({"gpu": {"compute_mode": "exclusive_process",
                                               "power_limit_w": 500,
                                               "clocks": {"applications": {
                                                   "memory_mhz": 2619, "graphics_mhz": 1500}}}})
    plan = plan_node([gpu(0), gpu(1)], prof)
    script = boot_unit(plan)[BOOT_SCRIPT].splitlines()
    assert {"nvidia-smi -c EXCLUSIVE_PROCESS || rc=1", "nvidia-smi -pl 500 || rc=1",
            "nvidia-smi -ac 2619,1500 || rc=1"} <= set(script)
    top = NodeProfile.model_validate({"gpu": {"power_limit_w": "max"}})
    two = boot_unit(plan_node([gpu(0), gpu(1, power_limit_max_w=650.0)], top))
    assert {"nvidia-smi -i 0 -pl 700 || rc=1", "nvidia-smi -i 1 -pl 650 || rc=1"} <= set(
        two[BOOT_SCRIPT].splitlines())  # not the same on every GPU: one command per GPU


def test_each_wrong_setting_is_one_command_in_order_ecc_last_with_drain_and_reboot() -> None:
    gpus = [gpu(0, ecc_mode_pending=False, ecc_mode_current=False, power_limit_w=200.0),
            gpu(1, compute_mode="exclusive_process", persistence_mode=False,
                clock_event_reasons=["applications_clocks_setting"])]
    plan = plan_node(gpus, NodeProfile.model_validate(PROFILE))
    assert [(s.gpu, s.argv[3:]) for s in plan.steps] == [
        (1, ("-pm", "1")), (1, ("-c", "DEFAULT")), (0, ("-pl", "700")), (1, ("-rgc",)),
        (0, ("-e", "1"))]
    ecc = plan.steps[-1]
    assert ecc.drain and ecc.reboot and not ecc.at_boot
    assert all(not s.drain for s in plan.steps[:-1]) and plan.drain and plan.reboot


def test_a_pending_ecc_change_only_asks_for_the_reboot() -> None:
    plan = plan_node([gpu(0, ecc_mode_current=False, ecc_mode_pending=True)],
                     NodeProfile.model_validate(PROFILE))
    assert plan.steps == [] and plan.reboot_due and plan.reboot and plan.drain


def test_unreadable_values_are_never_acted_on() -> None:
    g = gpu(0, persistence_mode={"error": "not_supported"}, power_limit_w={"error": "unknown"},
            ecc_mode_pending={"error": "gpu_is_lost"})
    plan = plan_node([g], NodeProfile.model_validate(PROFILE))
    assert plan.steps == [] and not plan.reboot
    assert len(plan.unknown) == 3 and "not_supported" in plan.unknown[0]


def test_power_outside_the_gpus_range_is_a_note_not_a_command() -> None:
    prof = {**PROFILE, "gpu": {**PROFILE["gpu"], "power_limit_w": 100}}
    plan = plan_node([gpu(0)], NodeProfile.model_validate(prof))
    assert plan.steps == [] and "outside what the GPU allows (200-700 W)" in plan.notes[0]


def test_mig_layout_drains_recreates_lost_instances_and_is_reapplied_at_boot() -> None:
    prof = NodeProfile.model_validate({"mig": MIG})
    lost = [gpu(0, mig_mode_current=True, mig_devices=[]), gpu(1)]
    plan = plan_node(lost, prof)
    assert [s.argv for s in plan.steps] == [
        ("nvidia-smi", "mig", "-i", "0", "-cgi", "1g.10gb,1g.10gb,3g.40gb", "-C")]
    assert plan.steps[0].drain and plan.steps[0].at_boot
    assert plan.boot == [plan.steps[0].argv]
    fine = [gpu(0, mig_mode_current=True, mig_devices=[
        {"gpu_instance_id": n, "profile": p} for n, p in
        ((1, "1g.10gb"), (2, "1g.10gb"), (3, "3g.40gb"))]), gpu(1)]
    assert plan_node(fine, prof).steps == []
    off = plan_node([gpu(0), gpu(1, mig_mode_current=True)], prof)
    assert [s.argv[3:5] for s in off.steps[:2]] == [("-mig", "1"), ("-mig", "0")]
    parted = plan_node(lost, prof, NodeTools(mig_parted="/usr/bin/nvidia-mig-parted"))
    assert [s.argv for s in parted.steps] == [
        ("nvidia-mig-parted", "apply", "-f", MIG_PARTED_FILE, "-c", "mixed")]
    assert parted.boot[-1][:2] == ("nvidia-mig-parted", "apply")
    # the file the command reads is one of the boot unit's files: only the chosen config
    layout = json.loads(boot_unit(parted)[MIG_PARTED_FILE])
    assert list(layout["mig-configs"]) == ["mixed"]
    assert layout["mig-configs"]["mixed"][0]["mig-devices"] == {"1g.10gb": 2, "3g.40gb": 1}


def test_an_enabled_nvidia_mig_manager_keeps_mig_and_fleet_plans_none() -> None:
    """nvidia-mig-manager.service applies its own config at every boot: fleet does not fight
    it (no MIG step, no MIG line in the boot unit) and says so; the other settings go on."""
    prof = NodeProfile.model_validate({"mig": MIG, "gpu": {"persistence_mode": True}})
    lost = [gpu(0, mig_mode_current=True, mig_devices=[], persistence_mode=False), gpu(1)]
    tools = NodeTools(mig_parted="/usr/bin/nvidia-mig-parted",
                      mig_manager_unit="/usr/lib/systemd/system/nvidia-mig-manager.service",
                      mig_manager_enabled=True, mig_manager_config="all-1g.10gb")
    plan = plan_node(lost, prof, tools)
    assert [s.setting for s in plan.steps] == ["persistence_mode"]
    assert not [c for c in plan.boot if "mig" in " ".join(c)]
    assert "nvidia-mig-manager" in plan.notes[0] and "all-1g.10gb" in plan.notes[0]
    assert MIG_PARTED_FILE not in boot_unit(plan)
    # installed but not enabled: fleet manages MIG (through mig-parted, which is there)
    off = plan_node(lost, prof, tools.model_copy(update={"mig_manager_enabled": False}))
    assert "mig_layout" in [s.setting for s in off.steps]


def test_boot_state_missing_stale_current_and_unknown() -> None:
    files = boot_unit(plan_node([gpu(0)], NodeProfile.model_validate(PROFILE)))

    def sha(path: str) -> str:
        return hashlib.sha256(files[path].encode()).hexdigest()

    right = NodeTools(boot_unit_sha256=sha(BOOT_UNIT), boot_script_sha256=sha(BOOT_SCRIPT),
                      boot_enabled=True)
    assert boot_state(files, right) == "current"
    assert boot_state(files, right.model_copy(update={"boot_enabled": False})) == "missing"
    assert boot_state(files, right.model_copy(update={"boot_script_sha256": None})) == "missing"
    assert boot_state(files, right.model_copy(update={"boot_unit_sha256": "0" * 64})) == "stale"
    assert boot_state(files, None) == "unknown"  # not probed: never called current
    unread = NodeTools.model_validate({**right.model_dump(exclude={"unreadable"}),
                                       "boot_script_sha256": {"error": "no_permission"}})
    assert boot_state(files, unread) == "unknown"
    assert boot_state({}, None) == "current"  # nothing to reapply, nothing to write


def test_a_boot_unit_left_from_an_older_profile_is_obsolete_unless_a_value_is_unread() -> None:
    """A profile that declares nothing a reboot forgets writes no unit; one still on the host
    (or only its link) is `obsolete`, and removed. An unread value never counts as nothing
    to reapply, nor an unread unit as absent."""
    ecc_only = NodeProfile.model_validate({"gpu": {"ecc": True}})
    plan = plan_node([gpu(0)], ecc_only)
    assert plan.boot == [] and plan.steps == [] and plan.unknown == []
    left = NodeTools(boot_unit_sha256="0" * 64, boot_script_sha256="1" * 64, boot_enabled=True)
    assert boot_state({}, left, plan) == "obsolete"
    assert boot_state({}, NodeTools(boot_enabled=True), plan) == "obsolete"  # a lone link
    assert boot_state({}, NodeTools(boot_enabled=False), plan) == "current"  # none there
    assert boot_state({}, None, plan) == "current"  # not probed: nothing known to remove
    unread_plan = plan_node([gpu(0, ecc_mode_pending=None)], ecc_only)
    assert unread_plan.unknown and boot_state({}, left, unread_plan) == "current"
    unread = NodeTools.model_validate({**left.model_dump(exclude={"unreadable"}),
                                       "boot_script_sha256": {"error": "no_permission"}})
    assert boot_state({}, unread, plan) == "current"


def test_xml_mig_devices_without_profile_names_are_unknown() -> None:
    prof = NodeProfile.model_validate({"mig": MIG})
    plan = plan_node([gpu(0, mig_mode_current=True, mig_devices=[
        {"gpu_instance_id": 1, "profile": None}])], prof)
    assert plan.steps == [] and "MIG devices" in plan.unknown[0]


def test_firmware_is_never_flashed_the_note_names_the_tool() -> None:
    plan = plan_node([gpu(0, vbios_version="96.00.74.00.0B")], NodeProfile.model_validate(PROFILE))
    assert plan.steps == [] and "nvfwupd" in plan.notes[0] and "96.00.74.00.0B" in plan.notes[0]


def test_boot_unit_runs_before_the_scheduler_daemons() -> None:
    files = boot_unit(plan_node([gpu(0)], NodeProfile.model_validate(PROFILE)))
    assert "Before=slurmd.service kubelet.service" in files[BOOT_UNIT]
    assert f"ExecStart={BOOT_SCRIPT}" in files[BOOT_UNIT]
    assert "nvidia-smi -i 0 -pm 1 || rc=1" in files[BOOT_SCRIPT].splitlines()
