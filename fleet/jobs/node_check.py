"""`fleet node-check`: the probe and the checks on this node, for Slurm's HealthCheckProgram.

slurmd runs the HealthCheckProgram every HealthCheckInterval; a failing program only gets logged
("health_check failed", Slurm spike trap 6), so the program drains its node itself, the way
NHC does. Here:

1. read the node's partitions and configured GPU count (`sinfo -h -N -n NODE -o '%P|%G'`);
2. run the self-contained host probe in a subprocess with this Python, under what is left of the
   time budget (a probe that hangs, say in a wedged driver call, is killed and becomes a
   `probe.timeout` FAIL finding: NHC too takes a node offline when its watchdog fires);
3. judge the facts with the check catalog against the expected release: `--release`, else the
   matrix's golden release of `--pool` or of the first of the node's partitions the matrix knows,
   else no release at all (the health checks still run, with the matrix's thresholds, or the
   defaults without a matrix);
4. on a FAIL finding, drain the node with `fleet: <check>: <message>`, but only after reading
   its state: a node already drained or down by someone else keeps that drain and its reason (a
   second `state=drain` would silently replace the reason, trap 7); one fleet drained already is
   left as it is. Nothing here ever resumes a node.

A probe that crashes or prints nothing usable is reported (exit 3) but drains nothing: a broken
monitor must not take nodes out of service. A node without NVML or without any GPU stack is not a
crash: the probe says so in its facts and the `probe.source` check judges it.

Kernel-log findings last for the boot: the check is stateless and reads the whole boot's kernel
log each time, so a node drained for Xid 79 is drained again after a resume until it reboots,
which is what an Xid 79 needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from fleet.domain.checks import Expectations, Finding, Severity, release_expectation, run_checks
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix, OsFamily, Release
from fleet.domain.ports import AdminState, HostResult

PROBE_SOURCE = Path(__file__).resolve().parent.parent / "probe" / "hostprobe.py"
MARKER = "fleet:"  # the scheduler adapter's marker; kept equal to it by a unit test
HEALTH = "health:"  # and its health-check prefix (fleet.schedulers.slurm.HEALTH), same test
DEFAULT_TIMEOUT_S = 20.0
RESERVE_S = 3.0  # of the budget kept for reading the node's state and draining it
REASON_MAX = 150

ExitCodeName = Literal[0, 1, 3]
DrainAction = Literal["none", "drained", "kept", "left", "off", "failed"]


class Scheduler(Protocol):
    """What node-check needs from the Slurm adapter (`fleet.schedulers.slurm.SlurmScheduler`)."""

    def state(self, host: str) -> AdminState: ...

    def drain(self, host: str, reason: str) -> HostResult[None]: ...


Run = Callable[[list[str], float | None], tuple[int, str, str]]
"""run(argv, timeout_s) -> (returncode, stdout, stderr); 124 on timeout, 127 when missing."""


def run_plain(argv: list[str], timeout_s: float | None) -> tuple[int, str, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]} timed out after {timeout_s or 0:g} s"
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc}"
    return p.returncode, p.stdout, p.stderr


def within(run: Run, deadline: float, monotonic: Callable[[], float] = time.monotonic) -> Run:
    """`run` with every command's timeout cut to what is left before `deadline`: scontrol
    retries for a long while when slurmctld does not answer, and the health check must end in
    time whatever happens."""

    def bounded(argv: list[str], timeout_s: float | None) -> tuple[int, str, str]:
        left = deadline - monotonic()
        if left < 0.2:
            return 124, "", f"{argv[0]}: the node-check time budget is spent"
        return run(argv, min(timeout_s or left, left))

    return bounded


# ------------------------------------------------------------------------------ Slurm's view
@dataclass(frozen=True)
class NodeInfo:
    """The node as slurm.conf describes it: its partitions and configured GPUs."""

    partitions: tuple[str, ...] = ()
    gpus: int | None = None
    error: str | None = None


_GPU_RE = re.compile(r"^gpu(?::[^:,()]+)?:(\d+)")


def parse_node_info(text: str) -> NodeInfo:
    """`sinfo -h -N -n NODE -o '%P|%G'` -> partitions (default one's `*` dropped) and the GPU
    count of the node's `gpu` gres (`gpu:h100:8(S:0-1)`, `gpu:8`; None without one)."""
    parts: list[str] = []
    gpus: int | None = None
    for line in text.splitlines():
        if "|" not in line:
            continue
        p, gres = line.strip().split("|", 1)
        p = p.rstrip("*")
        if p and p not in parts:
            parts.append(p)
        total = 0
        found = False
        for item in re.split(r",(?![^()]*\))", gres):
            m = _GPU_RE.match(item.strip())
            if m:
                total += int(m.group(1))
                found = True
        if found:
            gpus = total
    return NodeInfo(tuple(parts), gpus)


def read_node_info(node: str, run: Run = run_plain, timeout_s: float = 5.0) -> NodeInfo:
    rc, out, err = run(["sinfo", "-h", "-N", "-n", node, "-o", "%P|%G"], timeout_s)
    if rc != 0:
        return NodeInfo(error=f"sinfo exited {rc}: {(err or out).strip()[-200:]}")
    info = parse_node_info(out)
    if not info.partitions:
        return NodeInfo(error=f"sinfo does not know node {node}")
    return info


# ------------------------------------------------------------------------------------- probe
@dataclass
class LocalProbe:
    """The probe's JSON document, or why there is none."""

    doc: dict[str, Any] | None = None
    error: str | None = None
    timed_out: bool = False
    seconds: float = 0.0


def run_local_probe(timeout_s: float, python: str = sys.executable,
                    source: Path = PROBE_SOURCE) -> LocalProbe:
    """The host probe in a subprocess of its own session: past `timeout_s` the whole group is
    killed (a probe stuck in nvidia-smi leaves no orphan holding the GPU)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen([python, str(source), "--no-frameworks"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
    except OSError as exc:
        return LocalProbe(error=f"cannot start the probe: {exc}")
    try:
        out, err = proc.communicate(timeout=max(0.1, timeout_s))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return LocalProbe(timed_out=True, seconds=time.monotonic() - start)
    took = time.monotonic() - start
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        return LocalProbe(error=f"the probe exited {proc.returncode}: {last}", seconds=took)
    text = out.strip()
    try:
        doc = json.loads(text[text.find("{"):]) if "{" in text else None
    except ValueError as exc:
        return LocalProbe(error=f"the probe printed no valid JSON: {exc}", seconds=took)
    if not isinstance(doc, dict):
        return LocalProbe(error="the probe printed no JSON object", seconds=took)
    return LocalProbe(doc, seconds=took)


# ------------------------------------------------------------------------------------ result
@dataclass
class DrainOutcome:
    action: DrainAction = "none"
    reason: str | None = None  # the reason fleet set, or the one it found and left
    detail: str = ""


@dataclass
class NodeCheckResult:
    node: str
    pool: str | None = None
    release: str | None = None
    expect_note: str = ""
    facts: HostFacts | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # the probe could not run: nothing judged, nothing drained
    drain: DrainOutcome = field(default_factory=DrainOutcome)
    seconds: float = 0.0

    @property
    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.FAIL]

    @property
    def exit_code(self) -> ExitCodeName:
        if self.failing:
            return 1
        if self.error is not None:
            return 3
        return 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node, "ok": self.exit_code == 0, "exit_code": self.exit_code,
            "pool": self.pool, "release": self.release, "expectations": self.expect_note,
            "source": self.facts.source if self.facts else None,
            "gpus": len(self.facts.gpus) if self.facts else None,
            "error": self.error,
            "findings": [f.model_dump(mode="json") for f in self.findings
                         if f.severity is not Severity.OK],
            "drain": {"action": self.drain.action, "reason": self.drain.reason,
                      "detail": self.drain.detail},
            "seconds": round(self.seconds, 3),
        }


# ------------------------------------------------------------------------------- the pieces
def os_family(facts: HostFacts) -> OsFamily:
    pk = facts.versions.packages
    return "rhel" if (pk is not None and pk.manager == "rpm") else "debian"


def matrix_pools(matrix: Matrix) -> set[str]:
    return set(matrix.pools) | set(matrix.policy.golden.pools)


def choose_pool(matrix: Matrix | None, pool: str | None, info: NodeInfo) -> str | None:
    """`--pool`, else the first of the node's partitions the matrix names."""
    if pool is not None or matrix is None:
        return pool
    known = matrix_pools(matrix)
    return next((p for p in info.partitions if p in known), None)


def expectations(facts: HostFacts, matrix: Matrix | None, release: Release | None,
                 pool: str | None, gpus: int | None) -> tuple[Expectations, str]:
    """What this node should look like, and a line saying where that came from."""
    from fleet.domain.checks import expectations_for

    fam = os_family(facts)
    if matrix is None:
        return Expectations(gpu_count=gpus), "no matrix: health checks only, default thresholds"
    settings = matrix.pools.get(pool) if pool is not None else None
    model = settings.gpu_model if settings is not None else None
    if release is not None:
        return (Expectations(release=release_expectation(release, fam), gpu_count=gpus,
                             gpu_model=model), f"release {release.name} (--release)")
    if pool is not None:
        exp = expectations_for(matrix, pool, gpu_count=gpus, os_family=fam)
        name = exp.release.name if exp.release else "?"
        return exp, f"release {name}: golden of pool {pool}"
    return (Expectations(gpu_count=gpus),
            "no pool known for this node: health checks only, the matrix's thresholds")


def timeout_finding(seconds: float) -> Finding:
    return Finding(check="probe.timeout", severity=Severity.FAIL, remediation="drain",
                   message=f"the probe did not finish within {seconds:.0f} s "
                           "(a hung driver or nvidia-smi call?)")


def drain_reason(failing: list[Finding]) -> str:
    """`<check>: <message>` of the first failing finding, on one line, short; the scheduler
    adds the `fleet:` marker in front."""
    first = failing[0]
    gpu = f" (GPU {first.gpu})" if first.gpu and first.gpu not in first.message else ""
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    text = " ".join(f"{HEALTH} {first.check}: {first.message}{gpu}".split())
    room = REASON_MAX - len(more)
    if len(text) > room:
        text = text[: room - 3].rstrip() + "..."
    return text + more


def drain_node(scheduler: Scheduler, node: str, failing: list[Finding]) -> DrainOutcome:
    """Drain with fleet's reason unless the node is drained or down already (read first)."""
    st = scheduler.state(node)
    if st.state == "unknown":
        return DrainOutcome("failed", st.reason,
                            f"not draining: cannot read the node's state ({st.reason})")
    if st.state in ("drained", "draining", "down"):
        if st.by_fleet or (st.reason or "").startswith(f"{MARKER} {HEALTH}"):
            return DrainOutcome("kept", st.reason, f"already {st.state} by fleet")
        return DrainOutcome("left", st.reason,
                            f"{st.state} by someone else; their reason is kept")
    reason = drain_reason(failing)
    res = scheduler.drain(node, reason)
    if not res.ok:
        return DrainOutcome("failed", f"{MARKER} {reason}", res.error or "drain failed")
    if not res.changed:
        return DrainOutcome("left", None, "the scheduler left the node as it was")
    return DrainOutcome("drained", f"{MARKER} {reason}", "drained")


# -------------------------------------------------------------------------------- the check
def check_node(
    node: str,
    *,
    matrix: Matrix | None = None,
    release: Release | None = None,
    pool: str | None = None,
    scheduler: Scheduler | None = None,
    drain: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    node_info: Callable[[str, float], NodeInfo] | None = None,
    probe: Callable[[float], LocalProbe] = run_local_probe,
    monotonic: Callable[[], float] = time.monotonic,
) -> NodeCheckResult:
    """Probe, judge and (with `drain` and a scheduler) drain one node, within `timeout_s`."""
    start = monotonic()

    def left() -> float:
        return timeout_s - (monotonic() - start)

    info = NodeInfo()
    if node_info is not None:
        info = node_info(node, min(2.0, max(0.5, left() - RESERVE_S)))
    pool = choose_pool(matrix, pool, info)
    result = NodeCheckResult(node, pool, release.name if release else None)
    got = probe(max(0.5, left() - RESERVE_S))
    if got.timed_out:
        result.findings = [timeout_finding(timeout_s - RESERVE_S)]
        result.expect_note = "no facts: the probe timed out"
    elif got.doc is None:
        result.error = got.error or "the probe gave nothing"
    else:
        try:
            facts = HostFacts.model_validate(got.doc)
        except ValidationError as exc:
            result.error = f"probe output invalid: {exc.error_count()} error(s): " + \
                "; ".join(str(e["msg"]) for e in exc.errors()[:2])
        else:
            exp, result.expect_note = expectations(facts, matrix, release, pool, info.gpus)
            if exp.release is not None:
                result.release = exp.release.name
            result.facts = facts
            result.findings = run_checks(facts, exp,
                                         matrix.policy.thresholds if matrix else None)
    failing = result.failing
    if failing:
        if not drain:
            result.drain = DrainOutcome("off", None, "not draining (--no-drain, or not run by "
                                        "slurmd and no --drain)")
        elif scheduler is None:
            result.drain = DrainOutcome("failed", None, "no scheduler to drain through")
        else:
            result.drain = drain_node(scheduler, node, failing)
    result.seconds = monotonic() - start
    return result
