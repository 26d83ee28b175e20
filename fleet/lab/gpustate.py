"""The node state of the lab's fake GPUs: per-model defaults, and what a reboot resets. Pure.

A real GPU keeps two settings across a reboot, ECC mode and MIG mode (a pending change of
either takes effect then); it forgets persistence mode, compute mode, the power limit,
application and locked clocks, and every MIG GPU/compute instance
(`../shared/reference/node-state-anchors.md`; NVIDIA's nvidia-smi man page for `-e`, `-pl`,
`-ac`, `-lgc`, `-c`). The lab's driver package runs nvidia-persistenced, as NVIDIA's packages
do, so persistence comes back on at boot. The fake NVML reads these keys
(fleet/lab/nvml/fakenvml.c), the fake nvidia-smi writes them, `boot_reset` is what
`fleet.lab.hosts.prepare_boot` applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile as NVML lists it: NVML_GPU_INSTANCE_PROFILE_* index, the
    profile id nvidia-smi shows in `mig -lgip`, name, memory slices, instances at most."""

    index: int
    id: int
    name: str
    slices: int
    count: int
    memory_mb: int


# NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles" (A100 80GB and H100 80GB
# tables): profile names, ids and instance counts. Memory sizes are nominal (name x 1024 MB);
# NVML indices from nvml.h (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0 ... _1_SLICE_REV2 = 9).
_MIG_80GB = (
    MigProfile(0, 19, "1g.10gb", 1, 7, 10240),
    MigProfile(1, 14, "2g.20gb", 2, 3, 20480),
    MigProfile(2, 9, "3g.40gb", 3, 2, 40960),
    MigProfile(3, 5, "4g.40gb", 4, 1, 40960),
    MigProfile(4, 0, "7g.80gb", 7, 1, 81920),
    MigProfile(7, 20, "1g.10gb+me", 1, 1, 10240),
    MigProfile(9, 15, "1g.20gb", 1, 4, 20480),
)
MIG_SLICES = 7


@dataclass(frozen=True)
class NodeDefaults:
    """What a GPU of a model reports out of the box, each figure with its source."""

    vbios: str
    inforom_img: str
    inforom_oem: str
    inforom_ecc: str
    power_min_w: int
    power_max_w: int
    power_default_w: int
    app_graphics_mhz: int | None  # None: application clocks not supported (deprecated)
    app_mem_mhz: int | None
    nvlinks: int
    fabric: bool  # NVML reports a fabric state (Hopper and later on NVSwitch systems)
    nvswitches: int  # NVSwitch chips on the baseboard (/dev/nvidia-nvswitchN)
    mig: tuple[MigProfile, ...]
    source: str


NODE_DEFAULTS: dict[str, NodeDefaults] = {
    "H100": NodeDefaults(
        "96.00.99.00.01", "G520.0200.00.05", "2.1", "7.16", 200, 700, 700, 1980, 2619, 18,
        True, 4, _MIG_80GB,
        "tests/data/realdata/nvidia-smi-xml/nvidia-k8s-test-infra__qx-h100.xml (VBIOS, InfoROM, "
        "power limits, application clocks, fabric Completed/Success); 18 NVLink links: NVIDIA "
        "H100 Tensor Core GPU datasheet (NVLink 900 GB/s, 18 fourth-generation links); 4 NVSwitch "
        "chips: NVIDIA HGX H100 8-GPU baseboard",
    ),
    "A100": NodeDefaults(
        "92.00.45.00.03", "G506.0200.00.04", "2.0", "6.16", 100, 400, 400, 1095, 1593, 12,
        False, 6, _MIG_80GB,
        "tests/data/realdata/nvidia-smi-xml/nvidia-k8s-test-infra__qx-a100.xml (an "
        "A100-SXM4-40GB: VBIOS, InfoROM, power limits 100-400 W, 1095 MHz graphics application "
        "clock); 1593 MHz memory: the 80GB model's HBM2e clock; 12 NVLink links: NVIDIA A100 "
        "datasheet (NVLink 600 GB/s, third generation); 6 NVSwitch chips: NVIDIA HGX A100 8-GPU",
    ),
    "L40S": NodeDefaults(
        "95.02.66.00.15", "G133.0242.00.03", "2.1", "6.16", 100, 350, 350, None, None, 0,
        False, 0, (),
        "tests/data/realdata/nvidia-smi-xml/nvidia-k8s-test-infra__qx-l40s.xml (VBIOS, InfoROM, "
        "power limits; application clocks 'Requested functionality has been deprecated'); no "
        "NVLink and no MIG: NVIDIA L40S datasheet",
    ),
}

VOLATILE = (
    "persistence",
    "compute_mode",
    "power.limit_mw",
    "clock.app.graphics",
    "clock.app.mem",
    "clock.locked.min",
    "clock.locked.max",
    "mig.gi",
)
"""Per-GPU keys a reboot resets to the model's default (the key is dropped)."""


def mig_profiles_value(profiles: tuple[MigProfile, ...]) -> str:
    return ";".join(f"{p.index}:{p.id}:{p.name}:{p.slices}:{p.count}:{p.memory_mb}"
                    for p in profiles)


def state_lines(model: str) -> list[str]:
    """The fake-NVML keys of a model's defaults (gpu* lines: every GPU of the host); the
    power limits' default is GpuProfile.power_limit_mw (fleet.lab.model)."""
    d = NODE_DEFAULTS[model]
    lines = [
        f"gpu*.vbios={d.vbios}",
        f"gpu*.inforom.img={d.inforom_img}",
        f"gpu*.inforom.oem={d.inforom_oem}",
        f"gpu*.inforom.ecc={d.inforom_ecc}",
        "gpu*.inforom.pwr=N/A",
        f"gpu*.power.min_mw={d.power_min_w * 1000}",
        f"gpu*.power.max_mw={d.power_max_w * 1000}",
        f"gpu*.nvlink.count={d.nvlinks}",
        f"gpu*.fabric.state={3 if d.fabric else 0}",
        f"gpu*.mig.profiles={mig_profiles_value(d.mig)}",
    ]
    if d.app_graphics_mhz is None or d.app_mem_mhz is None:
        lines.append("gpu*.clock.app.supported=0")
    else:
        lines += [f"gpu*.clock.app.default.graphics={d.app_graphics_mhz}",
                  f"gpu*.clock.app.default.mem={d.app_mem_mhz}"]
    return lines


def boot_reset(kv: Mapping[str, str], gpus: int) -> tuple[dict[str, str], list[str]]:
    """(keys to set, keys to drop) for a reboot: pending ECC and MIG modes take effect, the
    volatile settings and every MIG instance go."""
    set_: dict[str, str] = {}
    drop: list[str] = []
    for i in range(gpus):
        pre = f"gpu{i}."
        for mode, pending in (("ecc.enabled", "ecc.pending"), ("mig.current", "mig.pending")):
            if pre + pending in kv:
                set_[pre + mode] = kv[pre + pending]
        drop += [pre + k for k in VOLATILE if pre + k in kv]
    return set_, drop


FM_VERSION_FILE = "/var/lib/gpusim/fabricmanager.version"

MIG_PARTED_BIN = "/usr/local/bin/nvidia-mig-parted"
"""Where the `mig-parted` lab fault installs the fake nvidia-mig-parted (one of the paths the
probe's `node_tools` looks in)."""


def mig_parted_script() -> str:
    """The fake nvidia-mig-parted (fleet/lab/nvml/nvidia_mig_parted.py): the real tool's v1
    config rules and apply order, on the fake NVML's state."""
    from pathlib import Path

    return (Path(__file__).parent / "nvml" / "nvidia_mig_parted.py").read_text()

FABRICMANAGER = r'''#!/bin/sh
# FAKE nv-fabricmanager (fleet lab): says its version, the package's unless a `fm-mismatch`
# fault left another one running (/var/lib/gpusim/fabricmanager.version).
v=$(cat /var/lib/gpusim/fabricmanager.version 2>/dev/null || echo "{ver}")
case "$1" in
  --version|-v) echo "Fabric Manager version is : $v" ;;
  *) echo "nv-fabricmanager (fleet lab fake): only --version" >&2; exit 1 ;;
esac
'''

SYSTEMCTL = r'''#!/bin/sh
# FAKE systemctl (fleet lab): the lab's hosts run no systemd. `is-active nvidia-fabricmanager`
# answers as the unit would: the daemon runs on an NVSwitch system when its version equals the
# driver's, and exits (failed) otherwise, as the real one refuses a mismatched driver.
if [ "$1" = is-active ] && [ "$2" = nvidia-fabricmanager ]; then
  command -v nv-fabricmanager >/dev/null 2>&1 || { echo inactive; exit 3; }
  fm=$(nv-fabricmanager --version | sed -n 's/.*version is : //p')
  drv=$(sed -n 's/^driver_version=//p' /usr/share/gpusim/driver.conf 2>/dev/null)
  if [ -n "$fm" ] && [ "$fm" = "$drv" ] && ls /dev/nvidia-nvswitch0 >/dev/null 2>&1; then
    echo active; exit 0
  fi
  echo failed; exit 3
fi
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
echo "Failed to connect to bus: Host is down" >&2
exit 1
'''
