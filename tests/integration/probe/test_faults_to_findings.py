"""Each lab fault, read by the real probe over SSH, yields its finding and remediation; a
healthy, pinned host yields none. One host (h3, A100), probed before and after each fault so the
kernel-log cursor leaves only the fault's own lines."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.history import History, open_history
from fleet.jobs.probe import ProbeResult, probe_inventory
from fleet.lab import lab

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
HOST = "h3"


@pytest.fixture(scope="module")
def history(lab_paths, hosts, tmp_path_factory) -> Iterator[History]:
    lab.reset(lab_paths, HOST)
    hosts[HOST].reboot_and_wait()
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run)}
    pin = subprocess.run(
        [sys.executable, "-m", "fleet", "--db", str(tmp_path_factory.mktemp("p") / "pin.db"),
         "apply", "-m", str(ROOT / "matrices" / "example.yaml"), "-i",
         str(ROOT / "inventories" / "lab.py"), "-r", "r580-cuda13.0", "-l", HOST],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert pin.returncode == 0, pin.stderr
    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)
    try:
        with open_history(str(tmp_path_factory.mktemp("h") / "fleet.db")) as h:
            yield h
    finally:
        os.environ.pop("FLEET_LAB_DIR", None)
        lab.reset(lab_paths, HOST)
        # a new boot: AER and volatile ECC counters count since boot, and the next tests' pin
        # verification would read this module's aer-fatal and ECC faults on h3
        hosts[HOST].reboot_and_wait()


def probe(history: History) -> ProbeResult:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    (result,) = probe_inventory(ROOT / "inventories" / "lab.py", [HOST], history,
                                now=lambda: datetime.now(UTC), matrix=matrix, frameworks=False)
    assert result.reachable and result.facts is not None, result.error
    return result


def notable(result: ProbeResult, *, all_: bool = False) -> set[tuple[str, str, str]]:
    return {(f.check, f.severity.value, f.remediation) for f in result.findings
            if all_ or f.severity.value != "ok"}


def test_a_healthy_pinned_host_has_no_findings(history) -> None:
    result = probe(history)
    assert notable(result) == set(), [f.message for f in result.findings
                                      if f.severity.value != "ok"]


FAULTS = [  # fault, (check, severity, remediation)
    ("ecc-uncorrected:gpu=1", ("ecc.uncorrectable", "fail", None)),
    ("remap-pending:gpu=0", ("remap.pending", "fail", "reset_gpu")),
    ("remap-failure:gpu=0", ("remap.failure", "fail", "rma")),
    ("thermal:gpu=0,temp=92", ("gpu.temperature", "fail", "drain")),
    ("thermal:gpu=2,temp=80", ("clocks.slowdown", "warn", "none")),
    ("xid:gpu=0,code=48", ("xid.memory", "fail", "drain")),
    ("xid:gpu=0,code=13", ("xid.application", "ok", None)),
    ("xid:gpu=0,code=79", ("gpu.fallen_off_bus", "fail", None)),
    ("gpu-lost:gpu=3", ("gpu.fallen_off_bus", "fail", None)),
    ("aer-fatal:gpu=0", ("aer.uncorrectable", "fail", None)),
    # aer-corrected is left out: the one-probe rate check waits for 10 minutes of uptime (a
    # fresh lab host has seconds); the weekly trend audit judges corrected-AER storms instead
    ("ecc-corrected:gpu=0,count=20000", ("ecc.corrected", "warn", None)),
]


@pytest.mark.parametrize(("fault", "expected"), FAULTS, ids=[f for f, _ in FAULTS])
def test_fault_yields_its_finding(history, lab_paths, fault: str,
                                  expected: tuple[str, str, str | None]) -> None:
    """None as remediation: any, as long as a failing finding says what to do."""
    probe(history)  # moves the kernel-log cursor past anything earlier
    lab.inject(lab_paths, HOST, [fault])
    try:
        found = notable(probe(history), all_=True)
    finally:
        lab.reset(lab_paths, HOST)
    check, severity, remediation = expected
    got = {r for c, s, r in found if (c, s) == (check, severity)}
    assert got, found
    if remediation is not None:
        assert remediation in got, found
    elif severity == "fail":
        assert got - {"none"}, found
