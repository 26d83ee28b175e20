"""The health and conformance checks: pure functions of HostFacts, put together in one order.

Each check has an id, the facts it reads, and returns findings (severity ok/warn/fail plus a
remediation). A check that lacks the facts it needs (an offline XML import has no kernel log, no
uptime) returns nothing rather than guessing; `probe.source` judges how the facts were obtained.
The checks live by family: `versions`, `gpus`, `memory`, `kernel_log`, `modes`, `host`,
`next_boot` (the pre-reboot gate's decision).
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks import gpus, host, kernel_log, memory, modes, next_boot, versions
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
]


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
