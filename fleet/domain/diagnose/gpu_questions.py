"""The GPU-side questions, in the field's order: queueing, is the GPU busy, throttled,
memory-bound, GPU memory. Each returns its findings and its answer."""

from __future__ import annotations

from fleet.domain.diagnose.model import Answer, Evidence, Finding, Severity
from fleet.domain.diagnose.views import gpu_views

Result = tuple[list[Finding], Answer]

IDLE_SM_PCT = 15.0
"""Below this mean SM utilization a GPU that has processes is starved, not busy."""
MEMORY_BOUND_PCT = 70.0
"""Memory-controller utilization from which the kernels wait on DRAM bandwidth."""
FB_FULL_PCT = 95.0
LEAK_MIB = 256.0
"""Growth of one process's GPU memory over the window that reads as a leak (and >= 10 %)."""
QUEUE_WAIT_S = 1.0
THROTTLE_REASONS = {
    "sw_power_cap": ("warning", "power cap"),
    "hw_slowdown": ("critical", "hardware slowdown (power brake or overheating)"),
    "hw_thermal_slowdown": ("critical", "hardware thermal slowdown"),
    "sw_thermal_slowdown": ("critical", "software thermal slowdown"),
    "hw_power_brake_slowdown": ("critical", "external power brake"),
}


def _cnj(cls: str, reason: str) -> Result:
    return [], Answer(cls, "could_not_judge", reason)


def _done(cls: str, findings: list[Finding], ok_reason: str) -> Result:
    if findings:
        return findings, Answer(cls, "finding", None)
    return [], Answer(cls, "ok", ok_reason)


def queueing(ev: Evidence) -> Result:
    if ev.queue is None:
        why = ("the pool names no metrics URL for its serving layer" if ev.queue_source is None
               else f"metrics from {ev.queue_source} could not be read")
        return _cnj("queueing", why)
    q = ev.queue
    if q.waiting is None and q.wait_seconds_mean is None:
        return _cnj("queueing", "the metrics name no known queue depth or queue wait")
    findings = []
    waiting = q.waiting or 0.0
    wait = q.wait_seconds_mean
    if waiting >= 1 and (wait is None or wait >= QUEUE_WAIT_S or waiting > (q.running or 0)):
        sev: Severity = "critical" if (wait or 0) >= 10 * QUEUE_WAIT_S else "warning"
        findings.append(Finding(
            "queueing", sev,
            f"{waiting:g} request(s) waiting in the serving queue"
            + (f", mean queue wait {wait:.2f} s" if wait is not None else ""),
            {"waiting": waiting, "running": q.running, "queue_wait_s_mean": wait,
             "source": ev.queue_source},
            "watch the queue depth against the running batch over a few minutes",
            "the host is saturated by demand, not slow: add replicas or raise the batch size "
            "and max concurrent requests if GPU memory allows",
        ))
    return _done("queueing", findings, f"queue depth {waiting:g}")


def gpu_idle(ev: Evidence) -> Result:
    views = gpu_views(ev)
    measured = {i: v for i, v in views.items() if v.sm is not None}
    if not measured:
        return _cnj("gpu_idle", "no utilization (dmon.txt and nvidia-smi -q missing)")
    findings = []
    for v in measured.values():
        if v.processes and v.sm is not None and v.sm < IDLE_SM_PCT:
            findings.append(Finding(
                "gpu_idle", "warning",
                f"{v.label} has {len(v.processes)} process(es) but SM utilization is "
                f"{v.sm:g} %",
                {"sm_pct": v.sm, "mem_pct": v.mem, "source": v.util_source,
                 "processes": sorted(v.processes)},
                "py-spy dump --pid <pid> (or nsys profile) to see what the process waits on",
                "the GPU is starved: look at the input pipeline, data loading, CPU-side "
                "pre/post-processing and host-to-device copies before the GPU",
                v.index,
            ))
    busy = ", ".join(f"GPU {i} {v.sm:g} %" for i, v in measured.items())
    return _done("gpu_idle", findings, f"SM utilization {busy}")


def throttled(ev: Evidence) -> Result:
    views = gpu_views(ev)
    judged = False
    findings = []
    for v in views.values():
        s = v.state
        if s is None:
            continue
        if s.reasons is not None or (s.clock_sm is not None and s.clock_sm_max):
            judged = True
        active = [r for r in (s.reasons or []) if r in THROTTLE_REASONS]
        power_capped = (v.pwr is not None and s.power_limit_w
                        and v.pwr >= 0.98 * s.power_limit_w and (v.sm or 0) > IDLE_SM_PCT)
        if not active and not power_capped:
            continue
        sev: Severity = (
            "critical" if any(THROTTLE_REASONS[r][0] == "critical" for r in active)
            else "warning")
        what = ", ".join(THROTTLE_REASONS[r][1] for r in active) or "power draw at the cap"
        evidence = {
            "reasons": active, "sm_clock_mhz": v.pclk, "sm_clock_max_mhz": s.clock_sm_max,
            "power_draw_w": v.pwr, "power_limit_w": s.power_limit_w,
            "temperature_c": s.temperature_c,
        }
        if v.pclk and s.clock_sm_max:
            evidence["clock_pct_of_max"] = round(100 * v.pclk / s.clock_sm_max, 1)
        thermal = any("thermal" in r for r in active)
        findings.append(Finding(
            "throttled", sev,
            f"{v.label} clocks held down: {what}",
            evidence,
            "nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE -i " + str(v.index),
            ("check airflow, fans and inlet temperature; a GPU that throttles alone is a "
             "hardware ticket" if thermal else
             "the GPU holds its clocks down to stay under its power limit: compare Current and "
             "Default Power Limit (nvidia-smi -q -d POWER), restore a lowered limit "
             "(nvidia-smi -pl), check the PSU and cooling; same utilization at a lower clock "
             "is slower work"),
            v.index,
        ))
    if not judged:
        return _cnj("throttled", "no clock event reasons or clocks (nvidia-smi -q missing)")
    return _done("throttled", findings, "no throttle reason active")


def memory_bound(ev: Evidence) -> Result:
    views = gpu_views(ev)
    measured = [v for v in views.values() if v.mem is not None]
    if not measured:
        return _cnj("memory_bound", "no memory utilization (dmon.txt and nvidia-smi -q missing)")
    findings = []
    for v in measured:
        if v.mem is not None and v.mem >= MEMORY_BOUND_PCT:
            findings.append(Finding(
                "memory_bound", "warning",
                f"{v.label} memory controller busy {v.mem:g} % of the time (SM {v.sm} %)",
                {"mem_pct": v.mem, "sm_pct": v.sm, "source": v.util_source},
                "ncu --section MemoryWorkloadAnalysis on the hot kernel",
                "the work waits on DRAM bandwidth: larger batches, fused kernels, lower "
                "precision (FP8/INT8 weights, KV cache) or a GPU with more bandwidth",
                v.index,
            ))
    return _done("memory_bound", findings, "memory utilization below "
                 f"{MEMORY_BOUND_PCT:g} %")


def gpu_memory(ev: Evidence) -> Result:
    views = gpu_views(ev)
    findings = []
    judged = False
    for v in views.values():
        s = v.state
        if s is None or s.fb_total_mib is None or s.fb_used_mib is None or not s.fb_total_mib:
            continue
        judged = True
        pct = 100 * s.fb_used_mib / s.fb_total_mib
        if pct >= FB_FULL_PCT:
            findings.append(Finding(
                "gpu_memory", "warning",
                f"{v.label} memory {pct:.0f} % full ({s.fb_used_mib} of {s.fb_total_mib} MiB)",
                {"fb_used_mib": s.fb_used_mib, "fb_total_mib": s.fb_total_mib,
                 "used_pct": round(pct, 1),
                 "processes": {p.pid: p.used_mib for p in s.processes}},
                f"nvidia-smi --query-compute-apps=pid,used_memory --format=csv -i {v.index}",
                "allocations at the limit fail or retry (OOM, fragmentation): lower the batch, "
                "the KV-cache share (gpu_memory_utilization) or the context length",
                v.index,
            ))
    series: dict[tuple[int, int], list[float]] = {}
    names: dict[tuple[int, int], str] = {}
    for p in ev.pmon or []:
        if p.fb_mib is not None:
            judged = True
            series.setdefault((p.gpu, p.pid), []).append(p.fb_mib)
            names[(p.gpu, p.pid)] = p.command
    for (gpu, pid), mib in series.items():
        growth = mib[-1] - mib[0]
        steady = all(b >= a for a, b in zip(mib, mib[1:], strict=False))
        if len(mib) >= 3 and steady and growth >= LEAK_MIB and growth >= 0.1 * max(mib[0], 1):
            findings.append(Finding(
                "gpu_memory", "warning",
                f"GPU {gpu}: pid {pid} ({names[(gpu, pid)]}) GPU memory grew "
                f"{growth:g} MiB over {len(mib)} samples",
                {"pid": pid, "command": names[(gpu, pid)], "first_mib": mib[0],
                 "last_mib": mib[-1], "samples": len(mib)},
                f"nvidia-smi pmon -s m -i {gpu} for a few minutes: does it keep growing?",
                "a process whose GPU memory only grows leaks (cached tensors, growing KV "
                "cache, fragmentation): restart it on a schedule and report the leak",
                gpu,
            ))
    if not judged:
        return _cnj("gpu_memory", "no GPU memory figures (nvidia-smi -q and pmon -s um missing)")
    return _done("gpu_memory", findings, "GPU memory below "
                 f"{FB_FULL_PCT:g} % and no process growing")
