"""Another release's packages on a host: installed, held, removed with configuration left (apt),
or a versionlock left (dnf).

A host that was rolled back from r580 to r570 by hand (or by an older fleet) can keep
`cuda-toolkit-13-0` and `cudnn9-cuda-13` installed and held, and `nvidia-driver-580-open` in
dpkg's removed-configuration-left (`rc`) state. None of it breaks the driver, but the host is not
the release it claims: the next `apt-get upgrade` or a CDI refresh can pick the other toolkit up.
This check and the drift audit (`fleet.domain.drift`) flag each such package with the command
that removes it; `fleet apply` of the host's release purges the installed ones too
(`fleet.domain.pinning`; it reads installed packages only, so an `rc` entry or a dangling lock
is left to the command the finding gives).

Which names belong to "another release" is NVIDIA's naming (`fleet.domain.matrix.packages
.extraneous`): a variant of one of the release's own package names (another branch, CUDA or
cuDNN major) or the other generation of a component the release manages (DCGM 3 next to 4).
Components the release does not manage are left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fleet.domain.checks.models import Expectations, Finding, ReleaseExpectation, Severity
from fleet.domain.facts import HostFacts, Packages
from fleet.domain.matrix import packages as truth
from fleet.domain.matrix.models import OsFamily, Thresholds

CHECK_ID = "packages.other_release"
READS = ("versions.packages",)
SUMMARY = "no package, hold or leftover configuration of another release"


@dataclass(frozen=True)
class Leftover:
    """One package of another release the host still carries."""

    name: str
    component: str
    version: str
    held: bool
    residual: bool  # removed, configuration left (dpkg `rc`)

    def describe(self, family: OsFamily = "debian") -> str:
        if self.residual and family == "rhel":
            return f"{self.name} not installed, its versionlock left"
        if self.residual:
            return f"{self.name} removed, configuration left (rc)" + (", held" if self.held
                                                                     else "")
        return f"{self.name} {self.version}" + (" (held)" if self.held else "")

    def fix(self, family: OsFamily) -> str:
        """The commands that take it off the host (the hold first: apt refuses otherwise)."""
        if family == "debian":
            unhold = [f"apt-mark unhold {self.name}"] if self.held else []
            return " && ".join([*unhold, f"apt-get purge -y {self.name}"])
        unlock = [f"dnf versionlock delete {self.name}"] if self.held else []
        remove = [] if self.residual else [f"dnf -y remove {self.name}"]
        return " && ".join([*unlock, *remove])


def family_of(packages: Packages) -> OsFamily:
    return "rhel" if packages.manager == "rpm" else "debian"


def leftovers(packages: Packages, wanted: Sequence[str], family: OsFamily,
              components: Mapping[str, str] | None = None) -> list[Leftover]:
    """The packages of another release among `packages` (installed and `rc`), by name.

    `wanted` names the release's packages; `components` gives their components when known
    (the matrix does), else NVIDIA's naming guesses them (a name it does not know manages none).
    """
    comps = dict(components or {})
    pairs = [(n, comps.get(n) or truth.component_of(n, family) or "") for n in wanted]
    out: list[Leftover] = []
    for residual, items in ((False, packages.items), (True, packages.residual)):
        by_name = {p.name: p for p in items}
        for name, component in truth.extraneous(by_name, pairs, family).items():
            p = by_name[name]
            out.append(Leftover(name, component, p.version, p.held, residual))
    return sorted(out, key=lambda lo: (lo.residual, lo.name))


def _host_release(packages: Packages, exp: Expectations) -> ReleaseExpectation | None:
    """The expected release the host's packages match best (the golden wins a tie)."""
    if exp.release is None:
        return None
    installed = {p.name for p in packages.items}
    best = exp.release
    score = len(set(best.packages_held) & installed)
    for r in exp.allowed:
        s = len(set(r.packages_held) & installed)
        if s > score:
            best, score = r, s
    return best


def other_release_packages(facts: HostFacts, exp: Expectations,
                           th: Thresholds) -> Iterable[Finding]:
    """Warn for each package of another release: installed, held, or its configuration left."""
    pk = facts.versions.packages
    if pk is None:
        return
    release = _host_release(pk, exp)
    if release is None or not release.packages_held:
        return
    family = family_of(pk)
    for lo in leftovers(pk, release.packages_held, family):
        yield Finding(
            check=CHECK_ID, severity=Severity.WARN, remediation="none",
            message=f"{lo.describe(family)}: {lo.component} of another release than "
                    f"{release.name}; remove it: {lo.fix(family)}"
                    + ("" if lo.residual else f" (or `fleet apply -r {release.name}`)"),
            facts=list(READS),
            evidence={"package": lo.name, "component": lo.component, "version": lo.version,
                      "held": lo.held, "residual": lo.residual, "release": release.name,
                      "fix": lo.fix(family)})
