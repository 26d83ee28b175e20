"""Golden diagnoses over the real captures (tests/data/realdata, see SOURCES.md there) and over
the bundles derived from them (tests/data/diagnose/bundles, written by make_bundles.py there).

Set FLEET_REGEN_GOLDEN=1 to rewrite the golden files after a deliberate change; review the diff.
The verdicts are also asserted by hand below, so a regenerated golden cannot hide a regression.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleet.domain.diagnose.bundle import evidence
from fleet.domain.diagnose.questions import diagnose

DATA = Path(__file__).parents[2] / "data"
REAL = DATA / "realdata"
GOLDEN = DATA / "diagnose" / "golden"
BUNDLES = DATA / "diagnose" / "bundles"
REGEN = os.environ.get("FLEET_REGEN_GOLDEN") == "1"

SMI = sorted(p for d in ("nvidia-smi-xml", "nvidia-smi-q-text") for p in (REAL / d).iterdir()
             if not p.name.endswith(".expected.json"))
LOGS = sorted(p for p in (REAL / "kernel-logs").iterdir() if p.suffix == ".log")
BUNDLE_DIRS = sorted(p for p in BUNDLES.iterdir() if p.is_dir())


def _check(golden: Path, actual: dict[str, object]) -> None:
    text = json.dumps(actual, indent=2, sort_keys=True) + "\n"
    if REGEN or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
        if not REGEN:
            pytest.fail(f"wrote new golden {golden}; review it and rerun")
    assert json.loads(golden.read_text()) == json.loads(text)


def _capture(path: Path) -> dict[str, object]:
    key = {".xml": "nvidia-smi-q.xml", ".txt": "nvidia-smi-q.txt", ".log": "kernel.log"}
    return diagnose(evidence({key[path.suffix]: path.read_text()})).as_dict()


@pytest.mark.parametrize("path", SMI + LOGS, ids=lambda p: p.name)
def test_real_capture_golden(path: Path) -> None:
    _check(GOLDEN / "realdata" / path.parent.name / (path.name + ".json"), _capture(path))


@pytest.mark.parametrize("path", BUNDLE_DIRS, ids=lambda p: p.name)
def test_bundle_golden(path: Path) -> None:
    files = {p.name: p.read_text() for p in path.iterdir()}
    _check(GOLDEN / "bundles" / (path.name + ".json"), diagnose(evidence(files)).as_dict())


# The verdict each real capture must give, checked by hand against the capture.
REAL_VERDICTS = {
    # HW Slowdown and HW Power Brake Slowdown are Active on every GPU of this capture
    "gpud__h100-80gb-hbm3-x8__535.161.08.txt": "throttled",
    # "Pending : Yes" under Remapped Rows
    "gpud__a10__535.129.03__remapped-rows-pending.txt": "hardware",
    # SW Power Cap Active
    "thamada-gls__A10__550.90.12.txt": "throttled",
    # x8 link on a x16 card (Link Width Max 16x, Current 8x)
    "nvidia-k8s-test-infra__qx-l40s.xml": "pcie",
    # python holds 20 GiB on GPUs at 0 % utilization
    "gpud__rtx-4090-x8__535.154.05.txt": "gpu_idle",
    # an H100 at 100 % under gpu_burn, nothing throttled
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt": "healthy",
    "nvidia-k8s-test-infra__qx-h100.xml": "healthy",
    "telegraf__rtx-3090-v12.xml": "healthy",
    # NVLink5 Xids 144/145/149
    "issue__gpud-pr-1174-1160__xid144-145-149-nvlink5.log": "nvlink",
    # Xid 79 and "GPU has fallen off the bus"
    "issue__akash-support-209__xid79-fallen-off-bus__535.161.07.log": "hardware",
    # Xid 48 DBE, row remap, contained
    "gpud__xid-48-63-94__dbe-rowremap-contained.log": "hardware",
    # only application Xids (13, 43): informational (the process's bug), nothing stands out
    "gpud__xid-13-43__sm-exception-pytorch.log": "healthy",
}


@pytest.mark.parametrize("name", sorted(REAL_VERDICTS))
def test_real_capture_verdict(name: str) -> None:
    path = next(p for p in SMI + LOGS if p.name == name)
    assert _capture(path)["verdict"] == REAL_VERDICTS[name]


BUNDLE_VERDICTS = {
    "healthy": "healthy", "power-capped": "throttled", "pcie-downtrain": "pcie",
    "gpu-memory-leak": "gpu_memory", "far-numa": "numa", "cpu-saturated": "host_cpu",
    "full-disk": "disk", "queueing": "queueing", "host-swapping": "host_memory",
    "driver-not-loaded": "fallback", "host-only": "could_not_judge",
}


def test_every_bundle_has_a_verdict_here() -> None:
    assert {p.name for p in BUNDLE_DIRS} == set(BUNDLE_VERDICTS)


@pytest.mark.parametrize("name", sorted(BUNDLE_VERDICTS))
def test_bundle_verdict(name: str) -> None:
    files = {p.name: p.read_text() for p in (BUNDLES / name).iterdir()}
    d = diagnose(evidence(files))
    assert d.verdict == BUNDLE_VERDICTS[name]
    if name not in ("healthy", "host-only"):
        assert [f.cls for f in d.findings if f.severity != "info"] == [d.verdict]
