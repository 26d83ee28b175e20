"""The health and conformance checks: pure functions of HostFacts.

Each check has an id, the facts it reads, and returns findings (severity ok/warn/fail plus a
remediation). A check that lacks the facts it needs (an offline XML import has no kernel log, no
uptime) returns nothing rather than guessing; `probe.source` judges how the facts were obtained.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import fleet.domain.checks.cdi as cdi_check
import fleet.domain.checks.packages as packages_check
from fleet.domain.checks.models import (
    Expectations,
    Finding,
    Remediation,
    Severity,
)
from fleet.domain.checks.xid import judge_xid
from fleet.domain.facts import GpuFacts, HostFacts, KernelEvent
from fleet.domain.matrix.models import Thresholds

CheckFn = Callable[[HostFacts, Expectations, Thresholds], Iterable[Finding]]

OK, WARN, FAIL = Severity.OK, Severity.WARN, Severity.FAIL


@dataclass(frozen=True)
class Check:
    id: str
    reads: tuple[str, ...]
    fn: CheckFn
    summary: str


CHECKS: list[Check] = []


def check(id: str, reads: tuple[str, ...], summary: str) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        CHECKS.append(Check(id, reads, fn, summary))
        return fn

    return deco


def _f(
    check_id: str,
    sev: Severity,
    rem: Remediation,
    msg: str,
    gpu: GpuFacts | str | None = None,
    facts: Iterable[str] = (),
    **evidence: object,
) -> Finding:
    if isinstance(gpu, GpuFacts):
        gpu = gpu.pci_bus_id or (str(gpu.index) if gpu.index is not None else None)
    return Finding(
        check=check_id,
        severity=sev,
        remediation=rem,
        message=msg,
        gpu=gpu,
        facts=list(facts),
        evidence=dict(evidence),
    )


_VER = re.compile(r"(\d{3,}\.\d+(?:\.\d+)?)")
_DRIVER_PKG = re.compile(
    r"^(nvidia-driver|nvidia-kernel-common|nvidia-dkms|nvidia-utils|libnvidia-compute|"
    r"kmod-nvidia|nvidia-kmod|cuda-drivers|nvidia-open|nvidia-driver-libs)"
)


def _upstream(version: str) -> str | None:
    m = _VER.search(version.split(":", 1)[-1])
    return m.group(1) if m else None


def _driver_packages(facts: HostFacts) -> dict[str, str]:
    pk = facts.versions.packages
    if pk is None:
        return {}
    out = {}
    for p in pk.items:
        v = _upstream(p.version)
        if _DRIVER_PKG.match(p.name) and v and not p.name.startswith("cuda-drivers"):
            out[p.name] = v
    return out


def _installed_driver(facts: HostFacts) -> str | None:
    return facts.versions.driver_kernel_module or facts.versions.driver_library


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


# ----------------------------------------------------------------------------------- versions
@check(
    "driver.agreement",
    ("versions.driver_library", "versions.driver_kernel_module", "versions.packages"),
    "NVML, the loaded kernel module and the installed packages name the same driver",
)
def driver_agreement(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    v = facts.versions
    reads = ["versions.driver_library", "versions.driver_kernel_module", "versions.packages"]
    mismatch_err = any("mismatch" in str(e) for e in facts.source_errors.values())
    pkgs = _driver_packages(facts)
    pkg_versions = sorted(set(pkgs.values()))
    if mismatch_err:
        yield _f(
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
        yield _f(
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
        yield _f(
            "driver.agreement",
            FAIL,
            "reinstall_driver",
            f"driver packages disagree: {', '.join(pkg_versions)}",
            facts=reads,
            packages=pkgs,
        )
    elif ref and pkg_versions and pkg_versions != [ref]:
        yield _f(
            "driver.agreement",
            FAIL,
            "reboot",
            f"driver {ref} is loaded but packages are at {pkg_versions[0]}; reboot to load it",
            facts=reads,
            loaded=ref,
            packages=pkgs,
        )


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
    installed = _installed_driver(facts)
    reads = ["versions.driver_library", "versions.driver_kernel_module"]
    if installed is None:
        yield _f(
            "release.conformance",
            FAIL,
            "reinstall_driver",
            "installed driver version unknown (no NVML, no kernel module)",
            facts=reads,
        )
        return
    releases = (exp.release, *exp.allowed)
    match = next((r for r in releases if r.driver_version == installed), None)
    if match is None:
        yield _f(
            "release.conformance",
            FAIL,
            "reinstall_driver",
            f"driver {installed} is neither golden ({exp.release.driver_version}, "
            f"{exp.release.name}) nor allowed",
            facts=reads,
            installed=installed,
            golden=exp.release.driver_version,
            allowed=[r.driver_version for r in exp.allowed],
        )
        return
    if match.cuda_version and facts.versions.toolkits is not None:
        found = [t.version for t in facts.versions.toolkits]
        if not any(
            t == match.cuda_version or t.startswith(match.cuda_version + ".") for t in found
        ):
            yield _f(
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
                yield _f(
                    "release.conformance",
                    FAIL,
                    "reinstall_driver",
                    f"package {name} of release {match.name} is not installed",
                    facts=["versions.packages"],
                    package=name,
                )
            elif not p.held:
                yield _f(
                    "release.conformance",
                    WARN,
                    "none",
                    f"package {name} is not held: an unattended upgrade can replace it",
                    facts=["versions.packages"],
                    package=name,
                    version=p.version,
                )


# ---------------------------------------------------------------------------------------- gpus
@check("gpu.inventory", ("gpu_count", "gpus.name", "source"), "expected GPU count and model")
def gpu_inventory(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    seen = len(facts.gpus)
    if exp.gpu_count is not None and seen != exp.gpu_count:
        yield _f(
            "gpu.inventory",
            FAIL,
            "reboot" if 0 < seen < exp.gpu_count else "drain",
            f"{seen} GPU(s) visible, {exp.gpu_count} expected",
            facts=["gpus"],
            seen=seen,
            expected=exp.gpu_count,
        )
    elif facts.gpu_count is not None and facts.gpu_count != seen and facts.gpus:
        yield _f(
            "gpu.inventory",
            FAIL,
            "reboot",
            f"driver reports {facts.gpu_count} GPU(s) but only {seen} could be read",
            facts=["gpu_count", "gpus"],
        )
    if exp.gpu_model:
        for g in facts.gpus:
            if g.name is not None and exp.gpu_model.lower() not in g.name.lower():
                yield _f(
                    "gpu.inventory",
                    FAIL,
                    "none",
                    f"{g.label} is a {g.name}, expected {exp.gpu_model}",
                    g,
                    facts=["gpus.name"],
                )


@check("gpu.recovery_action", ("gpus.recovery_action",), "the driver asks for no recovery action")
def recovery_action(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    remedies: dict[str, Remediation] = {
        "reset": "reset_gpu",
        "gpu reset": "reset_gpu",
        "reboot": "reboot",
        "node reboot": "reboot",
        "drain p2p": "drain",
        "drain and reset": "drain",
    }
    for g in facts.gpus:
        a = (g.recovery_action or "none").lower()
        if a != "none":
            yield _f(
                "gpu.recovery_action",
                FAIL if a != "drain p2p" else WARN,
                remedies.get(a, "reset_gpu"),
                f"{g.label}: driver recovery action is {a!r}",
                g,
                facts=["gpus.recovery_action"],
            )


@check(
    "pcie.link",
    ("gpus.pcie_gen_*", "gpus.pcie_width_*", "gpus.clock_event_reasons"),
    "PCIe link trained to its max generation and width (when busy)",
)
def pcie_link(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if th.pcie_link_only_when_busy and (
            g.clock_event_reasons is None or "gpu_idle" in g.clock_event_reasons
        ):
            continue
        low = []
        if g.pcie_gen_current and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max:
            low.append(f"gen {g.pcie_gen_current} of {g.pcie_gen_max}")
        if g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
            low.append(f"x{g.pcie_width_current} of x{g.pcie_width_max}")
        if low:
            yield _f(
                "pcie.link",
                WARN,
                "reset_gpu",
                f"{g.label}: PCIe link degraded while busy ({', '.join(low)})",
                g,
                facts=["gpus.pcie_gen_current", "gpus.pcie_width_current"],
            )


@check(
    "pcie.replay_rate",
    ("gpus.pcie_replay_counter", "identity.uptime_s"),
    "PCIe replays per minute within DCGM's per-lane budget",
)
def pcie_replay_rate(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    uptime = facts.identity.uptime_s if facts.identity else None
    if not uptime or uptime < 600:
        return
    for g in facts.gpus:
        if g.pcie_replay_counter is None or not g.pcie_gen_max or not g.pcie_width_max:
            continue
        gen = g.pcie_gen_current or g.pcie_gen_max
        per_lane = th.pcie_replay_per_lane_per_min.get(
            gen, max(th.pcie_replay_per_lane_per_min.values())
        )
        allowed = math.ceil(per_lane * (g.pcie_width_current or g.pcie_width_max))
        rate = g.pcie_replay_counter / (uptime / 60.0)
        if rate > allowed:
            yield _f(
                "pcie.replay_rate",
                WARN,
                "none",
                f"{g.label}: {rate:.1f} PCIe replays/min since boot (budget {allowed}/min)",
                g,
                facts=["gpus.pcie_replay_counter", "identity.uptime_s"],
                rate_per_min=round(rate, 2),
                allowed_per_min=allowed,
            )


# ----------------------------------------------------------------------------------------- ECC
@check(
    "ecc.uncorrectable",
    ("gpus.ecc_*_uncorrected", "gpus.ecc_sram_threshold_exceeded"),
    "no uncorrectable ECC errors",
)
def ecc_uncorrectable(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    for g in facts.gpus:
        if (g.ecc_volatile_uncorrected or 0) > th.ecc_uncorrectable_max:
            yield _f(
                "ecc.uncorrectable",
                FAIL,
                "drain",
                f"{g.label}: {g.ecc_volatile_uncorrected} uncorrectable ECC error(s) since "
                "driver load; drain and reset the GPU",
                g,
                facts=["gpus.ecc_volatile_uncorrected"],
                count=g.ecc_volatile_uncorrected,
            )
        elif g.ecc_aggregate_uncorrected:
            yield _f(
                "ecc.uncorrectable",
                WARN,
                "none",
                f"{g.label}: {g.ecc_aggregate_uncorrected} uncorrectable ECC error(s) in its "
                "lifetime; watch the remap state",
                g,
                facts=["gpus.ecc_aggregate_uncorrected"],
                count=g.ecc_aggregate_uncorrected,
            )
        if g.ecc_sram_threshold_exceeded:
            yield _f(
                "ecc.uncorrectable",
                FAIL,
                "rma",
                f"{g.label}: SRAM error threshold exceeded; run field diagnostics",
                g,
                facts=["gpus.ecc_sram_threshold_exceeded"],
            )


@check("ecc.corrected", ("gpus.ecc_*_corrected",), "corrected ECC errors below the thresholds")
def ecc_corrected(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        agg, vol = g.ecc_aggregate_corrected, g.ecc_volatile_corrected
        if agg is not None and agg > th.ecc_corrected_aggregate_max:
            yield _f(
                "ecc.corrected",
                FAIL,
                "rma",
                f"{g.label}: {agg} corrected ECC errors in its lifetime "
                f"(> {th.ecc_corrected_aggregate_max})",
                g,
                facts=["gpus.ecc_aggregate_corrected"],
                count=agg,
            )
        elif vol is not None and vol > th.ecc_corrected_volatile_max:
            yield _f(
                "ecc.corrected",
                WARN,
                "none",
                f"{g.label}: {vol} corrected ECC errors since driver load "
                f"(> {th.ecc_corrected_volatile_max}); trend it",
                g,
                facts=["gpus.ecc_volatile_corrected"],
                count=vol,
            )


@check("ecc.retired_pages", ("gpus.retired_pages_*",), "retired pages below the table limit")
def retired_pages(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        sbe, dbe = g.retired_pages_sbe or 0, g.retired_pages_dbe or 0
        if sbe + dbe >= th.retired_pages_limit:
            yield _f(
                "ecc.retired_pages",
                FAIL,
                "rma",
                f"{g.label}: {sbe + dbe} retired pages (limit {th.retired_pages_limit})",
                g,
                facts=["gpus.retired_pages_sbe", "gpus.retired_pages_dbe"],
                sbe=sbe,
                dbe=dbe,
            )
        elif dbe > th.retired_pages_dbe_max:
            yield _f(
                "ecc.retired_pages",
                WARN,
                "rma",
                f"{g.label}: {dbe} pages retired for double-bit errors",
                g,
                facts=["gpus.retired_pages_dbe"],
                dbe=dbe,
            )
        if g.retired_pages_pending:
            yield _f(
                "ecc.retired_pages",
                WARN,
                "reboot",
                f"{g.label}: page retirement pending; reload the driver or reboot",
                g,
                facts=["gpus.retired_pages_pending"],
            )


@check("remap.pending", ("gpus.remapped_rows_pending",), "no row remap waiting for a GPU reset")
def remap_pending(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.remapped_rows_pending:
            yield _f(
                "remap.pending",
                FAIL if th.fail_on_remap_pending else WARN,
                "reset_gpu",
                f"{g.label}: row remap pending ({g.remapped_rows_uncorrectable or 0} "
                f"uncorrectable, {g.remapped_rows_correctable or 0} correctable remaps); "
                + (
                    "drain the GPU and reset it to apply the remap"
                    if th.fail_on_remap_pending
                    else "reset the GPU at the next window"
                ),
                g,
                facts=["gpus.remapped_rows_pending"],
            )


@check(
    "remap.failure",
    ("gpus.remapped_rows_failure", "gpus.remapped_rows_uncorrectable", "gpus.remap_histogram"),
    "row remapping has not failed or run out",
)
def remap_failure(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.remapped_rows_failure:
            yield _f(
                "remap.failure",
                FAIL if th.fail_on_remap_failure else WARN,
                "rma",
                f"{g.label}: row remapping failed (NVIDIA's RMA criterion)",
                g,
                facts=["gpus.remapped_rows_failure"],
            )
        elif (g.remapped_rows_uncorrectable or 0) >= th.remapped_rows_uncorrectable_limit:
            yield _f(
                "remap.failure",
                FAIL,
                "rma",
                f"{g.label}: {g.remapped_rows_uncorrectable} uncorrectable remaps",
                g,
                facts=["gpus.remapped_rows_uncorrectable"],
            )
        elif g.remap_histogram and (g.remap_histogram.low or g.remap_histogram.none):
            yield _f(
                "remap.failure",
                WARN,
                "rma",
                f"{g.label}: {g.remap_histogram.low + g.remap_histogram.none} memory banks "
                "have few or no spare rows left",
                g,
                facts=["gpus.remap_histogram"],
            )


# ---------------------------------------------------------------------------------- kernel log
def _gpu_for(facts: HostFacts, pci: str | None) -> str | None:
    return pci


@check("xid", ("kernel_log.events",), "Xid events judged by class (catalog severity)")
def xid_events(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    groups: dict[tuple[str | None, int], list[KernelEvent]] = {}
    for e in facts.events():
        if e.kind == "xid" and e.xid is not None and e.xid != 79:
            groups.setdefault((e.pci, e.xid), []).append(e)
    for (pci, xid), evs in groups.items():
        judged = [judge_xid(xid, e.text) for e in evs]
        sev, rem, cls = max(judged, key=lambda j: j[0].rank)
        yield _f(
            f"xid.{cls}",
            sev,
            rem,
            f"Xid {xid} ({cls}) x{len(evs)} on {pci or 'unknown GPU'}: {evs[0].text[:160]}",
            _gpu_for(facts, pci),
            facts=["kernel_log.events"],
            xid=xid,
            count=len(evs),
            first_line=evs[0].line,
        )


@check("gpu.fallen_off_bus", ("kernel_log.events",), "no GPU fell off the bus (Xid 79 or not)")
def fallen_off_bus(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    seen: dict[str | None, list[KernelEvent]] = {}
    for e in facts.events():
        if e.kind == "fallen_off_bus" or (e.kind == "xid" and e.xid == 79):
            seen.setdefault(e.pci, []).append(e)
    for pci, evs in seen.items():
        yield _f(
            "gpu.fallen_off_bus",
            FAIL,
            "reboot",
            f"GPU {pci or '(unknown address)'} fell off the bus; drain and reboot, "
            "check AER on its upstream port",
            pci,
            facts=["kernel_log.events"],
            lines=[e.line for e in evs],
            with_xid=any(e.kind == "xid" for e in evs),
        )


def _nvidia_related(facts: HostFacts, pci: str | None) -> bool:
    if not facts.gpus:
        return True
    if pci is None:
        return False
    related = {g.pci_bus_id for g in facts.gpus if g.pci_bus_id}
    related |= {a.pci for a in facts.aer or [] if a.pci}
    slots = {p.rsplit(".", 1)[0] for p in related}
    return pci in related or pci.rsplit(".", 1)[0] in slots


@check(
    "aer.uncorrectable",
    ("aer", "kernel_log.events"),
    "no uncorrectable PCIe AER error on a GPU or its upstream port",
)
def aer_uncorrectable(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    for a in facts.aer or []:
        fatal, nonfatal = a.total("fatal") or 0, a.total("nonfatal") or 0
        if fatal + nonfatal > th.aer_uncorrectable_max:
            yield _f(
                "aer.uncorrectable",
                FAIL,
                "drain",
                f"{a.role} {a.pci}: {fatal} fatal, {nonfatal} non-fatal AER errors since boot "
                "(the nvidia driver cannot recover from these)",
                a.pci,
                facts=["aer"],
                fatal=fatal,
                nonfatal=nonfatal,
            )
    by_pci: dict[str | None, list[KernelEvent]] = {}
    for e in facts.events():
        if (
            e.kind == "aer"
            and e.severity in ("fatal", "nonfatal")
            and _nvidia_related(facts, e.pci)
        ):
            by_pci.setdefault(e.pci, []).append(e)
    for pci, evs in by_pci.items():
        if len(evs) <= th.aer_uncorrectable_max:
            continue
        yield _f(
            "aer.uncorrectable",
            FAIL,
            "drain",
            f"{len(evs)} uncorrectable AER event(s) on {pci}: {evs[0].text[:160]}",
            pci,
            facts=["kernel_log.events"],
            lines=[e.line for e in evs],
            severities=sorted({e.severity or "" for e in evs}),
        )


@check(
    "aer.corrected_rate",
    ("aer", "identity.uptime_s", "kernel_log.events"),
    "corrected PCIe AER errors below the rate threshold",
)
def aer_corrected(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    uptime = facts.identity.uptime_s if facts.identity else None
    if uptime and uptime >= 600:
        for a in facts.aer or []:
            cor = a.total("correctable") or 0
            rate = cor / (uptime / 3600.0)
            if rate > th.aer_correctable_per_hour_max:
                yield _f(
                    "aer.corrected_rate",
                    WARN,
                    "none",
                    f"{a.role} {a.pci}: {cor} corrected AER errors since boot "
                    f"({rate:.0f}/h > {th.aer_correctable_per_hour_max:.0f}/h)",
                    a.pci,
                    facts=["aer", "identity.uptime_s"],
                    count=cor,
                    per_hour=round(rate, 1),
                )
    evs = [
        e
        for e in facts.events()
        if e.kind == "aer" and e.severity == "corrected" and _nvidia_related(facts, e.pci)
    ]
    if len(evs) > th.aer_correctable_events_max:
        yield _f(
            "aer.corrected_rate",
            WARN,
            "none",
            f"{len(evs)} corrected AER events in the kernel log window "
            f"(> {th.aer_correctable_events_max})",
            None,
            facts=["kernel_log.events"],
            count=len(evs),
        )


# ------------------------------------------------------------------------------ modes, clocks
@check("clocks.slowdown", ("gpus.clock_event_reasons",), "no thermal or power-brake slowdown")
def clocks_slowdown(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        active = sorted(set(g.clock_event_reasons or []) & set(th.clock_slowdown_reasons))
        if active:
            yield _f(
                "clocks.slowdown",
                WARN,
                "none",
                f"{g.label}: clocks held down by {', '.join(active)}",
                g,
                facts=["gpus.clock_event_reasons"],
                reasons=active,
                temperature_c=g.temperature_c,
                power_draw_w=g.power_draw_w,
            )


@check("gpu.temperature", ("gpus.temperature_c",), "GPU temperature within the matrix limit")
def temperature(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.temperature_c is not None and g.temperature_c > th.gpu_temperature_max_c:
            yield _f(
                "gpu.temperature",
                FAIL,
                "drain",
                f"{g.label}: {g.temperature_c} C, above the {th.gpu_temperature_max_c} C limit; "
                "check cooling and airflow",
                g,
                facts=["gpus.temperature_c"],
                temperature_c=g.temperature_c,
                limit_c=th.gpu_temperature_max_c,
            )


@check("persistence_mode", ("gpus.persistence_mode",), "persistence mode on")
def persistence(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if not th.require_persistence_mode:
        return
    for g in facts.gpus:
        if g.persistence_mode is False:
            yield _f(
                "persistence_mode",
                WARN,
                "none",
                f"{g.label}: persistence mode off (enable nvidia-persistenced)",
                g,
                facts=["gpus.persistence_mode"],
            )


@check("mig.mode", ("gpus.mig_mode_current", "gpus.mig_mode_pending"), "MIG mode as expected")
def mig_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if (
            exp.mig_mode is not None
            and g.mig_mode_current is not None
            and g.mig_mode_current != exp.mig_mode
        ):
            yield _f(
                "mig.mode",
                FAIL,
                "reset_gpu",
                f"{g.label}: MIG {'on' if g.mig_mode_current else 'off'}, expected "
                f"{'on' if exp.mig_mode else 'off'}",
                g,
                facts=["gpus.mig_mode_current"],
            )
        elif (
            g.mig_mode_pending is not None
            and g.mig_mode_current is not None
            and g.mig_mode_pending != g.mig_mode_current
        ):
            yield _f(
                "mig.mode",
                WARN,
                "reset_gpu",
                f"{g.label}: MIG mode change pending until the GPU is reset",
                g,
                facts=["gpus.mig_mode_pending"],
            )


# ---------------------------------------------------------------------------- host plumbing
@check("device_nodes", ("device_nodes", "gpus.minor_number"), "/dev/nvidia* nodes present")
def device_nodes(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if facts.device_nodes is None or not (facts.gpus or exp.gpu_count):
        return
    have = {n.path: n for n in facts.device_nodes}
    wanted = ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    wanted += [f"/dev/nvidia{g.minor_number}" for g in facts.gpus if g.minor_number is not None]
    missing = [p for p in wanted if p not in have]
    if missing:
        yield _f(
            "device_nodes",
            FAIL,
            "reinstall_driver",
            f"device nodes missing: {', '.join(missing)}",
            facts=["device_nodes"],
            missing=missing,
        )
    closed = [p for p in wanted if p in have and not have[p].mode.endswith("6")]
    if closed:
        yield _f(
            "device_nodes",
            WARN,
            "none",
            f"device nodes not readable and writable by all: {', '.join(closed)}",
            facts=["device_nodes"],
            modes={p: have[p].mode for p in closed},
        )


@check("container_runtime", ("container_runtime",), "NVIDIA container runtime configured")
def container_runtime(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    cr = facts.container_runtime
    if cr is None or cr.configured:
        return
    if exp.container_runtime:
        yield _f(
            "container_runtime",
            FAIL,
            "fix_container_runtime",
            "NVIDIA container runtime not configured (docker, containerd or CDI)",
            facts=["container_runtime"],
        )
    elif cr.docker_installed or cr.containerd_installed:
        yield _f(
            "container_runtime",
            WARN,
            "fix_container_runtime",
            "a container engine is installed but the NVIDIA runtime is not configured: "
            "containers will not see the GPUs (run nvidia-ctk runtime configure)",
            facts=["container_runtime"],
        )


# stale CDI specs after a driver upgrade (fleet/domain/checks/cdi.py)
CHECKS.append(Check(cdi_check.CHECK_ID, cdi_check.READS, cdi_check.cdi_specs, cdi_check.SUMMARY))
# another release's packages, holds or `rc` configuration (fleet/domain/checks/packages.py)
CHECKS.append(Check(packages_check.CHECK_ID, packages_check.READS,
                    packages_check.other_release_packages, packages_check.SUMMARY))


@check("frameworks.cpu_fallback", ("frameworks", "gpus"), "torch/onnxruntime see the GPUs")
def cpu_fallback(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if not facts.frameworks:
        return
    has_gpus = bool(facts.gpus) or bool(facts.gpu_count) or bool(exp.gpu_count)
    for fw in facts.frameworks:
        if fw.result is None:
            yield _f(
                "frameworks.cpu_fallback",
                WARN,
                "none",
                f"{fw.name}: could not check ({fw.unreadable.get('result', 'unknown')})",
                facts=["frameworks"],
            )
        elif has_gpus and fw.sees_gpu is False:
            yield _f(
                "frameworks.cpu_fallback",
                FAIL,
                "reinstall_driver",
                f"{fw.name} {fw.result.get('version', '')} sees no GPU: work would silently "
                "run on the CPU",
                facts=["frameworks", "gpus"],
                result=fw.result,
            )


@check("probe.source", ("source", "source_errors"), "GPU facts came from NVML")
def probe_source(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if facts.source == "nvidia-smi":
        yield _f(
            "probe.source",
            WARN,
            "none",
            f"NVML unavailable, facts read from nvidia-smi ({facts.source_errors.get('nvml', {})})",
            facts=["source"],
        )
    elif facts.source == "none":
        expected = bool(exp.gpu_count) or bool(facts.device_nodes) or bool(_driver_packages(facts))
        if expected:
            yield _f(
                "probe.source",
                FAIL,
                "reinstall_driver",
                "no GPU facts: NVML and nvidia-smi both failed on a host with an NVIDIA "
                "driver installed",
                facts=["source", "source_errors"],
                errors=facts.source_errors,
            )


def run_checks(
    facts: HostFacts,
    expectations: Expectations | None = None,
    thresholds: Thresholds | None = None,
) -> list[Finding]:
    """Every check over one host's facts, most severe first (then by check id and GPU).

    `thresholds` is the matrix's `policy.thresholds`; None means the defaults.
    """
    exp = expectations or Expectations()
    th = thresholds or Thresholds()
    out: list[Finding] = []
    for c in CHECKS:
        out.extend(c.fn(facts, exp, th))
    return sorted(out, key=lambda f: (-f.severity.rank, f.check, f.gpu or "", f.message))


def worst(findings: Iterable[Finding]) -> Severity:
    return max((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)
