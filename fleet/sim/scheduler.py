"""`SimScheduler`: a simulated workload manager implementing `fleet.domain.ports.Scheduler`.

It behaves like Slurm for the subset fleet uses: a drained host with running jobs is "draining"
until they end, fleet's drains carry the `fleet:` marker so `by_fleet` is known, a host drained by
someone else is never resumed, and a host the simulated fleet cannot reach is "down". Jobs end on
the logical clock; `drain(..., wait_s)` succeeds when they would end within the wait.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from fleet.domain.ports import AdminState, HostResult, StopAction
from fleet.domain.reboot_gate import RebootPass, require_pass
from fleet.sim.model import SimClock

MARKER = "fleet:"


@dataclass
class _Node:
    drained: bool = False
    reason: str | None = None
    jobs_end: datetime | None = None  # when the running jobs finish; None: no jobs
    job_id: str | None = None
    drain_fails: bool = False


class FleetSide(Protocol):
    """What the scheduler needs of the simulated fleet it schedules (`SimFleet` has it): its
    clock, whether a host answers, and the reboot that `scontrol reboot` asks of it."""

    clock: Callable[[], datetime]

    def is_reachable(self, host: str) -> bool: ...
    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]: ...


class SimScheduler:
    """In-process drain/undrain with Slurm-like semantics (see the module doc)."""

    name = "sim"

    def __init__(self, fleet: FleetSide | None = None, *,
                 clock: Callable[[], datetime] | None = None,
                 drained: Mapping[str, str] | None = None, marker: str = MARKER) -> None:
        self.fleet = fleet
        self.clock: Callable[[], datetime] = clock or (fleet.clock if fleet else SimClock())
        self.marker = marker
        self._nodes: dict[str, _Node] = {}
        self.calls: list[tuple[str, str]] = []  # (verb, host), for assertions
        for host, reason in (drained or {}).items():
            self.set_drained(host, reason)

    def _node(self, host: str) -> _Node:
        node = self._nodes.get(host)
        if node is None:
            if self.fleet is not None:
                self.fleet.is_reachable(host)  # KeyError for a host the fleet does not have
            node = self._nodes[host] = _Node()
        return node

    def _down(self, host: str) -> bool:
        return self.fleet is not None and not self.fleet.is_reachable(host)

    def _running(self, node: _Node) -> bool:
        return node.jobs_end is not None and node.jobs_end > self.clock()

    # ---------------------------------------------------------------- simulation controls
    def set_drained(self, host: str, reason: str) -> None:
        """Someone else (an operator, a health checker) drained `host` with `reason`."""
        node = self._node(host)
        node.drained, node.reason = True, reason

    def start_job(self, host: str, seconds: float, job_id: str = "1") -> None:
        """A job is running on `host` for another `seconds` of logical time."""
        node = self._node(host)
        node.jobs_end = self.clock() + timedelta(seconds=seconds)
        node.job_id = job_id

    def fail_drains(self, host: str, fail: bool = True) -> None:
        """Make `drain` on `host` fail (the controller refuses the update)."""
        self._node(host).drain_fails = fail

    # ------------------------------------------------------------------- Scheduler port
    def state(self, host: str) -> AdminState:
        node = self._node(host)
        by_fleet = bool(node.reason and node.reason.startswith(self.marker))
        if self._down(host):
            return AdminState("down", node.reason or "Not responding", by_fleet)
        if not node.drained:
            return AdminState("available")
        if self._running(node):
            return AdminState("draining", node.reason, by_fleet, None, (node.job_id or "1",))
        return AdminState("drained", node.reason, by_fleet)

    def idle(self, host: str) -> HostResult[bool]:
        """In service and running no job (`IdleCheck`); a down host is not ok."""
        node = self._node(host)
        if self._down(host):
            return HostResult.failed(host, "Not responding")
        return HostResult(host, not node.drained and not self._running(node))

    def stop_jobs(self, host: str, jobs: Sequence[str], action: StopAction
                  ) -> HostResult[list[str]]:
        """Cancel or requeue: the job leaves the node at once (a requeued one runs elsewhere)."""
        self.calls.append((action, host))
        node = self._node(host)
        if not self._running(node):
            return HostResult(host, [], changed=False)
        node.jobs_end = None
        return HostResult(host, list(jobs), changed=True)

    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        self.calls.append(("drain", host))
        node = self._node(host)
        if node.drain_fails:
            return HostResult.failed(host, "slurm_update error: Invalid node state specified")
        if node.drained and not (node.reason or "").startswith(self.marker):
            # someone else's drain: leave it (and its reason) as it is; never take it over
            return HostResult(host, None, changed=False)
        if self._down(host) and not node.drained:
            return HostResult.failed(host, "node is DOWN (not responding); not taking it over")
        changed = not node.drained
        node.drained = True
        node.reason = f"{self.marker} {reason}".strip()
        if wait_s > 0 and self._running(node):
            assert node.jobs_end is not None
            left = (node.jobs_end - self.clock()).total_seconds()
            if left > wait_s:
                return HostResult(host, None, ok=False, changed=changed, seconds=wait_s,
                                  error=f"1 job still running after {wait_s:g} s")
            node.jobs_end = None  # the wait saw the job finish
            return HostResult(host, None, changed=changed, seconds=left)
        return HostResult(host, None, changed=changed)

    def reboot_nodes(self, hosts: Sequence[str], reason: str, *, timeout_s: float,
                     gate: RebootPass) -> dict[str, HostResult[None]]:
        """`scontrol reboot` in the simulation: only nodes fleet drained and the pre-reboot
        gate passed; the fleet reboots them (a hung reboot stays hung)."""
        require_pass(gate, hosts)
        out: dict[str, HostResult[None]] = {}
        mine = []
        for h in hosts:
            self.calls.append(("reboot", h))
            node = self._node(h)
            if not (node.drained and (node.reason or "").startswith(self.marker)):
                out[h] = HostResult.failed(h, f"not rebooting {h}: not drained by fleet")
            else:
                mine.append(h)
        if mine and self.fleet is not None:
            out.update(self.fleet.reboot(mine, gate=gate))
        return out

    def undrain(self, host: str) -> HostResult[None]:
        self.calls.append(("undrain", host))
        node = self._node(host)
        if not node.drained:
            return HostResult(host, None, changed=False)
        if not (node.reason or "").startswith(self.marker):
            return HostResult.failed(
                host, f"drained by someone else ({node.reason}); fleet does not resume it")
        node.drained, node.reason = False, None
        return HostResult(host, None, changed=True)
