"""Kernel-log checks: Xid events by class, GPUs fallen off the bus, PCIe AER errors.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.base import FAIL, WARN, Check, finding, registrar
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.checks.xid import judge_xid
from fleet.domain.facts import HostFacts, KernelEvent
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


def _gpu_for(facts: HostFacts, pci: str | None) -> str | None:
    return pci


@check("kernel_log.readable", ("kernel_log.events",), "the kernel log could be read")
def kernel_log_readable(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    log = facts.kernel_log
    if log is not None and log.events is None and "events" in log.unreadable:
        yield finding(
            "kernel_log.readable",
            FAIL,
            "none",
            f"the kernel log could not be read ({log.unreadable['events']}): Xid, fallen-off-"
            "the-bus and AER events are unverified",
            facts=["kernel_log.events"],
        )


@check("kernel_log.complete", ("kernel_log.events",),
       "the kernel log was read whole since the last probe")
def kernel_log_complete(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    """What the probe noted it could not read since its cursor: Xid events there are unverified,
    so the log must not read as clean. Bytes skipped by a first probe (no cursor) are older
    boots' lines over the size limit, which the probe never meant to read."""
    log = facts.kernel_log
    if log is None or log.events is None:
        return
    missed = []
    if log.notes.get("rotated_tail_missing"):
        missed.append("the rotated file holding the end of the last read was not found")
    skipped = log.notes.get("skipped_bytes")
    if log.since is not None and isinstance(skipped, int) and skipped > 0:
        missed.append(f"{skipped} bytes written since the last probe were over the read limit")
    if missed:
        yield finding(
            "kernel_log.complete",
            WARN,
            "none",
            f"part of the kernel log since the last probe was not read ({'; '.join(missed)}): "
            "Xid, fallen-off-the-bus and AER events there are unverified",
            facts=["kernel_log.events"],
        )


@check("xid", ("kernel_log.events",), "Xid events judged by class (catalog severity)")
def xid_events(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    groups: dict[tuple[str | None, int], list[KernelEvent]] = {}
    for e in facts.events():
        if e.kind == "xid" and e.xid is not None and e.xid != 79:
            groups.setdefault((e.pci, e.xid), []).append(e)
    counted = (facts.kernel_log.xid_counts if facts.kernel_log is not None else None) or {}
    for (pci, xid), evs in groups.items():
        judged = [judge_xid(xid, e.text) for e in evs]
        sev, rem, cls = max(judged, key=lambda j: j[0].rank)
        # the probe keeps a bounded event list but counts every event by code (a flood)
        count = max(len(evs), int((counted.get(pci or "") or {}).get(str(xid), 0)))
        yield finding(
            f"xid.{cls}",
            sev,
            rem,
            f"Xid {xid} ({cls}) x{count} on {pci or 'unknown GPU'}: {evs[0].text[:160]}",
            _gpu_for(facts, pci),
            facts=["kernel_log.events"],
            xid=xid,
            count=count,
            first_line=evs[0].line,
        )


@check("gpu.fallen_off_bus", ("kernel_log.events",), "no GPU fell off the bus (Xid 79 or not)")
def fallen_off_bus(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    seen: dict[str | None, list[KernelEvent]] = {}
    for e in facts.events():
        if e.kind == "fallen_off_bus" or (e.kind == "xid" and e.xid == 79):
            seen.setdefault(e.pci, []).append(e)
    for pci, evs in seen.items():
        yield finding(
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
            yield finding(
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
        yield finding(
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
                yield finding(
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
        yield finding(
            "aer.corrected_rate",
            WARN,
            "none",
            f"{len(evs)} corrected AER events in the kernel log window "
            f"(> {th.aer_correctable_events_max})",
            None,
            facts=["kernel_log.events"],
            count=len(evs),
        )
