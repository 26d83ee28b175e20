"""Put hosts' node state right (issue 23), on the pin path of `fleet apply`, `fleet rollback`
and a rollout's verify step.

Per host whose pool selects a node profile: probe, plan against the profile
(`fleet.domain.node_plan`: persistence, compute mode, power limit, clocks, MIG mode and
instances, ECC), run the steps through the backend's `NodeCommands` (argv lists, each checked by
`fleet.domain.node_commands`), and send the hosts whose change waits for a reboot (ECC) through
the caller's reboot, which is the one pre-reboot gate (`fleet.jobs.reboot_gate.gated_reboot`).
Idempotent: the plan comes from what the host shows now, so a second run finds no step and
says so. Firmware and Fabric Manager are never changed: the plan's notes name the tool.
A value the probe could not read plans no step (the plan lists it as unknown).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.checks.base import profile_of
from fleet.domain.checks.expect import pool_profiles
from fleet.domain.checks.models import Expectations
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_commands import show
from fleet.domain.node_plan import (
    BOOT_SCRIPT,
    BOOT_UNIT,
    MIG_PARTED_FILE,
    BootState,
    NodePlan,
    boot_state,
    boot_unit,
    plan_node,
)
from fleet.domain.ports import Backend, HostRef, HostResult, NodeCommands

Reboot = Callable[[list[str]], Mapping[str, HostResult[None]]]


@dataclass
class NodeChange:
    """One host's node state: what differs from its profile, and what was done about it."""

    host: str
    profile: str | None
    plan: NodePlan = field(default_factory=NodePlan)
    boot_files: dict[str, str] = field(default_factory=dict)
    """The boot unit that reapplies what a reboot forgets (empty: nothing to reapply)."""
    applied: bool = False  # its steps ran and succeeded
    boot_written: bool = False  # the boot unit was missing or different, and was written
    boot_removed: bool = False  # the profile declares nothing for it: the old unit was removed
    boot_state: BootState = "current"
    """The boot unit on the host against `boot_files` when planned (`node_plan.boot_state`)."""
    rebooted: bool = False  # the reboot its ECC change waits for was done
    error: str | None = None

    @property
    def changed(self) -> bool:
        return self.plan.changed or self.boot_state in ("missing", "stale", "obsolete")

    @property
    def drain(self) -> bool:
        return self.plan.drain

    def lines(self) -> list[str]:
        """The dry run's lines: each command with the value it changes, then what fleet does
        not change and what it could not read."""
        out = [f"node {s.setting}" + (f" GPU {s.gpu}" if s.gpu >= 0 else "")
               + f": {s.found} -> {s.wanted}: {show(s.argv)}"
               + (" (GPU idle: drained)" if s.drain else "")
               + (" (at the next reboot)" if s.reboot else "") for s in self.plan.steps]
        if self.plan.reboot_due:
            out.append("node ecc: a change is pending: a drained reboot applies it")
        if self.boot_files:
            what = {"missing": "missing -> written", "stale": "differs -> rewritten",
                    "current": "as planned", "unknown": "not read: written where it differs"}
            out.append(f"node boot unit: {what[self.boot_state]}: {BOOT_UNIT} reapplies "
                       f"{len(self.plan.boot)} setting(s) at boot")
        elif self.boot_state == "obsolete":
            out.append(f"node boot unit: the profile declares nothing a reboot forgets -> "
                       f"removed: {BOOT_UNIT}, {BOOT_SCRIPT}, {MIG_PARTED_FILE}")
        out += [f"node (not changed by fleet): {n}" for n in self.plan.notes]
        out += [f"node (unknown, left alone): {u}" for u in self.plan.unknown]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "steps": [{"gpu": s.gpu, "setting": s.setting, "from": s.found, "to": s.wanted,
                       "command": list(s.argv), "drain": s.drain, "reboot": s.reboot}
                      for s in self.plan.steps],
            "reboot": self.plan.reboot, "drain": self.plan.drain,
            "notes": list(self.plan.notes), "unknown": list(self.plan.unknown),
            "boot_unit": sorted(self.boot_files), "boot_written": self.boot_written,
            "boot_removed": self.boot_removed,
            "boot_state": self.boot_state,
            "applied": self.applied, "rebooted": self.rebooted, "error": self.error,
        }


def host_profile(matrix: Matrix, ref: HostRef, facts: HostFacts | None
                 ) -> tuple[str | None, NodeProfile | None]:
    """The name and profile this host must match (a per-model pool picks by its GPUs)."""
    profile, by_model = pool_profiles(matrix, ref.pool)
    if profile is None and not by_model:
        return None, None
    if facts is None:
        return matrix.profile_name_for(ref.pool or "", ref.gpu_model), None
    chosen = profile_of(facts, Expectations(profile=profile, profile_by_model=by_model,
                                            gpu_model=ref.gpu_model))
    name = next((n for n, p in matrix.profiles.items() if p is chosen), None)
    return name, chosen


def plan_nodes(backend: Backend, matrix: Matrix, refs: Sequence[HostRef]
               ) -> dict[str, NodeChange]:
    """Probe the hosts whose pool selects a profile, and plan each; hosts of pools without
    one are left out (nothing to put right)."""
    todo = [r for r in refs if any(pool_profiles(matrix, r.pool))]
    if not todo:
        return {}
    probed = backend.probe([r.name for r in todo])
    out: dict[str, NodeChange] = {}
    for ref in todo:
        got = probed[ref.name]
        if not got.ok or got.value is None:
            name, _ = host_profile(matrix, ref, None)
            change = NodeChange(ref.name, name)
            change.plan.unknown.append(f"node state unread (probe: {got.error})")
            out[ref.name] = change
            continue
        name, profile = host_profile(matrix, ref, got.value)
        change = NodeChange(ref.name, name)
        if profile is None:
            change.plan.unknown.append("no profile for this host's GPU model")
        elif not got.value.gpus:
            change.plan.unknown.append(f"no GPU facts (source {got.value.source})")
        else:
            tools = got.value.node_tools
            change.plan = plan_node(got.value.gpus, profile, tools)
            change.boot_files = boot_unit(change.plan) if change.plan.boot else {}
            change.boot_state = boot_state(change.boot_files, tools, change.plan)
        out[ref.name] = change
    return out


def declares_ecc(matrix: Matrix, pool: str | None) -> bool:
    """The pool's profile (or one of its per-model profiles) declares an ECC mode."""
    profile, by_model = pool_profiles(matrix, pool)
    return any(p.gpu is not None and p.gpu.ecc is not None
               for p in [profile, *by_model.values()] if p is not None)


def settle_before_reboot(backend: Backend, matrix: Matrix, refs: Sequence[HostRef]
                         ) -> dict[str, NodeChange]:
    """Set the node-state changes that wait for a reboot (ECC mode) on hosts about to reboot
    for another reason (a driver change), so that one reboot applies both: ECC mode is held
    pending in the GPU until the next reboot, whatever reboots it. Run before the pin: after
    it, the new nvidia-smi would meet the old loaded kernel module. Planned from a fresh
    probe; only the steps that wait for a reboot; never reboots (the caller's reboot does).
    Hosts whose step fails are put right after the reboot, as without this (a second one)."""
    changes = plan_nodes(backend, matrix, [r for r in refs if declares_ecc(matrix, r.pool)])
    early = {n: NodeChange(n, c.profile, NodePlan(steps=[s for s in c.plan.steps if s.reboot],
                                                  gpus=list(c.plan.gpus)))
             for n, c in changes.items() if any(s.reboot for s in c.plan.steps)}
    if early:
        put_right(backend, early, lambda names: {})
    return early


def put_right(backend: Backend, changes: Mapping[str, NodeChange], reboot: Reboot) -> None:
    """Run each host's planned steps and write its boot unit where it differs, then reboot
    (through `reboot`, the caller's gated reboot) the hosts whose change waits for one.
    Results land in each `NodeChange`."""
    run = {n: [s.argv for s in c.plan.steps] for n, c in changes.items() if c.plan.steps}
    files = {n: c.boot_files for n, c in changes.items() if c.boot_files}
    remove = sorted(n for n, c in changes.items() if c.boot_state == "obsolete")
    done: Mapping[str, HostResult[list[str]]] = {}
    if (run or files or remove) and isinstance(backend, NodeCommands):
        done = backend.run_commands(run, files=files, remove_boot=remove)
    elif run or files or remove:
        for n in [*files, *remove]:
            changes[n].plan.notes.append("boot unit not installed: this backend runs no "
                                         "commands")
        for n in run:
            changes[n].error = "node state not applied: this backend runs no commands"
        return
    rebooting = [n for n, c in changes.items() if c.plan.reboot_due and not c.plan.steps]
    for name, res in done.items():
        c = changes[name]
        if not res.ok:
            c.error = f"node state: {res.error}"
            continue
        c.applied = bool(c.plan.steps)
        # `changed` covers commands and files alike: with no step, it is the boot unit; with
        # steps, the probe's reading says whether the files differed (the operation writes
        # exactly those; one it could not read counts as not known to be written)
        if c.plan.steps:
            c.boot_written = bool(c.boot_files) and c.boot_state in ("missing", "stale")
            c.boot_removed = c.boot_state == "obsolete"
        else:
            c.boot_written = bool(c.boot_files) and res.changed
            c.boot_removed = c.boot_state == "obsolete" and res.changed
        if c.plan.reboot:
            rebooting.append(name)
    if not rebooting:
        return
    for name, booted in reboot(sorted(rebooting)).items():
        if booted.ok:
            changes[name].rebooted = True
        else:
            changes[name].error = f"node state: the reboot it needs: {booted.error}"
