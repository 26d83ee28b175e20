"""The drift audit: is each host on an allowed release, exactly, pinned, and reachable?

Pure: host facts and a matrix in, one verdict per host out. It fails closed: a host that cannot
be reached, whose driver cannot be read, or whose packages were not reported is non-conformant,
because "could not verify" must never pass an audit.

A host is conformant when
- it was reachable and probed;
- the running driver was read (NVML or /proc/driver/nvidia/version): a package alone says what
  is installed, not what is loaded, so a host with no driver loaded is not conformant;
- NVML, the loaded kernel module and the driver package name the same driver (three-way);
- that driver is the one of an allowed release (`Matrix.allowed_releases`: every pool's golden
  plus `policy.allowed`) and not a blocked version;
- every package of that release is installed at the release's version and held;
- no package of another release is installed, held or left as `rc` configuration (another
  CUDA toolkit, cuDNN or DCGM generation: `fleet.domain.checks.packages`);
- the running kernel meets the release's kernel constraint (when both are known);
- the distribution's automatic upgrader leaves the release's packages alone: on Debian,
  unattended-upgrades' Package-Blacklist names each of them; on RHEL, fleet's exclude guard in
  dnf-automatic's automatic.conf does. A guard the probe could not read or did not report is
  not verified, and a host that cannot be verified is not conformant.

A conformant host on an allowed release other than its pool's golden is reported as behind its
golden (a note, not drift). Each difference reads "component: have X, want Y".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.checks.packages import leftovers
from fleet.domain.facts import HostFacts, UpgradeGuard
from fleet.domain.matrix.models import Matrix, OsFamily, Release
from fleet.domain.pinning import dnf_automatic_excluded, upstream_of
from fleet.domain.versions import kernel_release_version, satisfies

_DRIVER_PKG = re.compile(r"^(nvidia-driver|nvidia-open|nvidia-utils|kmod-nvidia|nvidia-kmod)")
_BLACKLIST_ENTRY = re.compile(r'"([^"]+)"\s*;')


@dataclass(frozen=True)
class Difference:
    component: str
    have: str
    want: str
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.component}: have {self.have}, want {self.want}"
        return f"{text} ({self.detail})" if self.detail else text

    def as_dict(self) -> dict[str, str]:
        return {"component": self.component, "have": self.have, "want": self.want,
                "detail": self.detail, "text": str(self)}


@dataclass(frozen=True)
class DriftInput:
    """What the audit knows about one host after this run's probe."""

    host: str
    pool: str | None
    reachable: bool
    facts: HostFacts | None = None
    error: str | None = None
    unattended_excluded: frozenset[str] | None = None
    """Package names the automatic upgrader (unattended-upgrades, dnf-automatic) is told to leave
    alone; None: read them from the facts' upgrade guard (`upgrade_excluded`)."""
    in_flight: str | None = None
    """What an unfinished rollout is doing to the host (it is moving on purpose, not drift)."""


@dataclass
class HostDrift:
    host: str
    pool: str | None
    reachable: bool
    conformant: bool
    release: str | None
    """The allowed release the host's driver matches, or None."""
    golden: str | None
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    in_flight: str | None = None
    """Set when a rollout is moving the host: its differences are reported, not drift."""

    @property
    def behind_golden(self) -> bool:
        return self.conformant and self.release is not None and self.release != self.golden

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "pool": self.pool, "reachable": self.reachable,
            "conformant": self.conformant, "release": self.release, "golden": self.golden,
            "behind_golden": self.behind_golden,
            "differences": [d.as_dict() for d in self.differences], "notes": list(self.notes),
            "in_flight": self.in_flight,
        }


def unattended_excluded(text: str) -> frozenset[str]:
    """Package names in an apt.conf `Unattended-Upgrade::Package-Blacklist` block.

    Entries are regular expressions; fleet writes `"name$";` (see `pinning.unattended_blacklist`),
    so escapes and the anchor are stripped back to the name.
    """
    out: set[str] = set()
    in_block = False
    for line in text.splitlines():
        stripped = line.strip()
        if "Package-Blacklist" in stripped:
            in_block = True
        if in_block:
            for m in _BLACKLIST_ENTRY.finditer(stripped):
                out.add(re.sub(r"\\(.)", r"\1", m.group(1)).removeprefix("^").removesuffix("$"))
            if "};" in stripped:
                in_block = False
    return frozenset(out)


def upgrade_excluded(facts: HostFacts) -> tuple[frozenset[str] | None, str]:
    """The package names the host's automatic upgrader leaves alone, from the probe's upgrade
    guard: (names, "") or (None, why they are unknown)."""
    guard = facts.upgrade_guard
    if _os_family(facts) == "rhel":
        if guard is None or (guard.dnf_automatic is None and "dnf_automatic" in guard.unreadable):
            return None, _guard_reason(guard, "dnf_automatic")
        if guard.dnf_automatic is None:
            return frozenset(), ""  # no automatic.conf: fleet's guard is not there
        return dnf_automatic_excluded(guard.dnf_automatic) or frozenset(), ""
    if guard is None or guard.apt_conf is None:
        return None, _guard_reason(guard, "apt_conf")
    out: set[str] = set()
    for text in guard.apt_conf.values():
        out |= unattended_excluded(text)
    return frozenset(out), ""


def _guard_reason(guard: UpgradeGuard | None, key: str) -> str:
    if guard is None:
        return "not reported by the probe"
    return guard.unreadable.get(key, "not reported by the probe")


def _os_family(facts: HostFacts) -> OsFamily:
    pk = facts.versions.packages
    return "rhel" if pk is not None and pk.manager == "rpm" else "debian"


def _driver_package_version(facts: HostFacts, names: Iterable[str]) -> str | None:
    pk = facts.versions.packages
    if pk is None:
        return None
    for name in names:
        p = pk.get(name)
        if p is not None:
            return upstream_of(p.version)
    for p in pk.items:
        if _DRIVER_PKG.match(p.name):
            return upstream_of(p.version)
    return None


def _unread_driver(facts: HostFacts) -> str:
    """Why neither NVML nor the kernel module named the running driver."""
    why = facts.versions.unreadable
    return "; ".join(f"{what}: {why.get(key, 'not reported')}" for what, key in
                     (("NVML", "driver_library"),
                      ("/proc/driver/nvidia/version", "driver_kernel_module")))


def audit_host(inp: DriftInput, matrix: Matrix) -> HostDrift:
    """One host's verdict against the matrix (its pool's golden and the allowed releases)."""
    pool = inp.pool
    golden: Release | None = None
    try:
        golden = matrix.golden_for(pool or "")
    except KeyError:  # the loader rejects this; be defensive anyway
        golden = None
    out = HostDrift(inp.host, pool, inp.reachable, False, None,
                    golden.name if golden else None, in_flight=inp.in_flight)
    diffs, notes = out.differences, out.notes
    if pool is None or pool not in matrix.pools:
        notes.append(f"pool {pool!r} not in the matrix: judged against the default golden")
    if not inp.reachable or inp.facts is None:
        diffs.append(Difference("reachable", "no" if not inp.reachable else "no facts", "yes",
                                inp.error or ""))
        return out
    facts = inp.facts
    osf = _os_family(facts)
    allowed = matrix.allowed_releases()
    if golden is not None:  # golden first, so a tie resolves to it
        allowed = [golden] + [r for r in allowed if r.name != golden.name]
    target_names = [s.name for s in golden.packages(osf) if s.component == "driver"] \
        if golden else []
    v = facts.versions
    lib, kmod = v.driver_library, v.driver_kernel_module
    pkg = _driver_package_version(facts, target_names)
    seen = {k: x for k, x in (("NVML", lib), ("kernel module", kmod), ("package", pkg)) if x}
    if len(set(seen.values())) > 1:
        diffs.append(Difference(
            "driver (three-way)", ", ".join(f"{k} {x}" for k, x in seen.items()),
            "one version", "reboot if the package is newer than the loaded module"))
    loaded = kmod or lib
    if loaded is None:  # the package alone says what is installed, not what runs
        diffs.append(Difference(
            "driver (loaded)", "unknown (" + _unread_driver(facts) + ")",
            golden.driver.version if golden else "a loaded golden driver",
            "neither NVML nor /proc/driver/nvidia/version could be read: the running driver "
            "cannot be verified"))
    installed = loaded or pkg
    blocked = {b.version: b.reason for b in matrix.policy.blocked if b.component == "driver"}
    release: Release | None = None
    if installed is None:
        diffs.append(Difference("driver", "unknown (no NVML, kernel module or package)",
                                golden.driver.version if golden else "a golden driver"))
    else:
        release = next((r for r in allowed if r.driver.version == installed), None)
        if installed in blocked:
            diffs.append(Difference("driver", installed, "not a blocked version",
                                    f"blocked: {blocked[installed]}"))
        if release is None and golden is not None:
            others = sorted({r.driver.version for r in allowed} - {golden.driver.version})
            diffs.append(Difference(
                "driver", installed, golden.driver.version,
                f"golden {golden.name}" + (f"; also allowed: {', '.join(others)}"
                                            if others else "")))
    target = release or golden
    if target is not None:
        excluded, why = ((inp.unattended_excluded, "") if inp.unattended_excluded is not None
                         else upgrade_excluded(facts))
        diffs.extend(_release_differences(facts, target, osf, excluded, why, notes, matrix))
    out.release = release.name if release else None
    out.conformant = not diffs
    if out.behind_golden:
        notes.append(f"on allowed release {out.release}; the pool's golden is {out.golden}")
    return out


def _release_differences(
    facts: HostFacts, release: Release, osf: OsFamily,
    unattended: frozenset[str] | None, unattended_why: str, notes: list[str], matrix: Matrix,
) -> list[Difference]:
    diffs: list[Difference] = []
    specs = release.packages(osf)
    pk = facts.versions.packages
    blocked = {(b.component, b.version): b.reason for b in matrix.policy.blocked}
    if pk is None:
        reason = facts.versions.unreadable.get("packages", "not reported by the probe")
        diffs.append(Difference("packages", f"unknown ({reason})",
                                f"{len(specs)} packages of {release.name} installed and held"))
        if facts.versions.toolkits is not None:
            found = [t.version for t in facts.versions.toolkits]
            if not any(t == release.cuda or t.startswith(release.cuda + ".")
                       or release.cuda.startswith(t + ".") for t in found):
                diffs.append(Difference("cuda", ", ".join(found) or "none", release.cuda))
    else:
        for spec in specs:
            p = pk.get(spec.name)
            if p is None:
                diffs.append(Difference(spec.component, "not installed", spec.version,
                                        spec.name))
                continue
            have = upstream_of(p.version)
            if have != spec.version:
                diffs.append(Difference(spec.component, have, spec.version, spec.name))
            if (spec.component, have) in blocked:
                diffs.append(Difference(spec.component, have, "not a blocked version",
                                        f"blocked: {blocked[(spec.component, have)]}"))
            if not p.held:
                what = "apt-mark hold" if osf == "debian" else "versionlock"
                diffs.append(Difference(f"{spec.name} hold", "not held", "held", what))
        # another release's packages, holds or `rc` configuration, with the command that
        # removes each (fleet apply of the release purges them too)
        for lo in leftovers(pk, [sp.name for sp in specs], osf,
                            {sp.name: sp.component for sp in specs}):
            diffs.append(Difference(f"{lo.component} of another release", lo.describe(osf),
                                    "not on the host", lo.fix(osf)))
    kernel = facts.identity.kernel if facts.identity else None
    constraint = release.companions.kernel
    if constraint and kernel:
        try:
            kv = kernel_release_version(kernel)
        except ValueError:
            kv = None
        if kv is None or not satisfies(kv, constraint):
            diffs.append(Difference("kernel", kernel, constraint))
    nxt = facts.boot.next_kernel if facts.boot is not None else None
    if constraint and nxt and nxt != kernel:  # the kernel the next reboot boots, too
        try:
            nv: str | None = kernel_release_version(nxt)
        except ValueError:
            nv = None
        if nv is None or not satisfies(nv, constraint):
            diffs.append(Difference("next-boot kernel", nxt, constraint))
    upgrader = "unattended-upgrades" if osf == "debian" else "dnf-automatic"
    if unattended is None:
        diffs.append(Difference(upgrader, f"unknown ({unattended_why or 'not reported'})",
                                "the release's packages excluded",
                                "the guard could not be verified"))
    else:
        missing = sorted(s.name for s in specs if s.name not in unattended)
        if missing:
            diffs.append(Difference(upgrader, "not excluded: " + ", ".join(missing), "excluded"))
    return diffs


def audit(inputs: Iterable[DriftInput], matrix: Matrix) -> list[HostDrift]:
    """Every host's verdict, by pool then name."""
    return sorted((audit_host(i, matrix) for i in inputs), key=lambda d: (d.pool or "", d.host))


def summarize(drifts: Iterable[HostDrift]) -> Mapping[str, Any]:
    rows = list(drifts)
    return {
        "hosts": len(rows),
        "conformant": sum(d.conformant for d in rows),
        "non_conformant": sum(not d.conformant and d.in_flight is None for d in rows),
        "in_flight": sum(not d.conformant and d.in_flight is not None for d in rows),
        "unreachable": sum(not d.reachable for d in rows),
        "behind_golden": sum(d.behind_golden for d in rows),
    }
