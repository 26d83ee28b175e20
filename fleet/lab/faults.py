"""Faults the lab can inject, as pure data: a spec string -> the effects on a host.

A fault spec is `NAME[:key=value,...]`, for example `ecc-corrected:gpu=0,count=10`,
`xid:gpu=2,code=79`, `pcie-downtrain:gpu=1,gen=3,width=8`. A bare `key=value` sets a fake-NVML state
key directly (`gpu0.temp=95`). `effects()` says what changes: NVML state keys (set or incremented),
kernel log lines, sysfs AER counters, host files and lab flags; `fleet.lab.hosts` applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from fleet.errors import BadInput, Problem
from fleet.lab import boot, gpustate, serving
from fleet.lab.model import PROFILES, HostSpec, gpu_bdf, upstream_bdf

AER_CORRECTABLE = (
    "RxErr",
    "BadTLP",
    "BadDLLP",
    "Rollover",
    "Timeout",
    "NonFatalErr",
    "CorrIntErr",
    "HeaderOF",
)
AER_UNCORRECTABLE = (
    "Undefined",
    "DLP",
    "SDES",
    "TLP",
    "FCP",
    "CmpltTO",
    "CmpltAbrt",
    "UnxCmplt",
    "RxOF",
    "MalfTLP",
    "ECRC",
    "UnsupReq",
    "ACSViol",
    "UncorrIntErr",
    "BlockedTLP",
    "AtomicOpBlocked",
    "TLPBlockedErr",
    "PoisonTLPBlocked",
)
AER_FILES = {
    "aer_dev_correctable": (AER_CORRECTABLE, "TOTAL_ERR_COR"),
    "aer_dev_nonfatal": (AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL"),
    "aer_dev_fatal": (AER_UNCORRECTABLE, "TOTAL_ERR_FATAL"),
}

XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
    "0x7f2a_3c000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
    "physAddr 0x12bac1c3e0 partition 2, subpartition 1.",
    61: "Internal micro-controller breakpoint/warning (GPU-1)",
    62: "Internal micro-controller halt",
    63: "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000012bac1c3e0), no spare rows left.",
    74: "NVLink: fatal error detected on link 4(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: SM (0x1). RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
}

# name -> (allowed params with defaults, help)
FAULTS: dict[str, tuple[dict[str, str], str]] = {
    "ecc-corrected": ({"gpu": "0", "count": "10"}, "bump corrected (single-bit) ECC counters"),
    "ecc-uncorrected": (
        {"gpu": "0", "count": "1"},
        "bump uncorrected ECC counters, Xid 48 and 63, a pending row remap",
    ),
    "ecc-growth": ({"gpu": "0", "per_hour": "120"}, "corrected ECC counters grow steadily"),
    "remap-pending": ({"gpu": "0"}, "a row remap pending (needs a GPU reset), Xid 63"),
    "remap-failure": ({"gpu": "0"}, "row remapping failed (no spare rows), Xid 64"),
    "pcie-downtrain": ({"gpu": "0", "gen": "3", "width": "8"}, "PCIe link trained below max"),
    "thermal": ({"gpu": "0", "temp": "92"}, "thermal slowdown: temperature up, clocks down"),
    "power": ({"gpu": "0"}, "power capping: usage at the limit, SW power cap reason"),
    "xid": ({"gpu": "0", "code": "13"}, "an Xid line in the kernel log"),
    "aer-corrected": ({"gpu": "0", "count": "25"}, "a burst of corrected PCIe AER errors"),
    "aer-fatal": ({"gpu": "0"}, "a fatal (uncorrectable) PCIe AER error"),
    "gpu-lost": ({"gpu": "0"}, "GPU fell off the bus: Xid 79, every NVML call on it fails"),
    "driver-not-loaded": ({}, "no kernel module: nvmlInit fails, /proc/driver/nvidia is gone"),
    "link-down": ({}, "host unreachable: its network link goes down (netns mode)"),
    "reboot-hang": ({}, "the next reboot never comes back"),
    "broken-package": ({}, "installing a driver package fails in its postinst (apt exits 100)"),
    "operator-driver": ({}, "the GPU Operator's driver container's root and marks under "
                        "/run/nvidia (IS_HOST_DRIVER=false); a reboot or `lab reset` clears"),
    "slow-bench": ({"factor": "0.7"}, "benchmarks and the model server run at this factor"),
    # for `fleet diagnose` (docs/diagnose.md): what the fake nvidia-smi's dmon/pmon/topo show
    "gpu-leak": (
        {"gpu": "0", "pid": "4242", "mib": "2048", "rate": "64"},
        "a compute process on the GPU whose memory grows by `rate` MiB/s (a leak), 60 % busy",
    ),
    "far-numa": (
        {"gpu": "0", "pid": "1", "cpus": "1", "node": "1"},
        "the GPU's CPU affinity becomes `cpus` (NUMA `node`) and `pid` uses the GPU: a process "
        "running on any other CPU is on the far node",
    ),
    "busy": ({"gpu": "0", "util": "90", "mem": "40"}, "GPU utilization and memory-controller %"),
    "slow-serving": serving.SLOW_SERVING,
    "cpu-fallback": (
        {"branch": "0", "factor": "0.1"},
        "the workload (model server, fleet-lab-bench) computes on the CPU, as a runtime that lost "
        "its CUDA provider: `factor` times the speed, GPUs idle; only on driver `branch` (0: any)",
    ),
    "kernel-without-module": (
        {},
        "a newer kernel, without headers (so no driver install builds its nvidia module), "
        "becomes GRUB's default entry: the pre-reboot gate refuses; `fleet lab reset` removes it",
    ),
    "secure-boot-unsigned": (
        {}, "Secure Boot on; the lab's nvidia module is unsigned, so it would not load",
    ),
    "stale-cdi": (
        {"version": "535.183.01"},
        "/etc/cdi/nvidia.yaml generated for driver `version` (its libraries, not the installed "
        "ones): containers asking for nvidia.com/gpu would fail; `fleet lab reset` removes it",
    ),
    # node state (issue 23): settings a person or a reboot left wrong, firmware, Fabric Manager
    "ecc-off": ({"gpu": "0"}, "ECC switched off (and the reboot that applies it done)"),
    "power-cap": ({"gpu": "0", "watts": "0"},
                  "power limit lowered to `watts` (0: the model's minimum), as `nvidia-smi -pl`"),
    "clocks-locked": ({"gpu": "0", "min": "210", "max": "900"},
                      "graphics clocks locked to [min, max] MHz, as `nvidia-smi -lgc`"),
    "compute-exclusive": ({"gpu": "0"}, "compute mode EXCLUSIVE_PROCESS, as `nvidia-smi -c 3`"),
    "persistence-off": ({"gpu": "0"}, "persistence mode off, as `nvidia-smi -pm 0`"),
    "mig-layout-lost": ({"gpu": "0"},
                        "MIG mode on, no GPU instances: a reboot without the boot unit"),
    "vbios-mismatch": ({"gpu": "0", "version": "96.00.74.00.0B"},
                       "this GPU runs another VBIOS than its siblings"),
    "mig-parted": ({}, "NVIDIA's nvidia-mig-parted installed (the lab's fake, "
                       f"{gpustate.MIG_PARTED_BIN}): fleet applies MIG layouts with it"),
    "fm-mismatch": ({"version": "570.133.20"},
                    "Fabric Manager `version` runs (not the driver's): it refused the driver, "
                    "the GPUs' fabric registration never completes"),
}

_KEY_RE = re.compile(r"^[A-Za-z0-9_.*]{1,80}$")
_VAL_RE = re.compile(r"^[A-Za-z0-9_.:+ /-]{0,120}$")
_INT_PARAMS = {"gpu", "count", "per_hour", "gen", "width", "temp", "code", "pid", "mib", "rate",
               "node", "util", "mem", "branch", "watts", "min", "max"}
_CPUS_RE = re.compile(r"^\d{1,4}(?:-\d{1,4})?$")


@dataclass(frozen=True)
class Fault:
    name: str
    params: dict[str, str]

    def int(self, key: str) -> int:
        return int(self.params[key])


@dataclass
class Effects:
    set: dict[str, str] = field(default_factory=dict)
    add: dict[str, int] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)  # kernel messages, without the syslog prefix
    aer: list[tuple[str, str, str, int]] = field(default_factory=list)  # bdf, file, field, n
    flags: dict[str, bool] = field(default_factory=dict)
    sysfs: dict[tuple[str, str], str] = field(default_factory=dict)  # (bdf, file) -> content
    files: dict[str, str] = field(default_factory=dict)  # host path (in FAULT_FILES) -> content

    def merge(self, other: Effects) -> None:
        self.set.update(other.set)
        for k, v in other.add.items():
            self.add[k] = self.add.get(k, 0) + v
        self.log += other.log
        self.aer += other.aer
        self.flags.update(other.flags)
        self.sysfs.update(other.sysfs)
        self.files.update(other.files)


def parse(specs: list[str], gpu_count: int | None = None) -> list[Fault]:
    """Parse fault specs; every bad one is reported (BadInput), not only the first."""
    faults: list[Fault] = []
    problems: list[Problem] = []
    for i, spec in enumerate(specs):
        where = f"FAULT[{i}]"
        name, _, rest = spec.partition(":")
        if name not in FAULTS and "=" in name and not rest:
            key, _, val = spec.partition("=")
            if not _KEY_RE.fullmatch(key) or not _VAL_RE.fullmatch(val):
                problems.append(Problem(None, None, where, f"bad state key or value in {spec!r}"))
            else:
                faults.append(Fault("raw", {key: val}))
            continue
        if name not in FAULTS:
            problems.append(
                Problem(
                    None,
                    None,
                    where,
                    f"unknown fault {name!r}; known: {', '.join(FAULTS)} or a raw KEY=VALUE",
                )
            )
            continue
        allowed, _ = FAULTS[name]
        params = dict(allowed)
        bad = False
        for item in filter(None, rest.split(",")):
            k, eq, v = item.partition("=")
            if not eq or k not in allowed:
                problems.append(
                    Problem(
                        None,
                        None,
                        where,
                        f"{name}: unknown parameter {item!r}"
                        f" (takes {', '.join(allowed) or 'none'})",
                    )
                )
                bad = True
                continue
            params[k] = v
        for k, v in params.items():
            if k in _INT_PARAMS and not (v.isdigit() and len(v) <= 9):
                problems.append(Problem(None, None, where, f"{name}: {k} must be a number: {v!r}"))
                bad = True
            elif k == "version" and name == "vbios-mismatch":
                if not re.fullmatch(r"[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){4}", v):
                    problems.append(Problem(None, None, where, f"{name}: bad VBIOS {v!r}"))
                    bad = True
            elif k == "version" and not re.fullmatch(r"\d{3}\.\d{1,3}(?:\.\d{1,3})?", v):
                problems.append(Problem(None, None, where, f"{name}: bad driver version {v!r}"))
                bad = True
            elif k == "model" and (why := serving.check_model(v)):
                problems.append(Problem(None, None, where, f"{name}: {why}"))
                bad = True
            elif k == "cpus" and not _CPUS_RE.fullmatch(v):
                problems.append(Problem(None, None, where, f"{name}: cpus must be N or N-M: {v!r}"))
                bad = True
            elif k == "factor":
                try:
                    if not 0 < float(v) <= 10:
                        raise ValueError
                except ValueError:
                    problems.append(
                        Problem(None, None, where, f"{name}: factor must be in (0, 10]: {v!r}")
                    )
                    bad = True
        if (
            not bad
            and gpu_count is not None
            and "gpu" in params
            and int(params["gpu"]) >= gpu_count
        ):
            problems.append(
                Problem(
                    None,
                    None,
                    where,
                    f"{name}: gpu {params['gpu']} does not exist (host has {gpu_count})",
                )
            )
            bad = True
        if not bad:
            faults.append(Fault(name, params))
    if problems:
        raise BadInput(problems)
    return faults


def _xid(gpu: int, code: int, text: str | None = None) -> str:
    bus = gpu_bdf(gpu)[:-2]  # 0000:18:00
    return (
        f"NVRM: Xid (PCI:{bus}): {code}, pid='<unknown>', name=<unknown>, "
        f"{text or XID_TEXT.get(code, 'Unknown error')}"
    )


def effects(fault: Fault, host: HostSpec) -> Effects:
    e = Effects()
    p = fault.params
    g = int(p.get("gpu", "0"))
    pre = f"gpu{g}."
    prof = PROFILES[host.gpu_model]
    dev_id = f"10de:{prof.device_id >> 16:04x}"
    name = fault.name
    if name == "raw":
        e.set.update(p)
    elif name == "ecc-corrected":
        n = fault.int("count")
        e.add.update({pre + "ecc.volatile.sbe": n, pre + "ecc.aggregate.sbe": n})
    elif name == "ecc-uncorrected":
        n = fault.int("count")
        e.add.update(
            {
                pre + "ecc.volatile.dbe": n,
                pre + "ecc.aggregate.dbe": n,
                pre + "remapped.uncorrectable": n,
            }
        )
        e.set[pre + "remapped.pending"] = "1"
        e.log += [_xid(g, 48), _xid(g, 63)]
    elif name == "ecc-growth":
        e.set[pre + "ecc.volatile.sbe.per_hour"] = p["per_hour"]
        e.set[pre + "ecc.aggregate.sbe.per_hour"] = p["per_hour"]
        e.set[pre + "ecc.growth_since"] = "{now}"
    elif name == "remap-pending":
        e.set[pre + "remapped.pending"] = "1"
        e.add[pre + "remapped.uncorrectable"] = 1
        e.log.append(_xid(g, 63))
    elif name == "remap-failure":
        e.set[pre + "remapped.failure"] = "1"
        e.log.append(_xid(g, 64))
    elif name == "pcie-downtrain":
        e.set.update({pre + "pcie.gen.curr": p["gen"], pre + "pcie.width.curr": p["width"]})
        speed = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0"}.get(int(p["gen"]), "8.0")
        e.sysfs[(gpu_bdf(g), "current_link_speed")] = f"{speed} GT/s PCIe\n"
        e.sysfs[(gpu_bdf(g), "current_link_width")] = f"{p['width']}\n"
    elif name == "thermal":
        e.set.update(
            {
                pre + "temp": p["temp"],
                pre + "throttle_reasons": "0x68",
                pre + "clock.sm": str(prof.sm_max // 2),
                pre + "clock.graphics": str(prof.sm_max // 2),
            }
        )
    elif name == "power":
        e.set.update(
            {
                pre + "power.usage_mw": str(prof.power_limit_mw),
                pre + "throttle_reasons": "0x4",
                pre + "clock.sm": str(prof.sm_max * 3 // 4),
                pre + "clock.graphics": str(prof.sm_max * 3 // 4),
            }
        )
    elif name == "xid":
        e.log.append(_xid(g, fault.int("code")))
    elif name == "aer-corrected":
        n = fault.int("count")
        up = upstream_bdf(g)
        for bdf in (gpu_bdf(g), up):
            e.aer += [
                (bdf, "aer_dev_correctable", "RxErr", n),
                (bdf, "aer_dev_correctable", "TOTAL_ERR_COR", n),
            ]
        e.log += [
            f"pcieport {up}: AER: Multiple Correctable error message received from {gpu_bdf(g)}",
            f"nvidia {gpu_bdf(g)}: PCIe Bus Error: severity=Correctable, type=Physical Layer, "
            "(Receiver ID)",
            f"nvidia {gpu_bdf(g)}:   device [{dev_id}] error status/mask=00000001/0000a000",
            f"nvidia {gpu_bdf(g)}:    [ 0] RxErr                  (First)",
        ]
    elif name == "aer-fatal":
        up = upstream_bdf(g)
        e.aer += [
            (gpu_bdf(g), "aer_dev_fatal", "CmpltTO", 1),
            (gpu_bdf(g), "aer_dev_fatal", "TOTAL_ERR_FATAL", 1),
        ]
        e.log += [
            f"pcieport {up}: AER: Uncorrectable (Fatal) error message received from {gpu_bdf(g)}",
            f"nvidia {gpu_bdf(g)}: PCIe Bus Error: severity=Uncorrectable (Fatal), "
            "type=Transaction Layer, (Requester ID)",
            f"nvidia {gpu_bdf(g)}:   device [{dev_id}] error status/mask=00004000/00000000",
            f"nvidia {gpu_bdf(g)}:    [14] CmpltTO                (First)",
            f"nvidia {gpu_bdf(g)}: AER: can't recover (no error_detected callback)",
            f"pcieport {up}: AER: device recovery failed",
        ]
    elif name == "gpu-lost":
        e.set[pre + "error.*"] = "15"
        e.log += [
            f"NVRM: GPU at PCI:{gpu_bdf(g)[:-2]}: GPU-{host.index:08x}-0000-4000-8000-{g:012x}",
            _xid(g, 79),
            f"NVRM: GPU {gpu_bdf(g)}: GPU has fallen off the bus.",
        ]
    elif name in ("driver-not-loaded", "link-down", "reboot-hang", "broken-package",
                  "operator-driver"):
        e.flags[name] = True
    elif name == "slow-bench":
        e.set["perf.slowdown"] = p["factor"]
    elif name == "gpu-leak":
        e.set.update({pre + "procs": f"{p['pid']}:{p['mib']}:{p['rate']}",
                      pre + "procs_since": "{now}", pre + "util.gpu": "60"})
    elif name == "far-numa":
        e.set.update({pre + "cpus": p["cpus"], pre + "numa": p["node"],
                      pre + "procs": f"{p['pid']}:1024", pre + "util.gpu": "60"})
    elif name == "busy":
        e.set.update({pre + "util.gpu": p["util"], pre + "util.memory": p["mem"]})
    elif name == "cpu-fallback":
        e.set.update(cpu_fallback(p))
    elif name == "slow-serving":
        e.set.update(serving.slow_serving_state(p))
    elif name == "stale-cdi":
        e.files[CDI_SPEC] = cdi_spec(p["version"], prof.count)
    elif name in NODE_FAULTS:
        node_effects(e, fault, host)
    elif name in ("kernel-without-module", "secure-boot-unsigned"):
        e.files.update(boot.fault_files(name))
    return e


CDI_SPEC = "/etc/cdi/nvidia.yaml"
FM_VERSION = gpustate.FM_VERSION_FILE
# host files faults write; `lab reset` removes them
FAULT_FILES = (CDI_SPEC, FM_VERSION, gpustate.MIG_PARTED_BIN, *boot.FAULT_FILES)


def cdi_spec(version: str, gpus: int) -> str:
    """A CDI spec as `nvidia-ctk cdi generate` lays it out (sorted keys, nvidia.com/gpu devices by
    index and `all`), naming the lab driver package's files for `version`: the library
    (libnvidia-ml.so.VERSION, see fleet/lab/repo.py) and nvidia-smi. Generated for the installed
    version it is a current spec; for another, the stale one a driver upgrade leaves behind."""
    lib = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}"
    mounts = "".join(
        f"  - containerPath: {p}\n    hostPath: {p}\n    options:\n    - ro\n    - nosuid\n"
        "    - nodev\n    - bind\n"
        for p in (lib, "/usr/bin/nvidia-smi")
    )
    devices = "".join(
        f"- containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{i}\n  name: \"{i}\"\n"
        for i in range(gpus)
    )
    devices += "- containerEdits:\n    deviceNodes:\n" + "".join(
        f"    - path: /dev/nvidia{i}\n" for i in range(gpus)
    ) + "  name: all\n"
    return (
        "---\ncdiVersion: 0.5.0\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-uvm\n"
        "  - path: /dev/nvidiactl\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  hooks:\n"
        "  - args:\n    - nvidia-cdi-hook\n    - enable-cuda-compat\n"
        f"    - --host-driver-version={version}\n    hookName: createContainer\n"
        "    path: /usr/bin/nvidia-cdi-hook\n  mounts:\n"
        f"{mounts}devices:\n{devices}kind: nvidia.com/gpu\n"
    )


def syslog_line(when: datetime, hostname: str, uptime: float, message: str) -> str:
    """A kernel line as rsyslog writes /var/log/kern.log (traditional format)."""
    secs = max(0.0, uptime)
    whole = int(secs)
    micro = int(round((secs - whole) * 1e6)) % 1000000
    stamp = f"{when.strftime('%b')} {when.day:2d} {when.strftime('%H:%M:%S')}"
    return f"{stamp} {hostname} kernel: [{whole:5d}.{micro:06d}] {message}"


def aer_file(counts: dict[str, int], kind: str) -> str:
    fields, total = AER_FILES[kind]
    lines = [f"{f} {counts.get(f, 0)}" for f in fields]
    lines.append(f"{total} {counts.get(total, 0)}")
    return "\n".join(lines) + "\n"


def parse_aer_file(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def cpu_fallback(p: dict[str, str]) -> dict[str, str]:
    """State keys the lab workload reads (`cpu_fallback` in fleet/lab/perf.py)."""
    branch = str(int(p["branch"]))
    return {"perf.cpu_fallback": "any" if branch == "0" else branch,
            "perf.cpu_fallback_factor": p["factor"]}


NODE_FAULTS = ("ecc-off", "power-cap", "clocks-locked", "compute-exclusive", "persistence-off",
               "mig-layout-lost", "vbios-mismatch", "fm-mismatch", "mig-parted")


def node_effects(e: Effects, fault: Fault, host: HostSpec) -> None:
    """The fake-NVML keys (fleet/lab/gpustate.py) a node-state fault writes: per GPU, so a
    reboot resets exactly the ones a real reboot resets."""
    p, name = fault.params, fault.name
    pre = f"gpu{int(p.get('gpu', '0'))}."
    if name == "ecc-off":
        e.set.update({pre + "ecc.enabled": "0", pre + "ecc.pending": "0"})
    elif name == "power-cap":
        lo = gpustate.NODE_DEFAULTS[host.gpu_model].power_min_w
        watts = max(lo, fault.int("watts"))  # a real -pl refuses below the minimum
        e.set[pre + "power.limit_mw"] = str(watts * 1000)
    elif name == "clocks-locked":
        e.set.update({pre + "clock.locked.min": p["min"], pre + "clock.locked.max": p["max"]})
    elif name == "compute-exclusive":
        e.set[pre + "compute_mode"] = "3"
    elif name == "persistence-off":
        e.set[pre + "persistence"] = "0"
    elif name == "mig-layout-lost":
        e.set.update({pre + "mig.current": "1", pre + "mig.pending": "1", pre + "mig.gi": ""})
    elif name == "vbios-mismatch":
        e.set[pre + "vbios"] = p["version"]
    elif name == "mig-parted":
        e.files[gpustate.MIG_PARTED_BIN] = gpustate.mig_parted_script()
    elif name == "fm-mismatch":
        e.files[FM_VERSION] = p["version"] + "\n"
        if gpustate.NODE_DEFAULTS[host.gpu_model].fabric:
            e.set.update({"gpu*.fabric.state": "1", "gpu*.fabric.status": "0"})
