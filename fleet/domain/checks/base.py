"""What every check shares: the Check record, a per-family registrar, and the finding builder.

A check is a pure function of one host's facts, the host's expectations and the matrix
thresholds; each family module (versions, gpus, memory, kernel_log, modes, host) registers its
checks in its own list and `catalog` puts the families together in one order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fleet.domain.checks.models import Expectations, Finding, Remediation, Severity
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.matrix.models import Thresholds

CheckFn = Callable[[HostFacts, Expectations, Thresholds], Iterable[Finding]]

OK, WARN, FAIL = Severity.OK, Severity.WARN, Severity.FAIL


@dataclass(frozen=True)
class Check:
    id: str
    reads: tuple[str, ...]
    fn: CheckFn
    summary: str


def registrar(
    into: list[Check],
) -> Callable[[str, tuple[str, ...], str], Callable[[CheckFn], CheckFn]]:
    """A `@check(id, reads, summary)` decorator that appends to one family's list."""

    def check(id: str, reads: tuple[str, ...], summary: str) -> Callable[[CheckFn], CheckFn]:
        def deco(fn: CheckFn) -> CheckFn:
            into.append(Check(id, reads, fn, summary))
            return fn

        return deco

    return check


def finding(
    check_id: str,
    sev: Severity,
    rem: Remediation,
    msg: str,
    gpu: GpuFacts | str | None = None,
    facts: Iterable[str] = (),
    **evidence: object,
) -> Finding:
    """One finding; a GPU is named by its PCI address (else its index)."""
    if isinstance(gpu, GpuFacts):
        gpu = gpu.pci_bus_id or (str(gpu.index) if gpu.index is not None else None)
    return Finding(
        check=check_id,
        severity=sev,
        remediation=rem,
        message=msg,
        gpu=gpu,
        facts=list(facts),
        evidence=dict(evidence),
    )
