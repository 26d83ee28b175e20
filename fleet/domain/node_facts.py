"""Node state: the GPU settings, MIG layout, firmware and links a node profile declares.

These are facts like any other (`fleet.domain.facts`): the probe (NVML first, `nvidia-smi -q -x`
where NVML is missing) and `fleet facts parse` (XML and `-q` captures) fill them, and a value that
cannot be read is written as `{"error": REASON, "detail": ...}`, which the model turns into `None`
with the reason in `unreadable[FIELD]`. `None` without a reason means "not collected" (an older
probe, a CSV capture). Checks treat both the same way: unreadable, never a healthy default. No
field here has a default other than None.

The JSON shape, per GPU (keys of a `gpus[]` entry, beside the older ones; every value may be the
error object instead):

    "vbios_version": "96.00.99.00.01",        nvmlDeviceGetVbiosVersion, XML vbios_version
    "inforom_image": "G520.0200.00.05",       nvmlDeviceGetInforomImageVersion,
                                              XML inforom_version/img_version
    "inforom_oem": "2.1", "inforom_ecc": "7.16", "inforom_pwr": null,
                                              nvmlDeviceGetInforomVersion(OEM|ECC|POWER)
    "gsp_firmware_version": "580.105.08",     nvmlDeviceGetGspFirmwareVersion, gsp_firmware_version
    "gsp_mode": true,                          nvmlDeviceGetGspFirmwareMode (enabled); XML: version
                                              present -> true, "N/A" -> false
    "compute_mode": "default",                 default | exclusive_process | prohibited
                                              | exclusive_thread
    "power_limit_default_w": 700.0, "power_limit_min_w": 200.0, "power_limit_max_w": 700.0,
                                              (current: the older "power_limit_w")
    "clocks_applications_graphics_mhz": 1980, "clocks_applications_memory_mhz": 2619,
    "clocks_default_applications_graphics_mhz": 1980,
    "clocks_default_applications_memory_mhz": 2619,
    "clocks_locked_graphics_mhz": [1410, 1410],   [min, max] set by `nvidia-smi -lgc`; [] when
                                              none is set (never null for "not locked")
    "mig_devices": [                           MIG mode on: one entry per GPU+compute instance;
      {"gpu_instance_id": 2, "compute_instance_id": 0,   MIG mode off: []
       "profile": "3g.40gb",                   mig-parted's name ("1c.3g.40gb" for a CI profile)
       "gi_profile_id": 9, "placement_start": 0,
       "memory_mib": 40448, "multiprocessor_count": 60}
    ],
    "nvlink_links": [{"link": 0, "active": true}, ...],   nvmlDeviceGetNvLinkState per link;
                                              [] on a GPU without NVLink
    "fabric_state": "completed", "fabric_status": "success",   XML fabric/state, fabric/status
                                              (lower case; "not supported" on non-NVSwitch GPUs)

Existing per-GPU keys that are node state too (unchanged): ecc_mode_current, ecc_mode_pending,
persistence_mode, power_limit_w (current), mig_mode_current, mig_mode_pending,
pcie_gen_current, pcie_gen_max, pcie_width_current, pcie_width_max.

Per host, `"fabric_manager": {"running": true, "version": "580.105.08", "service": "active",
"nvswitch_count": 4}` (`systemctl is-active nvidia-fabricmanager`, `nv-fabricmanager --version`,
/dev/nvidia-nvswitch*), each value again possibly the error object; the whole key may be the
error object too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from fleet.domain.fact_base import FactsModel

ComputeMode = Literal["default", "exclusive_process", "prohibited", "exclusive_thread"]

NODE_GPU_FIELDS: tuple[str, ...] = (
    "vbios_version", "inforom_image", "inforom_oem", "inforom_ecc", "inforom_pwr",
    "gsp_firmware_version", "gsp_mode", "compute_mode",
    "power_limit_default_w", "power_limit_min_w", "power_limit_max_w",
    "clocks_applications_graphics_mhz", "clocks_applications_memory_mhz",
    "clocks_default_applications_graphics_mhz", "clocks_default_applications_memory_mhz",
    "clocks_locked_graphics_mhz", "mig_devices", "nvlink_links", "fabric_state", "fabric_status",
)
"""The keys this module adds to a GPU's facts (for probes, fakes and parsers to cover)."""


class MigDevice(BaseModel):
    """One MIG device: a GPU instance with one of its compute instances."""

    model_config = ConfigDict(extra="ignore")

    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None
    """mig-parted's profile name ("1g.10gb"; "1c.2g.20gb" for a compute-instance profile).
    None where the source does not name it: `nvidia-smi -q[ -x]` lists no profile names."""
    gi_profile_id: int | None = None
    placement_start: int | None = None
    memory_mib: int | None = None
    multiprocessor_count: int | None = None


class NvLinkLink(BaseModel):
    model_config = ConfigDict(extra="ignore")

    link: int
    active: bool | None = None
    """None: the link's state could not be read (never counted as up)."""


class GpuNodeState(FactsModel):
    """The node-state fields of one GPU (GpuFacts inherits them; see the module docstring)."""

    vbios_version: str | None = None
    inforom_image: str | None = None
    inforom_oem: str | None = None
    inforom_ecc: str | None = None
    inforom_pwr: str | None = None
    gsp_firmware_version: str | None = None
    gsp_mode: bool | None = None
    """True: the GPU runs the GSP firmware."""
    compute_mode: ComputeMode | None = None
    power_limit_default_w: float | None = None
    power_limit_min_w: float | None = None
    power_limit_max_w: float | None = None
    clocks_applications_graphics_mhz: int | None = None
    clocks_applications_memory_mhz: int | None = None
    clocks_default_applications_graphics_mhz: int | None = None
    clocks_default_applications_memory_mhz: int | None = None
    clocks_locked_graphics_mhz: list[int] | None = None
    """[min, max] locked by `nvidia-smi -lgc`; [] when none is set."""
    mig_devices: list[MigDevice] | None = None
    nvlink_links: list[NvLinkLink] | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None

    def reason(self, field: str) -> str:
        """Why `field` has no value: the probe's reason, or "not collected"."""
        return self.unreadable.get(field, "not collected")

    def nvlink_active(self) -> int | None:
        """Links up; None when the link list, or any link's state, is unreadable."""
        if self.nvlink_links is None or any(link.active is None for link in self.nvlink_links):
            return None
        return sum(1 for link in self.nvlink_links if link.active)


class FabricManagerFacts(FactsModel):
    """Fabric Manager on the host (NVSwitch systems): its service and its version."""

    running: bool | None = None
    version: str | None = None
    service: str | None = None
    """systemd's ActiveState of nvidia-fabricmanager ("active", "failed", "inactive")."""
    nvswitch_count: int | None = None


class NodeTools(FactsModel):
    """What on the host bears on putting its node state right (the probe's `node_tools`):
    fleet's boot unit as it is now (sha256 of each file; None: absent, or unreadable with its
    reason in `unreadable`), and NVIDIA's MIG tools. nvidia-mig-manager.service applies its own
    mig-parted config at every boot; where it is enabled, fleet leaves MIG to it rather than
    fight it (fleet.domain.node_plan)."""

    boot_unit_sha256: str | None = None
    boot_script_sha256: str | None = None
    mig_parted_file_sha256: str | None = None
    boot_enabled: bool | None = None
    """The `multi-user.target.wants` link of fleet-node-state.service is there."""
    mig_parted: str | None = None
    """The nvidia-mig-parted binary's path; None: not installed."""
    mig_manager_unit: str | None = None
    """nvidia-mig-manager.service's unit file; None: not installed."""
    mig_manager_enabled: bool | None = None
    mig_manager_config: str | None = None
    """MIG_PARTED_SELECTED_CONFIG of its drop-ins: the config it applies at boot."""

    def reason(self, field: str) -> str:
        return self.unreadable.get(field, "not collected")
