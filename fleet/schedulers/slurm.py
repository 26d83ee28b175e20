"""Slurm: drain with `scontrol`, wait for running jobs with `squeue`, resume only our drains.

    scontrol show node NODE                                         -> State=IDLE+DRAIN, Reason=...
    scontrol update nodename=NODE state=drain reason="fleet: ..."   (DRAIN: no new jobs)
    squeue -h -w NODE -t R,CG -o %i                                 (jobs still on the node)
    scontrol update nodename=NODE state=resume                      (only if the reason is ours)

Ownership lives in the drain reason: fleet's reasons start with the marker (`fleet:`), the way
NHC prefixes its own with `NHC:`. A node drained or downed by anyone else is never resumed and
never re-drained under our marker (that would make it look like ours: GPU Operator #304,
NVSentinel #1424). Completing jobs (CG) count as running: their epilog may still hold the GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleet.domain.ports import AdminState, HostResult
from fleet.schedulers.runner import Runner, check_node_name, one_line, run_command, tail

MARKER = "fleet:"
# Values that run to the end of their line in `scontrol show node` (they may contain spaces).
_REST_OF_LINE = ("OS", "Reason", "Comment", "Extra")
_BUSY = frozenset({"ALLOCATED", "ALLOC", "MIXED", "COMPLETING"})
_UP = frozenset({"IDLE", "ALLOCATED", "ALLOC", "MIXED", "COMPLETING", "PLANNED", "RESERVED"})


@dataclass(frozen=True)
class SlurmNode:
    """The parts of `scontrol show node` fleet reads."""

    name: str
    state: str  # as printed: "IDLE+DRAIN", "MIXED+DRAIN", "DOWN*+DRAIN"
    reason: str | None
    fields: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def flags(self) -> list[str]:
        return [f for f in self.state.upper().replace("*", "").split("+") if f]

    @property
    def base(self) -> str:
        return self.flags[0] if self.flags else "UNKNOWN"

    @property
    def not_responding(self) -> bool:
        return "*" in self.state or "NOT_RESPONDING" in self.flags

    @property
    def drain(self) -> bool:
        return any(f in ("DRAIN", "DRAINED", "DRAINING") for f in self.flags)

    @property
    def down(self) -> bool:
        return self.base in ("DOWN", "FAIL", "FAILING") or self.not_responding

    def by(self, marker: str) -> bool:
        return bool(self.reason) and str(self.reason).startswith(marker)

    def admin_state(self, marker: str = MARKER) -> AdminState:
        ours = self.by(marker)
        if self.down:
            return AdminState("down", self.reason, ours)
        if self.drain:
            busy = self.base in _BUSY or "COMPLETING" in self.flags or self.base == "DRAINING"
            return AdminState("draining" if busy else "drained", self.reason, ours)
        if self.base in _UP:
            return AdminState("available", self.reason, False)
        return AdminState("unknown", self.reason, ours)


def parse_show_node(text: str) -> list[SlurmNode]:
    """`scontrol show node [NAME]` output -> one SlurmNode per `NodeName=` block.

    Values of OS, Reason, Comment and Extra run to the end of the line; every other line is
    `Key=Value` pairs separated by spaces (a token without `=` continues the previous value).
    """
    nodes: list[SlurmNode] = []
    current: dict[str, str] | None = None

    def close() -> None:
        if current and "NodeName" in current:
            reason = current.get("Reason")
            nodes.append(SlurmNode(current["NodeName"], current.get("State", "UNKNOWN"),
                                   reason if reason not in (None, "", "(null)", "None") else None,
                                   dict(current)))

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("NodeName="):
            close()
            current = {}
        if current is None:
            continue
        key = line.split("=", 1)[0]
        if key in _REST_OF_LINE and "=" in line:
            current[key] = line.split("=", 1)[1].strip()
            continue
        last: str | None = None
        for token in line.split():
            if "=" in token:
                k, v = token.split("=", 1)
                current[k] = v
                last = k
            elif last is not None:
                current[last] += " " + token
    close()
    return nodes


class SlurmScheduler:
    """`Scheduler` over `scontrol` and `squeue` (see the module doc)."""

    name = "slurm"

    def __init__(self, runner: Runner | None = None, *, marker: str = MARKER,
                 scontrol: str = "scontrol", squeue: str = "squeue", timeout_s: float = 30.0,
                 poll_s: float = 10.0, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.run = runner or run_command
        self.marker = marker
        self.scontrol = scontrol
        self.squeue = squeue
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.sleep = sleep
        self.monotonic = monotonic

    def show(self, host: str) -> SlurmNode | str:
        """The node, or the error text when scontrol cannot show it."""
        check_node_name(host)
        rc, out, err = self.run([self.scontrol, "show", "node", host], self.timeout_s)
        if rc != 0:
            return one_line(err or out or f"scontrol exited {rc}")
        for node in parse_show_node(out):
            if node.name == host:
                return node
        return f"Node {host} not found"

    def state(self, host: str) -> AdminState:
        node = self.show(host)
        if isinstance(node, str):
            return AdminState("unknown", node)
        return node.admin_state(self.marker)

    def _update(self, host: str, *args: str) -> str | None:
        argv = [self.scontrol, "update", f"nodename={host}", *args]
        rc, out, err = self.run(argv, self.timeout_s)
        if rc != 0:
            return f"scontrol update {' '.join(args[:1])} failed (exit {rc}): {tail(err or out)}"
        return None

    def running_jobs(self, host: str) -> list[str] | str:
        argv = [self.squeue, "-h", "-w", host, "-t", "R,CG", "-o", "%i"]
        rc, out, err = self.run(argv, self.timeout_s)
        if rc != 0:
            return f"squeue failed (exit {rc}): {tail(err or out)}"
        return [line.strip() for line in out.splitlines() if line.strip()]

    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        node = self.show(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        ours = node.by(self.marker)
        if node.drain and not ours:
            return HostResult(host, None, changed=False)  # someone else's drain: leave it
        if node.down and not ours:
            return HostResult.failed(
                host, f"node is {node.state} ({node.reason or 'no reason'}); not taking it over")
        changed = False
        if not (node.drain and ours):
            error = self._update(host, "state=drain",
                                 f"reason={self.marker} {one_line(reason, 180)}")
            if error:
                return HostResult.failed(host, error)
            changed = True
        if wait_s <= 0:
            return HostResult(host, None, changed=changed)
        start = self.monotonic()
        while True:
            jobs = self.running_jobs(host)
            waited = self.monotonic() - start
            if isinstance(jobs, str):
                return HostResult(host, None, ok=False, changed=changed, seconds=waited,
                                  error=jobs)
            if not jobs:
                return HostResult(host, None, changed=changed, seconds=waited)
            if waited >= wait_s:
                return HostResult(host, None, ok=False, changed=changed, seconds=waited,
                                  error=f"{len(jobs)} job(s) still running after {wait_s:g} s: "
                                        + ",".join(jobs[:10]))
            self.sleep(min(self.poll_s, max(0.0, wait_s - waited)) or self.poll_s)

    def undrain(self, host: str) -> HostResult[None]:
        node = self.show(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        if not node.drain:
            return HostResult(host, None, changed=False)
        if not node.by(self.marker):
            return HostResult.failed(
                host, f"drained by someone else ({node.reason or 'no reason'}); "
                      "fleet does not resume it")
        error = self._update(host, "state=resume")
        if error:
            return HostResult.failed(host, error)
        return HostResult(host, None, changed=True)
