#!/usr/bin/python3
# FAKE nvidia-smi from the fleet lab, answered through pynvml (the fake NVML): the default
# one-line-per-GPU listing, and what `fleet diagnose` collects: -q -x, dmon -s pucm -c N,
# pmon -s um -c N, topo -m, nvlink -s. Settings are written into the fake NVML's state file
# with a real GPU's rules (fleet/lab/gpustate.py): -pm, -e (pending until a reboot), -pl (within
# min/max), -ac/-rac, -lgc/-rgc, -c, -mig, and `mig -lgip/-lgi/-cgi [-C]/-dci/-dgi`.
# Shipped in the fake nvidia-driver packages (fleet/lab/repo.py); runs with the lab host's
# python3 and imports nothing but the stdlib and pynvml.
import os
import sys
import time
from typing import Any, NoReturn
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


COMPUTE_NAMES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


def na(value: Any) -> str:
    if value is None:
        return "N/A"
    return escape(value.decode() if isinstance(value, bytes) else str(value))


def onoff(v: Any) -> str:
    return "Enabled" if v else "Disabled"


def watts(mw: Any) -> str:
    return "N/A" if mw is None else f"{mw / 1000:.2f} W"


def node_xml_head(h: Any) -> list[str]:
    """persistence, MIG mode and MIG devices, in the order of a real v12/v13 log."""
    pm = call(n.nvmlDeviceGetPersistenceMode, h)
    mig = call(n.nvmlDeviceGetMigMode, h)
    out = [f"<persistence_mode>{'N/A' if pm is None else onoff(pm)}</persistence_mode>",
           "<mig_mode>" + (f"<current_mig>{onoff(mig[0])}</current_mig>"
                           f"<pending_mig>{onoff(mig[1])}</pending_mig>" if mig else
                           "<current_mig>N/A</current_mig><pending_mig>N/A</pending_mig>")
           + "</mig_mode>"]
    gis = gpu_instances(h) if mig and mig[0] else []
    if not gis:
        return out + ["<mig_devices>None</mig_devices>"]
    out.append("<mig_devices>")
    for i, (gi_id, prof) in enumerate(gis):
        out.append(f"<mig_device><index>{i}</index><gpu_instance_id>{gi_id}</gpu_instance_id>"
                   "<compute_instance_id>0</compute_instance_id><device_attributes><shared>"
                   f"<multiprocessor_count>{prof.multiprocessorCount}</multiprocessor_count>"
                   f"<copy_engine_count>{prof.copyEngineCount}</copy_engine_count>"
                   "</shared></device_attributes><fb_memory_usage>"
                   f"<total>{prof.memorySizeMB} MiB</total><reserved>0 MiB</reserved>"
                   f"<used>0 MiB</used><free>{prof.memorySizeMB} MiB</free></fb_memory_usage>"
                   "</mig_device>")
    return out + ["</mig_devices>"]


def inforom_xml(h: Any) -> list[str]:
    objs = [f"<{tag}>{na(call(n.nvmlDeviceGetInforomVersion, h, obj))}</{tag}>"
            for tag, obj in (("oem_object", 0), ("ecc_object", 1), ("pwr_object", 2))]
    return ["<inforom_version>",
            f"<img_version>{na(call(n.nvmlDeviceGetInforomImageVersion, h))}</img_version>",
            *objs, "</inforom_version>"]


def power_limits_xml(h: Any) -> str:
    lim = call(n.nvmlDeviceGetPowerManagementLimitConstraints, h) or (None, None)
    cur = call(n.nvmlDeviceGetEnforcedPowerLimit, h)
    return (f"<current_power_limit>{watts(cur)}</current_power_limit>"
            f"<requested_power_limit>{watts(call(n.nvmlDeviceGetPowerManagementLimit, h))}"
            "</requested_power_limit>"
            f"<default_power_limit>{watts(call(n.nvmlDeviceGetPowerManagementDefaultLimit, h))}"
            f"</default_power_limit><min_power_limit>{watts(lim[0])}</min_power_limit>"
            f"<max_power_limit>{watts(lim[1])}</max_power_limit>")


def app_clocks_xml(h: Any) -> list[str]:
    def mhz(fn: Any, clk: int) -> str:
        try:
            return f"{fn(h, clk)} MHz"
        except n.NVMLError_NotSupported:
            return "Requested functionality has been deprecated"
        except n.NVMLError:
            return "N/A"
    return [f"<{tag}><graphics_clock>{mhz(fn, 0)}</graphics_clock><mem_clock>{mhz(fn, 2)}"
            f"</mem_clock></{tag}>"
            for tag, fn in (("applications_clocks", n.nvmlDeviceGetApplicationsClock),
                            ("default_applications_clocks",
                             n.nvmlDeviceGetDefaultApplicationsClock))]


def fabric_xml(h: Any) -> list[str]:
    info = n.c_nvmlGpuFabricInfo_t()
    try:
        n.nvmlDeviceGetGpuFabricInfo(h, n.byref(info))
    except n.NVMLError:
        return ["<fabric><state>N/A</state><status>N/A</status></fabric>"]
    state = FABRIC_STATES.get(info.state, "N/A")
    status = "Success" if info.status == 0 else n.nvmlErrorString(info.status)
    return [f"<fabric><state>{state}</state><status>"
            f"{status if info.state == 3 else 'N/A'}</status></fabric>"]


def mig_profiles(h: Any) -> list[Any]:
    out = []
    for idx in range(10):
        try:
            out.append(n.nvmlDeviceGetGpuInstanceProfileInfo(h, idx))
        except n.NVMLError:
            continue
    return out


def gpu_instances(h: Any) -> list[tuple[int, Any]]:
    """(GPU instance id, its profile info) for every GPU instance, by id."""
    out = []
    for prof in mig_profiles(h):
        count = n.c_uint(0)
        arr = (n.c_nvmlGpuInstance_t * 16)()
        try:
            n.nvmlDeviceGetGpuInstances(h, prof.id, arr, n.byref(count))
        except n.NVMLError:
            continue
        out += [(n.nvmlGpuInstanceGetInfo(arr[i]).id, prof) for i in range(count.value)]
    return sorted(out, key=lambda t: t[0])


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
                *node_xml_head(h),
                f"<uuid>{n.nvmlDeviceGetUUID(h)}</uuid>",
                f"<vbios_version>{na(call(n.nvmlDeviceGetVbiosVersion, h))}</vbios_version>",
                *inforom_xml(h)]
        out += [f"<gsp_firmware_version>{na(call(n.nvmlDeviceGetGspFirmwareVersion, h))}"
                "</gsp_firmware_version>",
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
        mode = call(n.nvmlDeviceGetComputeMode, h)
        ecc = call(n.nvmlDeviceGetEccMode, h)
        for bit, name in REASONS:
            state = "Active" if mask & bit else "Not Active"
            out.append(f"<clocks_event_reason_{name}>{state}</clocks_event_reason_{name}>")
        out += ["</clocks_event_reasons>",
                f"<compute_mode>{COMPUTE_NAMES.get(mode, 'N/A')}</compute_mode>",
                "<ecc_mode>" + (f"<current_ecc>{onoff(ecc[0])}</current_ecc>"
                                f"<pending_ecc>{onoff(ecc[1])}</pending_ecc>" if ecc else
                                "<current_ecc>N/A</current_ecc><pending_ecc>N/A</pending_ecc>")
                + "</ecc_mode>",
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
                "</power_draw>" + power_limits_xml(h) + "</gpu_power_readings>",
                *app_clocks_xml(h),
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
        out += ["</processes>", *fabric_xml(h), "</gpu>"]
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


# ---------------------------------------------------------------- settings (writes)
STATE = os.environ.get("GPUSIM_STATE") or "/var/lib/gpusim/state"
COMPUTE_ARGS = {"0": 0, "DEFAULT": 0, "2": 2, "PROHIBITED": 2, "3": 3, "EXCLUSIVE_PROCESS": 3}


def write_state(changes: dict[str, str | None]) -> None:
    """Set (or, for None, drop) keys of the fake NVML's state file, atomically."""
    with open(STATE) as f:
        lines = f.read().splitlines()
    out, seen = [], set()
    for line in lines:
        key = line.partition("=")[0].strip()
        if not line.startswith("#") and key in changes:
            seen.add(key)
            if changes[key] is not None:
                out.append(f"{key}={changes[key]}")
            continue
        out.append(line)
    out += [f"{k}={v}" for k, v in changes.items() if k not in seen and v is not None]
    tmp = STATE + ".smi"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, STATE)


def targets(args: list[str]) -> list[tuple[int, Any]]:
    hs = handles()
    if "-i" not in args:
        return list(enumerate(hs))
    want = args[args.index("-i") + 1].split(",")
    return [(int(i), hs[int(i)]) for i in want]


def bus_id(h: Any) -> str:
    b = n.nvmlDeviceGetPciInfo(h).busId
    return b.decode() if isinstance(b, bytes) else b


def fail(msg: str, code: int = 2) -> NoReturn:
    print(msg)
    sys.exit(code)


def opt(args: list[str], flag: str) -> str:
    if args.index(flag) + 1 >= len(args):
        fail(f"Option {flag} requires an argument.")
    return args[args.index(flag) + 1]


def settings(args: list[str]) -> bool:
    """One setting flag; True when the arguments were a setting."""
    flags = {"-pm", "-e", "-pl", "-ac", "-rac", "-lgc", "-rgc", "-c", "-mig"}
    flag = next((a for a in args if a in flags), None)
    if flag is None or args[:1] and args[0] in ("dmon", "pmon", "topo", "mig", "nvlink"):
        return False
    changes: dict[str, str | None] = {}
    for i, h in targets(args):
        pre, bus = f"gpu{i}.", bus_id(h)
        if flag == "-pm":
            on = opt(args, flag) in ("1", "ENABLED")
            changes[pre + "persistence"] = "1" if on else "0"
            print(f"{'Enabled' if on else 'Disabled'} persistence mode for GPU {bus}.")
        elif flag == "-e":
            on = opt(args, flag) in ("1", "ENABLED")
            changes[pre + "ecc.pending"] = "1" if on else "0"
            print(f"{'Enabled' if on else 'Disabled'} ECC support for GPU {bus}.")
        elif flag == "-pl":
            w = float(opt(args, flag))
            lo, hi = n.nvmlDeviceGetPowerManagementLimitConstraints(h)
            if not lo <= w * 1000 <= hi:
                fail(f"Provided power limit {w:.2f} W is not a valid power limit which should be "
                     f"between {lo / 1000:.2f} W and {hi / 1000:.2f} W for GPU {bus}")
            old = n.nvmlDeviceGetPowerManagementLimit(h)
            changes[pre + "power.limit_mw"] = str(int(w * 1000))
            print(f"Power limit for GPU {bus} was set to {w:.2f} W from {old / 1000:.2f} W.")
        elif flag in ("-ac", "-rac"):
            try:
                dmem = n.nvmlDeviceGetDefaultApplicationsClock(h, 2)
                dgfx = n.nvmlDeviceGetDefaultApplicationsClock(h, 0)
            except n.NVMLError:
                fail(f"Setting applications clocks is not supported for GPU {bus}.", 3)
            if flag == "-rac":
                changes.update({pre + "clock.app.graphics": None, pre + "clock.app.mem": None})
                print(f"All done. Applications clocks reset to {dmem},{dgfx} for GPU {bus}.")
                continue
            mem, _, gfx = opt(args, flag).partition(",")
            top = n.nvmlDeviceGetMaxClockInfo(h, 0)
            if int(mem) != dmem or not 0 < int(gfx) <= top:
                fail(f"Specified clock combination \"MEM {mem}, SM {gfx}\" is not supported "
                     f"for GPU {bus}. Run 'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of "
                     "supported clock combinations")
            changes.update({pre + "clock.app.graphics": gfx, pre + "clock.app.mem": mem})
            print(f"Applications clocks set to \"(MEM {mem}, SM {gfx})\" for GPU {bus}")
        elif flag == "-lgc":
            lo_s, _, hi_s = opt(args, flag).partition(",")
            hi_s = hi_s or lo_s
            changes.update({pre + "clock.locked.min": lo_s, pre + "clock.locked.max": hi_s})
            print(f"GPU clocks set to \"(gpuClkMin {lo_s}, gpuClkMax {hi_s})\" for GPU {bus}")
        elif flag == "-rgc":
            changes.update({pre + "clock.locked.min": None, pre + "clock.locked.max": None})
            print(f"All done. GPU clocks reset for GPU {bus}.")
        elif flag == "-c":
            val = opt(args, flag).upper()
            if val not in COMPUTE_ARGS:
                fail(f'Invalid compute mode "{val}"')
            changes[pre + "compute_mode"] = str(COMPUTE_ARGS[val])
            name = COMPUTE_NAMES[COMPUTE_ARGS[val]].upper()
            print(f"Set compute mode to {name} for GPU {bus}.")
        elif flag == "-mig":
            on = opt(args, flag) in ("1", "ENABLED")
            if not mig_profiles(h):
                fail(f"Unable to enable MIG Mode for GPU {bus}: Not Supported", 3)
            if procs(h):
                fail(f"Unable to {'enable' if on else 'disable'} MIG Mode for GPU {bus}: "
                     "In use by another client", 19)
            # an idle GPU switches at once (driver R470 and later); the instances go with it
            changes.update({pre + "mig.current": str(int(on)), pre + "mig.pending": str(int(on)),
                            pre + "mig.gi": None})
            print(f"{'Enabled' if on else 'Disabled'} MIG Mode for GPU {bus}")
    write_state(changes)
    if flag == "-e":
        print("All done.\nReboot required.")
    elif flag not in ("-rac", "-rgc"):
        print("All done.")
    return True


def mig(args: list[str]) -> None:
    """`nvidia-smi mig`: list profiles and GPU instances, create (-cgi PROFILES [-C]), destroy."""
    import re as _re
    for i, h in targets(args):
        profs = mig_profiles(h)
        cur = call(n.nvmlDeviceGetMigMode, h)
        if not cur or not cur[0]:
            fail("No MIG-enabled devices found.", 6)
        with open(STATE) as f:
            state = dict(_re.findall(r"^([^#=\s]+)=(.*)$", f.read(), _re.M))
        gis = [x for x in (state.get(f"gpu{i}.mig.gi") or "").split(",") if x]
        if "-lgip" in args:
            print("GPU instance profiles:\n GPU   Name             ID    Instances   Memory")
            for p in profs:
                name = p.name.decode() if isinstance(p.name, bytes) else p.name
                print(f"  {i}  {name:<16} {p.id:>3}   {p.instanceCount:>2}/{p.instanceCount:<2}"
                      f"     {p.memorySizeMB / 1024:.2f}")
        elif "-lgi" in args:
            if not gis:
                print("No GPU instances found: Not Found")
                continue
            print("GPU instances:\n GPU   Name             Profile  Instance   Placement\n"
                  "                        ID       ID       Start:Size")
            for gid, prof in gpu_instances(h):
                name = prof.name.decode() if isinstance(prof.name, bytes) else prof.name
                start = gis[gid - 1].partition(":")[2]
                print(f"  {i}  {name.replace('MIG ', ''):<16} {prof.id:>3}     {gid:>3}"
                      f"         {start}:{prof.sliceCount}")
        elif "-cgi" in args:
            by_key = {}
            for p in profs:
                name = (p.name.decode() if isinstance(p.name, bytes) else p.name)
                by_key[name.replace("MIG ", "")] = p
                by_key[str(p.id)] = p
            used = sum(by_key[g.partition(":")[0]].sliceCount for g in gis
                       if g.partition(":")[0] in by_key)
            for want in opt(args, "-cgi").split(","):
                p = by_key.get(want.strip())
                if p is None:
                    fail(f"Unable to create a GPU instance on GPU {i} using profile {want}: "
                         "Invalid Argument", 2)
                if used + p.sliceCount > 7:
                    fail(f"Unable to create a GPU instance on GPU {i} using profile {want}: "
                         "Insufficient Resources", 2)
                gis.append(f"{p.id}:{used}")
                used += p.sliceCount
                name = (p.name.decode() if isinstance(p.name, bytes) else p.name)
                print(f"Successfully created GPU instance ID {len(gis):2d} on GPU {i:2d} using "
                      f"profile {name} (ID {p.id:2d})")
                if "-C" in args:
                    print(f"Successfully created compute instance ID  0 on GPU {i:2d} GPU "
                          f"instance ID {len(gis):2d} using profile {name} (ID  0)")
            write_state({f"gpu{i}.mig.gi": ",".join(gis)})
        elif "-dgi" in args:
            for gid in range(1, len(gis) + 1):
                print(f"Successfully destroyed GPU instance ID {gid:2d} from GPU {i:2d}")
            write_state({f"gpu{i}.mig.gi": ""})
        elif "-dci" in args:
            for gid in range(1, len(gis) + 1):
                print(f"Successfully destroyed compute instance ID  0 from GPU {i:2d} GPU "
                      f"instance ID {gid:2d}")


def nvlink_status() -> None:
    """`nvidia-smi nvlink -s`: a line per link, `<inactive>` for a link that is down."""
    for i, h in enumerate(handles()):
        print(f"GPU {i}: {n.nvmlDeviceGetName(h)} (UUID: {n.nvmlDeviceGetUUID(h)})")
        for link in range(64):
            try:
                up = n.nvmlDeviceGetNvLinkState(h, link)
            except n.NVMLError:
                break
            print(f"\t Link {link}: {'26.562 GB/s' if up else '<inactive>'}")


def main(args: list[str]) -> None:
    init()
    if settings(args):
        return
    if args[:1] == ["mig"]:
        mig(args)
    elif args[:2] == ["nvlink", "-s"]:
        nvlink_status()
    elif args[:2] == ["-q", "-x"] or args[:1] == ["-x"]:
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
