"""Slurm: drain with `scontrol`, wait for running jobs with `squeue`, resume only our drains.

    scontrol show node NODE                                         -> State=IDLE+DRAIN, Reason=...
    scontrol update nodename=NODE state=drain reason="fleet: ..."   (DRAIN: no new jobs)
    squeue -h -w NODE -t R,CG,S,ST -o %i                            (jobs still on the node)
    scontrol update nodename=NODE state=resume                      (only if the reason is ours)
    scancel JOB... | scontrol requeue JOB...                        (only when the matrix says so)
    scontrol reboot NODE                                            (`rollout.reboot: slurm`)

A drained node keeps running its jobs (DRAINING, `MIXED+DRAIN`) until they end; it is ready only
when `scontrol` says exactly drained (`IDLE+DRAIN`, no COMPLETING) and `squeue` lists no running
or completing job on it. `scontrol show node` prints the reason with its owner and time appended
(`Reason=ops: RMA 12 [alice@2026-11-30T10:00:00]`); they are split off and kept.

Ownership lives in the drain reason: fleet's reasons start with the marker (`fleet:`), the way
NHC prefixes its own with `NHC:`. A node drained or downed by anyone else is never resumed and
never re-drained under our marker (that would make it look like ours: GPU Operator #304,
NVSentinel #1424). Completing jobs (CG) count as running: their epilog may still hold the GPUs;
suspended (S) and stopped (ST) jobs keep their memory and GPUs on the node, and a reboot kills
them, so they count too.

Empty means listed empty: a node is `drained` only when scontrol's base state is idle AND squeue
lists nothing. `MIXED+DRAIN` (or ALLOCATED, COMPLETING) with an empty squeue is `draining`, never
empty: some work is there that squeue did not name. A failed squeue is `unknown`.
`idle()` (`IdleCheck`) is stricter still, for a benchmark beside no job: exactly `IDLE`, nothing
listed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleet.domain.ports import AdminState, HostResult, StopAction
from fleet.domain.reboot_gate import RebootPass, require_pass
from fleet.schedulers.runner import (
    Runner,
    check_node_name,
    one_line,
    run_command,
    subprocess_runner,
    tail,
)

MARKER = "fleet:"
HEALTH = "health:"
"""`fleet node-check` drains with `fleet: health: <check>: ...`: the health checker's drain, like
NHC's. Rollouts, apply and undrain treat it as someone else's: a node that failed its health
check is never moved first, put back in service or resumed by them; an operator resumes it."""
# Values that run to the end of their line in `scontrol show node` (they may contain spaces).
_REST_OF_LINE = ("OS", "Reason", "Comment", "Extra")
_BUSY = frozenset({"ALLOCATED", "ALLOC", "MIXED", "COMPLETING"})
_UP = frozenset({"IDLE", "ALLOCATED", "ALLOC", "MIXED", "COMPLETING", "PLANNED", "RESERVED"})
_REASON_RE = re.compile(r"^(?P<text>.*?)\s*\[(?P<owner>[^\s@\]]+)@(?P<when>[^\]]+)\]$")
_JOB_ID_RE = re.compile(r"^[0-9]{1,12}(_[0-9]{1,9})?(\+[0-9]{1,6})?$")
_REBOOTING = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"})
HOLDING_STATES = "R,CG,S,ST"
"""squeue job states that hold a node: running, completing, suspended, stopped."""


def split_reason(printed: str | None) -> tuple[str | None, str | None, str | None]:
    """`ops: RMA 12 [alice@2026-11-30T10:00:00]` -> ("ops: RMA 12", "alice", "2026-11-...")."""
    if printed is None:
        return None, None, None
    m = _REASON_RE.match(printed)
    if not m:
        return printed, None, None
    return m.group("text") or None, m.group("owner"), m.group("when")


@dataclass(frozen=True)
class SlurmNode:
    """The parts of `scontrol show node` fleet reads."""

    name: str
    state: str  # as printed: "IDLE+DRAIN", "MIXED+DRAIN", "DOWN*+DRAIN"
    reason: str | None  # without the "[owner@time]" scontrol appends
    fields: dict[str, str] = field(default_factory=dict, compare=False)
    owner: str | None = None
    reason_time: str | None = None

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

    @property
    def rebooting(self) -> bool:
        return any(f in _REBOOTING for f in self.flags)

    @property
    def boot_time(self) -> str | None:
        return self.fields.get("BootTime")

    def by(self, marker: str) -> bool:
        """Drained by fleet's rollouts, apply or quarantine (not by its health check)."""
        reason = str(self.reason or "")
        return reason.startswith(marker) and not reason[len(marker):].lstrip().startswith(HEALTH)

    def admin_state(self, marker: str = MARKER, jobs: Sequence[str] = ()) -> AdminState:
        """The node as the port sees it; `jobs` (from squeue) keep a drained node draining."""
        ours = self.by(marker)
        held = tuple(jobs)
        if self.down:
            return AdminState("down", self.reason, ours, self.owner, held)
        if self.drain:
            busy = (self.base in _BUSY or "COMPLETING" in self.flags
                    or self.base == "DRAINING" or bool(held))
            return AdminState("draining" if busy else "drained", self.reason, ours, self.owner,
                              held)
        if self.base in _UP:
            return AdminState("available", self.reason, False, self.owner, held)
        return AdminState("unknown", self.reason, ours, self.owner, held)


def parse_show_node(text: str) -> list[SlurmNode]:
    """`scontrol show node [NAME]` output -> one SlurmNode per `NodeName=` block.

    Values of OS, Reason, Comment and Extra run to the end of the line; every other line is
    `Key=Value` pairs separated by spaces (a token without `=` continues the previous value).
    """
    nodes: list[SlurmNode] = []
    current: dict[str, str] | None = None

    def close() -> None:
        if current and "NodeName" in current:
            printed = current.get("Reason")
            text, owner, when = split_reason(
                printed if printed not in (None, "", "(null)", "None") else None)
            nodes.append(SlurmNode(current["NodeName"], current.get("State", "UNKNOWN"),
                                   text, dict(current), owner, when))

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

    drain_kick_s = 0.0  # a drain is a flag: nothing to push along while waiting

    def __init__(self, runner: Runner | None = None, *, marker: str = MARKER,
                 scontrol: str = "scontrol", squeue: str = "squeue", scancel: str = "scancel",
                 timeout_s: float = 30.0, poll_s: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic,
                 slurm_conf: str | None = None) -> None:
        if runner is None and slurm_conf:
            runner = subprocess_runner({**os.environ, "SLURM_CONF": slurm_conf})
        self.run = runner or run_command
        self.marker = marker
        self.scontrol = scontrol
        self.squeue = squeue
        self.scancel = scancel
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
        """The node's state; a drained node is `drained` only when squeue lists no running or
        completing job on it (scontrol lags squeue by a moment after a job ends: trap 4)."""
        node = self.show(host)
        if isinstance(node, str):
            return AdminState("unknown", node)
        if not node.drain:
            return node.admin_state(self.marker)
        jobs = self.running_jobs(host)
        if isinstance(jobs, str):
            return AdminState("unknown", f"{node.state}: {jobs}", node.by(self.marker),
                              node.owner)
        return node.admin_state(self.marker, jobs)

    def _update(self, host: str, *args: str) -> str | None:
        argv = [self.scontrol, "update", f"nodename={host}", *args]
        rc, out, err = self.run(argv, self.timeout_s)
        if rc != 0:
            return f"scontrol update {' '.join(args[:1])} failed (exit {rc}): {tail(err or out)}"
        return None

    def running_jobs(self, host: str) -> list[str] | str:
        """The jobs holding the node (running, completing, suspended, stopped), or the error."""
        check_node_name(host)
        argv = [self.squeue, "-h", "-w", host, "-t", HOLDING_STATES, "-o", "%i"]
        rc, out, err = self.run(argv, self.timeout_s)
        if rc != 0:
            return f"squeue failed (exit {rc}): {tail(err or out)}"
        return [line.strip() for line in out.splitlines() if line.strip()]

    def idle(self, host: str) -> HostResult[bool]:
        """True when the node runs nothing at all: in service and exactly IDLE (not MIXED,
        PLANNED, RESERVED, draining, down or not responding) and squeue lists no job. A failed
        read is not ok (never idle)."""
        node = self.show(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        if node.flags != ["IDLE"] or node.not_responding:
            return HostResult(host, False)
        jobs = self.running_jobs(host)
        if isinstance(jobs, str):
            return HostResult.failed(host, jobs)
        return HostResult(host, not jobs)

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

    # --------------------------------------------------------------- JobControl, NodeReboot
    def stop_jobs(self, host: str, jobs: Sequence[str], action: StopAction
                  ) -> HostResult[list[str]]:
        """`scancel` or `scontrol requeue` the given jobs (ids checked, never a shell)."""
        check_node_name(host)
        ids = [j for j in jobs if _JOB_ID_RE.fullmatch(j)]
        if len(ids) != len(jobs):
            bad = [j for j in jobs if j not in ids]
            return HostResult.failed(host, f"refusing job ids {bad!r}")
        if not ids:
            return HostResult(host, [], changed=False)
        if action == "cancel":
            argv = [self.scancel, *ids]
        elif action == "requeue":
            argv = [self.scontrol, "requeue", ",".join(ids)]
        else:
            return HostResult.failed(host, f"unknown action {action!r}")
        rc, out, err = self.run(argv, self.timeout_s)
        if rc != 0:
            return HostResult.failed(host, f"{argv[0]} {argv[1]} failed (exit {rc}): "
                                           f"{tail(err or out)}")
        return HostResult(host, ids, changed=True)

    def reboot_nodes(self, hosts: Sequence[str], reason: str, *, timeout_s: float,
                     gate: RebootPass) -> dict[str, HostResult[None]]:
        """Only nodes the pre-reboot gate passed (`gate`, from `fleet.jobs.reboot_gate`).
        `scontrol reboot` (the cluster's RebootProgram) on every node, then wait until each
        registers with a new boot time and no reboot flag. Only nodes fleet drained (and
        emptied): a plain reboot of a drained node keeps the drain and fleet's reason (with
        " : reboot issued" appended), so the node stays out of service until fleet has verified
        it. Never `ASAP` here: its default next state is RESUME, which would put the node back
        in service before verification (and clears anyone's drain)."""
        require_pass(gate, hosts)
        out: dict[str, HostResult[None]] = {}
        before: dict[str, str | None] = {}
        for host in hosts:
            node = self.show(host)
            if isinstance(node, str):
                out[host] = HostResult.failed(host, node)
                continue
            if not (node.drain and node.by(self.marker)):
                out[host] = HostResult.failed(
                    host, f"not rebooting {host}: it is {node.state} "
                          f"({node.reason or 'no reason'}), not drained by fleet")
                continue
            rc, o, e = self.run([self.scontrol, "reboot", host], self.timeout_s)
            if rc != 0:
                out[host] = HostResult.failed(host, f"scontrol reboot failed (exit {rc}): "
                                                    f"{tail(e or o)}")
                continue
            before[host] = node.boot_time
        start = self.monotonic()
        last: dict[str, str] = {}
        while before:
            self.sleep(min(self.poll_s, 2.0))
            for host in list(before):
                now = self.show(host)
                if isinstance(now, str):
                    last[host] = now
                    continue
                last[host] = f"{now.state} (BootTime {now.boot_time})"
                if now.boot_time != before[host] and not now.rebooting and not now.down:
                    out[host] = HostResult(host, None, changed=True,
                                           seconds=self.monotonic() - start)
                    del before[host]
            if before and self.monotonic() - start >= timeout_s:
                for host in before:
                    out[host] = HostResult(host, None, ok=False, reachable=False,
                                           seconds=self.monotonic() - start,
                                           error=f"not back from `scontrol reboot` within "
                                                 f"{timeout_s:g} s: {last.get(host, '?')}")
                break
        return out
