"""Node-profile checks of the links: PCIe generation and width per GPU model, NVLink links up,
Fabric Manager running at the driver's version (`profiles.NAME.links`).

PCIe: the width is judged always, the generation only under load. An idle GPU lowers its link
generation on purpose to save power (the same rule as the diagnose code's `pcie` question and
the `pcie.link` check); the probe's clock-event reasons say whether the GPU is idle."""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.base import (
    FAIL,
    WARN,
    Check,
    finding,
    for_model,
    gpu_arg,
    mismatch,
    profile_of,
    registrar,
    unreadable,
)
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)

PCIE_FIX = ("drain, then reseat the card or riser and check the slot's BIOS link setting "
            "(lspci -vv -s {bus} | grep -E 'LnkCap|LnkSta')")


def gpu_busy(g: GpuFacts) -> bool | None:
    """True under load, False idle, None when the clock-event reasons are unreadable."""
    if g.clock_event_reasons is None:
        return None
    return "gpu_idle" not in g.clock_event_reasons


@check("node.pcie", ("gpus.pcie_gen_current", "gpus.pcie_width_current",
                     "gpus.clock_event_reasons"),
       "PCIe generation (under load) and width as the profile wants")
def pcie(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    links = p.links if p is not None else None
    if links is None or not links.pcie:
        return
    for g in facts.gpus:
        want = for_model(links.pcie, g)
        if want is None:
            if g.name is None:
                yield unreadable("node.pcie", g, "name", g.reason("name"),
                                 "a PCIe link for its model")
            continue
        fix = PCIE_FIX.format(bus=g.pci_bus_id or "<bus id>")
        if g.pcie_width_current is None:
            yield unreadable("node.pcie", g, "pcie_width_current",
                             g.reason("pcie_width_current"), f"x{want.width}")
        elif g.pcie_width_current < want.width:
            yield mismatch("node.pcie", WARN, "drain", g, "PCIe width", f"x{want.width}",
                           f"x{g.pcie_width_current}", fix, "pcie_width_current")
        busy = gpu_busy(g)
        if g.pcie_gen_current is None:
            yield unreadable("node.pcie", g, "pcie_gen_current", g.reason("pcie_gen_current"),
                             f"gen {want.gen}")
        elif g.pcie_gen_current < want.gen and busy is None:
            yield unreadable("node.pcie", g, "clock_event_reasons",
                             "cannot tell idle from busy: " + g.reason("clock_event_reasons"),
                             f"gen {want.gen} under load")
        elif g.pcie_gen_current < want.gen and busy:
            yield mismatch("node.pcie", WARN, "drain", g, "PCIe generation under load",
                           f"gen {want.gen}", f"gen {g.pcie_gen_current}", fix,
                           "pcie_gen_current")


@check("node.nvlink", ("gpus.nvlink_links",), "NVLink links up as the profile wants")
def nvlink(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    want = p.links.nvlink_active if p is not None and p.links is not None else None
    if want is None:
        return
    for g in facts.gpus:
        up = g.nvlink_active()
        if up is None:
            reason = (g.reason("nvlink_links") if g.nvlink_links is None
                      else "a link's state unreadable")
            yield unreadable("node.nvlink", g, "nvlink_links", reason, want)
        elif up < want:
            down = [link.link for link in g.nvlink_links or [] if not link.active]
            yield mismatch("node.nvlink", FAIL, "drain", g, "NVLink links up", want, up,
                           f"drain, nvidia-smi nvlink -s -i {gpu_arg(g)}; reset the GPU "
                           f"(nvidia-smi -r -i {gpu_arg(g)}) or check the NVSwitch trays and "
                           "Fabric Manager", "nvlink_links",
                           f"down: {', '.join(map(str, down))}" if down else "")


@check("node.fabric_manager", ("fabric_manager", "versions.driver_kernel_module",
                               "gpus.fabric_state"),
       "Fabric Manager running at the driver's version, fabric registration complete")
def fabric_manager(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    if p is None or p.links is None or p.links.fabric_manager != "required":
        return
    fm = facts.fabric_manager
    driver = facts.versions.driver_kernel_module or facts.versions.driver_library
    if fm is None:
        yield unreadable("node.fabric_manager", None, "fabric_manager",
                         facts.unreadable.get("fabric_manager", "not collected"), "running")
    else:
        start = "systemctl enable --now nvidia-fabricmanager"
        if fm.running is None:
            yield unreadable("node.fabric_manager", None, "fabric_manager.running",
                             fm.unreadable.get("running", "not collected"), "running")
        elif not fm.running:
            yield mismatch("node.fabric_manager", FAIL, "drain", None, "Fabric Manager",
                           "running", fm.service or "not running", start,
                           "fabric_manager.running")
        if fm.version is None or driver is None:
            missing = "fabric_manager.version" if fm.version is None else "driver version"
            yield unreadable("node.fabric_manager", None, missing,
                             fm.unreadable.get("version", "not collected"), driver or "the "
                             "driver's version")
        elif fm.version != driver:
            yield mismatch("node.fabric_manager", FAIL, "drain", None, "Fabric Manager version",
                           driver, fm.version, "install the nvidia-fabricmanager package of "
                           f"driver {driver} (fleet apply of the host's release pins it), "
                           "then restart nvidia-fabricmanager", "fabric_manager.version")
    for g in facts.gpus:
        state = g.fabric_state
        if state is not None and state not in ("completed", "not supported"):
            yield finding("node.fabric_manager", WARN, "none",
                          f"{g.label}: fabric registration {state} "
                          f"({g.fabric_status or 'no status'}), wanted completed", g,
                          facts=["gpus.fabric_state"], wanted="completed", found=state,
                          fix="check nvidia-fabricmanager's log; restart it")
        elif state == "completed" and g.fabric_status not in (None, "success"):
            yield finding("node.fabric_manager", WARN, "none",
                          f"{g.label}: fabric registration failed ({g.fabric_status})", g,
                          facts=["gpus.fabric_status"], wanted="success",
                          found=g.fabric_status, fix="check nvidia-fabricmanager's log")
