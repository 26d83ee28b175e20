"""Vocabulary of the check catalog: severities, remediations, findings, thresholds, expectations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

Remediation = Literal[
    "none", "reset_gpu", "reboot", "drain", "rma", "reinstall_driver", "fix_container_runtime"
]


class Severity(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return {"ok": 0, "warn": 1, "fail": 2}[self.value]


class Finding(BaseModel):
    """One verdict of one check, about the host or one GPU."""

    check: str
    severity: Severity
    remediation: Remediation = "none"
    message: str
    gpu: str | None = None
    """The GPU's PCI address ("0000:9b:00.0"), its index when the address is unknown, or None."""
    facts: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)


class CheckThresholds(BaseModel):
    """Numeric limits of the health checks.

    Defaults follow DCGM and node-health-check practice (shared/reference/nvidia.md §3-§4). Every
    field here should later be read from the matrix policy (`Policy.thresholds`); the adapter is a
    field-by-field copy once that model settles.
    """

    ecc_corrected_volatile_warn: int = 10_000
    """Volatile corrected ECC errors (since driver load) above which to warn (Azure NHC limit)."""
    ecc_corrected_aggregate_fail: int = 20_000_000
    """Lifetime corrected ECC errors above which to fail (Azure NHC H100 DRAM limit)."""
    retired_pages_fail: int = 63
    """SBE+DBE retired pages at which the table is considered full (DCGM, formerly 60)."""
    retired_pages_dbe_warn: int = 15
    """DBE retired pages above which to warn (DCGM soft limit)."""
    remap_uncorrectable_fail: int = 512
    """Uncorrectable row remaps at which the GPU is in a bad state (DCGM)."""
    pcie_replays_per_lane_per_min: dict[int, float] = Field(
        default_factory=lambda: {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
    )
    """Allowed PCIe replays per minute per lane by generation (DCGM, BER 1e-12)."""
    aer_corrected_per_hour_warn: float = 100.0
    """sysfs TOTAL_ERR_COR per hour of uptime above which to warn."""
    aer_corrected_events_warn: int = 20
    """Corrected AER events in the kernel log window above which to warn."""
    slowdown_reasons: list[str] = Field(
        default_factory=lambda: [
            "hw_slowdown",
            "hw_thermal_slowdown",
            "sw_thermal_slowdown",
            "hw_power_brake_slowdown",
        ]
    )
    """Clock-event reasons that mean thermal or power trouble (sw_power_cap and idle are normal)."""
    require_persistence_mode: bool = True
    pcie_link_only_when_busy: bool = True
    """The link legitimately trains down at idle; skip the check while the GPU reports idle."""


@dataclass(frozen=True)
class ReleaseExpectation:
    """The versions a host should run (adapted from the matrix's Release later)."""

    name: str
    driver_version: str
    cuda_version: str | None = None
    packages_held: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expectations:
    """What this host should look like; every field is optional (None = not checked)."""

    release: ReleaseExpectation | None = None
    """The golden release of the host's pool."""
    allowed: tuple[ReleaseExpectation, ...] = ()
    """Other releases the policy allows (conformant, reported as drift-free)."""
    gpu_count: int | None = None
    gpu_model: str | None = None
    """Substring of the product name, e.g. "H100"."""
    mig_mode: bool | None = None
    container_runtime: bool = False
    """The NVIDIA container runtime must be configured (Kubernetes or docker pools)."""
    extra: dict[str, Any] = field(default_factory=dict)
