"""What pinning a release would change on one host, said in an operator's words (dry runs).

A `PinPlan` is steps for a machine to run; a dry run must tell a person what those steps do to
the host: which packages are installed, upgraded, downgraded or removed (from which version to
which), which packages get held or released (`apt-mark hold|unhold`, `dnf versionlock
add|delete`), which managed pin files are written, and whether the host reboots and why.

Pure: everything comes from the plan, which carries the facts it was made from (installed
packages, holds, the managed files, the loaded kernel module), and the release's packages.
`HostChange.changed` is true exactly when `PinPlan.changed` is: a dry run never says "would
change" without saying what (tested for every combination in tests/unit/pinning).

Holds follow the deploy (`fleet.domain.pinning`): every package of the release ends held; a
held package that the transaction removes is released first. With apt a hold is by name, so a
held package that moves to another version stays held (released for the one transaction and held
again) and is not listed; a dnf version lock names the version, so that package is `relock`ed at
the new one. The kernel packages a pool's `kernel.hold` holds or releases
(`fleet.domain.kernel_hold`) are listed after the release's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fleet.domain.pinning import (
    REBOOT_COMPONENTS,
    Change,
    OsFamily,
    PinPlan,
    WantedPackage,
    other_releases,
)

HoldAction = Literal["hold", "unhold", "relock"]
FileAction = Literal["create", "replace"]


def hold_tool(os_family: OsFamily) -> str:
    """The command that holds packages on this family."""
    return "apt-mark" if os_family == "debian" else "dnf versionlock"


@dataclass(frozen=True)
class HoldChange:
    package: str
    action: HoldAction
    tool: str  # apt-mark | dnf versionlock
    version: str | None  # the upstream version held after the change; None when released

    def as_dict(self) -> dict[str, Any]:
        return {"package": self.package, "action": self.action, "tool": self.tool,
                "version": self.version}

    def __str__(self) -> str:
        at = f" at {self.version}" if self.version and self.action != "unhold" else ""
        return f"{self.action} {self.package}{at} ({self.tool})"


@dataclass(frozen=True)
class FileChange:
    path: str
    action: FileAction
    purpose: str

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "action": self.action, "purpose": self.purpose}

    def __str__(self) -> str:
        return f"{self.action} {self.path} ({self.purpose})"


def package_dict(c: Change) -> dict[str, Any]:
    """One package change as JSON: the keys `fleet apply --json` has always used."""
    return {"component": c.component, "package": c.package, "from": c.before, "to": c.after,
            "kind": c.kind}


def package_line(c: Change) -> str:
    return f"{c.kind} {c.package} {c.before or '-'} -> {c.after or '-'}"


@dataclass(frozen=True)
class HostChange:
    """Everything a pin would do to one host."""

    os_family: OsFamily
    packages: tuple[Change, ...] = ()
    holds: tuple[HoldChange, ...] = ()
    files: tuple[FileChange, ...] = ()
    reboot: bool = False
    reboot_reason: str | None = None
    # steps of the plan that are none of the above (say, enabling a dnf module stream), by
    # their description: a dry run lists every step it would take
    other: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.packages or self.holds or self.files or self.reboot or self.other)

    def as_dict(self) -> dict[str, Any]:
        return {"os_family": self.os_family,
                "packages": [package_dict(c) for c in self.packages],
                "holds": [h.as_dict() for h in self.holds],
                "files": [f.as_dict() for f in self.files],
                "reboot": self.reboot, "reboot_reason": self.reboot_reason,
                "other_steps": list(self.other)}

    def lines(self) -> list[str]:
        """One line per change, packages first, then holds, files and the reboot."""
        out = [package_line(c) for c in self.packages]
        out += [str(h) for h in self.holds]
        out += [str(f) for f in self.files]
        out += list(self.other)
        if self.reboot:
            out.append(f"reboot ({self.reboot_reason})" if self.reboot_reason else "reboot")
        return out


def hold_changes(os_family: OsFamily, wanted: Sequence[WantedPackage],
                 changes: Sequence[Change], held: frozenset[str] | set[str],
                 installed: Mapping[str, str] | None = None) -> list[HoldChange]:
    """How the held (version-locked) packages change when the plan runs, by package name
    (with `installed`: the holds of other releases' packages no longer installed go too)."""
    tool = hold_tool(os_family)
    moving = {c.package for c in changes}
    wanted_names = {w.name for w in wanted}
    out: list[HoldChange] = []
    for w in sorted(wanted, key=lambda w: w.name):
        if w.name not in held:
            out.append(HoldChange(w.name, "hold", tool, w.version))
        elif w.name in moving and os_family == "rhel":
            out.append(HoldChange(w.name, "relock", tool, w.version))
    for c in sorted(changes, key=lambda c: c.package):
        if c.package in held and c.package not in wanted_names:
            out.append(HoldChange(c.package, "unhold", tool, None))
    if installed is not None:
        for name in sorted(other_releases(set(held) - set(installed), wanted, os_family)):
            out.append(HoldChange(name, "unhold", tool, None))
    return out


def reboot_reason(plan: PinPlan, wanted: Sequence[WantedPackage]) -> str | None:
    """Why the host reboots after the pin; None when it does not."""
    if not plan.reboot_required:
        return None
    module = [c for c in plan.changes if c.component in REBOOT_COMPONENTS]
    moved = [c.package for c in module if c.after is not None] or [c.package for c in module]
    if moved:
        return f"kernel module changes with {', '.join(moved)}"
    drivers = sorted({w.version for w in wanted if w.component == "driver"})
    return (f"kernel module {plan.loaded_module} is loaded, the release's driver is "
            f"{', '.join(drivers)}")


# Commands whose effect the package, hold and file lists above already say.
_SAID = ("apt-mark ", "apt-get update", "DEBIAN_FRONTEND=noninteractive apt-get install ",
         "dnf versionlock ", "dnf -y install ", "dnf -y downgrade ", "dnf -y reinstall ",
         "dnf -y remove ")


def host_change(plan: PinPlan, wanted: Sequence[WantedPackage]) -> HostChange:
    """What running `plan` (made for `wanted`) would change on its host."""
    files = tuple(FileChange(s.path, "replace" if plan.files.get(s.path) is not None
                             else "create", s.description)
                  for s in plan.steps if s.path is not None)
    other = tuple(s.description for s in plan.steps
                  if s.path is None and not (s.command or "").startswith(_SAID))
    tool = hold_tool(plan.os_family)
    kernel = [HoldChange(n, "hold", tool, None) for n in plan.kernel_hold]
    kernel += [HoldChange(n, "unhold", tool, None) for n in plan.kernel_unhold]
    return HostChange(plan.os_family, plan.changes,
                      tuple(hold_changes(plan.os_family, wanted, plan.changes, plan.held,
                                         plan.installed)) + tuple(kernel),
                      files, plan.reboot_required, reboot_reason(plan, wanted), other)
