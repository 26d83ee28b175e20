"""Slurm as the fan-out engine: the host probe on every node of a partition with ONE `srun`.

    sinfo -h -N -p P -o '%N|%T|%E'                      -> which nodes can run it now
    srun -p P -N n -w a,b,c --ntasks-per-node=1 -I5 -l -v -k -J fleet-probe-X -t M --chdir=/tmp \\
         --export=NONE /usr/bin/env PATH=... python3 -c '<wrapper + probe source>' <args>

Why inline `python3 -c` and not `sbcast` + `srun`: the probe travels compressed inside the launch
RPC that srun sends anyway (about 20 KB, far below the 128 KB argument limit), so there is one
round trip, no allocation to hold between two commands and no file left on the nodes; it is also
what the SSH path ships, so the facts come from the same code. `--export=NONE` keeps the
controller's environment (a virtualenv's PATH) off the nodes; with it Slurm wants an absolute
program, hence `/usr/bin/env` and the PATH a login shell would have.

Output. `srun -l` prefixes each line with its task id, and slurmstepd cuts long lines into
labelled pieces, so every task prints its node name first and then its facts compressed,
base64-encoded and cut into short numbered lines; `parse_srun_output` (fleet.remote.srun_output)
puts them back together and says, per node, what went wrong when they do not add up.

Binding. A node is untrusted: what it prints about itself proves nothing. `srun -v` prints, on
the controller, which host it launched each task on (`srun: launching StepId=J.S on host NODE,
1 tasks: T`); every labelled line is filed under the node srun launched that task on, never
under the name the line carries. A task whose lines name another node has its whole output
refused (its own node fails; the other node keeps what its own task sent), and a task srun did
not announce is ignored. A kernel-log cursor that would be refused fails its own node only.
What a task prints is kept up to TASK_LIMIT (srun_output.CappedLines); past it that node fails,
cut off, and the controller's memory stays bounded.

Slurm traps handled (see the Slurm spike): nodes that are drained, draining, down, not
responding (`*`), powered off (`~`), rebooting (`@`, `^`) or busy are read with `sinfo` first
and reported as not probed, because `srun` on such a node waits forever (`-I5` bounds the
allocation wait anyway); `sinfo -N` prints a row per partition, hence `-p`. A srun that fails or
outlives its timeout is interrupted and its job cancelled by name; every node without a complete
answer gets its own error.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fleet.domain.facts import HostFacts
from fleet.domain.names import check_name
from fleet.domain.ports import HostRef, HostResult
from fleet.remote.backend import SshBackend
from fleet.remote.inline import PROBE_SOURCE
from fleet.remote.srun_output import TAG, CappedLines, parse_sinfo, parse_srun_output

# A line of output is at most CHUNK characters plus the tag and the node name's length cut back
# out of it: slurmstepd cuts lines into 1024-byte labelled pieces (seen on Slurm 22.05).
CHUNK = 960
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CURSOR_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=;:-_.+/,")
_PARTITION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# Runs on each node: name the node, run the probe's own main() with the SSH path's arguments,
# print its JSON compressed in short numbered lines. Python 3.6+, stdlib only.
_WRAPPER = """\
import base64,contextlib,io,json,os,sys,zlib
n=os.environ.get('SLURMD_NODENAME') or os.uname()[1]
w=sys.stdout.write
w('{tag} %s begin\\n'%n);sys.stdout.flush()
a=json.loads(base64.b64decode(sys.argv[1]).decode())
v=['--no-frameworks'] if not a['frameworks'] else []
c=a['since'].get(n)
if c:v+=['--since',c]
g={{'__name__':'fleet_hostprobe'}}
exec(compile(zlib.decompress(base64.b64decode('{payload}')),'hostprobe.py','exec'),g)
b=io.StringIO()
with contextlib.redirect_stdout(b):g['main'](v)
d=base64.b64encode(zlib.compress(b.getvalue().encode(),6)).decode()
k=max(256,{chunk}-len(n))
p=[d[i:i+k] for i in range(0,len(d),k)]
for i,x in enumerate(p):w('{tag} %s %d %s\\n'%(n,i,x))
w('{tag} %s end %d\\n'%(n,len(p)));sys.stdout.flush()
"""


class SlurmUnavailable(RuntimeError):
    """sinfo could not be run or answered with an error."""


class SlurmInputError(ValueError):
    """Bad input about Slurm: a refused partition name, an unknown or empty partition, an
    inventory naming two slurm.conf files."""


# ------------------------------------------------------------------------------------ sinfo
def sinfo_argv(partition: str) -> list[str]:
    check_partition(partition)
    return ["sinfo", "-h", "-N", "-p", partition, "-o", "%N|%T|%E"]


def check_partition(name: str) -> str:
    if not _PARTITION_RE.fullmatch(name):
        raise SlurmInputError(f"refusing partition name {name!r}")
    return name


# ------------------------------------------------------------------------------------- srun
@cache
def _payload(path: Path, mtime_ns: int) -> str:
    return base64.b64encode(zlib.compress(path.read_bytes(), 9)).decode()


def wrapper_code(probe_source: Path = PROBE_SOURCE) -> str:
    """The `python3 -c` program each task runs (the probe travels inside it)."""
    p = probe_source.resolve()
    return _WRAPPER.format(tag=TAG, chunk=CHUNK, payload=_payload(p, p.stat().st_mtime_ns))


def cursor_problem(cursor: str | None) -> str | None:
    """Why a kernel-log cursor (host-supplied, from the history) cannot be sent; None: fine."""
    if cursor and not set(cursor) <= _CURSOR_OK:
        return f"refusing kernel-log cursor {cursor!r}"
    return None


def wrapper_args(nodes: Sequence[str], since: Mapping[str, str | None] | None,
                 frameworks: bool) -> str:
    """One argument for every task: each picks its own kernel-log cursor by node name."""
    cursors: dict[str, str] = {}
    for node in nodes:
        c = (since or {}).get(node)
        if c:
            problem = cursor_problem(c)
            if problem:
                raise ValueError(problem)
            cursors[node] = c
    doc = json.dumps({"since": cursors, "frameworks": frameworks}, sort_keys=True)
    return base64.b64encode(doc.encode()).decode()


def srun_argv(partition: str, nodes: Sequence[str], *, job_name: str, timeout_s: float,
              since: Mapping[str, str | None] | None = None, frameworks: bool = False,
              immediate_s: int = 5, python: str = "python3",
              probe_source: Path = PROBE_SOURCE) -> list[str]:
    """The one srun that probes `nodes` (one task per node), never run through a shell."""
    check_partition(partition)
    for n in nodes:
        check_name("node", n)
    if not nodes:
        raise ValueError("no nodes to probe")
    minutes = max(1, math.ceil(timeout_s / 60))
    return [
        "srun", "-p", partition, "-N", str(len(nodes)), "-w", ",".join(nodes),
        "--ntasks-per-node=1", f"-I{immediate_s}", "-l", "-v", "-k", "-J", job_name,
        "-t", str(minutes), "--chdir=/tmp", "--export=NONE",
        "/usr/bin/env", f"PATH={NODE_PATH}", python, "-c", wrapper_code(probe_source),
        wrapper_args(nodes, since, frameworks),
    ]


# ---------------------------------------------------------------------------------------- I/O
Exec = Callable[[list[str], Mapping[str, str], float], tuple[int, str, str, bool]]
"""exec(argv, env, timeout_s) -> (returncode, stdout, stderr, timed_out)."""


def run_interruptible(argv: list[str], env: Mapping[str, str],
                      timeout_s: float) -> tuple[int, str, str, bool]:
    """Run a command; past `timeout_s` interrupt it the way srun wants (SIGINT twice within a
    second ends the job step) and keep what it printed so far, each task's lines capped
    (`CappedLines`: a task over TASK_LIMIT is named on stderr, cut off)."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=dict(env),
                                start_new_session=True)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found", False
    out, err = CappedLines(), CappedLines()
    readers = [threading.Thread(target=_drain, args=(pipe, capped), daemon=True)
               for pipe, capped in ((proc.stdout, out), (proc.stderr, err))]
    for r in readers:
        r.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        for _ in range(2):
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for r in readers:
        r.join(timeout=10)
    rc = proc.returncode if proc.returncode is not None else 124
    return rc, out.text(), err.text() + out.notes() + err.notes(), timed_out


def _drain(pipe: Any, capped: CappedLines) -> None:
    """Read a pipe to its end in 64 KiB pieces into `capped` (which keeps what it may)."""
    with contextlib.suppress(OSError, ValueError):
        while data := pipe.read1(65536):
            capped.feed(data)
    capped.close()


def _plain_exec(argv: list[str], env: Mapping[str, str],
                timeout_s: float) -> tuple[int, str, str, bool]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(env), check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout_s:g} s: {' '.join(argv[:3])}", True
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found", False
    return p.returncode, p.stdout, p.stderr, False


def _tail(text: str, lines: int = 2) -> str:
    return " | ".join(x.strip() for x in text.strip().splitlines()[-lines:] if x.strip())


@dataclass
class SrunReport:
    """One fan-out: per node facts or the reason why not, and what it cost."""

    results: dict[str, HostResult[HostFacts]]
    skipped: dict[str, str]  # node -> Slurm state that kept it out
    seconds: float
    argv_head: list[str]  # srun's options (the program argument left out)


def srun_probe(partition: str, nodes: Sequence[str], *, env: Mapping[str, str],
               timeout_s: float = 120.0, since: Mapping[str, str | None] | None = None,
               frameworks: bool = False, immediate_s: int = 5,
               run: Exec = run_interruptible, plain: Exec = _plain_exec,
               monotonic: Callable[[], float] = time.monotonic) -> SrunReport:
    """Probe `nodes` of `partition`: read their state, srun the probe on the ready ones, parse.

    Every requested node gets a result: facts, or an error saying why (Slurm state, srun error,
    timeout, missing or cut output). Node names here are Slurm node names.
    """
    start = monotonic()
    results: dict[str, HostResult[HostFacts]] = {}
    skipped: dict[str, str] = {}
    rc, out, err, _ = plain(sinfo_argv(partition), env, 15.0)
    if rc != 0:
        why = f"sinfo failed (exit {rc}): {_tail(err or out)}"
        return SrunReport({n: HostResult.unreachable(n, why) for n in nodes}, {},
                          monotonic() - start, [])
    rows = parse_sinfo(out)
    ready: list[str] = []
    for n in nodes:
        row = rows.get(n)
        bad_cursor = cursor_problem((since or {}).get(n))
        if row is None:
            results[n] = HostResult.unreachable(n, f"not in Slurm partition {partition}")
        elif not row.probeable:
            skipped[n] = row.state
            results[n] = HostResult.unreachable(n, row.why_not())
        elif bad_cursor:  # as over SSH: that host fails, the others are probed
            results[n] = HostResult.failed(n, f"probe failed: {bad_cursor}")
        else:
            ready.append(n)
    head: list[str] = []
    if ready:
        job = f"fleet-probe-{uuid.uuid4().hex[:8]}"
        argv = srun_argv(partition, ready, job_name=job, timeout_s=timeout_s, since=since,
                         frameworks=frameworks, immediate_s=immediate_s)
        head = argv[: argv.index("/usr/bin/env")]
        rc, out, err, timed_out = run(argv, env, timeout_s)
        if timed_out:
            plain(["scancel", "--name", job], env, 10.0)  # a job left behind ends now
        parsed = parse_srun_output(out, err)
        # srun -v is chatty: its informational lines explain nothing when it failed
        general = ("; ".join(parsed.general[-2:]) or (_tail(err) if rc != 0 else "")
                   or f"srun exited {rc}")
        for n in ready:
            doc = parsed.docs.get(n)
            if doc is not None:
                try:
                    results[n] = HostResult(n, HostFacts.model_validate(doc))
                except ValidationError as exc:
                    results[n] = HostResult.failed(n, f"probe output invalid: {exc}")
                continue
            known = parsed.errors.get(n)
            if timed_out:
                reason = f"srun timed out after {timeout_s:g} s" + (f": {known}" if known else "")
            else:
                reason = known or f"no answer from srun (exit {rc}): {general}"
            results[n] = HostResult.unreachable(n, reason)
    return SrunReport(results, skipped, monotonic() - start, head)


def slurm_env(confs: set[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for Slurm's commands: SLURM_CONF from the inventory when it names one
    (all hosts must agree), else whatever the caller's environment says."""
    env = dict(os.environ if base is None else base)
    if len(confs) > 1:
        raise SlurmInputError("the inventory names more than one slurm_conf: "
                         + ", ".join(sorted(confs)))
    if confs:
        env["SLURM_CONF"] = next(iter(confs))
    return env


class SrunBackend(SshBackend):
    """`SshBackend` whose `probe` goes through one srun; every other call stays on SSH.

    Hosts are the inventory's (after `limit`) that are nodes of `partition`; a host's Slurm node
    name is its `slurm_node` host data, else its inventory name. `slurm_conf` host data, when
    present, becomes SLURM_CONF for sinfo, srun and scancel.
    """

    def __init__(self, inventory_path: str | Path, limit: Sequence[str] | None = None, *,
                 partition: str, timeout_s: float = 120.0, connect_timeout: int = 10,
                 run: Exec = run_interruptible, plain: Exec = _plain_exec) -> None:
        super().__init__(inventory_path, limit, connect_timeout=connect_timeout)
        self.partition = check_partition(partition)
        self.timeout_s = timeout_s
        self._run, self._plain = run, plain
        refs = super().hosts()
        self._node = {r.name: str(r.data.get("slurm_node") or r.name) for r in refs}
        self.env = slurm_env({str(r.data["slurm_conf"]) for r in refs
                              if r.data.get("slurm_conf")})
        rc, out, err, _ = plain(sinfo_argv(partition), self.env, 15.0)
        if rc != 0:
            raise SlurmUnavailable(f"sinfo -p {partition} failed (exit {rc}): "
                                   f"{_tail(err or out)}")
        members = parse_sinfo(out)
        if not members:
            raise SlurmInputError(f"Slurm partition {partition!r} has no nodes "
                                  "(or does not exist)")
        self._refs = [r for r in refs if self._node[r.name] in members]
        self.outside = sorted(set(members) - set(self._node.values()))
        self.last: SrunReport | None = None

    def hosts(self) -> list[HostRef]:
        return list(self._refs)

    def names(self) -> list[str]:
        return [r.name for r in self._refs]

    def probe(self, hosts: Sequence[str], *,
              since: Mapping[str, str | None] | Callable[[], Mapping[str, str | None]] | None
              = None, frameworks: bool = False) -> dict[str, HostResult[HostFacts]]:
        """As `SshBackend.probe` (nothing connects ahead here: a callable `since` is called
        first)."""
        unknown = [h for h in hosts if h not in self._node]
        if unknown:
            raise KeyError(f"not in the inventory: {', '.join(unknown)}")
        if callable(since):
            since = since()
        nodes = [self._node[h] for h in hosts]
        cursors = {self._node[h]: c for h, c in (since or {}).items() if h in self._node}
        report = srun_probe(self.partition, nodes, env=self.env, timeout_s=self.timeout_s,
                            since=cursors, frameworks=frameworks, run=self._run,
                            plain=self._plain)
        self.last = report
        out: dict[str, HostResult[HostFacts]] = {}
        for h in hosts:
            r = report.results[self._node[h]]
            r.host = h
            out[h] = r
        return out
