"""Scheduler adapters: drain and undrain hosts in the workload manager (`fleet.domain.ports`).

`make_scheduler("none" | "slurm" | "kubernetes" | "sim", **opts)`. Slurm and Kubernetes go
through one command-runner seam (`fleet.schedulers.runner`), so tests swap in fakes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.domain.names import name_problem
from fleet.domain.ports import HostRef, Scheduler
from fleet.errors import BadInput, Problem

NAMES = ("none", "slurm", "kubernetes", "sim")


def make_scheduler(name: str, **opts: Any) -> Scheduler:
    """A scheduler adapter by name; `opts` go to its constructor.

    none: marker.
    slurm: runner, marker, scontrol, squeue, scancel, timeout_s, poll_s, sleep, monotonic,
    slurm_conf.
    kubernetes (or k8s): runner, kubectl, context and kubeconfig (passed to every kubectl call),
    prefix, skip_labels; timeout_s, the drain timeout (the most one `kubectl drain` may block,
    1 s to 7 days), and command_timeout_s, the limit of every other kubectl call; the
    `kubectl drain` options pod_selector (a label selector, parsed as kubectl parses it),
    delete_emptydir_data, ignore_daemonsets and grace_period_s (1 to 86400; 0 is refused).
    disable_eviction=True is refused: fleet always evicts, so PodDisruptionBudgets hold.
    sim: fleet (a SimFleet: its own scheduler), or clock and drained for a standalone one.
    """
    key = name.strip().lower()
    if key == "none":
        from fleet.schedulers.none import NoneScheduler

        return NoneScheduler(**opts)
    if key == "slurm":
        from fleet.schedulers.slurm import SlurmScheduler

        return SlurmScheduler(**opts)
    if key in ("kubernetes", "k8s"):
        from fleet.schedulers.kubernetes import KubernetesScheduler

        return KubernetesScheduler(**opts)
    if key == "sim":
        from fleet.sim.scheduler import SimScheduler

        fleet = opts.pop("fleet", None)
        if fleet is not None and not opts:
            sched: Scheduler = fleet.scheduler()
            return sched
        return SimScheduler(fleet, **opts)
    raise BadInput.single(f"unknown scheduler {name!r} (expected one of: {', '.join(NAMES)})",
                          field="scheduler")


def scheduler_for(name: str | None, refs: Sequence[HostRef], **opts: Any) -> Scheduler:
    """The scheduler a command uses: `name` when given (`--scheduler`), else the inventory's
    `scheduler` host data (every host must agree), else none. Slurm takes `slurm_conf` and
    Kubernetes `kubeconfig` from the host data (the lab's inventory puts them there), so the
    commands reach that cluster."""
    data = [r.data for r in refs]
    said = {str(d.get("scheduler")) for d in data if d.get("scheduler")}
    if name is None:
        if len(said) > 1:
            raise BadInput.single("the inventory's hosts name different schedulers ("
                                  + ", ".join(sorted(said)) + "); pass --scheduler",
                                  field="scheduler")
        name = next(iter(said), "none")
    key = name.strip().lower()
    if key in ("slurm", "kubernetes", "k8s"):  # the host name is the node name in every call
        bad = [f"host {r.name!r}: {p}" for r in refs if (p := name_problem("node", r.name))]
        if bad:
            raise BadInput([Problem(None, None, "scheduler",
                                    f"{key} cannot take this inventory host as a node name: {b}")
                            for b in bad])
    if key == "slurm" and "runner" not in opts and "slurm_conf" not in opts:
        confs = {str(d["slurm_conf"]) for d in data if d.get("slurm_conf")}
        if len(confs) > 1:
            raise BadInput.single("the inventory's hosts name different slurm_conf files",
                                  field="slurm_conf")
        if confs:
            opts["slurm_conf"] = next(iter(confs))
    if key in ("kubernetes", "k8s") and "runner" not in opts and "kubeconfig" not in opts:
        configs = {str(d["kubeconfig"]) for d in data if d.get("kubeconfig")}
        if len(configs) > 1:
            raise BadInput.single("the inventory's hosts name different kubeconfig files",
                                  field="kubeconfig")
        if configs:
            opts["kubeconfig"] = next(iter(configs))
    return make_scheduler(key, **opts)


__all__ = ["NAMES", "make_scheduler", "scheduler_for"]
