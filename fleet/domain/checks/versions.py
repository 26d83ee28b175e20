"""Version checks: the loaded driver, NVML's library and the packages agree, and they are the
host's golden or an allowed release.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fleet.domain.checks.base import FAIL, OK, WARN, Check, finding, registrar
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.driver_owner import OPERATOR_SETTINGS, DriverOwner, from_host
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


_VER = re.compile(r"(\d{3,}\.\d+(?:\.\d+)?)")
_DRIVER_PKG = re.compile(
    r"^(nvidia-driver|nvidia-kernel-common|nvidia-dkms|nvidia-utils|libnvidia-compute|"
    r"kmod-nvidia|nvidia-kmod|cuda-drivers|nvidia-open|nvidia-driver-libs)"
)


def _upstream(version: str) -> str | None:
    m = _VER.search(version.split(":", 1)[-1])
    return m.group(1) if m else None


def driver_packages(facts: HostFacts) -> dict[str, str]:
    pk = facts.versions.packages
    if pk is None:
        return {}
    out = {}
    for p in pk.items:
        v = _upstream(p.version)
        if _DRIVER_PKG.match(p.name) and v and not p.name.startswith("cuda-drivers"):
            out[p.name] = v
    return out


def installed_driver(facts: HostFacts) -> str | None:
    return facts.versions.driver_kernel_module or facts.versions.driver_library


@check(
    "driver.agreement",
    ("versions.driver_library", "versions.driver_kernel_module", "versions.packages"),
    "NVML, the loaded kernel module and the installed packages name the same driver",
)
def driver_agreement(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    v = facts.versions
    reads = ["versions.driver_library", "versions.driver_kernel_module", "versions.packages"]
    mismatch_err = any("mismatch" in str(e) for e in facts.source_errors.values())
    pkgs = driver_packages(facts)
    pkg_versions = sorted(set(pkgs.values()))
    if mismatch_err:
        yield finding(
            "driver.agreement",
            FAIL,
            "reboot",
            "NVML reports a driver/library version mismatch: the loaded kernel module is not "
            "the installed user-space driver; reboot (or reload the module)",
            facts=reads,
            source_errors=facts.source_errors,
        )
        return
    lib, kmod = v.driver_library, v.driver_kernel_module
    if lib and kmod and lib != kmod:
        stale_module = bool(pkg_versions) and pkg_versions == [lib]
        yield finding(
            "driver.agreement",
            FAIL,
            "reboot" if stale_module else "reinstall_driver",
            f"user-space driver {lib} but kernel module {kmod} is loaded"
            + (" (packages are at the new version: reboot to load it)" if stale_module else ""),
            facts=reads,
            library=lib,
            kernel_module=kmod,
            packages=pkgs,
        )
        return
    ref = lib or kmod
    if ref and len(pkg_versions) > 1:
        yield finding(
            "driver.agreement",
            FAIL,
            "reinstall_driver",
            f"driver packages disagree: {', '.join(pkg_versions)}",
            facts=reads,
            packages=pkgs,
        )
    elif ref and pkg_versions and pkg_versions != [ref]:
        yield finding(
            "driver.agreement",
            FAIL,
            "reboot",
            f"driver {ref} is loaded but packages are at {pkg_versions[0]}; reboot to load it",
            facts=reads,
            loaded=ref,
            packages=pkgs,
        )


def driver_owner(facts: HostFacts) -> DriverOwner | None:
    """Who manages the driver, from the host's side; None where it was not collected."""
    dc = facts.driver_container
    return None if dc is None else from_host(dc)


@check(
    "driver.owner",
    ("driver_container",),
    "the driver is the host's packages or the GPU Operator's container, and fleet can tell",
)
def driver_owner_check(facts: HostFacts, exp: Expectations, th: Thresholds
                       ) -> Iterable[Finding]:
    owner = driver_owner(facts)
    if owner is None:
        return
    if owner.kind == "unknown":
        yield finding("driver.owner", FAIL, "none",
                      f"cannot tell who manages the NVIDIA driver: {owner.why}",
                      facts=["driver_container"], owner=owner.kind)
    elif owner.operator:
        yield finding("driver.owner", OK, "none",
                      f"the GPU Operator's driver container manages the driver ({owner.why}); "
                      "its version is judged, no host packages are expected",
                      facts=["driver_container"], owner=owner.kind)


@check(
    "release.conformance",
    ("versions", "versions.packages", "versions.toolkits"),
    "installed driver and CUDA equal the golden or an allowed release; packages held",
)
def release_conformance(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    if exp.release is None:
        return
    installed = installed_driver(facts)
    reads = ["versions.driver_library", "versions.driver_kernel_module"]
    owner = driver_owner(facts)
    container = owner is not None and owner.operator
    if installed is None:
        yield finding(
            "release.conformance",
            FAIL,
            "none" if container else "reinstall_driver",
            "driver version unknown: the GPU Operator's driver container loaded no kernel "
            "module (see its nvidia-driver-daemonset pod)" if container else
            "installed driver version unknown (no NVML, no kernel module)",
            facts=reads,
        )
        return
    releases = (exp.release, *exp.allowed)
    match = next((r for r in releases if r.driver_version == installed), None)
    if match is None:
        yield finding(
            "release.conformance",
            FAIL,
            "reinstall_driver",
            f"driver {installed} is neither golden ({exp.release.driver_version}, "
            f"{exp.release.name}) nor allowed"
            + (f" (the GPU Operator's container: {OPERATOR_SETTINGS})" if container else ""),
            facts=reads,
            installed=installed,
            golden=exp.release.driver_version,
            allowed=[r.driver_version for r in exp.allowed],
        )
        return
    if container:  # the container brings its libraries: no host toolkit or packages
        return
    if match.cuda_version and facts.versions.toolkits is not None:
        found = [t.version for t in facts.versions.toolkits]
        if not any(
            t == match.cuda_version or t.startswith(match.cuda_version + ".") for t in found
        ):
            yield finding(
                "release.conformance",
                FAIL,
                "reinstall_driver",
                f"CUDA toolkit {match.cuda_version} of release {match.name} not installed "
                f"(found: {', '.join(found) or 'none'})",
                facts=["versions.toolkits"],
                expected=match.cuda_version,
                found=found,
            )
    pk = facts.versions.packages
    if match.packages_held and pk is not None:
        for name in match.packages_held:
            p = pk.get(name)
            if p is None:
                yield finding(
                    "release.conformance",
                    FAIL,
                    "reinstall_driver",
                    f"package {name} of release {match.name} is not installed",
                    facts=["versions.packages"],
                    package=name,
                )
            elif not p.held:
                yield finding(
                    "release.conformance",
                    WARN,
                    "none",
                    f"package {name} is not held: an unattended upgrade can replace it",
                    facts=["versions.packages"],
                    package=name,
                    version=p.version,
                )
