"""Node-state facts (fleet.domain.node_facts) from real captures in tests/data/realdata.

Values below were read by eye from the capture files. Fields no real capture carries: locked
clocks (-lgc) and NVLink link states (neither -q nor -q -x prints them), MIG profile names, and
Fabric Manager's service; those must come out unreadable, never as a default.
"""

from __future__ import annotations

from pathlib import Path

from fleet.domain.facts import HostFacts
from fleet.facts import facts_from_file

DATA = Path(__file__).parents[2] / "data" / "realdata"


def test_h100_xml_firmware_power_clocks_fabric() -> None:
    g = facts_from_file(DATA / "nvidia-smi-xml" / "nvidia-k8s-test-infra__qx-h100.xml").gpus[0]
    assert (g.vbios_version, g.inforom_image, g.inforom_oem, g.inforom_ecc) == (
        "96.00.99.00.01", "G520.0200.00.05", "2.1", "7.16")
    assert g.inforom_pwr is None and g.unreadable["inforom_pwr"] == "not_available"
    assert (g.gsp_firmware_version, g.gsp_mode) == ("580.105.08", True)
    assert g.compute_mode == "default"
    assert (g.power_limit_w, g.power_limit_default_w, g.power_limit_min_w,
            g.power_limit_max_w) == (700.0, 700.0, 200.0, 700.0)
    assert (g.clocks_applications_graphics_mhz, g.clocks_applications_memory_mhz) == (1980, 2619)
    assert (g.fabric_state, g.fabric_status) == ("completed", "success")
    assert g.mig_devices == []


def test_fields_no_capture_has_are_unreadable_with_a_reason() -> None:
    g = facts_from_file(DATA / "nvidia-smi-xml" / "nvidia-k8s-test-infra__qx-h100.xml").gpus[0]
    for field in ("clocks_locked_graphics_mhz", "nvlink_links"):
        assert getattr(g, field) is None
        assert g.unreadable[field].startswith("not_in_capture")
    assert g.nvlink_active() is None


def test_old_driver_without_gsp_element_is_unreadable_not_off() -> None:
    g = facts_from_file(DATA / "nvidia-smi-xml" / "telegraf__gtx-1660-ti.xml").gpus[0]
    assert g.gsp_mode is None and g.unreadable["gsp_mode"].startswith("not_in_capture")


def test_gsp_na_means_gsp_off() -> None:
    g = facts_from_file(DATA / "nvidia-smi-q-text" / "thamada-gls__V100_x8__550.127.05.txt").gpus[0]
    assert g.gsp_mode is False
    assert g.unreadable["gsp_firmware_version"] == "not_available"


def test_a100_xml_mig_devices_every_one_counted() -> None:
    g = facts_from_file(DATA / "nvidia-smi-xml" / "telegraf__a100-sxm4-v12.xml").gpus[0]
    assert g.mig_mode_current is True
    assert g.mig_devices is not None and len(g.mig_devices) == 4
    assert [d.gpu_instance_id for d in g.mig_devices] == [3, 4, 5, 6]
    assert {(d.memory_mib, d.multiprocessor_count, d.profile) for d in g.mig_devices} == {
        (19968, 14, None)}


def test_h100_q_text_mig_devices() -> None:
    path = DATA / "nvidia-smi-q-text" / "linux-x86_64__nvidia-h100-mig__590.48.01__idle.txt"
    g = facts_from_file(path).gpus[0]
    assert g.mig_devices is not None
    assert [d.gpu_instance_id for d in g.mig_devices] == [2, 3, 9, 10]
    assert (g.mig_devices[0].multiprocessor_count, g.mig_devices[0].memory_mib) == (60, 40448)
    assert g.vbios_version == "96.00.A5.00.01" and g.inforom_image == "G520.0200.00.05"


def test_probe_error_objects_become_unreadable() -> None:
    facts = HostFacts.model_validate({
        "gpus": [{"index": 0, "compute_mode": {"error": "not_supported", "detail": "nvml"},
                  "nvlink_links": [{"link": 0, "active": True}, {"link": 1, "active": None}]}],
        "fabric_manager": {"error": "command_not_found", "detail": "systemctl"},
    })
    g = facts.gpus[0]
    assert g.compute_mode is None and g.reason("compute_mode") == "not_supported: nvml"
    assert g.reason("vbios_version") == "not collected"
    assert g.nvlink_active() is None
    assert facts.fabric_manager is None
    assert facts.unreadable["fabric_manager"] == "command_not_found: systemctl"


def test_h100_query_gpu_csv_node_state() -> None:
    path = (DATA / "nvidia-smi-csv"
            / "linux-x86_64__nvidia-h100-mig__590.48.01__idle__query-gpu-full.csv")
    g = facts_from_file(path).gpus[0]
    assert (g.vbios_version, g.inforom_image, g.gsp_mode, g.compute_mode) == (
        "96.00.A5.00.01", "G520.0200.00.05", True, "default")
    assert (g.power_limit_default_w, g.power_limit_min_w, g.power_limit_max_w) == (
        700.0, 200.0, 700.0)
    assert g.fabric_state == "completed"
    # this driver answers "[Requested functionality has been deprecated]" for app clocks
    assert g.clocks_applications_graphics_mhz is None
    assert g.unreadable["clocks_applications_graphics_mhz"] == "deprecated"
    assert g.reason("mig_devices") == "not collected"  # --query-gpu has no MIG devices
