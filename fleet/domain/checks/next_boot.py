"""`node.next_boot`: will the kernel this host boots next load its driver's module?

The decision of the pre-reboot gate (`fleet.domain.reboot_gate`, which seals it into the
verdict every reboot needs) and of the check `fleet check` and the weekly hygiene run report
before anyone reboots: "the next reboot of h7 would lose the GPU driver: kernel 6.8.0-49 has no
nvidia 580.95.05 module". Pure. Unknown never passes: a next-boot kernel that could not be
resolved, a module or a Secure Boot state that could not be read fail.

Secure Boot: a module loads when its key id (modinfo `sig_key`: the signing certificate's
serial, or its subject key id on older signatures) is an enrolled Machine Owner Key's serial or
key id, or the id of a key the running kernel holds (/proc/keys, the distribution's module
signing key among them); or its signer is the name of such a kernel key, unless an enrolled MOK
has that name too (a regenerated, not yet enrolled DKMS key keeps the old key's name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from fleet.domain.boot_facts import BootFacts, KernelModule
from fleet.domain.checks.base import Check, registrar
from fleet.domain.checks.models import Expectations, Finding, Severity
from fleet.domain.checks.versions import driver_packages
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds
from fleet.domain.versions import kernel_release_version, satisfies

CHECK_ID = "node.next_boot"
CHECKS: list[Check] = []
check = registrar(CHECKS)


def hexid(text: str | None) -> str:
    """Key ids compared one way: hex digits only, lower case, no leading zeros."""
    h = re.sub(r"[^0-9a-fA-F]", "", text or "").lower()
    return h.lstrip("0") or ("0" if h else "")


def module_trust(module: KernelModule, boot: BootFacts) -> tuple[bool | None, str]:
    """Would Secure Boot let this module load? (True / False / None: cannot tell, and why)."""
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
        return None, ("signed by a key fleet could not match: the enrolled keys could not be "
                      f"read ({boot.unreadable.get('enrolled_keys', 'not reported')})")
    who = module.signer or "an unnamed key"
    return False, f"signed by {who!r} (key {module.sig_key or '?'}), which is not enrolled"


def _fixes(kernel: str, driver: str, boot: BootFacts, os_family: str) -> str:
    """The ways out, most direct first."""
    branch = driver.split(".")[0]
    ki = boot.kernel(kernel)
    running = boot.running_kernel
    out = []
    if ki is not None and ki.headers is False:
        hdr = f"linux-headers-{kernel}" if os_family == "debian" else f"kernel-devel-{kernel}"
        out.append(f"install {hdr}, then `dkms autoinstall -k {kernel}`")
    else:
        out.append(f"`dkms autoinstall -k {kernel}`")
    if os_family == "debian":
        out.append(f"or install the precompiled module package for {kernel} "
                   f"(linux-modules-nvidia-{branch}-server-open-{kernel} or its non-open twin)")
    else:
        out.append(f"or install the precompiled kmod-nvidia package built for {kernel}")
    if running and running != kernel:
        pin = (f"grubby --set-default /boot/vmlinuz-{running}" if os_family == "rhel"
               else f"grub-set-default the entry of {running} (GRUB_DEFAULT=saved)")
        out.append(f"or keep booting {running}: `{pin}`, and hold the "
                   "kernel packages (apt-mark hold / dnf versionlock)")
    return "; ".join(out)


def next_boot_finding(host: str, boot: BootFacts | None, driver: str, *,
                      flavor: str | None = None, os_family: str = "debian",
                      kernel_constraint: str | None = None,
                      secure_boot: str = "any") -> Finding:
    """The one decision: OK when `host`'s next-boot kernel will load an nvidia `driver`
    module (of `flavor` when given; signed by a trusted key when Secure Boot is on; on a kernel
    the release's `kernel_constraint` allows; Secure Boot as the pool's policy says), else
    FAIL with the kernel and the fix."""
    lose = f"the next reboot of {host} would lose the GPU driver"
    ev: dict[str, Any] = {"driver": driver}

    def fail(msg: str) -> Finding:
        return Finding(check=CHECK_ID, severity=Severity.FAIL, remediation="reinstall_driver",
                       message=msg, facts=["boot"], evidence=ev)

    if boot is None:
        return fail(f"{lose}? unknown: the probe reported no boot facts (an older probe?); "
                    "not rebooting")
    kernel = boot.next_kernel
    ev.update({"kernel": kernel, "running_kernel": boot.running_kernel,
               "next_source": boot.next_source, "next_entry": boot.next_entry,
               "secure_boot": boot.secure_boot})
    if kernel is None:
        why = boot.unreadable.get("next_kernel", "not reported")
        return fail(f"{lose}? unknown: the next-boot kernel could not be resolved ({why}); "
                    "not rebooting")
    ki = boot.kernel(kernel)
    if ki is None or (ki.module is None and "module" in ki.unreadable):
        why_mod = ki.unreadable.get("module") if ki is not None else "not inspected"
        return fail(f"{lose}? unknown: kernel {kernel}'s nvidia module could not be read "
                    f"({why_mod}); not rebooting")
    fixes = _fixes(kernel, driver, boot, os_family)
    mod = ki.module
    if mod is None:
        return fail(f"{lose}: kernel {kernel} has no nvidia {driver} module; fix: {fixes}")
    ev["module"] = mod.model_dump()
    if mod.version != driver:
        return fail(f"{lose}: kernel {kernel} has no nvidia {driver} module (its module, "
                    f"{mod.filename}, is {mod.version or 'of unknown version'}); fix: {fixes}")
    if flavor and mod.flavor and mod.flavor != flavor:
        return fail(f"{lose}: kernel {kernel}'s nvidia {driver} module is the {mod.flavor} one, "
                    f"the release wants {flavor}; fix: {fixes}")
    if kernel_constraint:
        try:
            ok = satisfies(kernel_release_version(kernel), kernel_constraint)
        except ValueError:
            ok = False
        if not ok:
            return fail(f"the next reboot of {host} boots kernel {kernel}, outside the "
                        f"release's kernel constraint {kernel_constraint!r}; fix: set the "
                        f"default entry to an allowed kernel, or hold the kernel")
    if secure_boot != "any" and boot.secure_boot is None:
        return fail(f"{host}'s Secure Boot state could not be read "
                    f"({boot.unreadable.get('secure_boot', 'not reported')}) and the pool "
                    f"says secure_boot: {secure_boot}")
    if secure_boot == "required" and boot.secure_boot is False:
        return fail(f"{host} boots with Secure Boot off and the pool says secure_boot: "
                    "required; fix: enable it in the firmware (with the module signed first)")
    if secure_boot == "forbidden" and boot.secure_boot is True:
        return fail(f"{host} boots with Secure Boot on and the pool says secure_boot: "
                    "forbidden; fix: disable it in the firmware (or change the pool's policy)")
    trusted, why = module_trust(mod, boot)
    sign = ("sign it with an enrolled Machine Owner Key (`kmodsign sha512 MOK.priv MOK.der "
            f"{mod.filename}`, or DKMS's key /var/lib/dkms/mok.key), or enroll its key "
            "(`mokutil --import KEY.der`, confirmed in MokManager at the console on the next "
            "boot)")
    if boot.secure_boot is True and trusted is not True:
        return fail(f"{lose}: Secure Boot is on and kernel {kernel}'s nvidia {driver} module is "
                    f"{why}: it will not load; fix: {sign}")
    if boot.secure_boot is None and trusted is not True:
        sb = boot.unreadable.get("secure_boot", "not reported")
        return fail(f"{lose}? unknown: the Secure Boot state could not be read ({sb}) and "
                    f"kernel {kernel}'s nvidia {driver} module is {why}; not rebooting")
    note = f"; {why}" if boot.secure_boot else ""
    return Finding(check=CHECK_ID, severity=Severity.OK, message=(
        f"kernel {kernel} (next boot, {boot.next_source}) has the nvidia {driver} module"
        f"{note}"), facts=["boot"], evidence=ev)


def _target(facts: HostFacts, exp: Expectations) -> str | None:
    """The driver the next boot must load: what the installed packages agree on, else the
    release the host should run, else the module loaded now."""
    pkgs = set(driver_packages(facts).values())
    if len(pkgs) == 1:
        return pkgs.pop()
    if exp.release is not None:
        return exp.release.driver_version
    return facts.versions.driver_kernel_module


@check(CHECK_ID, ("boot", "versions.packages"),
       "the next-boot kernel will load the driver's module (Secure Boot, kernel constraint)")
def next_boot(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if facts.boot is None:  # not collected (an import, an older probe): nothing to judge
        return
    driver = _target(facts, exp)
    if driver is None:
        return  # no driver on the host: nothing a reboot could lose
    pk = facts.versions.packages
    family = "rhel" if pk is not None and pk.manager == "rpm" else "debian"
    rel = exp.release
    f = next_boot_finding(facts.identity.hostname if facts.identity and facts.identity.hostname
                          else "this host", facts.boot, driver,
                          flavor=rel.driver_flavor if rel and rel.driver_version == driver
                          else None,
                          os_family=family, kernel_constraint=rel.kernel if rel else None,
                          secure_boot=exp.secure_boot)
    if f.severity is not Severity.OK:
        yield f
