"""Host captures -> data: `/proc/meminfo`, `/proc/loadavg`, `/proc/stat`, `df -P`, `ps`, and the
serving layer's Prometheus text (queue depth and wait)."""

from __future__ import annotations

import math
import re

from fleet.domain.diagnose.model import (
    CpuTimes,
    DiskUse,
    HostProcess,
    LoadAvg,
    MemInfo,
    QueueMetrics,
)
from fleet.errors import BadInput


def _bad(name: str, line: int, field: str, message: str) -> BadInput:
    return BadInput.single(message, file=name, line=line, field=field)


def parse_meminfo(text: str, name: str = "meminfo") -> MemInfo:
    """`/proc/meminfo`: `Key:   123 kB` lines."""
    values: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        key, sep, rest = raw.partition(":")
        toks = rest.split()
        if not sep or not toks or not toks[0].isdigit():
            raise _bad(name, lineno, key.strip() or "line", "expected `Key: <number> kB`")
        values[key.strip()] = int(toks[0])
    if "MemTotal" not in values:
        raise _bad(name, 1, "MemTotal", "no MemTotal line: not a copy of /proc/meminfo")
    return MemInfo(values["MemTotal"], values.get("MemAvailable"), values.get("SwapTotal", 0),
                   values.get("SwapFree", 0))


def parse_loadavg(text: str, name: str = "loadavg") -> LoadAvg:
    """`/proc/loadavg`: `0.52 0.58 0.59 1/467 12345`."""
    lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1)
             if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise _bad(name, 1, "loadavg", "empty")
    lineno, line = lines[-1]
    toks = line.split()
    try:
        one, five, fifteen = (float(t) for t in toks[:3])
    except ValueError:
        raise _bad(name, lineno, "loadavg", f"expected three load averages, got {line!r}") \
            from None
    if not all(math.isfinite(v) and v >= 0 for v in (one, five, fifteen)):
        raise _bad(name, lineno, "loadavg", f"load averages must be finite and >= 0: {line!r}")
    return LoadAvg(one, five, fifteen)


def parse_stat(text: str, name: str = "stat") -> CpuTimes:
    """`/proc/stat`, once or twice (before and after the sampling): the CPU count, and with two
    copies the busy share between them (user+nice+system+irq+softirq+steal over all)."""
    totals: list[tuple[int, int]] = []
    cpus: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        toks = raw.split()
        if not toks or not toks[0].startswith("cpu"):
            continue
        if not all(t.isdigit() for t in toks[1:]) or len(toks) < 5:
            raise _bad(name, lineno, toks[0], "expected `cpuN` and at least 4 tick counts")
        ticks = [int(t) for t in toks[1:]]
        if toks[0] == "cpu":
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
            total = sum(ticks[:8])
            totals.append((total - idle, total))
        else:
            cpus.add(toks[0])
    if not totals:
        raise _bad(name, 1, "cpu", "no `cpu` line: not a copy of /proc/stat")
    if len(totals) >= 2:
        busy = totals[-1][0] - totals[0][0]
        total = totals[-1][1] - totals[0][1]
        if total < 0 or busy < 0:
            raise _bad(name, 1, "cpu", "the second copy counts fewer ticks than the first")
        return CpuTimes(len(cpus) or 1, busy, total)
    return CpuTimes(len(cpus) or 1, None, None)


_SKIP_FS = ("tmpfs", "devtmpfs", "squashfs", "overlay", "proc", "sysfs", "udev", "none", "efivarfs")


def parse_df(text: str, name: str = "df.txt") -> list[DiskUse]:
    """`df -P`: `Filesystem 1024-blocks Used Available Capacity Mounted on`. Pseudo and
    read-only image filesystems (tmpfs, squashfs snaps: always 100 %) are left out."""
    out = []
    seen_header = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        toks = raw.split()
        if not toks or raw.startswith("#"):
            continue
        if toks[0] == "Filesystem":
            seen_header = True
            continue
        if not seen_header:
            raise _bad(name, lineno, "header", "no `Filesystem ...` header: not `df -P` output")
        if len(toks) < 6 or not toks[4].endswith("%"):
            raise _bad(name, lineno, "Capacity", f"expected 6 columns with a `NN%` capacity: "
                       f"{raw.strip()!r}")
        pct, avail = toks[4].rstrip("%"), toks[3]
        if pct == "-" or toks[0] in _SKIP_FS or toks[0].split("/")[-1].startswith("loop"):
            continue
        if not pct.isdigit() or not avail.isdigit():
            raise _bad(name, lineno, "Capacity", f"not a number: {toks[4]!r} / {toks[3]!r}")
        out.append(DiskUse(toks[0], " ".join(toks[5:]), int(pct), int(avail)))
    return out


def parse_ps(text: str, name: str = "ps.txt") -> list[HostProcess]:
    """`ps -eo pid,psr,pcpu,rss,args`."""
    out = []
    header = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        toks = raw.split(None, 4)
        if not toks or raw.startswith("#"):
            continue
        if toks[0] == "PID":
            header = True
            continue
        if not header:
            raise _bad(name, lineno, "header", "no `PID PSR %CPU RSS ...` header: not "
                       "`ps -eo pid,psr,pcpu,rss,args` output")
        if len(toks) < 4 or not toks[0].isdigit():
            raise _bad(name, lineno, "PID", f"expected pid, psr, pcpu, rss, args: {raw!r}")
        try:
            pcpu = float(toks[2])
            rss = int(toks[3])
        except ValueError:
            raise _bad(name, lineno, "%CPU", f"not a number in {raw.strip()!r}") from None
        psr = int(toks[1]) if toks[1].isdigit() else None
        out.append(HostProcess(int(toks[0]), psr, pcpu, rss, toks[4] if len(toks) > 4 else ""))
    return out


# Queue metrics of common serving layers (Prometheus text).
_WAITING = ("vllm:num_requests_waiting", "tgi_queue_size", "nv_inference_pending_request_count",
            "sglang:num_queue_reqs")
_RUNNING = ("vllm:num_requests_running", "tgi_batch_current_size", "sglang:num_running_reqs")
_WAIT_HIST = ("vllm:request_queue_time_seconds", "tgi_request_queue_duration")
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str, name: str = "metrics.txt") -> QueueMetrics:
    """Queue depth, running requests and the mean queue wait, summed over label sets."""
    sums: dict[str, float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise _bad(name, lineno, "sample", f"not a Prometheus sample: {line[:80]!r}")
        try:
            value = float(m.group(3))
        except ValueError:
            raise _bad(name, lineno, m.group(1), f"value {m.group(3)!r} is not a number") \
                from None
        if math.isfinite(value):
            sums[m.group(1)] = sums.get(m.group(1), 0.0) + value

    def first(names: tuple[str, ...]) -> float | None:
        return next((sums[n] for n in names if n in sums), None)

    wait = None
    for h in _WAIT_HIST:
        s, c = sums.get(h + "_sum"), sums.get(h + "_count")
        if s is not None and c:
            wait = s / c
            break
    known = set(_WAITING + _RUNNING) | {h + s for h in _WAIT_HIST for s in ("_sum", "_count")}
    return QueueMetrics(first(_WAITING), first(_RUNNING), wait,
                        {k: v for k, v in sums.items() if k in known})
