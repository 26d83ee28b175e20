"""A stale CDI spec on a lab host (fault `stale-cdi`), read by the real probe over SSH: the check
fails it with `nvidia-ctk cdi generate`, the pin's verify gate (`health_findings`) fails the host,
and once a spec for the installed driver is written the finding goes; `fleet lab reset` removes
the file. One host, three probes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.domain.checks import Finding, Severity
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.ports import HostRef
from fleet.history import History, open_history
from fleet.jobs.apply import health_findings
from fleet.jobs.probe import ProbeResult, probe_inventory
from fleet.lab import lab
from fleet.lab.faults import CDI_SPEC, cdi_spec

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrices" / "example.yaml"
HOST = "h4"
CMD = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def probe(history: History) -> ProbeResult:
    matrix = load_matrix(MATRIX).matrix
    (result,) = probe_inventory(ROOT / "inventories" / "lab.py", [HOST], history,
                                now=lambda: datetime.now(UTC), matrix=matrix, frameworks=False)
    assert result.reachable and result.facts is not None, result.error
    return result


def cdi(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.check == "container_runtime.cdi"]


def test_stale_cdi_spec_found_then_gone_after_regenerating(lab_paths, hosts, tmp_path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("FLEET_LAB_DIR", str(lab_paths.run))
    lab.reset(lab_paths, HOST)
    h = hosts[HOST]
    try:
        with open_history(str(tmp_path / "fleet.db")) as history:
            before = probe(history)
            assert before.facts is not None and before.facts.container_runtime is not None
            installed = before.facts.versions.driver_library
            assert installed, before.facts.versions.unreadable
            assert before.facts.container_runtime.cdi == [] and cdi(before.findings) == []

            old = "535.183.01" if installed != "535.183.01" else "570.133.20"
            lab.inject(lab_paths, HOST, [f"stale-cdi:version={old}"])
            stale = probe(history)
            (f,) = cdi(stale.findings)
            assert (f.severity, f.remediation, f.evidence["command"]) == (
                Severity.FAIL, "fix_container_runtime", CMD)
            assert f.evidence["spec_driver"] == [old] and f.evidence["installed"] == installed
            assert f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{old}" in \
                f.evidence["missing_host_paths"]
            # the gate the pin's verify step runs after pinning fails this host
            matrix = load_matrix(MATRIX).matrix
            release = next(r for r in matrix.releases if r.driver.version == installed)
            assert stale.facts is not None
            gate = health_findings(stale.facts, release, HostRef(HOST), matrix)
            assert any(g.check == "container_runtime.cdi" and g.severity is Severity.FAIL
                       for g in gate)

            # regenerate (what `nvidia-ctk cdi generate` writes for the installed driver)
            spec = cdi_spec(installed, before.facts.gpu_count or 0)
            h.sh(f"cat > {CDI_SPEC} <<'EOF'\n{spec}EOF\n")
            fresh = probe(history)
            assert cdi(fresh.findings) == []
            assert fresh.facts is not None and fresh.facts.container_runtime is not None
            (read,) = fresh.facts.container_runtime.cdi or []
            assert (read.path, read.missing_count, list(read.driver_versions)) == (
                CDI_SPEC, 0, [installed])
    finally:
        lab.reset(lab_paths, HOST)
    assert h.sh(f"test -e {CDI_SPEC}", check=False)[0] == 1  # the fault's undo removed it
