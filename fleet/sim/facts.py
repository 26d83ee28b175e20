"""What a probe of a simulated host prints: the same JSON shape as `fleet/probe/hostprobe.py`.

Built only when a host is probed (a fleet of 10,000 hosts keeps a few slots per host, not 10,000
documents). The kernel log is rendered as real `NVRM: Xid` lines and parsed by the probe's own
parser, so checks see exactly what they would see from a host.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fleet.domain.matrix.models import Release
from fleet.domain.pinning import UNATTENDED_PATH, unattended_blacklist, with_dnf_automatic_guard
from fleet.probe.hostprobe import parse_kernel_log
from fleet.sim.model import GpuProfile

XID_TEXT: dict[int, str] = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    31: "pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS "
        "GPCCLIENT_T1_0 faulted @ 0x7f1a_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
    48: "pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on "
        "GPU in the framebuffer at partition 6, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "pid=0, GPU has fallen off the bus.",
    94: "pid=4242, name=python3, Contained: SM (0x1). RST: No, D-RST: No",
    95: "pid=4242, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
         "(GSP_RM_CONTROL) (0x20801702 0x4).",
}


def digest(*parts: object) -> bytes:
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).digest()


def boot_id(seed: int, host: str, boots: int) -> str:
    return str(uuid.UUID(bytes=digest("boot", seed, host, boots)))


def xid_line(when: datetime, host: str, uptime: float, pci: str, xid: int) -> str:
    short = pci[5:12] if len(pci) >= 12 else pci  # "0000:18:00.0" -> "18:00.0"; NVRM drops .fn
    bus = "0000:" + short.rsplit(".", 1)[0]
    text = XID_TEXT.get(xid, f"pid=4242, name=python3, Xid {xid} event")
    stamp = f"{when:%b} {when.day:2d} {when:%H:%M:%S}"
    return f"{stamp} {host} kernel: [{uptime:12.6f}] NVRM: Xid (PCI:{bus}): {xid}, {text}"


def distro_version(upstream: str, os_family: str) -> str:
    return f"{upstream}-1" if os_family == "debian" else f"{upstream}-1.el9"


def _err(reason: str, detail: str) -> dict[str, str]:
    return {"error": reason, "detail": detail}


def _gpu(profile: GpuProfile, seed: int, host: str, host_index: int, i: int, *,
         ecc_volatile: int, ecc_aggregate: int, dbe: bool) -> dict[str, Any]:
    d = digest("gpu", seed, host, i)
    temp = 29 + d[0] % 9
    return {
        "index": i,
        "name": profile.name,
        "uuid": "GPU-" + str(uuid.UUID(bytes=d)),
        "serial": str(1650000000000 + (host_index * 16 + i) % 10**12),
        "minor_number": i,
        "pci_bus_id": profile.bus_ids[i % len(profile.bus_ids)],
        "pci_device_id": profile.pci_device_id,
        "pcie_gen_current": profile.pcie_gen,
        "pcie_gen_max": profile.pcie_gen,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "pcie_replay_counter": 0,
        "clock_graphics_mhz": 345,
        "clock_sm_mhz": 345,
        "clock_mem_mhz": profile.clock_max_mem_mhz,
        "clock_max_graphics_mhz": profile.clock_max_sm_mhz,
        "clock_max_sm_mhz": profile.clock_max_sm_mhz,
        "clock_max_mem_mhz": profile.clock_max_mem_mhz,
        "clock_event_reasons": ["gpu_idle"],
        "clock_event_reasons_mask": 1,
        "temperature_c": temp,
        "power_draw_w": round(profile.power_limit_w * 0.1 + d[1] % 20, 1),
        "power_limit_w": profile.power_limit_w,
        "ecc_mode_current": True,
        "ecc_mode_pending": True,
        "ecc_volatile_corrected": ecc_volatile,
        "ecc_volatile_uncorrected": 1 if dbe else 0,
        "ecc_aggregate_corrected": ecc_aggregate,
        "ecc_aggregate_uncorrected": 1 if dbe else 0,
        "ecc_sram_threshold_exceeded": False,
        # Ampere and later retire no pages: they remap rows (NVML answers NOT_SUPPORTED).
        "retired_pages_sbe": _err("not_supported", "nvmlDeviceGetRetiredPages"),
        "retired_pages_dbe": _err("not_supported", "nvmlDeviceGetRetiredPages"),
        "retired_pages_pending": _err("not_supported", "nvmlDeviceGetRetiredPagesPendingStatus"),
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 1 if dbe else 0,
        "remapped_rows_pending": dbe,
        "remapped_rows_failure": False,
        "remap_histogram": {"max": profile.remap_banks - (1 if dbe else 0), "high": 1 if dbe else 0,
                            "partial": 0, "low": 0, "none": 0},
        "mig_mode_current": False,
        "mig_mode_pending": False,
        "persistence_mode": True,
        "recovery_action": None,
    }


KERNELS = {"debian": ("5.15.0-119-generic", "6.8.0-49-generic"),
           "rhel": ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64")}
"""Per OS family: the kernel the hosts run, and the newer one `kernel_without_module` installs
(on Ubuntu 22.04, the HWE kernel an unattended upgrade brings)."""

KERNEL_PACKAGES = {
    "debian": ("linux-generic", "linux-headers-5.15.0-119-generic", "linux-headers-generic",
               "linux-image-5.15.0-119-generic", "linux-image-generic"),
    "rhel": ("kernel", "kernel-core", "kernel-devel", "kernel-modules"),
}
"""The kernel's installed packages per OS family (what a pool's kernel hold holds)."""


def boot_facts(os_family: str, driver: str | None, flavor: str | None = "open", *,
               new_kernel: bool = False, booted_new: bool = False,
               secure_boot: bool = False) -> dict[str, Any]:
    """The probe's `boot` section: the default entry is the running kernel (with the installed
    `driver`'s DKMS module, unsigned), or, with `new_kernel`, a newer kernel without headers or
    module. Also the test doubles' healthy boot facts."""
    old, new = KERNELS["rhel" if os_family == "rhel" else "debian"]
    running = new if booted_new else old
    kernels = [old, new] if new_kernel else [old]

    def mod(k: str) -> dict[str, Any] | None:
        if driver is None or k == new:
            return None
        return {"filename": f"/lib/modules/{k}/updates/dkms/nvidia.ko",
                "version": driver, "vermagic": f"{k} SMP mod_unload modversions",
                "license": "Dual MIT/GPL" if flavor == "open" else "NVIDIA",
                "flavor": flavor, "signer": None, "sig_key": None,
                "sig_hashalgo": None}
    return {
        "running_kernel": running, "installed_kernels": kernels,
        "next_kernel": kernels[-1],
        "next_source": "grubby" if os_family == "rhel" else "grubenv saved_entry",
        "next_entry": None,
        "kernels": [{"version": k, "module": mod(k), "headers": k != new} for k in kernels],
        "dkms": [{"module": "nvidia", "version": driver, "kernel": old,
                  "arch": "x86_64", "state": "installed"}] if driver is not None else [],
        "secure_boot": secure_boot, "secure_boot_source": "mokutil",
        "enrolled_keys": [], "kernel_keys": [],
        "nouveau_blacklisted": True, "nouveau_blacklist": ["/etc/modprobe.d/nvidia.conf"],
    }


def host_facts(
    *,
    seed: int,
    host: str,
    host_index: int,
    profile: GpuProfile,
    gpu_count: int,
    os_family: str,
    now: datetime,
    boot_at: datetime,
    boots: int,
    installed: Sequence[tuple[str, str, bool]],
    userspace: Release | None,
    loaded: Release | None,
    log_lines: Sequence[str],
    since: str | None,
    lost_gpu: int | None,
    dbe_gpu: int | None,
    ecc_gpu: int,
    ecc_volatile: int,
    ecc_aggregate: int,
    boot: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One probe document. `userspace` is the release whose packages are installed, `loaded` the
    one whose kernel module is loaded; they differ between an apply and the reboot after it."""
    bid = boot_id(seed, host, boots)
    uptime = max(0.0, (now - boot_at).total_seconds())
    deb = os_family == "debian"
    facts: dict[str, Any] = {
        "schema": 1,
        "collected_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "identity": {
            "hostname": host,
            "os": "Ubuntu 22.04.4 LTS" if deb else "Rocky Linux 9.4 (Blue Onyx)",
            "kernel": "5.15.0-119-generic" if deb else "5.14.0-427.13.1.el9_4.x86_64",
            "arch": "x86_64",
            "boot_id": bid,
            "uptime_s": round(uptime, 1),
        },
    }
    packages = {
        "manager": "dpkg" if deb else "rpm",
        "items": [{"name": n, "version": v, "held": h} for n, v, h in installed],
    }
    toolkits = []
    if userspace is not None:
        mm = ".".join(userspace.cuda.split(".")[:2])
        toolkits.append({"path": f"/usr/local/cuda-{mm}", "version": userspace.cuda})
    if loaded is not None:
        kmod: Any = loaded.driver.version
        flavor: Any = loaded.driver.flavor
    else:
        kmod, flavor = _err("not_found", "/proc/driver/nvidia/version"), None
    gpus: list[dict[str, Any]] = []
    nvml_err: dict[str, str] | None
    smi_err: dict[str, str] | None
    if userspace is None:
        nvml_err = _err("library_not_found", "NVML Shared Library Not Found")
        smi_err = _err("not_found", "nvidia-smi: command not found")
    elif loaded is None:
        nvml_err = _err("driver_not_loaded", "nvmlInit: Driver Not Loaded")
        smi_err = _err("nvidia_smi_failed", "NVIDIA-SMI has failed because it couldn't "
                       "communicate with the NVIDIA driver.")
    elif loaded.driver.version != userspace.driver.version:
        nvml_err = _err("driver_library_mismatch",
                        "nvmlInit: RM has detected an NVML/RM version mismatch.")
        smi_err = _err("nvidia_smi_failed",
                       "Failed to initialize NVML: Driver/library version mismatch")
    else:
        nvml_err = smi_err = None
    if nvml_err is None and userspace is not None:
        facts["source"] = "nvml"
        facts["source_errors"] = {}
        mm = ".".join(userspace.cuda.split(".")[:2])
        library: Any = userspace.driver.version
        cuda_api: Any = mm
        nvml: Any = "12." + userspace.driver.version
        for i in range(gpu_count):
            if i == lost_gpu:
                gpus.append({"index": i, "handle": _err(
                    "gpu_is_lost", "nvmlDeviceGetHandleByIndex: GPU is lost")})
                continue
            gpus.append(_gpu(profile, seed, host, host_index, i,
                             ecc_volatile=ecc_volatile if i == ecc_gpu else 0,
                             ecc_aggregate=ecc_aggregate if i == ecc_gpu else 0,
                             dbe=i == dbe_gpu))
        gpu_total: Any = gpu_count
    else:
        facts["source"] = "none"
        facts["source_errors"] = {"nvml": nvml_err, "nvidia_smi": smi_err}
        library = cuda_api = _err("not_available", "no NVML and no nvidia-smi")
        nvml = None
        gpu_total = None
    facts["versions"] = {
        "driver_library": library,
        "driver_kernel_module": kmod,
        "kernel_module_flavor": flavor,
        "cuda_driver_api": cuda_api,
        "nvml_library": nvml,
        "packages": packages,
        "toolkits": toolkits,
    }
    facts["gpus"] = gpus
    facts["gpu_count"] = gpu_total
    prefix = f"sim:{bid}:"
    start = 0
    if since and since.startswith(prefix):
        start = min(len(log_lines), int(since[len(prefix):] or 0))
    facts["kernel_log"] = {
        "source": "journal",
        "cursor": f"{prefix}{len(log_lines)}",
        "since": since,
        "events": parse_kernel_log("\n".join(log_lines[start:])) if log_lines[start:] else [],
        "truncated": 0,
    }
    zero = {"correctable": {"TOTAL_ERR_COR": 0}, "nonfatal": {"TOTAL_ERR_NONFATAL": 0},
            "fatal": {"TOTAL_ERR_FATAL": 0}}
    facts["aer"] = [
        {"pci": profile.bus_ids[i % len(profile.bus_ids)], "role": "device",
         "pci_class": "0x030200", **zero}
        for i in range(gpu_count)
    ] if loaded is not None else []
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    nodes += [f"/dev/nvidia{i}" for i in range(gpu_count)]
    facts["device_nodes"] = [
        {"path": p, "mode": "0666", "char_device": True} for p in sorted(nodes)
    ] if loaded is not None else []
    ctk = userspace.companions.container_toolkit if userspace is not None else None
    facts["container_runtime"] = {
        "docker_installed": False, "containerd_installed": True, "nvidia_ctk": ctk,
        "nvidia_container_runtime": ctk, "cdi_specs": ["/etc/cdi/nvidia.yaml"] if ctk else [],
        "configured": ctk is not None,
    }
    facts["frameworks"] = []
    facts["upgrade_guard"] = upgrade_guard(userspace, os_family)
    if boot is not None:
        facts["boot"] = boot
    facts["probe_cpu_ms"] = 0.0
    return facts


def fallen_off_bus_line(when: datetime, host: str, uptime: float, pci: str) -> str:
    stamp = f"{when:%b} {when.day:2d} {when:%H:%M:%S}"
    return f"{stamp} {host} kernel: [{uptime:12.6f}] NVRM: GPU {pci}: GPU has fallen off the bus."


def upgrade_guard(release: Release | None, os_family: str) -> dict[str, Any]:
    """What the probe's `probe_upgrade_guard` reads on a host the pin deploy left on `release`:
    unattended-upgrades' blacklist (Debian) or dnf-automatic's exclude guard (RHEL)."""
    if os_family == "debian":
        return {"apt_conf": {} if release is None else {
            UNATTENDED_PATH: unattended_blacklist(release.packages("debian"))}}
    return {"dnf_automatic": None if release is None else with_dnf_automatic_guard(
        None, release.packages("rhel"))}
