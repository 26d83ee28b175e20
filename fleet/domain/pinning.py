"""Pin planning: from what a host has to the exact steps that put a release on it.

Pure, like a pyinfra operation body: facts in (installed packages, holds, current pin files),
steps out. The deploy layer turns steps into commands on a host; tests assert on steps with no
host at all. A host already on the release yields no steps, which is what makes deploys
idempotent.

Debian/Ubuntu: a preferences file pins each package to its version as NVIDIA writes it, epoch
included (`1:3.3.6` for DCGM 3, `1:4.4.1-*` for DCGM 4, `580.95.05-*`; see
`fleet.domain.matrix.packages`) at priority 1001 (so apt may downgrade to it). One
`apt-get install --purge` transaction installs the wanted packages and purges other releases'
packages (`name-` suffix: other driver branches, toolkits, cuDNN, DCGM generations; no `rc`
configuration is left behind), then `apt-mark hold`. Installing by name with the pin in place
means the plan needs no distro revision (`-1`, `-0ubuntu1`): apt resolves it.

RHEL family: the `nvidia-driver` module stream of the release first (`dnf module reset` then
`dnf module enable nvidia-driver:580-open`: NVIDIA's EL9 repository lists its driver packages as
module artifacts, and dnf's modular filtering hides every driver of a stream not enabled), then
versionlock entries instead of pins, and explicit `dnf install`/`dnf downgrade` of
`name-[epoch:]<upstream>`: pyinfra 3.10's `dnf.packages` ignores a pinned version when another
version is installed (pyinfra issue 1910), so the plan does not go through it. Whenever the
locks are written, so is dnf-automatic's exclude guard (the dnf side of the unattended-upgrades
blacklist): an `exclude = <the release's packages>` line under `[base]` of
/etc/dnf/automatic.conf, which dnf-automatic applies on top of dnf.conf (`exclude` is dnf's alias
of `excludepkgs`, an append list: a site's own `excludepkgs` there and in dnf.conf stay in force).
A plain `dnf upgrade` is held by the versionlocks; a `dnf install` by hand still works.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from types import ModuleType

OsFamily = Literal["debian", "rhel"]

PREFERENCES_PATH = "/etc/apt/preferences.d/fleet-nvidia.pref"
UNATTENDED_PATH = "/etc/apt/apt.conf.d/51fleet-nvidia-unattended"
DNF_AUTOMATIC_PATH = "/etc/dnf/automatic.conf"
DNF_GUARD_MARK = "# Managed by fleet: pinned NVIDIA packages change only through fleet."
"""The line above fleet's `exclude =` line in automatic.conf (the file itself is dnf's)."""

# Defense in depth: the matrix already validates these, but nothing reaches a shell unchecked.
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.\-]{0,127}$")
_UPSTREAM_RE = re.compile(r"^[0-9][0-9A-Za-z.+~]{0,63}$")

# Packages of which a host may hold only one: another branch or flavor of the same family is
# removed when the release names a different one.
EXCLUSIVE_FAMILIES: Mapping[str, re.Pattern[str]] = {
    "driver": re.compile(r"^nvidia-driver(-\d+)?(-open|-server|-server-open)?$"),
    "fabric_manager": re.compile(r"^nvidia-fabricmanager(-\d+)?$"),
}

# Ubuntu/NVIDIA name most driver packages after their branch (nvidia-utils-570,
# libnvidia-compute-570, nvidia-fabricmanager-570, nvidia-dkms-570-open): every such package of
# another branch belongs to the old driver and must go with it.
BRANCHED_PACKAGE = re.compile(
    r"^(?:lib)?nvidia-[a-z0-9-]*?-(\d{3,4})(?:-open|-server|-server-open)?$"
)

# Components whose change replaces the kernel module: the host must reboot before it verifies.
REBOOT_COMPONENTS = frozenset({"driver"})


def _truth() -> ModuleType:
    """NVIDIA's package naming (`fleet.domain.matrix.packages`), imported when a plan needs it:
    the matrix package pulls in pydantic, which the modules importing this one must not pay."""
    from fleet.domain.matrix import packages

    return packages


class WantedPackage(Protocol):
    """What a release asks for; `fleet.domain.matrix` PackageSpec has this shape."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def component(self) -> str: ...


@dataclass(frozen=True)
class Change:
    component: str
    package: str
    before: str | None  # upstream version installed now, None when absent
    after: str | None  # upstream version wanted, None when removed
    kind: Literal["install", "upgrade", "downgrade", "reinstall", "remove"]

    def __str__(self) -> str:
        return f"{self.package}: {self.before or '-'} -> {self.after or '-'} ({self.kind})"


@dataclass(frozen=True)
class Step:
    """One action on a host: a command, or a file whose content must be exactly this."""

    description: str
    command: str | None = None
    path: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class PinPlan:
    os_family: OsFamily
    changes: tuple[Change, ...]
    steps: tuple[Step, ...]
    reboot_required: bool
    installed: Mapping[str, str] = field(default_factory=dict)  # distro versions before the pin
    # the rest of the facts the plan was made from, so a dry run can say what changes and why
    # (`fleet.domain.host_change`): held or version-locked names, the managed files' content
    # (None: absent), the loaded kernel module's version when known
    held: frozenset[str] = frozenset()
    files: Mapping[str, str | None] = field(default_factory=dict)
    loaded_module: str | None = None
    # kernel packages this pin holds and releases for the pool's `kernel.hold`
    # (`fleet.domain.kernel_hold.with_kernel_hold` adds them and their steps)
    kernel_hold: tuple[str, ...] = ()
    kernel_unhold: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Work to do: steps to run, or a reboot still owed (the new module is not loaded)."""
        return bool(self.steps) or self.reboot_required


def upstream_of(distro_version: str) -> str:
    """`1:550.54.15-0ubuntu1` and `3:550.54.15-1.el9` both give `550.54.15`."""
    v = distro_version.split(":", 1)[1] if ":" in distro_version else distro_version
    return v.rsplit("-", 1)[0] if "-" in v else v


def compare_upstream(a: str, b: str) -> int:
    try:
        va, vb = Version(a), Version(b)
    except InvalidVersion:
        return (a > b) - (a < b)
    return (va > vb) - (va < vb)


def _check(wanted: Iterable[WantedPackage]) -> None:
    for w in wanted:
        if not _NAME_RE.match(w.name):
            raise ValueError(f"refusing package name {w.name!r}: not a plain package name")
        if not _UPSTREAM_RE.match(w.version):
            raise ValueError(f"refusing version {w.version!r} of {w.name}: not a plain version")


def apt_preferences(wanted: Sequence[WantedPackage]) -> str:
    """Pins with NVIDIA's epochs: `Pin: version 3.3.6-*` matches no `1:3.3.6`, and apt then
    installs the newest."""
    blocks = [
        f"Package: {w.name}\nPin: version {_truth().apt_pin_version(w.name, w.version)}\n"
        "Pin-Priority: 1001\n"
        for w in sorted(wanted, key=lambda w: w.name)
    ]
    return "# Managed by fleet: exact versions of the pinned release.\n\n" + "\n".join(blocks)


def unattended_blacklist(wanted: Sequence[WantedPackage]) -> str:
    names = "".join(f'    "{re.escape(w.name)}$";\n' for w in sorted(wanted, key=lambda w: w.name))
    return (
        "// Managed by fleet: pinned NVIDIA packages change only through fleet.\n"
        f"Unattended-Upgrade::Package-Blacklist {{\n{names}}};\n"
    )


def dnf_automatic_guard(wanted: Sequence[WantedPackage]) -> str:
    """fleet's two lines for automatic.conf's `[base]`: the mark and the exclude list."""
    return f"{DNF_GUARD_MARK}\nexclude = {', '.join(sorted({w.name for w in wanted}))}\n"


def with_dnf_automatic_guard(text: str | None, wanted: Sequence[WantedPackage]) -> str:
    """automatic.conf with fleet's guard, and only it, right under the first `[base]` (a
    `[base]` appended when there is none; the file when absent is `[base]` alone). Exactly what
    `dnf_guard_command` does on the host, which tests check against each other."""
    text = "[base]\n" if text is None else text
    if text and not text.endswith("\n"):
        text += "\n"  # sed's `$a\`
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    skip = False
    for line in lines:  # drop each mark and the line after it (an earlier guard)
        if skip:
            skip = False
        elif line.rstrip("\n") == DNF_GUARD_MARK:
            skip = True
        else:
            kept.append(line)
    at = next((i for i, line in enumerate(kept) if re.fullmatch(r"\[base\]\s*", line)), None)
    if at is None:
        kept += ["\n", "[base]\n"]
        at = len(kept) - 1
    kept.insert(at + 1, dnf_automatic_guard(wanted))
    return "".join(kept)


def dnf_automatic_excluded(text: str) -> frozenset[str] | None:
    """The package names fleet's guard in automatic.conf excludes; None when it has none."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line == DNF_GUARD_MARK and lines[i + 1].startswith("exclude ="):
            value = lines[i + 1].split("=", 1)[1]
            return frozenset(n.strip() for n in value.split(",") if n.strip())
    return None


def dnf_guard_command(wanted: Sequence[WantedPackage], path: str = DNF_AUTOMATIC_PATH) -> str:
    """The host-side edit of `with_dnf_automatic_guard` (GNU sed, as on every EL host): the
    planner does not read automatic.conf, so the edit must be right whatever the file holds."""
    _check(wanted)
    f = shlex.quote(path)
    names = ", ".join(sorted({w.name for w in wanted}))
    mark = re.sub(r"([.\[\]*^$\\/])", r"\\\1", DNF_GUARD_MARK)  # a sed BRE
    base = r"^\[base\][[:space:]]*$"
    return (
        f"{{ [ -e {f} ] || printf '[base]\\n' > {f}; }} && "
        f"sed -i -e '/^{mark}$/{{$d;N;d}}' -e '$a\\' {f} && "
        f"{{ grep -q '{base}' {f} || printf '\\n[base]\\n' >> {f}; }} && "
        f"sed -i -e '0,/{base}/s//&\\n{DNF_GUARD_MARK}\\nexclude = {names}/' {f}"
    )


def _changes(wanted: Sequence[WantedPackage], installed: Mapping[str, str],
             os_family: OsFamily = "debian") -> list[Change]:
    changes: list[Change] = []
    for w in wanted:
        have = installed.get(w.name)
        before = upstream_of(have) if have is not None else None
        if before == w.version:
            continue
        if before is None:
            kind: Literal["install", "upgrade", "downgrade", "reinstall"] = "install"
        else:
            c = compare_upstream(w.version, before)
            kind = "upgrade" if c > 0 else "downgrade" if c < 0 else "reinstall"
        changes.append(Change(w.component, w.name, before, w.version, kind))
    for name, component in sorted(other_releases(installed, wanted, os_family).items()):
        changes.append(Change(component, name, upstream_of(installed[name]), None, "remove"))
    return changes


def other_releases(names: Iterable[str], wanted: Sequence[WantedPackage],
                   os_family: OsFamily = "debian") -> dict[str, str]:
    """Which of `names` belong to another release than `wanted` (name -> component): another
    driver branch, toolkit, cuDNN variant or DCGM generation, by NVIDIA's naming."""
    names = set(names)
    wanted_names = {w.name for w in wanted}
    removed: set[str] = set()
    for component, family in EXCLUSIVE_FAMILIES.items():
        if any(w.component == component for w in wanted):
            removed |= {n for n in names if family.match(n) and n not in wanted_names}
    branches = {w.version.split(".", 1)[0] for w in wanted if w.component == "driver"}
    for name in names:
        m = BRANCHED_PACKAGE.match(name)
        if branches and m and m.group(1) not in branches and name not in wanted_names:
            removed.add(name)
    others = _truth().extraneous(names, [(w.name, w.component) for w in wanted], os_family)
    removed |= set(others)
    return {name: others.get(name) or ("fabric_manager" if "fabricmanager" in name else "driver")
            for name in removed}


def _leftovers(wanted: Sequence[WantedPackage], installed: Mapping[str, str], held: set[str],
               residual: Iterable[str], os_family: OsFamily) -> list[Step]:
    """What removed packages of other releases left behind, which no install transaction sees:
    holds or version locks on packages no longer installed, and (apt) configuration files of
    packages removed without purging (dpkg's `rc`). A host that went through driver upgrades
    by hand has them; the checks flag them (packages.other_release), so the pin clears them."""
    q = shlex.quote
    dangling = sorted(other_releases(held - set(installed), wanted, os_family))
    steps: list[Step] = []
    if os_family == "debian":
        if dangling:
            steps.append(Step("release holds of other releases' packages no longer installed",
                              "apt-mark unhold " + " ".join(map(q, dangling))))
        rc = sorted(other_releases(set(residual) - set(installed), wanted, os_family))
        if rc:
            steps.append(Step("purge configuration other releases' removed packages left (rc)",
                              "dpkg --purge " + " ".join(map(q, rc))))
    elif dangling:
        steps.append(Step("delete version locks of other releases' packages no longer installed",
                          "dnf versionlock delete " + " ".join(map(q, dangling))))
    return steps


def plan_pin(
    os_family: OsFamily,
    wanted: Sequence[WantedPackage],
    installed: Mapping[str, str],
    held: Iterable[str],
    files: Mapping[str, str | None],
    loaded_module: str | None = None,
    *,
    module_stream: str | None = None,
    enabled_stream: str | None = None,
    residual: Iterable[str] = (),
) -> PinPlan:
    """Steps that make the host hold exactly `wanted`; none when it already does.

    `installed` maps package name to its distro version; `held` names held (apt) or
    version-locked (dnf) packages; `files` gives the current content of the managed pin files
    (None when absent). `loaded_module` is the running kernel module's version when known: a
    host whose packages are right but still runs another module owes a reboot (a pin that
    crashed before its reboot, say). On RHEL, `module_stream` is the release's `nvidia-driver`
    stream ("580-open") and `enabled_stream` the one enabled on the host (None: none).
    `residual` names NVIDIA packages removed with their configuration left (dpkg `rc`).
    """
    _check(wanted)
    held = set(held)
    changes = _changes(wanted, installed, os_family)
    if os_family == "debian":
        steps = _apt_steps(wanted, changes, held, files)
    else:
        steps = _dnf_steps(wanted, changes, held, files)
        if module_stream is not None and enabled_stream != module_stream:
            at = 1 if steps and steps[0].command and "versionlock delete" in steps[0].command else 0
            steps[at:at] = [
                Step("reset the nvidia-driver module stream", "dnf -y module reset nvidia-driver"),
                Step(f"enable the release's stream {module_stream}",
                     "dnf -y module enable " + shlex.quote(f"nvidia-driver:{module_stream}")),
            ]
    steps += _leftovers(wanted, installed, held, residual, os_family)
    reboot = any(c.component in REBOOT_COMPONENTS for c in changes)
    drivers = {w.version for w in wanted if w.component == "driver"}
    if loaded_module is not None and drivers and loaded_module not in drivers:
        reboot = True
    return PinPlan(os_family, tuple(changes), tuple(steps), reboot, dict(installed),
                   frozenset(held), dict(files), loaded_module)


class _Release(Protocol):
    @property
    def name(self) -> str: ...

    def packages(self, os_family: OsFamily) -> Sequence[WantedPackage]: ...


def release_of(releases: Iterable[_Release], installed: Mapping[str, str],
               os_family: OsFamily) -> str | None:
    """The release whose every package is installed at its version; the fullest match wins.

    None when no release matches: a host drifted by hand, or never pinned.
    """
    best: tuple[int, str] | None = None
    for rel in releases:
        wanted = rel.packages(os_family)
        matches = bool(wanted) and all(
            w.name in installed and upstream_of(installed[w.name]) == w.version for w in wanted)
        if matches and (best is None or len(wanted) > best[0]):
            best = (len(wanted), rel.name)
    return best[1] if best else None


def _apt_steps(
    wanted: Sequence[WantedPackage],
    changes: Sequence[Change],
    held: set[str],
    files: Mapping[str, str | None],
) -> list[Step]:
    q = shlex.quote
    steps: list[Step] = []
    moving = {c.package for c in changes}
    unhold = sorted(moving & held)
    if unhold:
        steps.append(
            Step("unhold packages that must change", "apt-mark unhold " + " ".join(map(q, unhold)))
        )
    prefs = apt_preferences(wanted)
    if files.get(PREFERENCES_PATH) != prefs:
        steps.append(
            Step(
                "pin exact versions (apt preferences, priority 1001)",
                path=PREFERENCES_PATH,
                content=prefs,
            )
        )
    blacklist = unattended_blacklist(wanted)
    if files.get(UNATTENDED_PATH) != blacklist:
        steps.append(
            Step(
                "keep unattended-upgrades off the pinned packages",
                path=UNATTENDED_PATH,
                content=blacklist,
            )
        )
    if changes:
        args = [q(c.package) if c.after else q(c.package + "-") for c in changes]
        steps.append(Step("update package lists", "apt-get update -qq"))
        steps.append(
            Step(
                "install the release, purge other releases' packages (one transaction)",
                "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades --purge "
                "--no-install-recommends -o Dpkg::Options::=--force-confdef "
                "-o Dpkg::Options::=--force-confold " + " ".join(args),
            )
        )
    to_hold = sorted({w.name for w in wanted} - (held - moving))
    if to_hold:
        steps.append(Step("hold the pinned packages", "apt-mark hold " + " ".join(map(q, to_hold))))
    return steps


def _dnf_steps(
    wanted: Sequence[WantedPackage], changes: Sequence[Change], held: set[str],
    files: Mapping[str, str | None],
) -> list[Step]:
    """`files` may hold automatic.conf's content (None: absent); without it the guard is
    written whenever the locks are."""
    q = shlex.quote
    steps: list[Step] = []
    moving = sorted({c.package for c in changes} & held)
    if moving:
        steps.append(
            Step(
                "release version locks of packages that must change",
                "dnf versionlock delete " + " ".join(map(q, moving)),
            )
        )
    for kind, verb in (
        ("install", "install"),
        ("upgrade", "install"),
        ("downgrade", "downgrade"),
        ("reinstall", "reinstall"),
    ):
        specs = [_truth().dnf_spec(c.package, c.after) for c in changes
                 if c.kind == kind and c.after is not None]
        if specs:
            steps.append(
                Step(f"{kind} exact versions", f"dnf -y {verb} " + " ".join(map(q, specs)))
            )
    removed = [c.package for c in changes if c.kind == "remove"]
    if removed:
        steps.append(
            Step("remove other releases' packages", "dnf -y remove " + " ".join(map(q, removed)))
        )
    lock = sorted(w.name for w in wanted if w.name not in held or w.name in moving)
    if lock:
        by_name = {w.name: w.version for w in wanted}
        specs = [_truth().dnf_spec(n, by_name[n]) for n in lock]
        steps.append(
            Step("lock the pinned versions", "dnf versionlock add " + " ".join(map(q, specs)))
        )
    stale = (DNF_AUTOMATIC_PATH in files and dnf_automatic_excluded(
        files[DNF_AUTOMATIC_PATH] or "") != frozenset(w.name for w in wanted))
    if lock or stale:
        steps.append(Step(f"keep dnf-automatic off the pinned packages (exclude in "
                          f"{DNF_AUTOMATIC_PATH} [base])", dnf_guard_command(wanted)))
    return steps
