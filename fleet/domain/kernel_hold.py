"""Kernel hold, opt-in per pool (`kernel: {hold: true}` in the matrix).

While a release is pinned on such a pool, the pin also holds the kernel packages the host has
installed (apt: `apt-mark hold` of every installed `linux-image-*` and `linux-headers-*`, the
meta packages and the versioned ones; dnf: `dnf versionlock add` of `kernel`, `kernel-core`,
`kernel-modules`...), so an unattended upgrade cannot bring a kernel the driver has no module
for. The pin of a pool without the hold releases them again.

fleet releases only what it held: the names it holds are recorded on the host
(`KERNEL_HOLD_PATH`, written before the hold, removed after the release), and a package the
operator held by hand is neither recorded nor released. Pure: facts in (installed kernel
packages, held names, the record's content), the plan out with its extra steps; a host whose
packages are already held and recorded gets no step, so a second apply changes nothing.

Names come from the host (dpkg/rpm databases, the record): each must be a plain package name
before it reaches a command line, else the plan refuses (ValueError).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from fleet.domain.pinning import OsFamily, PinPlan, Step

if TYPE_CHECKING:
    from fleet.domain.matrix.models import Matrix

KERNEL_HOLD_PATH = "/var/lib/fleet/kernel-hold"
KERNEL_HOLD_MARK = "# Managed by fleet: the kernel packages fleet holds (pool kernel.hold)."

RPM_KERNEL_PACKAGES = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core",
                       "kernel-modules-extra", "kernel-devel")
"""The EL kernel's packages a hold covers (those installed): the kernel itself, its modules and
the headers DKMS builds against."""

DEB_KERNEL_GLOBS = ("linux-image-*", "linux-headers-*")
_DEB_KERNEL = re.compile(r"^linux-(?:image|headers)-")
_NAME = re.compile(r"[a-z0-9][a-z0-9+.\-]{0,127}")


def _plain(names: Iterable[str], where: str) -> set[str]:
    out = set()
    for name in names:
        if not _NAME.fullmatch(name):
            raise ValueError(f"refusing package name {name!r} from {where}: not a plain "
                             "package name")
        out.add(name)
    return out


def kernel_packages(os_family: OsFamily, installed: Iterable[str]) -> list[str]:
    """The installed packages a kernel hold covers, sorted; ValueError for a name that is not
    a plain package name (the host's package database is not trusted)."""
    if os_family == "debian":
        names = [n for n in installed if _DEB_KERNEL.match(n)]
    else:
        names = [n for n in installed if n in RPM_KERNEL_PACKAGES]
    return sorted(_plain(names, "the host's package database"))


def record_text(names: Iterable[str]) -> str:
    """The record's content: the mark, then one name a line."""
    return KERNEL_HOLD_MARK + "\n" + "".join(f"{n}\n" for n in sorted(set(names)))


def recorded(text: str | None) -> frozenset[str]:
    """The names in the record (none when the host has no record); ValueError when a line is
    not a plain package name."""
    if text is None:
        return frozenset()
    lines = [line.strip() for line in text.splitlines()]
    return frozenset(_plain((n for n in lines if n and not n.startswith("#")), KERNEL_HOLD_PATH))


def _hold_command(os_family: OsFamily, names: list[str]) -> str:
    tool = "apt-mark hold" if os_family == "debian" else "dnf versionlock add"
    return f"{tool} " + " ".join(map(shlex.quote, names))


def _unhold_command(os_family: OsFamily, names: list[str]) -> str:
    tool = "apt-mark unhold" if os_family == "debian" else "dnf versionlock delete"
    return f"{tool} " + " ".join(map(shlex.quote, names))


def with_kernel_hold(plan: PinPlan, *, hold: bool, kernels: Iterable[str],
                     record: str | None, held: Iterable[str] | None = None) -> PinPlan:
    """`plan` with the steps that hold (`hold`) or release the kernel packages.

    `kernels` are the host's installed package names (filtered here), `record` the content of
    `KERNEL_HOLD_PATH` (None: absent), `held` every held / version-locked name on the host
    (default: the plan's). A pool asking for the hold on a host without kernel packages is
    refused: the protection asked for cannot be given (ValueError)."""
    fam = plan.os_family
    held_now = set(plan.held if held is None else held)
    mine = recorded(record)
    files = {**plan.files, KERNEL_HOLD_PATH: record}
    if hold:
        names = kernel_packages(fam, kernels)
        if not names:
            want = " ".join(DEB_KERNEL_GLOBS) if fam == "debian" else ", ".join(
                RPM_KERNEL_PACKAGES)
            raise ValueError(f"the pool asks for kernel.hold but no kernel package is "
                             f"installed ({want}): nothing to hold")
        to_hold = sorted(set(names) - held_now)
        keep = (mine & set(names)) | set(to_hold)
        steps = list(plan.steps)
        text = record_text(keep) if keep else None
        if text != record:  # the record first: a crash before the hold leaves it to redo
            steps.append(Step("record the kernel packages fleet holds", path=KERNEL_HOLD_PATH,
                              content=text) if text is not None else
                         Step("forget fleet's kernel hold record",
                              f"rm -f {shlex.quote(KERNEL_HOLD_PATH)}"))
        if to_hold:
            steps.append(Step("hold the kernel packages (pool kernel.hold)",
                              _hold_command(fam, to_hold)))
        return replace(plan, steps=tuple(steps), files=files, kernel_hold=tuple(to_hold))
    if record is None:
        return plan
    release = sorted(mine & held_now)
    steps = list(plan.steps)
    if release:
        steps.append(Step("release the kernel packages fleet held (the pool no longer asks "
                          "for kernel.hold)", _unhold_command(fam, release)))
    steps.append(Step("forget fleet's kernel hold record",
                      f"rm -f {shlex.quote(KERNEL_HOLD_PATH)}"))
    return replace(plan, steps=tuple(steps), files=files, kernel_unhold=tuple(release))


def holding(matrix: Matrix, pools: Iterable[tuple[str, str | None]]) -> frozenset[str]:
    """Of (host, pool) pairs, the hosts whose pool says `kernel: {hold: true}` (what
    `Backend.plan` and `Backend.apply` take as `kernel_hold`)."""
    return frozenset(host for host, pool in pools
                     if pool is not None and pool in matrix.pools
                     and matrix.pools[pool].kernel.hold)
