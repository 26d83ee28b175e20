"""What `srun -l -v` and `sinfo` print, parsed: pure functions over text (see srun_probe).

A node is untrusted: each labelled line is filed under the node srun says it launched that
task on (`launched_tasks`), never under the name the node prints about itself.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

TAG = "FLEET-PROBE"
TASK_LIMIT = 16 * 1024 * 1024
"""Most one task (one node) may print through srun, stdout and stderr together: the probe's
compressed document is a few hundred KB at most. Past it that node fails, cut off."""
OWN_LIMIT = 1024 * 1024
"""Most srun's own unlabelled lines may take (`-v` prints a few KB)."""
_MAX_LINE = 64 * 1024  # slurmstepd cuts task lines at 1 KiB; longer is cut here
# sinfo %T suffixes: * not responding, ~ powered off, # powering up, ! pending power down,
# % powering down, $ maintenance reservation, @ reboot pending, ^ reboot issued, - planned
_SUFFIXES = "*~#!%$@^-"
# states in which a node has a free CPU for a new job step right now
_PROBEABLE = frozenset({"idle", "mixed"})

@dataclass(frozen=True)
class SinfoNode:
    """One row of `sinfo -h -N -p P -o '%N|%T|%E'`."""

    name: str
    state: str  # as printed: "idle", "drained*", "mixed@"
    reason: str | None = None

    @property
    def base(self) -> str:
        return self.state.rstrip(_SUFFIXES).lower()

    @property
    def suffixes(self) -> str:
        return self.state[len(self.state.rstrip(_SUFFIXES)):]

    @property
    def probeable(self) -> bool:
        """Free for a probe step now: idle or mixed and no flag suffix at all."""
        return self.base in _PROBEABLE and not self.suffixes

    def why_not(self) -> str:
        extra = f" ({self.reason})" if self.reason else ""
        return f"not probed: Slurm says {self.state}{extra}"


def parse_sinfo(text: str) -> dict[str, SinfoNode]:
    """Rows by node name; a node printed twice keeps its first row. `%E` is "none" when unset."""
    out: dict[str, SinfoNode] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) < 2 or not parts[0]:
            continue
        reason = parts[2].strip() if len(parts) > 2 else ""
        out.setdefault(parts[0], SinfoNode(parts[0], parts[1].strip(),
                                           None if reason in ("", "none", "(null)") else reason))
    return out


@dataclass
class SrunOutput:
    """What `parse_srun_output` made of srun's stdout and stderr."""

    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # node -> why no document
    tasks: dict[int, str] = field(default_factory=dict)  # task id -> node, as srun launched it
    general: list[str] = field(default_factory=list)  # srun's own errors naming no node


_LABEL_RE = re.compile(r"^\s*(\d+): ?(.*)$")
_RAW_LABEL_RE = re.compile(rb"^\s*(\d+):")
# what the controller adds when it stopped keeping a task's lines (never a task's own line:
# those are labelled)
_CUT_RE = re.compile(r"^fleet: task (\d+) sent more than (.+) of output; cut off$")
_TAG_RE = re.compile(rf"^{TAG} (\S+) (begin|end (\d+)|(\d+) (\S+))\s*$")
_SRUN_NODE_RE = re.compile(r"^srun: error: ([A-Za-z0-9][A-Za-z0-9._-]*): task (\d+): (.*)$")
_SRUN_LAUNCH_RE = re.compile(r"failed on node ([A-Za-z0-9][A-Za-z0-9._-]*): (.*)$")
# `srun -v`: "srun: launching StepId=41.0 on host h1, 1 tasks: 0" (22.05; "41.0" before 20.11)
_LAUNCHING_RE = re.compile(
    r"^srun: launching \S+ on host ([A-Za-z0-9][A-Za-z0-9._-]*), \d+ tasks?: \[?([0-9,-]+)\]?$")
# what srun says at its own error levels; `-v` adds its informational lines, which are not news
_SRUN_PROBLEM_RE = re.compile(r"^srun: (error|fatal|Job|Force|Terminated|Cancelled|Timed out)")


def _task_ids(spec: str) -> list[int]:
    """`0`, `0,2`, `0-3` (a Slurm ranged list without its brackets) -> task ids."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def launched_tasks(stderr: str) -> dict[int, str]:
    """Task id -> node, from srun's own `launching ... on host` lines (`srun -v`). A task
    announced on two nodes is left out: nothing it prints can be bound."""
    tasks: dict[int, str] = {}
    twice: set[int] = set()
    for raw in stderr.splitlines():
        m = _LAUNCHING_RE.match(raw.strip())
        if not m:
            continue
        for task in _task_ids(m.group(2)):
            if tasks.get(task, m.group(1)) != m.group(1):
                twice.add(task)
            tasks[task] = m.group(1)
    return {t: n for t, n in tasks.items() if t not in twice}


def parse_srun_output(stdout: str, stderr: str = "") -> SrunOutput:
    """srun's labelled output -> one probe document per node that answered in full.

    Pure. stdout lines are `TASK: FLEET-PROBE NODE begin|I CHUNK|end N`; each is filed under
    the node srun says it launched TASK on (`launched_tasks`), and a task whose lines name
    another node has its node's output refused. Anything else a task prints (a traceback on
    stderr, labelled too) becomes that node's error when it has no document. Unlabelled
    `srun: error:` lines naming a node are that node's error; the others are kept in `general`.
    """
    res = SrunOutput()
    res.tasks = launched_tasks(stderr)
    chunks: dict[str, dict[int, str]] = {}
    ends: dict[str, int] = {}
    begun: set[str] = set()
    forged: dict[str, str] = {}  # node whose task spoke for another -> the first name it used
    unbound: set[int] = set()
    for raw in stdout.splitlines():
        m = _LABEL_RE.match(raw)
        if not m:
            continue
        task, text = int(m.group(1)), m.group(2)
        t = _TAG_RE.match(text)
        if not t:
            continue
        node = res.tasks.get(task)
        if node is None:
            unbound.add(task)
            continue
        if t.group(1) != node:
            forged.setdefault(node, t.group(1))
            continue
        if t.group(2) == "begin":
            begun.add(node)
        elif t.group(3) is not None:
            ends[node] = int(t.group(3))
        else:
            chunks.setdefault(node, {})[int(t.group(4))] = t.group(5)
    if unbound:
        res.general.append("ignored the output of task(s) "
                           + ", ".join(str(t) for t in sorted(unbound))
                           + ": srun did not say which node ran them")
    task_err: dict[str, list[str]] = {}
    cut: dict[str, str] = {}
    for raw in stderr.splitlines():
        line = raw.rstrip()
        if not line.strip() or _LAUNCHING_RE.match(line.strip()):
            continue
        c = _CUT_RE.match(line)
        if c:
            node = res.tasks.get(int(c.group(1)))
            if node is not None:
                cut[node] = f"sent more than {c.group(2)} of output; cut off"
            continue
        s = _SRUN_NODE_RE.match(line.strip())
        if s:
            res.errors.setdefault(s.group(1), s.group(3))
            res.tasks.setdefault(int(s.group(2)), s.group(1))
            continue
        launch = _SRUN_LAUNCH_RE.search(line)
        if line.startswith("srun:") and launch:
            res.errors.setdefault(launch.group(1), launch.group(2))
            continue
        m = _LABEL_RE.match(line)
        if m and not line.startswith("srun:"):
            node = res.tasks.get(int(m.group(1)))
            if node is not None:
                task_err.setdefault(node, []).append(m.group(2).strip())
                continue
        if _SRUN_PROBLEM_RE.match(line):
            res.general.append(line)
    for node in begun | set(chunks) | set(ends):
        if node in forged:
            continue
        got, want = chunks.get(node, {}), ends.get(node)
        problem: str | None = None
        if want is None:
            problem = f"output cut short ({len(got)} piece(s), no end line)"
        elif sorted(got) != list(range(want)):
            problem = f"output incomplete ({len(got)} of {want} piece(s))"
        else:
            try:
                text = zlib.decompress(base64.b64decode("".join(got[i] for i in range(want))))
                doc = json.loads(text.decode())
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
                res.docs[node] = doc
                res.errors.pop(node, None)
                continue
            except (ValueError, zlib.error) as exc:
                problem = f"output unreadable: {exc}"
        detail = task_err.get(node)
        res.errors[node] = problem + (f": {detail[-1]}" if detail else "")
    for node, why in cut.items():
        res.docs.pop(node, None)
        res.errors[node] = why
    for node, other in forged.items():
        res.errors[node] = (f"refused: the task srun ran on {node} sent output naming {other!r} "
                            "(a node answers for itself only)")
    for node, lines in task_err.items():
        if node not in res.docs and node not in res.errors:
            res.errors[node] = lines[-1]
    return res


class CappedLines:
    """The lines of one of srun's pipes, each task's (by its label) kept up to TASK_LIMIT
    bytes and srun's own up to OWN_LIMIT: what a node prints cannot grow the controller's
    memory past that. A task over its limit is named in `cut`; its later lines are dropped."""

    def __init__(self, task_limit: int | None = None, own_limit: int | None = None) -> None:
        self.task_limit = task_limit or TASK_LIMIT
        self.own_limit = own_limit or OWN_LIMIT
        self.lines: list[str] = []
        self.used: dict[int | None, int] = {}
        self.cut: set[int | None] = set()
        self._pending = b""

    def feed(self, data: bytes) -> None:
        self._pending += data
        *complete, self._pending = self._pending.split(b"\n")
        if len(self._pending) > _MAX_LINE:
            complete.append(self._pending[:_MAX_LINE])
            self._pending = b""
        for line in complete:
            self._keep(line)

    def close(self) -> None:
        if self._pending:
            self._keep(self._pending)
            self._pending = b""

    def _keep(self, raw: bytes) -> None:
        m = _RAW_LABEL_RE.match(raw)
        task = int(m.group(1)) if m else None
        used = self.used.get(task, 0) + len(raw) + 1
        self.used[task] = used
        if used > (self.own_limit if task is None else self.task_limit):
            self.cut.add(task)
            return
        self.lines.append(raw.decode("utf-8", "replace"))

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    def notes(self) -> str:
        """Lines for the parser saying which tasks were cut off (unlabelled: no task can
        print one)."""
        out = []
        for task in sorted(t for t in self.cut if t is not None):
            out.append(f"fleet: task {task} sent more than {self.task_limit // 1024 // 1024} "
                       "MiB of output; cut off\n")
        if None in self.cut:
            out.append(f"fleet: srun printed more than {self.own_limit // 1024} KiB; the rest "
                       "was dropped\n")
        return "".join(out)
