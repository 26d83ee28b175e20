"""The host-side questions: host memory (capacity, swap, the OOM killer), CPU, disk."""

from __future__ import annotations

from fleet.domain.diagnose.gpu_questions import Result, _cnj, _done
from fleet.domain.diagnose.model import Evidence, Finding, Severity

MEM_AVAILABLE_WARN_PCT = 10.0
MEM_AVAILABLE_CRIT_PCT = 5.0
SWAP_USED_WARN_PCT = 25.0
CPU_BUSY_PCT = 90.0
LOAD_PER_CPU = 1.5
DISK_WARN_PCT = 95
DISK_CRIT_PCT = 99


def host_memory(ev: Evidence) -> Result:
    m = ev.meminfo
    oom = [ln.strip() for ln in (ev.kernel_text or "").splitlines()
           if "Out of memory: Killed process" in ln or "oom-kill:" in ln]
    if m is None and ev.kernel_text is None:
        return _cnj("host_memory", "no meminfo and no kernel log")
    findings = []
    if m is not None and m.available_kib is not None and m.total_kib:
        avail = 100 * m.available_kib / m.total_kib
        swap_used = m.swap_total_kib - m.swap_free_kib
        swap_pct = 100 * swap_used / m.swap_total_kib if m.swap_total_kib else 0.0
        swapping = swap_pct >= SWAP_USED_WARN_PCT and avail < 2 * MEM_AVAILABLE_WARN_PCT
        if avail < MEM_AVAILABLE_WARN_PCT or swapping:
            sev: Severity = "critical" if avail < MEM_AVAILABLE_CRIT_PCT else "warning"
            findings.append(Finding(
                "host_memory", sev,
                f"host memory {avail:.1f} % available, swap {swap_pct:.0f} % used",
                {"mem_total_kib": m.total_kib, "mem_available_kib": m.available_kib,
                 "available_pct": round(avail, 1), "swap_used_kib": swap_used,
                 "swap_used_pct": round(swap_pct, 1)},
                "vmstat 1 10 (si/so columns); ps -eo pid,rss,args --sort=-rss | head",
                "the host swaps or is about to: pinned buffers and data loaders stall; cap "
                "the workers' memory, lower the loader count or add memory",
            ))
    if oom:
        findings.append(Finding(
            "host_memory", "critical", f"the kernel's OOM killer ran {len(oom)} time(s)",
            {"messages": oom[:5]},
            "journalctl -k | grep -i 'out of memory'",
            "processes were killed for host memory: find the one that grows (rss) and cap it",
        ))
    if m is None or m.available_kib is None:
        if findings:
            return findings, _done("host_memory", findings, "")[1]
        return _cnj("host_memory", "no MemAvailable (meminfo missing or too old a kernel)")
    return _done("host_memory", findings, "host memory and swap fine")


def host_cpu(ev: Evidence) -> Result:
    c, load = ev.cpu, ev.loadavg
    if c is None and load is None:
        return _cnj("host_cpu", "no stat and no loadavg")
    busy = 100 * c.busy / c.total if c and c.busy is not None and c.total else None
    per_cpu = load.one / c.cpus if load is not None and c is not None else None
    if busy is None and per_cpu is None:
        return _cnj("host_cpu", "no CPU count (stat missing) to weigh the load against"
                    if c is None else "one copy of /proc/stat and no loadavg: no CPU figure")
    top = [p for p in sorted(ev.ps or [], key=lambda p: -p.pcpu) if p.pcpu >= 1.0][:3]
    findings = []
    if (busy is not None and busy >= CPU_BUSY_PCT) or (
            busy is None and per_cpu is not None and per_cpu >= LOAD_PER_CPU):
        sev: Severity = "critical" if (busy or 0) >= 98 or (per_cpu or 0) >= 3 else "warning"
        findings.append(Finding(
            "host_cpu", sev,
            "host CPUs saturated: "
            + (f"{busy:.0f} % busy over the window" if busy is not None else
               f"load {load.one:g} on {c.cpus if c else '?'} CPUs" if load else ""),
            {"busy_pct": round(busy, 1) if busy is not None else None,
             "load1": load.one if load else None, "cpus": c.cpus if c else None,
             "load_per_cpu": round(per_cpu, 2) if per_cpu is not None else None,
             "top": [{"pid": p.pid, "pcpu": p.pcpu, "args": p.args[:80]} for p in top],
             **({"note": "no process in ps.txt uses the CPU: the load is outside this host's "
                 "process list (another container or VM, a noisy neighbour)"}
                if ev.ps is not None and not top else {})},
            "top -H -b -n1 | head -30; pidstat -u 1 5",
            "the GPU waits on the CPU (tokenization, data loading, pre/post-processing): "
            "give the GPU workers dedicated cores, move other work off the host",
        ))
    ok = (f"{busy:.0f} % busy" if busy is not None else f"load {per_cpu:.2f} per CPU")
    return _done("host_cpu", findings, ok)


def disk(ev: Evidence) -> Result:
    if ev.df is None:
        return _cnj("disk", "no df.txt")
    findings = []
    for d in ev.df:
        if d.used_pct >= DISK_WARN_PCT:
            sev: Severity = ("critical" if d.used_pct >= DISK_CRIT_PCT or d.avail_kib < 1 << 20
                             else "warning")
            findings.append(Finding(
                "disk", sev, f"{d.mount} is {d.used_pct} % full ({d.avail_kib // 1024} MiB free)",
                {"mount": d.mount, "filesystem": d.filesystem, "used_pct": d.used_pct,
                 "avail_kib": d.avail_kib},
                f"du -xh --max-depth=2 {d.mount} | sort -h | tail",
                "a full disk stalls checkpoints, logs and caches (and can fail jobs): clean up "
                "or grow the filesystem",
            ))
    return _done("disk", findings, "every filesystem below "
                 f"{DISK_WARN_PCT} %")
