"""Vocabulary of the check catalog: severities, remediations, findings, expectations.

Thresholds are not here: they are the matrix's `fleet.domain.matrix.models.Thresholds`
(`policy.thresholds`), the one place users override them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from fleet.domain.matrix.profiles import NodeProfile

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


@dataclass(frozen=True)
class ReleaseExpectation:
    """The versions a host should run; `expect.expectations_for` builds it from a matrix Release."""

    name: str
    driver_version: str
    cuda_version: str | None = None
    packages_held: tuple[str, ...] = ()
    kernel: str | None = None
    """The release's kernel constraint (">=5.15,<6.9"), checked on the running and the
    next-boot kernel."""
    driver_flavor: str | None = None


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
    secure_boot: Literal["required", "forbidden", "any"] = "any"
    """The pool's Secure Boot policy (`node.next_boot`)."""
    profile: NodeProfile | None = None
    """The pool's node profile (`node.*` checks); see `profile_by_model` for a per-model pick."""
    profile_by_model: dict[str, NodeProfile] = field(default_factory=dict)
    """GPU model key -> profile, when the pool picks one per GPU model (the host's first GPU's
    product name chooses, the longest matching key wins)."""
    extra: dict[str, Any] = field(default_factory=dict)
