#!/usr/bin/python3
# FAKE nvidia-smi from the fleet lab, answered through pynvml (the fake NVML): the default
# one-line-per-GPU listing, and what `fleet diagnose` collects: -q -x, dmon -s pucm -c N,
# pmon -s um -c N, topo -m. Shipped in the fake nvidia-driver packages (fleet/lab/repo.py);
# runs with the lab host's python3 and imports nothing but the stdlib and pynvml.
import sys
import time
from typing import Any
from xml.sax.saxutils import escape

import pynvml as n

REASONS = [(0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
           (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
           (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
           (0x100, "display_clock_setting")]


def init() -> None:
    try:
        n.nvmlInit()
    except n.NVMLError as e:
        msg = {18: "Failed to initialize NVML: Driver/library version mismatch",
               9: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                  "Make sure that the latest NVIDIA driver is installed and running."}
        print(msg.get(e.value, f"Failed to initialize NVML: {e}"))
        sys.exit(e.value if e.value < 256 else 255)


def call(fn: Any, *args: Any, default: Any = None) -> Any:
    try:
        return fn(*args)
    except n.NVMLError:
        return default


def handles() -> list[Any]:
    return [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]


def procs(h: Any) -> list[Any]:
    return call(n.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        return args[0].decode(errors="replace") or f"[{pid}]"
    except OSError:
        return f"[{pid}]"


def mib(b: int) -> int:
    return int(b) >> 20


def cpu_ranges(h: Any) -> str:
    words = call(n.nvmlDeviceGetCpuAffinity, h, 16)
    if words is None:
        return "N/A"
    cpus = [w * 64 + b for w in range(16) for b in range(64) if (int(words[w]) >> b) & 1]
    out: list[str] = []
    run: list[int] = []
    for c in cpus:
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out) or "N/A"


def xml() -> None:
    drv = n.nvmlSystemGetDriverVersion()
    cuda = call(n.nvmlSystemGetCudaDriverVersion, default=0) or 0
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
           "<nvidia_smi_log>", f"<timestamp>{time.ctime()}</timestamp>",
           f"<driver_version>{drv}</driver_version>",
           f"<cuda_version>{cuda // 1000}.{cuda % 1000 // 10}</cuda_version>",
           f"<attached_gpus>{n.nvmlDeviceGetCount()}</attached_gpus>"]
    for h in handles():
        pci = n.nvmlDeviceGetPciInfo(h)
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
        mem = n.nvmlDeviceGetMemoryInfo(h)
        util = call(n.nvmlDeviceGetUtilizationRates, h)
        mask = call(n.nvmlDeviceGetCurrentClocksEventReasons, h, default=0) or 0
        corr, unc, pend, fail = call(n.nvmlDeviceGetRemappedRows, h, default=(0, 0, 0, 0))
        sbe = call(n.nvmlDeviceGetTotalEccErrors, h, 0, 0, default=0)
        dbe = call(n.nvmlDeviceGetTotalEccErrors, h, 1, 0, default=0)
        out += [f'<gpu id="{bus}">',
                f"<product_name>{escape(n.nvmlDeviceGetName(h))}</product_name>",
                f"<uuid>{n.nvmlDeviceGetUUID(h)}</uuid>",
                "<pci>", f"<pci_bus_id>{bus}</pci_bus_id>", "<pci_gpu_link_info><pcie_gen>",
                f"<max_link_gen>{call(n.nvmlDeviceGetMaxPcieLinkGeneration, h)}</max_link_gen>",
                f"<current_link_gen>{call(n.nvmlDeviceGetCurrPcieLinkGeneration, h)}"
                "</current_link_gen>", "</pcie_gen><link_widths>",
                f"<max_link_width>{call(n.nvmlDeviceGetMaxPcieLinkWidth, h)}x</max_link_width>",
                f"<current_link_width>{call(n.nvmlDeviceGetCurrPcieLinkWidth, h)}x"
                "</current_link_width>", "</link_widths></pci_gpu_link_info>",
                f"<replay_counter>{call(n.nvmlDeviceGetPcieReplayCounter, h, default=0)}"
                "</replay_counter>", "</pci>",
                "<performance_state>P0</performance_state>", "<clocks_event_reasons>"]
        for bit, name in REASONS:
            state = "Active" if mask & bit else "Not Active"
            out.append(f"<clocks_event_reason_{name}>{state}</clocks_event_reason_{name}>")
        out += ["</clocks_event_reasons>",
                f"<fb_memory_usage><total>{mib(mem.total)} MiB</total><used>{mib(mem.used)} MiB"
                f"</used><free>{mib(mem.free)} MiB</free></fb_memory_usage>",
                "<utilization>"
                f"<gpu_util>{util.gpu if util else 'N/A'} %</gpu_util>"
                f"<memory_util>{util.memory if util else 'N/A'} %</memory_util></utilization>",
                f"<ecc_errors><volatile><dram_correctable>{sbe}</dram_correctable>"
                f"<dram_uncorrectable>{dbe}</dram_uncorrectable></volatile></ecc_errors>",
                f"<remapped_rows><remapped_row_corr>{corr}</remapped_row_corr>"
                f"<remapped_row_unc>{unc}</remapped_row_unc>"
                f"<remapped_row_pending>{'Yes' if pend else 'No'}</remapped_row_pending>"
                f"<remapped_row_failure>{'Yes' if fail else 'No'}</remapped_row_failure>"
                "</remapped_rows>",
                f"<temperature><gpu_temp>{call(n.nvmlDeviceGetTemperature, h, 0)} C</gpu_temp>"
                "</temperature>",
                "<gpu_power_readings>"
                f"<power_draw>{call(n.nvmlDeviceGetPowerUsage, h, default=0) / 1000:.2f} W"
                "</power_draw><current_power_limit>"
                f"{call(n.nvmlDeviceGetEnforcedPowerLimit, h, default=0) / 1000:.2f} W"
                "</current_power_limit></gpu_power_readings>",
                "<clocks>" + "".join(
                    f"<{t}_clock>{call(n.nvmlDeviceGetClockInfo, h, i)} MHz</{t}_clock>"
                    for i, t in ((0, "graphics"), (1, "sm"), (2, "mem"))) + "</clocks>",
                "<max_clocks>" + "".join(
                    f"<{t}_clock>{call(n.nvmlDeviceGetMaxClockInfo, h, i)} MHz</{t}_clock>"
                    for i, t in ((0, "graphics"), (1, "sm"), (2, "mem"))) + "</max_clocks>",
                "<processes>"]
        for p in procs(h):
            out.append(f"<process_info><pid>{p.pid}</pid><type>C</type>"
                       f"<process_name>{escape(comm(p.pid))}</process_name>"
                       f"<used_memory>{mib(p.usedGpuMemory or 0)} MiB</used_memory>"
                       "</process_info>")
        out += ["</processes>", "</gpu>"]
    out.append("</nvidia_smi_log>")
    print("\n".join(out))


def count(args: list[str]) -> int:
    if "-c" in args:
        return max(1, int(args[args.index("-c") + 1]))
    return 1 << 30


def dmon(args: list[str]) -> None:
    print("# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk"
          "     fb   bar1   ccpm ")
    print("# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz"
          "     MB     MB     MB ")
    hs = handles()
    for i in range(count(args)):
        if i:
            time.sleep(1)
        for gi, h in enumerate(hs):
            u = call(n.nvmlDeviceGetUtilizationRates, h)
            print(f"{gi:5d} {call(n.nvmlDeviceGetPowerUsage, h, default=0) // 1000:6d}"
                  f" {call(n.nvmlDeviceGetTemperature, h, 0):6d}      -"
                  f" {u.gpu if u else '-':>6} {u.memory if u else '-':>6}"
                  "      0      0      0      0"
                  f" {call(n.nvmlDeviceGetClockInfo, h, 2):6d}"
                  f" {call(n.nvmlDeviceGetClockInfo, h, 1):6d}"
                  f" {mib(n.nvmlDeviceGetMemoryInfo(h).used):6d}      -      0 ", flush=True)


def pmon(args: list[str]) -> None:
    print("# gpu         pid   type     fb   ccpm     sm    mem    enc    dec    jpg    ofa"
          "    command ")
    print("# Idx           #    C/G     MB     MB      %      %      %      %      %      %"
          "    name ")
    hs = handles()
    for i in range(count(args)):
        if i:
            time.sleep(1)
        for gi, h in enumerate(hs):
            ps = procs(h)
            u = call(n.nvmlDeviceGetUtilizationRates, h)
            for p in ps:
                sm = (u.gpu // len(ps)) if u else "-"
                mem = (u.memory // len(ps)) if u else "-"
                name = comm(p.pid).rsplit("/", 1)[-1][:15]
                print(f"{gi:5d} {p.pid:11d}     C {mib(p.usedGpuMemory or 0):6d}      0"
                      f" {sm:>6} {mem:>6}      -      -      -      -    {name}", flush=True)
            if not ps:
                print(f"{gi:5d}           -     -      -      -      -      -      -      -"
                      "      -      -    -", flush=True)


def topo() -> None:
    hs = handles()
    names = [f"GPU{i}" for i in range(len(hs))]
    print("\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    for i, h in enumerate(hs):
        links = [" X " if j == i else "NV18" for j in range(len(hs))]
        numa = call(n.nvmlDeviceGetNumaNodeId, h)
        print(f"GPU{i}\t" + "\t".join(links) + f"\t{cpu_ranges(h)}\t"
              f"{numa if numa is not None else 'N/A'}\t\tN/A")
    print("\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks")


def main(args: list[str]) -> None:
    init()
    if args[:2] == ["-q", "-x"] or args[:1] == ["-x"]:
        xml()
    elif args[:1] == ["dmon"]:
        dmon(args)
    elif args[:1] == ["pmon"]:
        pmon(args)
    elif args[:2] == ["topo", "-m"]:
        topo()
    else:
        drv = n.nvmlSystemGetDriverVersion()
        for i, h in enumerate(handles()):
            print(f"{i}, {n.nvmlDeviceGetName(h)}, {drv}")


if __name__ == "__main__":
    main(sys.argv[1:])
