"""Ports: the interface through which jobs reach hosts, and the one through which they drain them.

Pure types and protocols (no I/O), so adapters and jobs can both import them.

`Backend` is implemented twice: over SSH (`fleet.remote.backend.SshBackend`: pyinfra, fabric)
and in-process (`fleet.sim`: the simulated fleet used for rehearsals at scale, the demo and the
engine tests). `Scheduler` is implemented per workload manager (`fleet.schedulers`: none, Slurm,
Kubernetes) and by the simulated fleet.

Every per-host call returns a `HostResult` instead of raising: a job must be able to do the rest
of the fleet and say exactly which hosts it could not reach. Calls take and return host *names*;
`hosts()` is where names meet their pool, GPU model and NVLink/rack unit.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Release
from fleet.domain.pinning import PinPlan
from fleet.domain.reboot_gate import RebootPass

T = TypeVar("T")

OsFamily = Literal["debian", "rhel"]


@dataclass(frozen=True)
class HostRef:
    """A host as the inventory describes it."""

    name: str
    pool: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = None
    unit: str | None = None  # hosts sharing an NVLink domain or rack move together
    groups: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class HostResult(Generic[T]):
    """One host's answer to one call. `value` is set when `ok`; `error` says why not."""

    host: str
    value: T | None = None
    ok: bool = True
    reachable: bool = True
    changed: bool = False
    error: str | None = None
    seconds: float = 0.0
    refused: bool = False  # not an error of the host's: fleet will not do this there

    @classmethod
    def unreachable(cls, host: str, error: str) -> HostResult[T]:
        return cls(host, None, ok=False, reachable=False, error=error)

    @classmethod
    def failed(cls, host: str, error: str) -> HostResult[T]:
        return cls(host, None, ok=False, error=error)

    @classmethod
    def refusal(cls, host: str, error: str) -> HostResult[T]:
        return cls(host, None, ok=False, error=error, refused=True)


Samples = dict[str, list[float]]
"""Benchmark output: metric name to its samples (the judge compares these)."""


class Backend(Protocol):
    """Probe, plan, apply a release, reboot and benchmark hosts."""

    def hosts(self) -> list[HostRef]: ...

    def probe(self, hosts: Sequence[str], *, since: Mapping[str, str | None] | None = None
              ) -> dict[str, HostResult[HostFacts]]:
        """Host facts; `since` gives each host's kernel-log cursor from its last probe, so an
        event is counted once, not again at every probe until the host reboots."""
        ...

    def plan(self, hosts: Sequence[str], release: Release, *,
             kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        """What pinning `release` would change on each host; touches nothing. `kernel_hold`
        names the hosts whose pool holds the kernel packages (`kernel: {hold: true}`): their
        pin holds them, every other host's pin releases the ones fleet held."""
        ...

    def apply(self, hosts: Sequence[str], release: Release, *,
              kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        """Pin `release` (idempotent: `changed` is False on a host already on it); the kernel
        hold as `plan` says."""
        ...

    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]:
        """Reboot hosts the pre-reboot gate passed (`gate` covers them, else it raises
        `RebootNotGated`); only `fleet.jobs.reboot_gate.gated_reboot` makes a pass."""
        ...

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]: ...

    def close(self) -> None: ...


AdminStateName = Literal["available", "draining", "drained", "down", "unknown"]


@dataclass(frozen=True)
class AdminState:
    """A host's state in the workload manager, recorded before fleet touches it.

    `drained` means drained AND empty: no running or completing job (Slurm) and no evictable pod
    (Kubernetes) is left; while work remains the state is `draining` and `jobs` names it.
    """

    state: AdminStateName
    reason: str | None = None
    by_fleet: bool = False  # drained by fleet (its reason carries fleet's marker)
    owner: str | None = None  # who set the reason, where the scheduler says (Slurm: user)
    jobs: tuple[str, ...] = ()  # work still on the host: job ids, namespace/pod names


class Scheduler(Protocol):
    """Drain and undrain hosts in the workload manager (none, Slurm, Kubernetes, simulated).

    Never undrain a host someone else drained: callers check `state()` first and only undrain
    hosts whose state says `by_fleet`.
    """

    name: str

    def state(self, host: str) -> AdminState: ...

    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]: ...

    def undrain(self, host: str) -> HostResult[None]: ...


StopAction = Literal["cancel", "requeue"]


@runtime_checkable
class JobControl(Protocol):
    """A scheduler that can end the work left on a draining host, when the matrix says so
    (`rollout.drain.on_timeout: cancel | requeue`). Slurm: `scancel`, `scontrol requeue`."""

    def stop_jobs(self, host: str, jobs: Sequence[str], action: StopAction
                  ) -> HostResult[list[str]]: ...


@runtime_checkable
class NodeReboot(Protocol):
    """A scheduler that reboots its nodes itself (`rollout.reboot: slurm`): `scontrol reboot`,
    which runs the cluster's RebootProgram and knows when the node is back."""

    def reboot_nodes(self, hosts: Sequence[str], reason: str, *, timeout_s: float,
                     gate: RebootPass) -> dict[str, HostResult[None]]: ...


@runtime_checkable
class IdleCheck(Protocol):
    """A scheduler that can say a host in service runs nothing at all, so a benchmark there
    (a rollout's same-time baseline) slows no one's job and is not biased by one. `value` True:
    idle (Slurm: IDLE and `squeue` lists no job; Kubernetes: schedulable, no workload pod);
    False: busy; not ok: it could not tell, which is never idle."""

    def idle(self, host: str) -> HostResult[bool]: ...


@runtime_checkable
class NodeCommands(Protocol):
    """A backend that can run the node-state commands `fleet.domain.node_plan` plans
    (persistence, compute mode, power limit, clocks, ECC, MIG): argv lists only, each checked
    by `fleet.domain.node_commands.check_argv` before it leaves the controller. Per host, the
    commands run in order and stop at the first that fails; `value` is what they printed.
    `files`: per host, the boot unit's files (`fleet.domain.node_plan.boot_unit`, with the
    mig-parted layout where mig-parted applies it: written before the commands), written
    and enabled where they differ; `remove_boot`: hosts whose boot unit (unit, script, layout,
    link) goes, where any of it is there (their profile declares nothing a reboot forgets);
    `changed` says whether anything was run, written or removed."""

    def run_commands(self, commands: Mapping[str, Sequence[tuple[str, ...]]], *,
                     files: Mapping[str, Mapping[str, str]] | None = None,
                     remove_boot: Collection[str] = ()
                     ) -> dict[str, HostResult[list[str]]]: ...
