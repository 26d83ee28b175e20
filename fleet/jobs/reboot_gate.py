"""The one way fleet reboots a host: ask the pre-reboot gate first, right before the reboot.

Every reboot path (apply, rollback, a rollout's reboot step and its rollbacks, the lab demo's
fresh-slate reboot) calls `gated_reboot` after the packages are in: it probes the hosts again
(the boot facts of this moment, never a recorded state), asks `fleet.domain.reboot_gate.
judge_next_boot` whether the next-boot kernel will load the target driver's module, and reboots
only the hosts that pass, with the `RebootPass` the backends (and `scontrol reboot`) require. A
refused host is not rebooted: its result fails with the gate's finding, which names the kernel
and the fix; it stays drained (the callers undrain only verified hosts).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fleet.domain.checks.models import Finding
from fleet.domain.checks.versions import driver_packages
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Release
from fleet.domain.ports import Backend, HostResult
from fleet.domain.reboot_gate import BootVerdict, RebootPass, judge_next_boot

Reboot = Callable[[list[str], RebootPass], Mapping[str, HostResult[None]]]
"""How the passed hosts are rebooted: the backend (default) or the workload manager."""


@dataclass
class GatedReboot:
    """Per host: the reboot's result (a refusal is a failed result with the gate's message),
    the gate's verdict when the host could be probed, and the refusals' findings."""

    results: dict[str, HostResult[None]] = field(default_factory=dict)
    verdicts: dict[str, BootVerdict] = field(default_factory=dict)
    refused: dict[str, Finding] = field(default_factory=dict)


def target_driver(facts: HostFacts, release: Release | None) -> tuple[str | None, str | None]:
    """(driver version, flavor) the next boot must load: the release's; without one, the
    version the installed driver packages agree on (what the next boot loads), else the module
    loaded now."""
    if release is not None:
        return release.driver.version, release.driver.flavor
    found = set(driver_packages(facts).values())
    if len(found) == 1:
        return found.pop(), None
    v = facts.versions
    return v.driver_kernel_module or v.driver_library, v.kernel_module_flavor


def _family(facts: HostFacts) -> str:
    pk = facts.versions.packages
    return "rhel" if pk is not None and pk.manager == "rpm" else "debian"


def gated_reboot(backend: Backend, targets: Mapping[str, Release | None], *,
                 reboot: Reboot | None = None) -> GatedReboot:
    """Reboot each host of `targets` whose next-boot kernel will load its release's driver
    (None: the driver loaded now); refuse the others without touching them."""
    out = GatedReboot()
    hosts = list(targets)
    if not hosts:
        return out
    probed = backend.probe(hosts)
    passed: list[BootVerdict] = []
    for name in hosts:
        got = probed.get(name)
        if got is None or not got.ok or got.value is None:
            why = got.error if got is not None else "no answer"
            out.results[name] = HostResult(
                name, None, ok=False, reachable=got.reachable if got is not None else False,
                error=f"not rebooted: the pre-reboot gate could not probe {name} ({why})")
            continue
        facts = got.value
        driver, flavor = target_driver(facts, targets[name])
        if driver is None:
            out.results[name] = HostResult.failed(
                name, f"not rebooted: no target driver for {name} (none loaded, none given)")
            continue
        rel = targets[name]
        verdict = judge_next_boot(name, facts.boot, driver, flavor=flavor,
                                  os_family=_family(facts),
                                  kernel_constraint=rel.companions.kernel if rel else None)
        out.verdicts[name] = verdict
        if verdict.ok:
            passed.append(verdict)
        else:
            out.refused[name] = verdict.finding
            out.results[name] = HostResult.failed(name, verdict.finding.message)
    if passed:
        gate = RebootPass(passed)
        names = [v.host for v in passed]
        done = (reboot or (lambda ns, g: backend.reboot(ns, gate=g)))(names, gate)
        for n in names:
            out.results[n] = done.get(n) or HostResult.failed(n, "reboot: no answer")
    return out

