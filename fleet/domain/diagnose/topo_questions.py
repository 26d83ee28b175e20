"""Topology and data movement, software and the GPU's health: pcie, numa, nvlink, drift,
fallback, hardware."""

from __future__ import annotations

import re
from typing import Any

from fleet.domain.diagnose.gpu_questions import IDLE_SM_PCT, Result, _cnj, _done
from fleet.domain.diagnose.model import Answer, Evidence, Finding, Severity
from fleet.domain.diagnose.views import all_processes, gpu_views

# Xids that mean the GPU (not the application) is in trouble and must be looked at now.
CRITICAL_XIDS = {48, 62, 64, 74, 79, 92, 95, 119, 120, 140, 144, 145, 146, 147, 148, 149, 150}
NVLINK_XIDS = {74, 144, 145, 146, 147, 148, 149, 150}
CORRECTED_AER_BURST = 10


def pcie(ev: Evidence) -> Result:
    findings = []
    judged = False
    for v in gpu_views(ev).values():
        s = v.state
        if s is None:
            continue
        if s.pcie_width is not None and s.pcie_width_max:
            judged = True
        busy = (v.sm or 0) >= IDLE_SM_PCT
        narrow = bool(s.pcie_width and s.pcie_width_max and s.pcie_width < s.pcie_width_max)
        slow = bool(busy and s.pcie_gen and s.pcie_gen_max and s.pcie_gen < s.pcie_gen_max)
        if not (narrow or slow):
            continue
        findings.append(Finding(
            "pcie", "warning",
            f"{v.label} PCIe link at Gen{s.pcie_gen} x{s.pcie_width}, "
            f"maximum Gen{s.pcie_gen_max} x{s.pcie_width_max}",
            {"gen": s.pcie_gen, "gen_max": s.pcie_gen_max, "width": s.pcie_width,
             "width_max": s.pcie_width_max, "sm_pct": v.sm, "replays": s.pcie_replays},
            f"lspci -vv -s {s.bus_id or '<bus id>'} | grep -E 'LnkCap|LnkSta'",
            "a link trained below its maximum moves data slower (host-to-device copies, "
            "model loads): reseat the card or riser, check the slot's BIOS setting, and "
            "look for AER errors on the same link",
            v.index,
        ))
    if not judged:
        return _cnj("pcie", "no PCIe link figures (nvidia-smi -q missing)")
    return _done("pcie", findings, "every link at its maximum width (generation judged under "
                 "load only: idle GPUs lower it to save power)")


def numa(ev: Evidence) -> Result:
    procs = all_processes(ev)
    if ev.topo is None:
        return _cnj("numa", "no GPU CPU affinity (topo.txt missing)")
    if ev.ps is None:
        return _cnj("numa", "no process placement (ps.txt missing)")
    if ev.smi is None and ev.pmon is None:
        return _cnj("numa", "no GPU process list (nvidia-smi -q and pmon.txt missing)")
    if not procs:
        return [], _answer_ok("numa", "no GPU process to place")
    affinity = {t.gpu: t for t in ev.topo}
    psr = {p.pid: p for p in ev.ps}
    findings = []
    for gpu, proc in procs:
        topo, hp = affinity.get(gpu), psr.get(proc.pid)
        if topo is None or topo.cpus is None or hp is None or hp.psr is None:
            continue
        if hp.psr not in topo.cpus:
            findings.append(Finding(
                "numa", "warning",
                f"GPU {gpu}: pid {proc.pid} ({proc.name or hp.args[:40]}) runs on CPU {hp.psr}, "
                f"outside the GPU's NUMA node",
                {"pid": proc.pid, "cpu": hp.psr, "gpu_cpus": _ranges(topo.cpus),
                 "gpu_numa_node": topo.numa},
                f"taskset -cp {proc.pid}; numactl --hardware",
                "bind the process to the GPU's node (numactl --cpunodebind=N --membind=N, or "
                "the scheduler's CPU binding): every copy otherwise crosses the socket link",
                gpu,
            ))
    return _done("numa", findings, "every GPU process on its GPU's NUMA node")


def _answer_ok(cls: str, reason: str) -> Answer:
    return Answer(cls, "ok", reason)


def _ranges(cpus: frozenset[int]) -> str:
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def _xids(ev: Evidence) -> list[dict[str, Any]]:
    return [e for e in ev.kernel_events or [] if e["kind"] == "xid"]


def nvlink(ev: Evidence) -> Result:
    if ev.kernel_events is None:
        return _cnj("nvlink", "no kernel log (kernel.log missing)")
    events = [e for e in _xids(ev) if e["xid"] in NVLINK_XIDS or e["severity"] == "nvlink"]
    findings = []
    if events:
        findings.append(Finding(
            "nvlink", "critical",
            f"{len(events)} NVLink Xid event(s): "
            + ", ".join(sorted({f"Xid {e['xid']} on {e['pci']}" for e in events})),
            {"xids": sorted({e["xid"] for e in events}), "lines": [e["line"] for e in events]},
            "nvidia-smi nvlink -s; nvidia-smi nvlink -e",
            "NVLink errors slow or break peer traffic (all-reduce): drain the host, reset the "
            "GPUs (or reboot) and open a hardware ticket if they come back",
        ))
    return _done("nvlink", findings, "no NVLink Xid in the kernel log")


_API_MISMATCH = re.compile(r"NVRM: API mismatch.*|Driver/library version mismatch.*")


def drift(ev: Evidence) -> Result:
    if ev.smi is None and ev.kernel_text is None:
        return _cnj("drift", "no nvidia-smi output and no kernel log")
    hits = []
    for text in (ev.smi.failure if ev.smi else None, ev.kernel_text):
        if text:
            hits += [m.group(0).strip() for m in _API_MISMATCH.finditer(text)]
    findings = []
    if hits:
        findings.append(Finding(
            "drift", "critical",
            "the loaded kernel module and the user-space driver differ",
            {"messages": hits[:5], "driver": ev.smi.driver if ev.smi else None},
            "cat /proc/driver/nvidia/version; dpkg -l | grep nvidia",
            "an upgrade without a reboot (or a second driver): reboot onto one driver, then "
            "`fleet check` against the matrix",
        ))
    return _done("drift", findings, "no driver/library mismatch (release drift against the "
                 "matrix is `fleet check`)")


_GPU_WORK = re.compile(r"python|torch|vllm|llama|ollama|triton|tritonserver|sglang|text-gener")


def fallback(ev: Evidence) -> Result:
    if ev.smi is None:
        return _cnj("fallback", "no nvidia-smi output")
    findings = []
    if ev.smi.failure:
        findings.append(Finding(
            "fallback", "critical",
            f"nvidia-smi cannot use the GPUs: {ev.smi.failure}",
            {"nvidia_smi": ev.smi.failure},
            "lsmod | grep nvidia; dmesg | grep -i nvrm | tail",
            "no GPU is usable: frameworks fall back to the CPU or fail; load the driver "
            "(or reboot onto it) before anything else",
        ))
    elif ev.ps is not None and not all_processes(ev):
        busy = [p for p in ev.ps if p.pcpu >= 90 and _GPU_WORK.search(p.args)]
        if busy:
            top = max(busy, key=lambda p: p.pcpu)
            findings.append(Finding(
                "fallback", "warning",
                f"pid {top.pid} looks like GPU work and burns {top.pcpu:g} % CPU, but no "
                "process uses a GPU",
                {"pid": top.pid, "pcpu": top.pcpu, "args": top.args[:120]},
                f"cat /proc/{top.pid}/environ | tr '\\0' '\\n' | grep CUDA; "
                "python -c 'import torch; print(torch.cuda.is_available())'",
                "a silent CPU fallback (CUDA_VISIBLE_DEVICES, a CPU-only wheel, a container "
                "without --gpus): fix the environment and restart the process",
            ))
    return _done("fallback", findings, "nvidia-smi sees the GPUs")


def _hw(sev: Severity, summary: str, evidence: dict[str, Any], gpu: int | None = None,
        next_: str = "nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER",
        fix: str = "drain the host and run `fleet check` / dcgmi diag -r 3; follow the "
        "GPU's recovery action (reset, reboot) and open a hardware ticket if it returns") \
        -> Finding:
    return Finding("hardware", sev, summary, evidence, next_, fix, gpu)


def hardware(ev: Evidence) -> Result:
    if ev.smi is None and ev.kernel_events is None:
        return _cnj("hardware", "no nvidia-smi output and no kernel log")
    findings = []
    for s in ev.smi.gpus if ev.smi else []:
        label = f"GPU {s.index}" + (f" ({s.bus_id})" if s.bus_id else "")
        if s.ecc_volatile_uncorrected:
            findings.append(_hw("critical", f"{label}: {s.ecc_volatile_uncorrected} uncorrected "
                                "ECC error(s) since the last reset",
                                {"ecc_volatile_uncorrected": s.ecc_volatile_uncorrected},
                                s.index))
        if s.remap_failure:
            findings.append(_hw("critical", f"{label}: row remapping failed",
                                {"remap_failure": True}, s.index))
        elif s.remap_pending or s.retired_pending:
            findings.append(_hw("warning", f"{label}: a memory repair waits for a GPU reset",
                                {"remap_pending": s.remap_pending,
                                 "retired_pages_pending": s.retired_pending}, s.index))
        if s.recovery_action and s.recovery_action not in ("none", "n/a"):
            findings.append(_hw("critical", f"{label}: the driver asks for '{s.recovery_action}'",
                                {"recovery_action": s.recovery_action}, s.index))
    xids: dict[int, list[dict[str, Any]]] = {}
    for e in _xids(ev):
        if e["xid"] not in NVLINK_XIDS:
            xids.setdefault(e["xid"], []).append(e)
    for xid, events in sorted(xids.items()):
        cls = events[0]["severity"]
        sev: Severity = ("critical" if xid in CRITICAL_XIDS else
                         "info" if cls == "application" else "warning")
        findings.append(_hw(
            sev, f"Xid {xid} ({cls}) x{len(events)} on "
            + ", ".join(sorted({str(e["pci"]) for e in events})),
            {"xid": xid, "class": cls, "count": len(events),
             "lines": [e["line"] for e in events][:10], "first": events[0]["text"][:160]},
            next_="dmesg -T | grep -E 'NVRM: Xid' | tail -20",
            fix=("an application fault (bad address, illegal instruction): the process's bug, "
                 "not the GPU's, unless it recurs across jobs" if cls == "application" else
                 "drain the host; follow NVIDIA's Xid catalog for this code (reset, reboot or "
                 "RMA) and open a hardware ticket if it recurs"),
        ))
    lost = [e for e in ev.kernel_events or [] if e["kind"] == "fallen_off_bus"]
    if lost:
        findings.append(_hw("critical", "a GPU fell off the bus: "
                            + ", ".join(sorted({str(e["pci"]) for e in lost})),
                            {"lines": [e["line"] for e in lost][:10]},
                            next_="lspci -d 10de: ; nvidia-smi -L"))
    aer = [e for e in ev.kernel_events or [] if e["kind"] == "aer"]
    bad = [e for e in aer if e["severity"] in ("nonfatal", "fatal")]
    if bad or len(aer) >= CORRECTED_AER_BURST:
        sev2: Severity = ("critical" if any(e["severity"] == "fatal" for e in bad) else "warning")
        findings.append(_hw(
            sev2, f"{len(aer)} PCIe AER event(s), {len(bad)} uncorrectable",
            {"aer_events": len(aer), "uncorrectable": len(bad),
             "devices": sorted({str(e["pci"]) for e in aer})[:8]},
            next_="lspci -vvv -s <bus id> | grep -A4 AERCap; grep . "
            "/sys/bus/pci/devices/*/aer_dev_*",
            fix="PCIe errors on the GPU's link: reseat the card or riser and check the slot; "
            "a fatal one needs a reset or reboot",
        ))
    return _done("hardware", findings, "no Xid, AER, uncorrected ECC or pending repair")
