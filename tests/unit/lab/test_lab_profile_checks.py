"""A fresh lab host matches matrices/lab.yaml's node profile (no node.* finding), and each
settable node-state fault the lab injects is a node.* finding: the fake NVML read by the real
probe, judged by the real checks. No root, no lab (tests/unit/lab/test_node_state.py's harness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.domain.checks import expectations_for, run_checks
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.loader import load_matrix
from fleet.lab import faults as F
from fleet.lab import hosts
from tests.unit.lab.test_node_state import Gpu, _host, libdir  # noqa: F401  (fixture)

LAB = Path(__file__).parents[3] / "matrices" / "lab.yaml"


def _node_findings(g: Gpu) -> list[tuple[str, str | None]]:
    matrix = load_matrix(LAB).matrix
    facts = HostFacts.model_validate({
        "source": "nvml", "gpu_count": 8, "gpus": g.nvml(),
        "versions": {"driver_library": "580.95.05", "driver_kernel_module": "580.95.05"},
        # the host read (probe_fabric_manager) is not part of this harness
        "fabric_manager": {"running": True, "version": "580.95.05", "service": "active"}})
    exp = expectations_for(matrix, "h100", gpu_model="H100", gpu_count=8)
    return [(f.check, f.gpu) for f in run_checks(facts, exp)
            if f.check.startswith("node.") and f.severity.value != "ok"
            and f.check != "node.next_boot"]


def test_a_fresh_lab_h100_is_conformant(tmp_path: Path, libdir: Path) -> None:  # noqa: F811
    assert _node_findings(Gpu(tmp_path, libdir, _host("H100"))) == []


@pytest.mark.parametrize("spec,check", [
    ("ecc-off", "node.ecc"),
    ("power-cap:gpu=1", "node.power_limit"),
    ("clocks-locked:gpu=2,max=900", "node.clocks"),
    ("compute-exclusive:gpu=3", "node.compute_mode"),
    ("persistence-off", "node.persistence_mode"),
    ("vbios-mismatch:gpu=4", "node.firmware"),
    ("mig-layout-lost", "node.mig_mode"),  # lab.yaml wants MIG off on H100
])
def test_each_settable_fault_is_a_node_finding(tmp_path: Path, libdir: Path,  # noqa: F811
                                               spec: str, check: str) -> None:
    host = _host("H100")
    g = Gpu(tmp_path, libdir, host)
    hosts.update_state(tmp_path, F.effects(F.parse([spec], 8)[0], host).set)
    assert check in {c for c, _ in _node_findings(g)}
