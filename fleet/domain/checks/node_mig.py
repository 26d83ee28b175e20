"""Node-profile checks of MIG: the mode (`node.mig_mode`, formerly `mig.mode`) and the layout
of GPU and compute instances (`node.mig_layout`) against the profile's mig-parted config.

MIG mode survives a reboot; the instances do not (they come back only if something reapplies
the layout at boot), so a lost layout is the common finding after a reboot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from fleet.domain.checks.base import (
    FAIL,
    WARN,
    Check,
    finding,
    gpu_arg,
    mismatch,
    profile_of,
    registrar,
    unreadable,
)
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.matrix.models import Thresholds
from fleet.domain.matrix.profiles import MigDeviceGroup, MigSettings, model_matches

CHECKS: list[Check] = []
check = registrar(CHECKS)


def group_for(mig: MigSettings, g: GpuFacts) -> MigDeviceGroup | None:
    """The config entry that applies to this GPU (mig-parted: the first whose devices and
    device-filter both match), or None."""
    for group in mig.groups() or []:
        if group.devices != "all" and g.index not in group.devices:
            continue
        filters = group.filters()
        if filters and not any(_filter_matches(f, g) for f in filters):
            continue
        return group
    return None


def _filter_matches(flt: str, g: GpuFacts) -> bool:
    dev = (g.pci_device_id or "").upper().removeprefix("0X")
    if flt.upper().removeprefix("0X") == dev and dev:
        return True
    return bool(g.name) and model_matches(flt, g.name or "")


def _apply_cmd(mig: MigSettings, mode_only: bool = False) -> str:
    where = mig.file or "<the profile's layout>"
    return (f"nvidia-mig-parted apply -f {where} -c {mig.config}"
            + (" --mode-only" if mode_only else ""))


@check("node.mig_mode", ("gpus.mig_mode_current", "gpus.mig_mode_pending"),
       "MIG mode as the profile (or the pool) wants, no change pending")
def mig_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    mig = p.mig if p is not None else None
    for g in facts.gpus:
        group = group_for(mig, g) if mig is not None else None
        wanted = group.mig_enabled if group is not None else exp.mig_mode
        cur, pend = g.mig_mode_current, g.mig_mode_pending
        if wanted is not None and cur is None:
            if group is not None:
                yield unreadable("node.mig_mode", g, "mig_mode_current",
                                 g.reason("mig_mode_current"), wanted)
        elif wanted is not None and cur != wanted:
            fix = (_apply_cmd(mig, mode_only=True) if mig is not None else
                   f"nvidia-smi -i {gpu_arg(g)} -mig {int(wanted)}") + \
                " (drain first; the GPU is reset)"
            yield mismatch("node.mig_mode", FAIL, "reset_gpu", g, "MIG mode", wanted, cur, fix,
                           "mig_mode_current")
        elif pend is not None and cur is not None and pend != cur:
            yield finding("node.mig_mode", WARN, "reset_gpu",
                          f"{g.label}: MIG mode change pending until the GPU is reset", g,
                          facts=["gpus.mig_mode_pending"], wanted=pend, found=cur,
                          fix=f"drain, then nvidia-smi -i {gpu_arg(g)} -r")


@check("node.mig_layout", ("gpus.mig_devices",), "MIG instances as the profile's layout")
def mig_layout(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    mig = p.mig if p is not None else None
    if mig is None or mig.groups() is None:
        return
    for g in facts.gpus:
        group = group_for(mig, g)
        if group is None or not group.mig_enabled or g.mig_mode_current is False:
            continue  # MIG off where wanted on: node.mig_mode says so
        wanted = {k: v for k, v in group.mig_devices.items() if v}
        if g.mig_devices is None:
            yield unreadable("node.mig_layout", g, "mig_devices", g.reason("mig_devices"),
                             wanted)
            continue
        fix = _apply_cmd(mig) + " (drain first)"
        named = [d.profile for d in g.mig_devices]
        if any(n is None for n in named):
            total = sum(wanted.values())
            if len(named) != total:
                yield mismatch("node.mig_layout", FAIL, "drain", g, "MIG devices", total,
                               len(named), fix, "mig_devices",
                               "profile names unreadable: counted devices only")
            else:
                yield unreadable("node.mig_layout", g, "mig_devices",
                                 "the source names no MIG profiles (nvidia-smi -q); "
                                 f"{len(named)} devices, as many as wanted", wanted)
            continue
        found = dict(Counter(n for n in named if n is not None))
        if found != wanted:
            yield mismatch("node.mig_layout", FAIL, "drain", g, "MIG devices", wanted,
                           found or "none", fix, "mig_devices",
                           "the layout is lost at every reboot unless reapplied"
                           if not found else "")
