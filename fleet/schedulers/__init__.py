"""Scheduler adapters: drain and undrain hosts in the workload manager (`fleet.domain.ports`).

`make_scheduler("none" | "slurm" | "kubernetes" | "sim", **opts)`. Slurm and Kubernetes go
through one command-runner seam (`fleet.schedulers.runner`), so tests swap in fakes.
"""

from __future__ import annotations

from typing import Any

from fleet.domain.ports import Scheduler
from fleet.errors import BadInput

NAMES = ("none", "slurm", "kubernetes", "sim")


def make_scheduler(name: str, **opts: Any) -> Scheduler:
    """A scheduler adapter by name; `opts` go to its constructor.

    none: marker. slurm: runner, marker, scontrol, squeue, timeout_s, poll_s, sleep, monotonic.
    kubernetes (or k8s): runner, kubectl, context, kubeconfig, prefix, timeout_s, skip_labels.
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


__all__ = ["NAMES", "make_scheduler"]
