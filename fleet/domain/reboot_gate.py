"""The pre-reboot gate: will the kernel this host boots next load the target driver's module?

A reboot is the most dangerous thing fleet does: when the next-boot kernel has no nvidia module
of the target version (a DKMS build failed, an unattended kernel upgrade arrived after the last
build), or Secure Boot is on and the module is unsigned or signed by a key that is not enrolled,
the host comes back without GPUs, and a rollback reboots into the same kernel and fails again.

`judge_next_boot` decides from the probe's boot facts (`fleet.domain.boot_facts`), fresh from
the host right before the reboot; it is pure. Unknown never passes: a next-boot kernel that could
not be resolved, a module list or a Secure Boot state that could not be read refuse the reboot.

Only a passing `BootVerdict` can make a `RebootPass`, and every backend's `reboot` (and a
scheduler's `reboot_nodes`) refuses hosts that no pass covers: the jobs layer gets one through
`fleet.jobs.reboot_gate.gated_reboot`, the one function every reboot path calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.boot_facts import BootFacts, KernelModule
from fleet.domain.checks.models import Finding, Severity

CHECK_ID = "node.next_boot"
_SEAL = object()  # only judge_next_boot seals a verdict


class RebootNotGated(RuntimeError):
    """A reboot was asked for a host the pre-reboot gate did not pass."""


def hexid(text: str | None) -> str:
    """Key ids compared one way: hex digits only, lower case, no leading zeros."""
    h = re.sub(r"[^0-9a-fA-F]", "", text or "").lower()
    return h.lstrip("0") or ("0" if h else "")


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


def module_trust(module: KernelModule, boot: BootFacts) -> tuple[bool | None, str]:
    """Would Secure Boot let this module load? (True/False/None = cannot tell, why).

    Trusted: its key id (modinfo `sig_key`: the signing certificate's serial number, or its
    subject key id on older signatures) is an enrolled Machine Owner Key's serial or key id, or
    the key id of a key the running kernel holds (/proc/keys: the distribution's module signing
    key among them); or its signer is the name of such a kernel key, unless an enrolled MOK has
    that name too (a regenerated, not yet enrolled DKMS key keeps the old key's name)."""
    if not module.signer and not module.sig_key:
        return False, "unsigned"
    kid = hexid(module.sig_key)
    moks = boot.enrolled_keys
    for k in moks or []:
        if kid and kid in (k.serial, k.skid):
            return True, f"signed by enrolled key {k.subject_cn or kid}"
    for kk in boot.kernel_keys or []:
        if kid and kid == kk.skid:
            return True, f"signed by kernel key {kk.name}"
    if module.signer and not any(k.subject_cn == module.signer for k in moks or []):
        for kk in boot.kernel_keys or []:
            if kk.name == module.signer:
                return True, f"signed by kernel key {kk.name}"
    if moks is None:
        return None, ("the enrolled keys could not be read ("
                      f"{boot.unreadable.get('enrolled_keys', 'not reported')})")
    who = module.signer or "an unnamed key"
    return False, f"signed by {who!r} (key {module.sig_key or '?'}), which is not enrolled"


def _fixes(host: str, kernel: str, driver: str, boot: BootFacts, running: str | None,
           os_family: str) -> list[str]:
    """The ways out, most direct first."""
    branch = driver.split(".")[0]
    ki = boot.kernel(kernel)
    dkms = [d for d in boot.dkms or [] if d.version == driver]
    out = []
    if ki is not None and ki.headers is False:
        hdr = (f"linux-headers-{kernel}" if os_family == "debian" else f"kernel-devel-{kernel}")
        out.append(f"install {hdr}, then `dkms autoinstall -k {kernel}`")
    elif dkms or ki is None or ki.headers:
        out.append(f"`dkms autoinstall -k {kernel}`")
    if os_family == "debian":
        out.append(f"install the precompiled module package for {kernel} "
                   f"(linux-modules-nvidia-{branch}-server-open-{kernel} or its non-open twin)")
    else:
        out.append(f"install the precompiled kmod-nvidia package built for {kernel}")
    if running and running != kernel:
        pin = (f"grubby --set-default /boot/vmlinuz-{running}" if os_family == "rhel"
               else f"grub-set-default the entry of {running} (GRUB_DEFAULT=saved)")
        out.append(f"or keep booting {running}: `{pin}`, and hold the kernel "
                   "(pool `kernel: {hold: true}`)")
    return out


def _verdict(host: str, ok: bool, kernel: str | None, driver: str, message: str,
             evidence: dict[str, Any], severity: Severity | None = None) -> BootVerdict:
    sev = severity or (Severity.OK if ok else Severity.FAIL)
    finding = Finding(check=CHECK_ID, severity=sev,
                      remediation="none" if ok else "reinstall_driver",
                      message=message, facts=["boot"], evidence=evidence)
    return BootVerdict(host, ok, kernel, driver, finding, _SEAL)


def judge_next_boot(host: str, boot: BootFacts | None, driver: str, *,
                    flavor: str | None = None, os_family: str = "debian") -> BootVerdict:
    """Will `host`'s next-boot kernel load an nvidia `driver` module (of `flavor` when given),
    signed by an enrolled key when Secure Boot is on? Pure; unknown refuses."""
    lose = f"the next reboot of {host} would lose the GPU driver"
    ev: dict[str, Any] = {"driver": driver}
    if boot is None:
        return _verdict(host, False, None, driver,
                        f"{lose}? unknown: the probe reported no boot facts (an older probe?); "
                        "not rebooting", ev)
    kernel, running = boot.next_kernel, boot.running_kernel
    ev.update({"kernel": kernel, "running_kernel": running, "next_source": boot.next_source,
               "next_entry": boot.next_entry, "secure_boot": boot.secure_boot})
    if kernel is None:
        why = boot.unreadable.get("next_kernel", "not reported")
        return _verdict(host, False, None, driver,
                        f"{lose}? unknown: the next-boot kernel could not be resolved ({why}); "
                        "not rebooting", ev)
    ki = boot.kernel(kernel)
    if ki is None or (ki.module is None and "module" in ki.unreadable):
        why = ki.unreadable.get("module") if ki is not None else "not inspected"
        return _verdict(host, False, kernel, driver,
                        f"{lose}? unknown: kernel {kernel}'s nvidia module could not be read "
                        f"({why}); not rebooting", ev)
    fixes = "; ".join(_fixes(host, kernel, driver, boot, running, os_family))
    mod = ki.module
    if mod is None:
        return _verdict(host, False, kernel, driver,
                        f"{lose}: kernel {kernel} has no nvidia {driver} module; fix: {fixes}",
                        ev)
    ev["module"] = mod.model_dump()
    if mod.version != driver:
        return _verdict(host, False, kernel, driver,
                        f"{lose}: kernel {kernel} has no nvidia {driver} module (its module, "
                        f"{mod.filename}, is {mod.version or 'of unknown version'}); fix: {fixes}",
                        ev)
    if flavor and mod.flavor and mod.flavor != flavor:
        return _verdict(host, False, kernel, driver,
                        f"{lose}: kernel {kernel}'s nvidia {driver} module is the {mod.flavor} "
                        f"one, the release wants {flavor}; fix: {fixes}", ev)
    trusted, why = module_trust(mod, boot)
    sign = ("sign it with an enrolled Machine Owner Key (`kmodsign sha512 MOK.priv MOK.der "
            f"{mod.filename}`, or DKMS's signing key /var/lib/dkms/mok.key), or enroll its key "
            "(`mokutil --import KEY.der`, confirmed in MokManager at the next boot, which itself "
            "must not be an unattended one)")
    if boot.secure_boot is True and trusted is not True:
        return _verdict(host, False, kernel, driver,
                        f"{lose}: Secure Boot is on and kernel {kernel}'s nvidia {driver} module "
                        f"is {why}: it will not load; fix: {sign}", ev)
    if boot.secure_boot is None and trusted is not True:
        sb = boot.unreadable.get("secure_boot", "not reported")
        return _verdict(host, False, kernel, driver,
                        f"{lose}? unknown: the Secure Boot state could not be read ({sb}) and "
                        f"kernel {kernel}'s nvidia {driver} module is {why}; not rebooting", ev)
    note = f"; {why}" if boot.secure_boot else ""
    return _verdict(host, True, kernel, driver,
                    f"kernel {kernel} (next boot, {boot.next_source}) has the nvidia {driver} "
                    f"module{note}", ev)
