"""History rows of one probe: the snapshot's columns, per-GPU counter samples and findings,
from facts (pure).

Shared by the ORM writers (`fleet.jobs.record`) and the stdlib writer `fleet probe` uses on a
SQLite history (`fleet.history.lite`), so all of them store the same rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from fleet.domain.checks.models import Finding
from fleet.domain.facts import GpuFacts, HostFacts


def _aer_totals(facts: HostFacts, pci: str | None) -> dict[str, int | None]:
    out: dict[str, int | None] = {"aer_corrected": None, "aer_nonfatal": None, "aer_fatal": None}
    for entry in facts.aer or []:
        if entry.role == "device" and pci is not None and entry.pci == pci:
            out = {
                "aer_corrected": entry.total("correctable"),
                "aer_nonfatal": entry.total("nonfatal"),
                "aer_fatal": entry.total("fatal"),
            }
    return out


def _xid_counts(facts: HostFacts, gpu: GpuFacts) -> dict[str, int]:
    """The GPU's Xid events by code since the last probe: the probe's counts over everything
    it read (its event list may be cut, `KernelLog.truncated`), else its events counted."""
    log = facts.kernel_log
    if log is not None and log.xid_counts is not None and log.events is not None:
        per = log.xid_counts.get(gpu.pci_bus_id or "") or {}
        return {k: int(v) for k, v in sorted(per.items())}
    counts = Counter(
        str(e.xid)
        for e in facts.events()
        if e.kind == "xid" and e.xid is not None and e.pci is not None and e.pci == gpu.pci_bus_id
    )
    return dict(sorted(counts.items()))


def gpu_rows(facts: HostFacts) -> list[dict[str, Any]]:
    """Per-GPU counter samples, the columns the trend queries read."""
    rows = []
    for pos, g in enumerate(facts.gpus):
        rows.append({
            "gpu_index": g.index if g.index is not None else pos,
            "uuid": g.uuid,
            "pci_bus_id": g.pci_bus_id,
            "ecc_corrected_volatile": g.ecc_volatile_corrected,
            "ecc_uncorrected_volatile": g.ecc_volatile_uncorrected,
            "ecc_corrected_aggregate": g.ecc_aggregate_corrected,
            "ecc_uncorrected_aggregate": g.ecc_aggregate_uncorrected,
            "retired_sbe": g.retired_pages_sbe,
            "retired_dbe": g.retired_pages_dbe,
            "retired_pending": g.retired_pages_pending,
            "remapped_corrected": g.remapped_rows_correctable,
            "remapped_uncorrected": g.remapped_rows_uncorrectable,
            "remapped_pending": g.remapped_rows_pending,
            "remapped_failure": g.remapped_rows_failure,
            "pcie_replay": g.pcie_replay_counter,
            **_aer_totals(facts, g.pci_bus_id),
            "boot_id": facts.identity.boot_id if facts.identity is not None else None,
            "xid_counts": _xid_counts(facts, g),
        })
    return rows


def finding_rows(facts: HostFacts, findings: Sequence[Finding]) -> list[dict[str, Any]]:
    by_pci = {g.pci_bus_id: g.index for g in facts.gpus if g.pci_bus_id}
    rows = []
    for f in findings:
        index = None
        if f.gpu is not None:
            index = by_pci.get(f.gpu)
            if index is None and f.gpu.isdigit():
                index = int(f.gpu)
        rows.append({
            "check_id": f.check,
            "severity": f.severity.value,
            "gpu_index": index,
            "message": f.message,
            "remediation": f.remediation,
            "details": {"evidence": f.evidence, "gpu": f.gpu},
        })
    return rows


def snapshot_columns(facts: HostFacts, findings: Sequence[Finding]) -> dict[str, Any]:
    """What a reachable host's snapshot stores of its facts and findings (every writer's
    `source`, `driver_nvml`, `driver_kmod`, `facts`, `gpus` and `findings`)."""
    return {
        "source": facts.source, "driver_nvml": facts.versions.driver_library,
        "driver_kmod": facts.versions.driver_kernel_module, "facts": facts.to_json_dict(),
        "gpus": gpu_rows(facts), "findings": finding_rows(facts, findings),
    }


def gpu_model(facts: HostFacts) -> str | None:
    """The host's GPU model as the hosts table keeps it: its first GPU's name."""
    return facts.gpus[0].name if facts.gpus else None
