"""The weekly audit fails closed: what it cannot read is never conformant or healthy.

Issue 31, defects 1 and 2: a host whose running driver cannot be read, a GPU NVML cannot open,
NVML unable to count its GPUs, ECC switched off, an unreadable kernel log.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.checks import expectations_for, run_checks
from fleet.domain.drift import DriftInput, audit_host
from fleet.domain.facts import HostFacts
from fleet.errors import ExitCode
from fleet.history import open_history
from fleet.jobs.hygiene import run_hygiene
from fleet.probe import hostprobe as hp
from tests.unit.hygiene.fakes import (
    NOW,
    FakeBackend,
    FakeHost,
    FakeScheduler,
    example_matrix,
    fleet,
)
from tests.unit.probe.test_kernel_log_cursor import XID79, _line, _root


def _doc(host: FakeHost) -> dict[str, Any]:
    return host.facts().model_dump(mode="json", by_alias=True)


def _driver_not_loaded(host: FakeHost) -> HostFacts:
    d = _doc(host)
    d["source"] = "none"
    d["source_errors"] = {"nvml": {"error": "driver_not_loaded"}}
    d["versions"]["driver_library"] = {"error": "not_available", "detail": "no NVML"}
    d["versions"]["driver_kernel_module"] = {"error": "not_found",
                                             "detail": "/proc/driver/nvidia/version"}
    d["gpus"], d["gpu_count"] = [], None
    return HostFacts.model_validate(d)


def test_a_host_with_no_driver_loaded_is_not_conformant() -> None:
    m = example_matrix()
    h = fleet(m, {"h100": 1})[0]
    verdict = audit_host(DriftInput(h.name, "h100", True, _driver_not_loaded(h)), m)
    assert not verdict.conformant
    loaded = [d for d in verdict.differences if d.component == "driver (loaded)"]
    assert loaded and "not_found" in loaded[0].have and "not_available" in loaded[0].have
    plain = audit_host(DriftInput(h.name, "h100", True, h.facts()), m)
    assert plain.conformant, plain.differences  # the same host with its driver read passes


def test_failing_health_checks_make_the_run_exit_1(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 3})
    history = open_history(str(tmp_path / "h.db"))
    clean = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, m, now=NOW, judge=None,
                        benchmark=False)
    assert clean.exit_code == ExitCode.OK, clean.problems()
    hosts[0].counters[0]["temperature_c"] = 200  # a failing check, no drift, no trend
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, m, now=NOW, judge=None,
                         benchmark=False)
    assert not report.non_conformant
    assert report.exit_code == ExitCode.PROBLEMS
    assert any("gpu.temperature" in p and hosts[0].name in p for p in report.problems())


def test_the_driver_not_loaded_run_exits_1(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 3})
    broken = hosts[0]
    broken.facts = lambda: _driver_not_loaded(FakeHost(broken.name, broken.pool,  # type: ignore[method-assign]
                                                       broken.release))
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), open_history(str(tmp_path / "h.db")),
                         m, now=NOW, judge=None, benchmark=False)
    assert [d.host for d in report.non_conformant] == [broken.name]
    assert report.exit_code == ExitCode.PROBLEMS


# ------------------------------------------------------------------------- defect 2: GPUs
def _checks(facts: HostFacts, gpu_count: int | None = 8) -> list[tuple[str, str]]:
    m = example_matrix()
    exp = expectations_for(m, "h100", gpu_count=gpu_count)
    return [(f.severity.value, f.check) for f in run_checks(facts, exp, m.policy.thresholds)]


def _host() -> FakeHost:
    return fleet(example_matrix(), {"h100": 1})[0]


def test_a_gpu_nvml_cannot_open_is_a_finding() -> None:
    d = _doc(_host())
    d["gpus"][3] = {"index": 3, "handle": {"error": "gpu_is_lost",
                                           "detail": "nvmlDeviceGetHandleByIndex: GPU is lost"}}
    assert ("fail", "gpu.enumeration") in _checks(HostFacts.model_validate(d))
    assert _checks(_host().facts()) == []  # the healthy host says nothing


def test_nvml_unable_to_count_without_an_inventory_count_is_a_finding() -> None:
    d = _doc(_host())
    d["gpus"], d["gpu_count"] = [], {"error": "unknown", "detail": "nvmlDeviceGetCount"}
    assert ("fail", "gpu.enumeration") in _checks(HostFacts.model_validate(d), gpu_count=None)


def test_a_gpu_on_the_pci_bus_that_nvml_does_not_list_is_a_finding() -> None:
    h = _host()
    d = _doc(h)
    d["pci_gpus"] = [{"pci": h.pci(i), "pci_class": "0x030200", "device_id": "0x2330"}
                     for i in range(8)]
    assert _checks(HostFacts.model_validate(d)) == []  # the bus and NVML agree
    d["gpus"] = d["gpus"][:7]  # NVML lost the last board entirely
    found = [f for f in run_checks(HostFacts.model_validate(d), expectations_for(
        example_matrix(), "h100"), example_matrix().policy.thresholds)
        if f.check == "gpu.enumeration"]
    assert found and found[0].severity.value == "fail" and h.pci(7) in found[0].message


def test_ecc_switched_off_is_a_finding() -> None:
    d = _doc(_host())
    d["gpus"][0].update(ecc_mode_current=False, ecc_mode_pending=False,
                        **{k: {"error": "not_supported"} for k in (
                            "ecc_volatile_corrected", "ecc_volatile_uncorrected",
                            "ecc_aggregate_corrected", "ecc_aggregate_uncorrected")})
    assert ("fail", "ecc.mode") in _checks(HostFacts.model_validate(d))


def test_an_unreadable_kernel_log_is_a_finding() -> None:
    d = _doc(_host())
    d["kernel_log"] = {"source": None,
                       "events": {"error": "no_kernel_log", "detail": "dmesg, file, journal"}}
    assert ("fail", "kernel_log.readable") in _checks(HostFacts.model_validate(d))


def _with_log(kernel_log: dict[str, Any]) -> HostFacts:
    d = _doc(_host())
    d["kernel_log"] = {k: v for k, v in kernel_log.items() if k != "tried"}
    return HostFacts.model_validate(d)


def test_kernel_log_lines_the_probe_could_not_read_are_a_warning(tmp_path: Path) -> None:
    """Issue 31 defect 6, judged: the probe notes what it could not read since the last probe
    (a rotated file gone before its tail was read, bytes over the size limit after the cursor);
    Xid events there are unverified, so the audit says so instead of reading as clean."""
    h = _root(tmp_path)
    log = tmp_path / "var/log/kern.log"
    log.write_text(_line(0, "Linux version 6.5.0"))
    cursor = hp.probe_kernel_log(h, None, "file")["cursor"]
    assert ("warn", "kernel_log.complete") not in _checks(_with_log(
        hp.probe_kernel_log(h, None, "file")))  # a first probe reads its boot whole
    with log.open("a") as f:
        f.write(_line(9, XID79))
    os.rename(log, str(log) + ".9")  # rotated under a name the probe does not look for
    log.write_text(_line(19, "usb 1-1: new device"))
    kl = hp.probe_kernel_log(h, cursor, "file")
    assert kl["notes"] == {"rotated_tail_missing": True}
    found = [f for f in run_checks(_with_log(kl), expectations_for(example_matrix(), "h100"),
                                   example_matrix().policy.thresholds)
             if f.check == "kernel_log.complete"]
    assert [f.severity.value for f in found] == ["warn"]
    assert "rotated" in found[0].message


def test_bytes_skipped_after_the_cursor_are_a_warning_older_boots_are_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hp, "MAX_LOG_BYTES", 64 * 1024)
    h = _root(tmp_path)
    log = tmp_path / "var/log/kern.log"
    filler = _line(1, "x" * 200)
    log.write_text(filler * (hp.MAX_LOG_BYTES // len(filler) + 10)
                   + _line(0, "Linux version 6.5.0"))
    first = hp.probe_kernel_log(h, None, "file")
    assert first["notes"].get("skipped_bytes")  # older boots, over the limit: not this boot
    assert ("warn", "kernel_log.complete") not in _checks(_with_log(first))
    with log.open("a") as f:  # more than the limit arrives between two probes
        f.write(filler * (hp.MAX_LOG_BYTES // len(filler) + 10))
    later = hp.probe_kernel_log(h, first["cursor"], "file")
    assert later["notes"].get("skipped_bytes")
    assert ("warn", "kernel_log.complete") in _checks(_with_log(later))
    assert ("warn", "kernel_log.complete") not in _checks(_with_log(
        hp.probe_kernel_log(h, later["cursor"], "file")))  # nothing new, nothing missed


def test_an_xid_finding_counts_the_events_the_probe_did_not_keep(tmp_path: Path) -> None:
    """A flood of one Xid: the probe keeps a bounded list (`truncated` says how many it cut)
    but counts every event by code; the finding reports the count, not the kept list's length."""
    h = _root(tmp_path)
    (tmp_path / "var/log/kern.log").write_text("".join(
        [_line(0, "Linux version 6.5.0")]
        + [_line(10 + i, "NVRM: Xid (PCI:0000:10:00): 13, pid=77, Graphics Exception")
           for i in range(hp.MAX_EVENTS + 500)]))
    kl = hp.probe_kernel_log(h, None, "file")
    assert kl["truncated"] == 500
    facts = _with_log(kl)
    [f] = [f for f in run_checks(facts, expectations_for(example_matrix(), "h100"),
                                 example_matrix().policy.thresholds) if f.check.startswith("xid.")]
    assert f.evidence["count"] == hp.MAX_EVENTS + 500
    assert f"x{hp.MAX_EVENTS + 500} " in f.message
