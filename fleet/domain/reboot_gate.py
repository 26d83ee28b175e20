"""The pre-reboot gate: will the kernel this host boots next load the target driver's module?

A reboot is the most dangerous thing fleet does: when the next-boot kernel has no nvidia module
of the target version (a DKMS build failed, an unattended kernel upgrade arrived after the last
build), or Secure Boot is on and the module is unsigned or signed by a key that is not enrolled,
the host comes back without GPUs, and a rollback reboots into the same kernel and fails again.

`judge_next_boot` decides from the probe's boot facts (`fleet.domain.boot_facts`), fresh from
the host right before the reboot, with the same pure decision the `node.next_boot` check makes
(`fleet.domain.checks.next_boot.next_boot_finding`). Unknown never passes: a next-boot kernel
that could not be resolved, a module or a Secure Boot state that could not be read refuse.

Only a passing `BootVerdict` can make a `RebootPass`, and every backend's `reboot` (and a
scheduler's `reboot_nodes`) refuses hosts that no pass covers: the jobs layer gets one through
`fleet.jobs.reboot_gate.gated_reboot`, the one function every reboot path calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from fleet.domain.boot_facts import BootFacts
from fleet.domain.checks.models import Finding, Severity
from fleet.domain.checks.next_boot import next_boot_finding

_SEAL = object()  # only judge_next_boot seals a verdict


class RebootNotGated(RuntimeError):
    """A reboot was asked for a host the pre-reboot gate did not pass."""


@dataclass(frozen=True)
class BootVerdict:
    """The gate's answer for one host: `ok`, and the finding that says why (or why not)."""

    host: str
    ok: bool
    kernel: str | None
    driver: str
    finding: Finding
    _seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("a BootVerdict comes from judge_next_boot only")


class RebootPass:
    """Proof that the gate passed these hosts. Backends refuse a reboot it does not cover."""

    __slots__ = ("hosts",)

    def __init__(self, verdicts: Iterable[BootVerdict]) -> None:
        hosts = set()
        for v in verdicts:
            if not isinstance(v, BootVerdict) or v._seal is not _SEAL:  # noqa: SLF001
                raise TypeError("a RebootPass is made from the gate's verdicts only")
            if not v.ok:
                raise RebootNotGated(f"{v.host}: {v.finding.message}")
            hosts.add(v.host)
        self.hosts: frozenset[str] = frozenset(hosts)

    def check(self, hosts: Sequence[str]) -> None:
        """Raise unless every host was passed by the gate."""
        missing = sorted(set(hosts) - self.hosts)
        if missing:
            raise RebootNotGated(
                f"not rebooting {', '.join(missing)}: the pre-reboot gate did not pass "
                "(every reboot goes through fleet.jobs.reboot_gate.gated_reboot)")


def require_pass(gate: object, hosts: Sequence[str]) -> None:
    """What a backend's `reboot` calls first: no pass, or a pass not covering `hosts`, raises."""
    if not isinstance(gate, RebootPass):
        raise RebootNotGated("reboot without a RebootPass: every reboot goes through "
                             "fleet.jobs.reboot_gate.gated_reboot")
    gate.check(hosts)


def judge_next_boot(host: str, boot: BootFacts | None, driver: str, *,
                    flavor: str | None = None, os_family: str = "debian",
                    kernel_constraint: str | None = None) -> BootVerdict:
    """The gate's verdict: `fleet.domain.checks.next_boot.next_boot_finding`, sealed. (The
    pool's Secure Boot policy is the check's business, not a reason to refuse a reboot.)"""
    f = next_boot_finding(host, boot, driver, flavor=flavor, os_family=os_family,
                          kernel_constraint=kernel_constraint)
    ok = f.severity is Severity.OK
    kernel = boot.next_kernel if boot is not None else None
    return BootVerdict(host, ok, kernel, driver, f, _SEAL)
