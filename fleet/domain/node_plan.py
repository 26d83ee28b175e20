"""Put a host's GPUs into its node profile: which commands, in which order, what needs the GPUs
idle (a drain) or a reboot, and what a reboot forgets (the boot unit reapplies it). Pure.

Order: settings that take effect at once and need no idle GPU first (persistence, compute mode,
power limit, clocks), then those that need idle GPUs (MIG mode, MIG instances), then ECC, which
takes effect at the next reboot. A value the probe could not read is never guessed at: it is
listed in `unknown` and no step is planned for it (unknown never reboots). Firmware is never
flashed: a difference is a note naming the tool that updates it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from fleet.domain.facts import GpuFacts
from fleet.domain.matrix.profiles import Clocks, MigDeviceGroup, NodeProfile, best_key
from fleet.domain.node_commands import shell_line
from fleet.domain.node_facts import NodeTools

FIRMWARE_TOOL = ("nvfwupd (NVIDIA's firmware update tool, through the machine's BMC) or the "
                 "server vendor's firmware bundle; fleet never flashes firmware")
USER_CLOCKS = "applications_clocks_setting"  # NVML's user-defined-clocks event reason
_COMPUTE_ARG = {"default": "DEFAULT", "exclusive_process": "EXCLUSIVE_PROCESS",
                "prohibited": "PROHIBITED"}


@dataclass(frozen=True)
class NodeStep:
    """One command on the host."""

    gpu: int
    setting: str
    found: str
    wanted: str
    argv: tuple[str, ...]
    drain: bool = False  # the GPU must run nothing (MIG, ECC)
    reboot: bool = False  # takes effect at the next reboot (ECC)
    at_boot: bool = False  # a reboot forgets it: the boot unit reapplies it


@dataclass
class NodePlan:
    steps: list[NodeStep] = field(default_factory=list)
    boot: list[tuple[str, ...]] = field(default_factory=list)
    """Every command that puts back what a reboot forgets (the boot unit's script)."""
    unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # firmware and what fleet cannot apply
    reboot_due: bool = False  # a pending ECC change waits for a reboot already
    mig_parted_layout: str | None = None
    """The mig-parted file the boot unit's and the steps' `nvidia-mig-parted apply` read."""
    gpus: list[int] = field(default_factory=list)  # the GPU indices planned for

    @property
    def drain(self) -> bool:
        return any(s.drain for s in self.steps) or self.reboot

    @property
    def reboot(self) -> bool:
        return self.reboot_due or any(s.reboot for s in self.steps)

    @property
    def changed(self) -> bool:
        return bool(self.steps) or self.reboot_due


def _smi(gpu: int, *args: str) -> tuple[str, ...]:
    return ("nvidia-smi", "-i", str(gpu), *args)


def _onoff(v: bool) -> str:
    return "1" if v else "0"


def _mig_group(groups: Sequence[MigDeviceGroup], g: GpuFacts) -> MigDeviceGroup | None:
    """The config entry that applies to this GPU: its index listed (or all), its product name
    or PCI device id matching the entry's device-filter when there is one. At most one does:
    the matrix refuses entries that overlap (`profiles.overlap`)."""
    for grp in groups:
        if grp.devices != "all" and g.index not in grp.devices:
            continue
        wanted = grp.filters()
        if wanted and not any(f.lower() in {(g.name or "").lower(), (g.pci_device_id or "").lower()}
                              or (g.name or "").upper().endswith(f.upper()) for f in wanted):
            continue
        return grp
    return None


def plan_node(gpus: Sequence[GpuFacts], profile: NodeProfile,
              tools: NodeTools | None = None) -> NodePlan:
    """The steps that bring these GPUs to `profile`, and the boot unit's commands.
    `tools`: what the host has (the probe's `node_tools`). With nvidia-mig-parted, the whole
    layout is applied in one go from the file fleet writes beside it (`MIG_PARTED_FILE`);
    where NVIDIA's nvidia-mig-manager service is enabled, it applies its own config at every
    boot, so fleet plans nothing for MIG (two tools fighting over a GPU's instances at boot):
    a note says so, and the `node.mig_*` checks still judge the layout."""
    plan = NodePlan()
    manager = tools is not None and tools.mig_manager_enabled is True
    mig_parted = tools is not None and tools.mig_parted is not None and not manager
    if manager and profile.mig is not None:
        assert tools is not None
        plan.notes.append(
            f"MIG left to nvidia-mig-manager.service (enabled; it applies config "
            f"{tools.mig_manager_config or '(none set)'} at boot), not to fleet: set its "
            f"MIG_PARTED_SELECTED_CONFIG to {profile.mig.config} with this layout, or disable "
            "it to let fleet manage MIG")
    for g in gpus:
        if g.index is None:
            plan.unknown.append("a GPU without an index")
            continue
        plan.gpus.append(g.index)
        _gpu_settings(plan, g, profile)
        if not manager:
            _mig(plan, g, profile, mig_parted)
        _firmware(plan, g, profile)
    if mig_parted and profile.mig is not None and any(s.setting == "mig_layout"
                                                      for s in plan.steps):
        argv = ("nvidia-mig-parted", "apply", "-f", MIG_PARTED_FILE, "-c", profile.mig.config)
        plan.steps = [s for s in plan.steps if s.setting != "mig_layout"] + [
            NodeStep(-1, "mig_layout", "differs", profile.mig.config, argv, drain=True,
                     at_boot=True)]
    if mig_parted and profile.mig is not None and _mig_declared(profile):
        plan.boot = [c for c in plan.boot if c[:2] != ("nvidia-smi", "mig")] + [
            ("nvidia-mig-parted", "apply", "-f", MIG_PARTED_FILE, "-c", profile.mig.config)]
        plan.mig_parted_layout = mig_parted_file(profile)
    order = {"persistence_mode": 0, "compute_mode": 1, "power_limit_w": 2, "clocks": 3,
             "mig_mode": 4, "mig_layout": 5, "ecc": 6}
    plan.steps.sort(key=lambda s: (order.get(s.setting, 9), s.gpu))
    return plan


MIG_PARTED_FILE = "/etc/fleet/mig-parted.yaml"


def mig_parted_file(profile: NodeProfile) -> str | None:
    """The profile's chosen MIG config as a mig-parted file (JSON, which is YAML too): the one
    config fleet applies, so the file holds nothing else to pick by mistake."""
    mig = profile.mig
    groups = mig.groups() if mig is not None else None
    if mig is None or groups is None:
        return None
    doc = {"version": "v1", "mig-configs": {mig.config: [
        g.model_dump(mode="json", by_alias=True, exclude_none=True) for g in groups]}}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _mig_declared(profile: NodeProfile) -> bool:
    return profile.mig is not None and profile.mig.groups() is not None


def _gpu_settings(plan: NodePlan, g: GpuFacts, profile: NodeProfile) -> None:
    want = profile.gpu
    if want is None:
        return
    i = g.index
    assert i is not None
    if want.persistence_mode is not None:
        arg = _onoff(want.persistence_mode)
        plan.boot.append(_smi(i, "-pm", arg))
        if g.persistence_mode is None:
            plan.unknown.append(f"GPU {i} persistence mode ({g.reason('persistence_mode')})")
        elif g.persistence_mode != want.persistence_mode:
            plan.steps.append(NodeStep(i, "persistence_mode", _onoff(g.persistence_mode), arg,
                                       _smi(i, "-pm", arg), at_boot=True))
    if want.compute_mode is not None:
        arg = _COMPUTE_ARG[want.compute_mode]
        if want.compute_mode != "default":  # a reboot puts the default compute mode back
            plan.boot.append(_smi(i, "-c", arg))
        if g.compute_mode is None:
            plan.unknown.append(f"GPU {i} compute mode ({g.reason('compute_mode')})")
        elif g.compute_mode != want.compute_mode:
            plan.steps.append(NodeStep(i, "compute_mode", g.compute_mode, want.compute_mode,
                                       _smi(i, "-c", arg), at_boot=True))
    _power(plan, g, want.power_limit_w)
    if want.clocks is not None:
        _clocks(plan, g, want.clocks)
    if want.ecc is not None:
        if g.ecc_mode_pending is None or g.ecc_mode_current is None:
            plan.unknown.append(f"GPU {i} ECC mode ({g.reason('ecc_mode_pending')})")
        elif g.ecc_mode_pending != want.ecc:
            plan.steps.append(NodeStep(i, "ecc", _onoff(g.ecc_mode_current), _onoff(want.ecc),
                                       _smi(i, "-e", _onoff(want.ecc)), drain=True, reboot=True))
        elif g.ecc_mode_current != want.ecc:
            plan.reboot_due = True  # set already, pending: the reboot applies it


def _power(plan: NodePlan, g: GpuFacts, want: float | str | None) -> None:
    if want is None:
        return
    i = g.index
    assert i is not None
    target = (g.power_limit_default_w if want == "default" else
              g.power_limit_max_w if want == "max" else float(want))
    if target is None:
        plan.unknown.append(f"GPU {i} power limit {want} (not readable)")
        return
    lo, hi = g.power_limit_min_w, g.power_limit_max_w
    if lo is not None and hi is not None and not lo <= target <= hi:
        plan.notes.append(f"GPU {i}: power limit {target:g} W is outside what the GPU allows "
                          f"({lo:g}-{hi:g} W); not applied")
        return
    arg = f"{target:g}"
    if want != "default":  # a reboot restores the default limit by itself
        plan.boot.append(_smi(i, "-pl", arg))
    if g.power_limit_w is None:
        plan.unknown.append(f"GPU {i} power limit ({g.reason('power_limit_w')})")
    elif abs(g.power_limit_w - target) >= 0.5:
        plan.steps.append(NodeStep(i, "power_limit_w", f"{g.power_limit_w:g}", arg,
                                   _smi(i, "-pl", arg), at_boot=True))


def _clocks(plan: NodePlan, g: GpuFacts, want: Clocks) -> None:
    i = g.index
    assert i is not None
    held = g.clock_event_reasons is not None and USER_CLOCKS in g.clock_event_reasons
    if want.applications is not None:
        mem, gfx = want.applications.memory_mhz, want.applications.graphics_mhz
        arg = f"{mem},{gfx}"
        if (mem, gfx) != (g.clocks_default_applications_memory_mhz,
                          g.clocks_default_applications_graphics_mhz):
            plan.boot.append(_smi(i, "-ac", arg))  # a reboot restores the default ones
        found = (g.clocks_applications_memory_mhz, g.clocks_applications_graphics_mhz)
        if None in found:
            plan.unknown.append(f"GPU {i} application clocks "
                                f"({g.reason('clocks_applications_graphics_mhz')})")
        elif found != (mem, gfx):
            plan.steps.append(NodeStep(i, "clocks", f"{found[0]},{found[1]}", arg,
                                       _smi(i, "-ac", arg), at_boot=True))
        elif held and gfx == g.clocks_default_applications_graphics_mhz:
            # the application clocks are the default ones, yet a user setting holds the clock:
            # locked clocks (`-lgc`), which NVML cannot read back; `-rgc` lifts them
            plan.steps.append(NodeStep(i, "clocks", "locked (user-defined clocks)", arg,
                                       _smi(i, "-rgc")))
    elif want.locked_graphics_mhz is not None:
        lo, hi = want.locked_graphics_mhz
        plan.boot.append(_smi(i, "-lgc", f"{lo},{hi}"))
        if g.clocks_locked_graphics_mhz is None:
            plan.unknown.append(f"GPU {i} locked clocks "
                                f"({g.reason('clocks_locked_graphics_mhz')})")
        elif list(g.clocks_locked_graphics_mhz) != [lo, hi]:
            locked = ",".join(map(str, g.clocks_locked_graphics_mhz)) or "none"
            plan.steps.append(NodeStep(i, "clocks", locked, f"{lo},{hi}",
                                       _smi(i, "-lgc", f"{lo},{hi}"), at_boot=True))


def _mig(plan: NodePlan, g: GpuFacts, profile: NodeProfile, mig_parted: bool) -> None:
    if profile.mig is None:
        return
    groups = profile.mig.groups()
    i = g.index
    assert i is not None
    if groups is None:
        plan.unknown.append(f"MIG layout file {profile.mig.file} not read")
        return
    grp = _mig_group(groups, g)
    if grp is None:
        return
    if g.mig_mode_current is None:
        plan.unknown.append(f"GPU {i} MIG mode ({g.reason('mig_mode_current')})")
        return
    if g.mig_mode_current != grp.mig_enabled:
        plan.steps.append(NodeStep(i, "mig_mode", _onoff(g.mig_mode_current),
                                   _onoff(grp.mig_enabled),
                                   _smi(i, "-mig", _onoff(grp.mig_enabled)), drain=True))
    if not grp.mig_enabled:
        return
    want = Counter({k: n for k, n in grp.mig_devices.items() if n})
    listing = ",".join(k for k, n in sorted(want.items()) for _ in range(n))
    create = ("nvidia-smi", "mig", "-i", str(i), "-cgi", listing, "-C")
    if listing:
        plan.boot.append(create)
    devs = g.mig_devices if g.mig_mode_current else []
    if devs is None or any(d.profile is None for d in devs):
        plan.unknown.append(f"GPU {i} MIG devices ({g.reason('mig_devices')})")
        return
    found = Counter(d.profile for d in devs if d.profile)
    if found == want:
        return
    text = ",".join(f"{k}x{n}" for k, n in sorted(found.items())) or "none"
    wtext = ",".join(f"{k}x{n}" for k, n in sorted(want.items())) or "none"
    for argv in (("nvidia-smi", "mig", "-i", str(i), "-dci"),
                 ("nvidia-smi", "mig", "-i", str(i), "-dgi"), *([create] if listing else [])):
        if argv[-1] in ("-dci", "-dgi") and not devs:
            continue
        plan.steps.append(NodeStep(i, "mig_layout", text, wtext, argv, drain=True,
                                   at_boot=True))


def _firmware(plan: NodePlan, g: GpuFacts, profile: NodeProfile) -> None:
    fw = profile.firmware
    if fw is None:
        return
    i = g.index
    for what, allowed, found in (("VBIOS", fw.vbios, g.vbios_version),
                                 ("InfoROM image", fw.inforom_image, g.inforom_image)):
        if not allowed:
            continue
        key = best_key(list(allowed), g.name or "")
        if key is None:
            continue
        if found is None:
            plan.unknown.append(f"GPU {i} {what} (not readable)")
        elif found not in allowed[key]:
            plan.notes.append(f"GPU {i} {what} {found}, wanted {' or '.join(allowed[key])}: "
                              f"update it with {FIRMWARE_TOOL}")


def _per_host(plan: NodePlan) -> list[tuple[str, ...]]:
    """The boot commands, one `nvidia-smi ARGS` (every GPU) where all of a host's GPUs (two or
    more) get the same `nvidia-smi -i N ARGS`: a boot runs one command per setting, not one per
    GPU."""
    by_args: dict[tuple[str, ...], list[int]] = {}
    for argv in plan.boot:
        if argv[:2] == ("nvidia-smi", "-i") and argv[2].isdigit():
            by_args.setdefault(argv[3:], []).append(int(argv[2]))
    whole = {a for a, idx in by_args.items()
             if len(plan.gpus) > 1 and sorted(idx) == sorted(plan.gpus)}
    out: list[tuple[str, ...]] = []
    for argv in plan.boot:
        if argv[:2] == ("nvidia-smi", "-i") and argv[3:] in whole:
            if ("nvidia-smi", *argv[3:]) not in out:
                out.append(("nvidia-smi", *argv[3:]))
        else:
            out.append(argv)
    return out


def boot_unit(plan: NodePlan) -> dict[str, str]:
    """The files of the boot unit: a oneshot service, ordered before the schedulers' daemons,
    that reapplies every setting a reboot forgets (as nvidia-mig-manager does for MIG)."""
    lines = ["#!/bin/sh", "# fleet: GPU settings a reboot forgets (fleet apply writes this file)",
             "rc=0"]
    lines += [shell_line(argv) + " || rc=1" for argv in _per_host(plan)]
    lines.append("exit $rc")
    unit = "\n".join([
        "[Unit]",
        "Description=fleet: reapply the GPU settings a reboot forgets",
        "After=nvidia-persistenced.service systemd-modules-load.service",
        "Before=slurmd.service kubelet.service nvidia-dcgm.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        f"ExecStart={BOOT_SCRIPT}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])
    files = {BOOT_UNIT: unit, BOOT_SCRIPT: "\n".join(lines) + "\n"}
    if plan.mig_parted_layout is not None:
        files[MIG_PARTED_FILE] = plan.mig_parted_layout
    return files


BootState = Literal["current", "missing", "stale", "unknown", "obsolete"]


def boot_state(files: dict[str, str], tools: NodeTools | None,
               plan: NodePlan | None = None) -> BootState:
    """The boot unit on the host against `files` (what `boot_unit` writes): `missing` (a file
    or the enabling link absent), `stale` (a file differs), `current`, or `unknown` where the
    probe did not read it (an older probe, or a file it could not read): then the apply writes
    it where it differs and the dry run says so. With no `files` (the profile declares nothing
    a reboot forgets), `obsolete` where fleet's unit, script, layout or link is still on the
    host: the apply removes them, as a unit that reapplies settings no longer declared would
    keep putting them back. Never obsolete while `plan` has a value it could not read (a
    boot-time setting may hide behind it) or the probe did not read the unit."""
    if not files:
        return "obsolete" if _leftover(tools, plan) else "current"
    if tools is None:
        return "unknown"
    state: BootState = "current"
    for key, path in (("boot_unit_sha256", BOOT_UNIT), ("boot_script_sha256", BOOT_SCRIPT),
                      ("mig_parted_file_sha256", MIG_PARTED_FILE)):
        if path not in files:
            continue
        if key in tools.unreadable:
            return "unknown"
        have = getattr(tools, key)
        if have is None:
            state = "missing"
        elif have != hashlib.sha256(files[path].encode()).hexdigest() and state == "current":
            state = "stale"
    if tools.boot_enabled is None:
        return "unknown"
    if not tools.boot_enabled:
        state = "missing"
    return state


def _leftover(tools: NodeTools | None, plan: NodePlan | None) -> bool:
    """fleet's boot unit, or a piece of it, is on the host, and the plan is sure it needs none."""
    if tools is None or (plan is not None and plan.unknown):
        return False
    keys = ("boot_unit_sha256", "boot_script_sha256", "mig_parted_file_sha256")
    if tools.boot_enabled is None or any(k in tools.unreadable for k in keys):
        return False
    return tools.boot_enabled or any(getattr(tools, k) is not None for k in keys)


BOOT_UNIT = "/etc/systemd/system/fleet-node-state.service"
BOOT_SCRIPT = "/usr/local/sbin/fleet-node-state"
BOOT_WANTS = "/etc/systemd/system/multi-user.target.wants/fleet-node-state.service"
"""The link `systemctl enable` makes: written as a plain symlink, so enabling needs no running
systemd (a container, the lab)."""
