"""What every check shares: the Check record, a per-family registrar, and the finding builder.

A check is a pure function of one host's facts, the host's expectations and the matrix
thresholds; each family module (versions, gpus, memory, kernel_log, modes, host) registers its
checks in its own list and `catalog` puts the families together in one order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from fleet.domain.checks.models import Expectations, Finding, Remediation, Severity
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.matrix.models import Thresholds
from fleet.domain.matrix.profiles import NodeProfile, best_key

T = TypeVar("T")

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


def gpu_arg(g: GpuFacts) -> str:
    """How an `nvidia-smi -i` argument names this GPU: its PCI address, else its index."""
    return g.pci_bus_id or (str(g.index) if g.index is not None else "<gpu>")


def unreadable(check_id: str, g: GpuFacts | None, field: str, reason: str,
               wanted: object = None) -> Finding:
    """A value the profile asks about could not be read: a warning, never a pass."""
    who = g.label if g is not None else "host"
    return finding(check_id, WARN, "none",
                   f"{who}: {field} unreadable ({reason}); wanted {_show(wanted)}", g,
                   facts=[f"gpus.{field}" if g is not None else field],
                   unreadable=True, reason=reason, wanted=wanted, found=None)


def mismatch(check_id: str, sev: Severity, rem: Remediation, g: GpuFacts | None, what: str,
             wanted: object, found: object, fix: str, field: str, note: str = "") -> Finding:
    """A difference from the profile: names the GPU, the wanted and found values, the fix."""
    who = g.label if g is not None else "host"
    return finding(check_id, sev, rem,
                   f"{who}: {what} {_show(found)}, wanted {_show(wanted)}"
                   + (f" ({note})" if note else "") + f"; fix: {fix}", g,
                   facts=[f"gpus.{field}" if g is not None else field],
                   wanted=wanted, found=found, fix=fix)


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def profile_of(facts: HostFacts, exp: Expectations) -> NodeProfile | None:
    """The node profile this host must match: the pool's, or its pick for the host's GPU model
    (the first GPU's product name, else the pool's gpu_model)."""
    if exp.profile is not None or not exp.profile_by_model:
        return exp.profile
    name = next((g.name for g in facts.gpus if g.name), None) or exp.gpu_model
    key = best_key(list(exp.profile_by_model), name) if name else None
    return exp.profile_by_model[key] if key is not None else None


def for_model(table: dict[str, T] | None, g: GpuFacts) -> T | None:
    """A profile's per-GPU-model entry for this GPU (longest matching key), or None."""
    if not table or not g.name:
        return None
    key = best_key(list(table), g.name)
    return table[key] if key is not None else None
