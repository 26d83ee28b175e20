"""Every check: a healthy host yields no warn/fail; each injected fault yields its finding."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.domain.checks import (
    CHECKS,
    Expectations,
    ReleaseExpectation,
    run_checks,
    xid_catalog,
)
from fleet.domain.facts import HostFacts
from fleet.domain.matrix import Thresholds
from fleet.probe.hostprobe import XID_CLASSES
from fleet.sim.facts import boot_facts

REL = ReleaseExpectation("r550", "550.54.15", "12.4", ("nvidia-driver-550",))
EXP = Expectations(
    release=REL, gpu_count=2, gpu_model="H100", mig_mode=False, container_runtime=True
)


def gpu(i: int, **over: Any) -> dict[str, Any]:
    g = {
        "index": i,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{i}",
        "minor_number": i,
        "pci_bus_id": f"0000:{0x19 + i:02x}:00.0",
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "pcie_replay_counter": 100,
        "clock_event_reasons": ["gpu_idle"],
        "temperature_c": 35,
        "power_draw_w": 70.0,
        "power_limit_w": 700.0,
        "ecc_mode_current": True,
        "ecc_mode_pending": True,
        "ecc_volatile_corrected": 0,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": 3,
        "ecc_aggregate_uncorrected": 0,
        "retired_pages_sbe": {"error": "not_supported"},
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "remap_histogram": {"max": 2560, "high": 0, "partial": 0, "low": 0, "none": 0},
        "mig_mode_current": False,
        "mig_mode_pending": False,
        "persistence_mode": True,
        "recovery_action": "none",
    }
    g.update(over)
    return g


def healthy(**over: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "schema": 1,
        "source": "nvml",
        "identity": {"hostname": "gpu-a", "uptime_s": 86400.0, "boot_id": "b"},
        "versions": {
            "driver_library": "550.54.15",
            "driver_kernel_module": "550.54.15",
            "kernel_module_flavor": "open",
            "cuda_driver_api": "12.4",
            "packages": {
                "manager": "dpkg",
                "items": [
                    {"name": "nvidia-driver-550", "version": "550.54.15-0ubuntu1", "held": True},
                    {"name": "cuda-toolkit-12-4", "version": "12.4.1-1", "held": False},
                ],
            },
            "toolkits": [{"path": "/usr/local/cuda-12.4", "version": "12.4.1"}],
        },
        "gpu_count": 2,
        "gpus": [gpu(0), gpu(1)],
        "kernel_log": {"source": "journal", "events": []},
        "aer": [
            {
                "pci": "0000:19:00.0",
                "role": "device",
                "correctable": {"RxErr": 0, "TOTAL_ERR_COR": 2},
                "nonfatal": {"TOTAL_ERR_NONFATAL": 0},
                "fatal": {"TOTAL_ERR_FATAL": 0},
            }
        ],
        "device_nodes": [
            {"path": p, "mode": "0666", "char_device": True}
            for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1")
        ],
        "container_runtime": {
            "docker_installed": True,
            "configured": True,
            "docker": {"nvidia_runtime": True},
        },
        "frameworks": [
            {
                "name": "torch",
                "result": {"version": "2.4", "cuda_available": True, "device_count": 2},
            }
        ],
        "boot": boot_facts("debian", "550.54.15", "open"),
    }
    h.update(over)
    return h


def findings(data: dict[str, Any], exp: Expectations = EXP, th: Thresholds | None = None):
    return [
        (f.check, f.severity.value, f.remediation)
        for f in run_checks(HostFacts.model_validate(data), exp, th)
    ]


def test_healthy_host_has_no_findings() -> None:
    assert findings(healthy()) == []


def with_gpu0(**over: Any) -> dict[str, Any]:
    return healthy(gpus=[gpu(0, **over), gpu(1)])


def event(kind: str, line: int = 1, **over: Any) -> dict[str, Any]:
    e = {
        "kind": kind,
        "line": line,
        "pci": "0000:19:00.0",
        "xid": None,
        "severity": None,
        "text": "x",
    }
    e.update(over)
    return e


def log(*events: dict[str, Any]) -> dict[str, Any]:
    return healthy(kernel_log={"source": "journal", "events": list(events)})


CASES: list[tuple[str, dict[str, Any], tuple[str, str, str]]] = [
    (
        "library vs module (stale module)",
        healthy(versions={**healthy()["versions"], "driver_kernel_module": "535.161.07"}),
        ("driver.agreement", "fail", "reboot"),
    ),
    (
        "nvml mismatch error",
        healthy(source="none", source_errors={"nvml": {"error": "driver_library_mismatch"}}),
        ("driver.agreement", "fail", "reboot"),
    ),
    (
        "not golden",
        healthy(
            versions={
                **healthy()["versions"],
                "driver_library": "535.1.1",
                "driver_kernel_module": "535.1.1",
            }
        ),
        ("release.conformance", "fail", "reinstall_driver"),
    ),
    (
        "package not held",
        healthy(
            versions={
                **healthy()["versions"],
                "packages": {
                    "manager": "dpkg",
                    "items": [
                        {"name": "nvidia-driver-550", "version": "550.54.15-1", "held": False}
                    ],
                },
            }
        ),
        ("release.conformance", "warn", "none"),
    ),
    (
        "toolkit missing",
        healthy(versions={**healthy()["versions"], "toolkits": []}),
        ("release.conformance", "fail", "reinstall_driver"),
    ),
    ("gpu missing", healthy(gpus=[gpu(0)], device_nodes=None), ("gpu.inventory", "fail", "reboot")),
    ("wrong model", with_gpu0(name="NVIDIA A100-SXM4-80GB"), ("gpu.inventory", "fail", "none")),
    (
        "pcie gen low under load",
        with_gpu0(clock_event_reasons=[], pcie_gen_current=3),
        ("pcie.link", "warn", "reset_gpu"),
    ),
    (
        "pcie replays",
        with_gpu0(pcie_replay_counter=10_000_000),
        ("pcie.replay_rate", "warn", "none"),
    ),
    ("volatile DBE", with_gpu0(ecc_volatile_uncorrected=2), ("ecc.uncorrectable", "fail", "drain")),
    ("lifetime DBE", with_gpu0(ecc_aggregate_uncorrected=1), ("ecc.uncorrectable", "warn", "none")),
    (
        "SRAM threshold",
        with_gpu0(ecc_sram_threshold_exceeded=True),
        ("ecc.uncorrectable", "fail", "rma"),
    ),
    ("many SBE", with_gpu0(ecc_volatile_corrected=50_000), ("ecc.corrected", "warn", "none")),
    (
        "lifetime SBE",
        with_gpu0(ecc_aggregate_corrected=30_000_000),
        ("ecc.corrected", "fail", "rma"),
    ),
    (
        "retired pages full",
        with_gpu0(retired_pages_sbe=60, retired_pages_dbe=3),
        ("ecc.retired_pages", "fail", "rma"),
    ),
    (
        "retirement pending",
        with_gpu0(retired_pages_pending=True),
        ("ecc.retired_pages", "warn", "reboot"),
    ),
    (
        "remap pending",
        with_gpu0(remapped_rows_pending=True, remapped_rows_uncorrectable=4),
        ("remap.pending", "fail", "reset_gpu"),
    ),
    ("remap failure", with_gpu0(remapped_rows_failure=True), ("remap.failure", "fail", "rma")),
    (
        "recovery action",
        with_gpu0(recovery_action="reboot"),
        ("gpu.recovery_action", "fail", "reboot"),
    ),
    (
        "value not recognised",
        with_gpu0(remapped_rows_pending={"error": "unparsable", "detail": "Yes <note>"}),
        ("gpu.unparsable", "fail", "none"),
    ),
    ("xid 48", log(event("xid", xid=48, severity="memory")), ("xid.memory", "fail", "drain")),
    ("xid 119", log(event("xid", xid=119, severity="driver")), ("xid.driver", "fail", "reset_gpu")),
    ("xid 74", log(event("xid", xid=74, severity="nvlink")), ("xid.nvlink", "fail", "drain")),
    (
        "xid 149 fatal",
        log(event("xid", xid=149, text="NETIR Fatal XC0 i0 Link -1")),
        ("xid.nvlink", "fail", "reset_gpu"),
    ),
    (
        "xid 154 reset",
        log(
            event(
                "xid",
                xid=154,
                text="GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            )
        ),
        ("xid.informational", "fail", "reset_gpu"),
    ),
    ("xid 13 is ok", log(event("xid", xid=13)), ("xid.application", "ok", "none")),
    ("fallen off (no xid)", log(event("fallen_off_bus")), ("gpu.fallen_off_bus", "fail", "reboot")),
    ("fallen off (xid 79)", log(event("xid", xid=79)), ("gpu.fallen_off_bus", "fail", "reboot")),
    (
        "aer fatal sysfs",
        healthy(aer=[{"pci": "0000:00:01.0", "role": "upstream", "fatal": {"TOTAL_ERR_FATAL": 1}}]),
        ("aer.uncorrectable", "fail", "drain"),
    ),
    (
        "aer nonfatal log",
        log(event("aer", severity="nonfatal")),
        ("aer.uncorrectable", "fail", "drain"),
    ),
    (
        "aer corrected rate",
        healthy(aer=[{"pci": "0000:19:00.0", "correctable": {"TOTAL_ERR_COR": 1_000_000}}]),
        ("aer.corrected_rate", "warn", "none"),
    ),
    (
        "aer corrected events",
        log(*[event("aer", i, severity="corrected") for i in range(30)]),
        ("aer.corrected_rate", "warn", "none"),
    ),
    (
        "thermal slowdown",
        with_gpu0(clock_event_reasons=["hw_thermal_slowdown"]),
        ("clocks.slowdown", "warn", "none"),
    ),
    ("too hot", with_gpu0(temperature_c=90), ("gpu.temperature", "fail", "drain")),
    ("persistence off", with_gpu0(persistence_mode=False),
     ("node.persistence_mode", "warn", "none")),
    (
        "unexpected MIG",
        with_gpu0(mig_mode_current=True, mig_mode_pending=True),
        ("node.mig_mode", "fail", "reset_gpu"),
    ),
    ("MIG pending", with_gpu0(mig_mode_pending=True), ("node.mig_mode", "warn", "reset_gpu")),
    (
        "no uvm node",
        healthy(
            device_nodes=[
                {"path": "/dev/nvidiactl", "mode": "0666"},
                {"path": "/dev/nvidia0", "mode": "0666"},
                {"path": "/dev/nvidia1", "mode": "0666"},
            ]
        ),
        ("device_nodes", "fail", "reinstall_driver"),
    ),
    (
        "runtime not configured",
        healthy(container_runtime={"docker_installed": True, "configured": False}),
        ("container_runtime", "fail", "fix_container_runtime"),
    ),
    (
        "stale CDI spec (tests/unit/probe/test_cdi_check.py has the rest)",
        healthy(container_runtime={"configured": True, "cdi": [{
            "path": "/etc/cdi/nvidia.yaml", "parsed": True, "kind": "nvidia.com/gpu",
            "driver_versions": {"535.183.01": "/usr/lib/libnvidia-ml.so.535.183.01"}}]}),
        ("container_runtime.cdi", "fail", "fix_container_runtime"),
    ),
    (
        "CPU fallback",
        healthy(frameworks=[{"name": "torch", "result": {"cuda_available": False}}]),
        ("frameworks.cpu_fallback", "fail", "reinstall_driver"),
    ),
    (
        "framework hang",
        healthy(frameworks=[{"name": "torch", "result": {"error": "timeout"}}]),
        ("frameworks.cpu_fallback", "warn", "none"),
    ),
    (
        "another branch's configuration left (tests/unit/pinning/test_other_release_packages.py)",
        healthy(versions={**healthy()["versions"], "packages": {
            **healthy()["versions"]["packages"],
            "residual": [{"name": "nvidia-driver-535", "version": "535.183.01-1"}]}}),
        ("packages.other_release", "warn", "none"),
    ),
    (
        "a GPU NVML cannot open (issue 31)",
        healthy(gpus=[gpu(0), {"index": 1, "handle": {"error": "gpu_is_lost"}}]),
        ("gpu.enumeration", "fail", "reboot"),
    ),
    (
        "a GPU on the PCI bus NVML does not list (issue 31)",
        healthy(gpus=[gpu(0)], gpu_count=1, pci_gpus=[
            {"pci": gpu(0)["pci_bus_id"], "pci_class": "0x030200"},
            {"pci": "0000:9b:00.0", "pci_class": "0x030200"}]),
        ("gpu.enumeration", "fail", "reboot"),
    ),
    (
        "ECC switched off (issue 31)",
        healthy(gpus=[gpu(0, ecc_mode_current=False, ecc_mode_pending=False), gpu(1)]),
        ("ecc.mode", "fail", "reset_gpu"),
    ),
    (
        "kernel log unreadable (issue 31)",
        healthy(kernel_log={"source": None, "events": {"error": "no_kernel_log"}}),
        ("kernel_log.readable", "fail", "none"),
    ),
    (
        "kernel log since the last probe partly unread (issue 31)",
        healthy(kernel_log={"source": "file", "since": "file:7:100", "events": [],
                            "notes": {"skipped_bytes": 4096}}),
        ("kernel_log.complete", "warn", "none"),
    ),
    ("nvml fallback", healthy(source="nvidia-smi"), ("probe.source", "warn", "none")),
    (
        "no source at all",
        healthy(source="none", gpus=[]),
        ("probe.source", "fail", "reinstall_driver"),
    ),
    (
        "cannot tell who manages the driver",
        healthy(driver_container={"root": {"error": "os_error", "detail": "EIO"}}),
        ("driver.owner", "fail", "none"),
    ),
    (
        "next-boot kernel without the module",
        healthy(boot=boot_facts("debian", "550.54.15", "open", new_kernel=True)),
        ("node.next_boot", "fail", "reinstall_driver"),
    ),
]


@pytest.mark.parametrize(
    ("data", "expected"), [(d, e) for _, d, e in CASES], ids=[c[0] for c in CASES]
)
def test_fault_yields_finding(data: dict[str, Any], expected: tuple[str, str, str]) -> None:
    assert expected in findings(data)


def test_every_check_has_a_faulty_case() -> None:
    hit = {e[0].split(".")[0] if e[0].startswith("xid.") else e[0] for _, _, e in CASES}
    # The node-profile checks need a profile: test_node_checks.py covers each on real captures.
    profile_only = {c.id for c in CHECKS if c.id.startswith("node.")} - {
        "node.persistence_mode", "node.mig_mode", "node.next_boot"}
    assert {c.id for c in CHECKS} - profile_only <= hit


def test_sorted_most_severe_first() -> None:
    out = run_checks(
        HostFacts.model_validate(with_gpu0(persistence_mode=False, remapped_rows_failure=True)), EXP
    )
    assert [f.severity.value for f in out] == sorted(
        (f.severity.value for f in out), key=["fail", "warn", "ok"].index
    )


def test_idle_link_is_not_degraded() -> None:
    assert findings(with_gpu0(pcie_gen_current=1)) == []


def test_thresholds_override() -> None:
    th = Thresholds(require_persistence_mode=False)
    assert findings(with_gpu0(persistence_mode=False), th=th) == []


@pytest.mark.parametrize(
    ("data", "th", "expected"),
    [
        # The retired-pages limit is DCGM's current 63 (at or above fails), not the old 60.
        (with_gpu0(retired_pages_sbe=60, retired_pages_dbe=2), Thresholds(), []),
        (
            with_gpu0(retired_pages_sbe=60, retired_pages_dbe=2),
            Thresholds(retired_pages_limit=60),
            [("ecc.retired_pages", "fail", "rma")],
        ),
        (with_gpu0(retired_pages_dbe=15), Thresholds(), []),
        (with_gpu0(retired_pages_dbe=16), Thresholds(), [("ecc.retired_pages", "warn", "rma")]),
        (
            with_gpu0(remapped_rows_pending=True),
            Thresholds(fail_on_remap_pending=False),
            [("remap.pending", "warn", "reset_gpu")],
        ),
        (
            with_gpu0(remapped_rows_failure=True),
            Thresholds(fail_on_remap_failure=False),
            [("remap.failure", "warn", "rma")],
        ),
        (with_gpu0(remapped_rows_uncorrectable=511), Thresholds(), []),
        (
            with_gpu0(remapped_rows_uncorrectable=512),
            Thresholds(),
            [("remap.failure", "fail", "rma")],
        ),
        (with_gpu0(ecc_volatile_uncorrected=2), Thresholds(ecc_uncorrectable_max=2), []),
        (with_gpu0(ecc_volatile_corrected=10_000), Thresholds(), []),
        (
            healthy(aer=[{"pci": "0000:00:01.0", "fatal": {"TOTAL_ERR_FATAL": 1}}]),
            Thresholds(aer_uncorrectable_max=1),
            [],
        ),
        (
            log(*[event("aer", i, severity="corrected") for i in range(30)]),
            Thresholds(aer_correctable_events_max=30),
            [],
        ),
        (with_gpu0(temperature_c=87), Thresholds(), []),
        (
            with_gpu0(temperature_c=86),
            Thresholds(gpu_temperature_max_c=85),
            [("gpu.temperature", "fail", "drain")],
        ),
        (
            with_gpu0(clock_event_reasons=["sw_power_cap"]),
            Thresholds(clock_slowdown_reasons=("sw_power_cap",)),
            [("clocks.slowdown", "warn", "none")],
        ),
    ],
)
def test_thresholds_boundaries(
    data: dict[str, Any], th: Thresholds, expected: list[tuple[str, str, str]]
) -> None:
    assert findings(data, th=th) == expected


def test_matrix_thresholds_drive_the_checks() -> None:
    from fleet.domain.matrix import Policy

    policy = Policy.model_validate(
        {"golden": {"default": "r"}, "thresholds": {"gpu_temperature_max_c": 80}}
    )
    assert findings(with_gpu0(temperature_c=82), th=policy.thresholds) == [
        ("gpu.temperature", "fail", "drain")
    ]


def test_probe_xid_classes_match_catalog() -> None:
    assert {i: x.xid_class for i, x in xid_catalog().items()} == XID_CLASSES


def test_catalog_covers_required_xids() -> None:
    required = {
        13,
        31,
        43,
        45,
        48,
        61,
        62,
        63,
        64,
        68,
        69,
        74,
        79,
        92,
        94,
        95,
        109,
        119,
        120,
        140,
        144,
        145,
        146,
        147,
        148,
        149,
        150,
        154,
    }
    assert required <= set(xid_catalog())
