"""One host's result on the pin path (`fleet apply`, `fleet rollback`): what was planned,
what changed, the node state, and how it reads as JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.domain.checks import Finding, Severity
from fleet.domain.host_change import HostChange
from fleet.domain.pinning import Change
from fleet.jobs.node_apply import NodeChange

Outcome = Literal["unchanged", "would_change", "changed", "failed", "unreachable", "refused"]


@dataclass
class HostApply:
    host: str
    pool: str | None
    to_release: str
    from_release: str | None = None
    outcome: Outcome = "unchanged"
    changes: list[Change] = field(default_factory=list)
    reboot_required: bool = False
    rebooted: bool = False
    drained: bool = False  # drained by fleet for this change (undrained once verified)
    left_drained: bool = False  # failed after fleet drained it: kept out of service
    error: str | None = None
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    # what the pin does to the host, planned from its facts: packages, holds, pin files, reboot
    change: HostChange | None = None
    drain_through: str | None = None  # the scheduler it is (or would be) drained through
    node: NodeChange | None = None  # its node state against the pool's profile (issue 23)
    packages_change: bool = False  # the pin changes something (packages, holds, pin files)

    @property
    def needs_drain(self) -> bool:
        """Packages change (a module reload), or a node-state step needs idle GPUs."""
        return self.packages_change or (self.node is not None and self.node.drain)

    def as_dict(self) -> dict[str, Any]:
        change = self.change.as_dict() if self.change is not None else None
        return {
            "host": self.host, "pool": self.pool, "from_release": self.from_release,
            "to_release": self.to_release, "outcome": self.outcome,
            "changes": [{"component": c.component, "package": c.package, "from": c.before,
                         "to": c.after, "kind": c.kind} for c in self.changes],
            "holds": change["holds"] if change else [],
            "pin_files": change["files"] if change else [],
            "reboot_reason": change["reboot_reason"] if change else None,
            "other_steps": change["other_steps"] if change else [],
            "drain_through": self.drain_through,
            "reboot_required": self.reboot_required, "rebooted": self.rebooted,
            "drained": self.drained, "left_drained": self.left_drained,
            "error": self.error, "seconds": round(self.seconds, 3),
            "findings": [f.model_dump(mode="json") for f in self.findings
                         if f.severity is not Severity.OK],
            "node_state": self.node.as_dict() if self.node is not None else None,
        }
