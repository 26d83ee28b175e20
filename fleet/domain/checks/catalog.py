"""The health and conformance checks: pure functions of HostFacts, put together in one order.

Each check has an id, the facts it reads, and returns findings (severity ok/warn/fail plus a
remediation). A check that lacks the facts it needs (an offline XML import has no kernel log, no
uptime) returns nothing rather than guessing; `probe.source` judges how the facts were obtained.
The checks live by family: `versions`, `gpus`, `memory`, `kernel_log`, `modes`, `host`,
`next_boot` (the pre-reboot gate's decision), and the node-profile families `node_settings`,
`node_mig`, `node_firmware`, `node_links` (the `node.*` ids, against the pool's profile).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks import (
    gpus,
    host,
    kernel_log,
    memory,
    modes,
    next_boot,
    node_firmware,
    node_links,
    node_mig,
    node_settings,
    versions,
)
from fleet.domain.checks.base import Check
from fleet.domain.checks.models import Expectations, Finding, Severity
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = [
    *versions.CHECKS,
    *gpus.CHECKS,
    *memory.CHECKS,
    *kernel_log.CHECKS,
    *modes.CHECKS,
    *host.CHECKS,
    *next_boot.CHECKS,
    *node_settings.CHECKS,
    *node_mig.CHECKS,
    *node_firmware.CHECKS,
    *node_links.CHECKS,
]

CHECK_ALIASES: dict[str, str] = {
    "persistence_mode": "node.persistence_mode",
    "mig.mode": "node.mig_mode",
}
"""Former check ids -> today's: history rows and reports written before the node checks keep
their old ids; compare through `canonical_check`."""


def canonical_check(check_id: str) -> str:
    """Today's id of a check, also for an id history recorded before a rename."""
    return CHECK_ALIASES.get(check_id, check_id)


def run_checks(
    facts: HostFacts,
    expectations: Expectations | None = None,
    thresholds: Thresholds | None = None,
) -> list[Finding]:
    """Every check over one host's facts, most severe first (then by check id and GPU).

    `thresholds` is the matrix's `policy.thresholds`; None means the defaults.
    """
    exp = expectations or Expectations()
    th = thresholds or Thresholds()
    out: list[Finding] = []
    for c in CHECKS:
        out.extend(c.fn(facts, exp, th))
    return sorted(out, key=lambda f: (-f.severity.rank, f.check, f.gpu or "", f.message))


def worst(findings: Iterable[Finding]) -> Severity:
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)
