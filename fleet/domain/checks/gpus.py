"""GPU checks: the expected GPUs are there, the driver asks for no recovery, the PCIe link is
healthy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from fleet.domain.checks.base import FAIL, WARN, Check, finding, registrar
from fleet.domain.checks.models import Expectations, Finding, Remediation
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("gpu.inventory", ("gpu_count", "gpus.name", "source"), "expected GPU count and model")
def gpu_inventory(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    seen = len(facts.gpus)
    if exp.gpu_count is not None and seen != exp.gpu_count:
        yield finding(
            "gpu.inventory",
            FAIL,
            "reboot" if 0 < seen < exp.gpu_count else "drain",
            f"{seen} GPU(s) visible, {exp.gpu_count} expected",
            facts=["gpus"],
            seen=seen,
            expected=exp.gpu_count,
        )
    elif facts.gpu_count is not None and facts.gpu_count != seen and facts.gpus:
        yield finding(
            "gpu.inventory",
            FAIL,
            "reboot",
            f"driver reports {facts.gpu_count} GPU(s) but only {seen} could be read",
            facts=["gpu_count", "gpus"],
        )
    if exp.gpu_model:
        for g in facts.gpus:
            if g.name is not None and exp.gpu_model.lower() not in g.name.lower():
                yield finding(
                    "gpu.inventory",
                    FAIL,
                    "none",
                    f"{g.label} is a {g.name}, expected {exp.gpu_model}",
                    g,
                    facts=["gpus.name"],
                )


@check(
    "gpu.enumeration",
    ("gpus.handle", "gpu_count", "pci_gpus"),
    "every GPU the PCI bus lists is one NVML can count and open",
)
def gpu_enumeration(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if "handle" in g.unreadable:
            yield finding(
                "gpu.enumeration",
                FAIL,
                "reboot",
                f"GPU {g.index}: NVML cannot open it ({g.unreadable['handle']}); drain the host "
                "and reboot it, then check the GPU",
                str(g.index) if g.index is not None else None,
                facts=["gpus.handle"],
                reason=g.unreadable["handle"],
            )
    if "gpu_count" in facts.unreadable:
        yield finding(
            "gpu.enumeration",
            FAIL,
            "reboot",
            f"NVML cannot count the GPUs ({facts.unreadable['gpu_count']})"
            + ("" if exp.gpu_count else "; the inventory names no gpu_count to compare with"),
            facts=["gpu_count"],
            reason=facts.unreadable["gpu_count"],
        )
    if facts.pci_gpus is None:
        if "pci_gpus" in facts.unreadable:
            yield finding(
                "gpu.enumeration",
                WARN,
                "none",
                f"the PCI bus's NVIDIA devices could not be listed "
                f"({facts.unreadable['pci_gpus']}): NVML's GPU count is unverified",
                facts=["pci_gpus"],
            )
        return
    on_bus = sorted({d.pci for d in facts.pci_gpus if d.pci})
    opened = {g.pci_bus_id for g in facts.gpus if g.pci_bus_id}
    unseen = [p for p in on_bus if p not in opened]
    if len(on_bus) > len(opened) and unseen:
        yield finding(
            "gpu.enumeration",
            FAIL,
            "reboot",
            f"{len(on_bus)} NVIDIA GPU(s) on the PCI bus, NVML reads {len(opened)}: "
            f"{', '.join(unseen)} not seen by NVML",
            unseen[0] if len(unseen) == 1 else None,
            facts=["pci_gpus", "gpus.pci_bus_id"],
            on_bus=on_bus,
            unseen=unseen,
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
            yield finding(
                "gpu.recovery_action",
                FAIL if a != "drain p2p" else WARN,
                remedies.get(a, "reset_gpu"),
                f"{g.label}: driver recovery action is {a!r}",
                g,
                facts=["gpus.recovery_action"],
            )


@check("gpu.unparsable", ("gpus.*",), "every GPU value the checks read is one fleet recognises")
def unparsable(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    """A value nvidia-smi wrote that the parser does not recognise (`Yes <note>`) is None to the
    check that reads it, which then passes: fail here instead, with no remedy (unknown never
    reboots, never undrains)."""
    for g in facts.gpus:
        bad = {k: v for k, v in g.unreadable.items()
               if v.startswith(("unparsable", "unexpected_structure"))}
        if bad:
            yield finding(
                "gpu.unparsable",
                FAIL,
                "none",
                f"{g.label}: values fleet cannot read, so the checks on them cannot judge: "
                + "; ".join(f"{k} ({v})" for k, v in sorted(bad.items())),
                g,
                facts=sorted(f"gpus.{k}" for k in bad),
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
            yield finding(
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
            yield finding(
                "pcie.replay_rate",
                WARN,
                "none",
                f"{g.label}: {rate:.1f} PCIe replays/min since boot (budget {allowed}/min)",
                g,
                facts=["gpus.pcie_replay_counter", "identity.uptime_s"],
                rate_per_min=round(rate, 2),
                allowed_per_min=allowed,
            )
