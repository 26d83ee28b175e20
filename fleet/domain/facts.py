"""Host facts: what the probe (or an offline import) knows about one GPU host.

One model for every source: the host probe's JSON (`fleet/probe/hostprobe.py`), `nvidia-smi -q -x`
XML, `nvidia-smi -q` text and `--query-gpu` CSV all validate into `HostFacts`.

Unreadable fields. The probe never raises for a fact it cannot read; it writes
`{"error": "not_supported", "detail": "..."}` in the field's place. Every model here turns such a
value into `None` and records the reason in its own `unreadable` mapping (field name -> reason), so
checks read plain optional values and reports can still say *why* a value is missing. A section
that was not collected at all (an offline XML import has no kernel log) is `None` with no reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleet.domain.boot_facts import BootFacts
from fleet.domain.driver_owner import DriverContainer
from fleet.domain.fact_base import FactsModel
from fleet.domain.node_facts import FabricManagerFacts, GpuNodeState, NodeTools

FactsSource = Literal[
    "nvml", "nvidia-smi", "nvidia-smi-xml", "nvidia-smi-q", "nvidia-smi-csv", "none"
]
EventKind = Literal["xid", "aer", "fallen_off_bus"]


_Facts = FactsModel


class HostIdentity(_Facts):
    hostname: str | None = None
    os: str | None = None
    kernel: str | None = None
    arch: str | None = None
    boot_id: str | None = None
    uptime_s: float | None = None


class PackageVersion(BaseModel):
    name: str
    version: str
    held: bool = False


class Packages(_Facts):
    manager: Literal["dpkg", "rpm"] | None = None
    items: list[PackageVersion] = Field(default_factory=list)
    residual: list[PackageVersion] = Field(default_factory=list)
    """Not installed, yet kept: dpkg's removed-configuration-left (`rc`) or held packages, rpm's
    versionlock entries."""

    def get(self, name: str) -> PackageVersion | None:
        return next((p for p in self.items if p.name == name), None)


class Toolkit(BaseModel):
    path: str
    version: str


class Versions(_Facts):
    driver_library: str | None = None
    """User-space driver version as NVML (or nvidia-smi, which uses NVML) reports it."""
    driver_kernel_module: str | None = None
    """Loaded kernel module's version, from /proc/driver/nvidia/version."""
    kernel_module_flavor: Literal["open", "proprietary"] | None = None
    cuda_driver_api: str | None = None
    """Highest CUDA version the driver supports ("12.4"); not an installed toolkit."""
    nvml_library: str | None = None
    packages: Packages | None = None
    toolkits: list[Toolkit] | None = None


class RemapHistogram(BaseModel):
    max: int
    high: int
    partial: int
    low: int
    none: int


class GpuFacts(GpuNodeState):
    """One GPU; its node-state fields (VBIOS, clocks, MIG devices, ...) come from GpuNodeState."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    minor_number: int | None = None
    pci_bus_id: str | None = None
    """Normalized "0000:9b:00.0" (4-digit domain, lower case, with function)."""
    pci_device_id: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replay_counter: int | None = None
    clock_graphics_mhz: int | None = None
    clock_sm_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_max_graphics_mhz: int | None = None
    clock_max_sm_mhz: int | None = None
    clock_max_mem_mhz: int | None = None
    clock_event_reasons: list[str] | None = None
    """Active clock-event (formerly "throttle") reasons, e.g. ["hw_thermal_slowdown"]."""
    clock_event_reasons_mask: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    ecc_sram_threshold_exceeded: bool | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remap_histogram: RemapHistogram | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    persistence_mode: bool | None = None
    recovery_action: str | None = None
    """nvidia-smi "GPU Recovery Action" (None, Reset, Reboot, Drain P2P, Drain and Reset)."""

    @property
    def label(self) -> str:
        return f"GPU {self.index}" + (f" ({self.pci_bus_id})" if self.pci_bus_id else "")


class KernelEvent(BaseModel):
    """One event of `fleet logs parse --json`; the first six keys are a stable contract."""

    model_config = ConfigDict(extra="ignore")

    kind: EventKind
    pci: str | None = None
    xid: int | None = None
    severity: str | None = None
    line: int
    text: str
    timestamp: str | None = None
    uuid: str | None = None
    pid: int | None = None
    process: str | None = None
    device_id: str | None = None
    bits: list[str] = Field(default_factory=list)


class KernelLog(_Facts):
    source: str | None = None
    cursor: str | None = None
    since: str | None = None
    events: list[KernelEvent] | None = None
    truncated: int = 0
    """Events read but not kept in `events` (the probe keeps every kind's latest, see
    hostprobe.keep_events); `xid_counts` still counts them."""
    xid_counts: dict[str, dict[str, int]] | None = None
    """Xid events per PCI address and code over everything read since the cursor (None from a
    probe that predates it: count `events` instead)."""
    notes: dict[str, Any] = Field(default_factory=dict)
    """What the read could not cover: a rotated file not found, bytes over the size limit."""


class AerCounters(_Facts):
    pci: str | None = None
    role: Literal["device", "upstream"] = "device"
    pci_class: str | None = None
    downstream: list[str] = Field(default_factory=list)
    correctable: dict[str, int] | None = None
    nonfatal: dict[str, int] | None = None
    fatal: dict[str, int] | None = None

    def total(self, kind: Literal["correctable", "nonfatal", "fatal"]) -> int | None:
        counters: dict[str, int] | None = {
            "correctable": self.correctable,
            "nonfatal": self.nonfatal,
            "fatal": self.fatal,
        }[kind]
        if counters is None:
            return None
        key = {
            "correctable": "TOTAL_ERR_COR",
            "nonfatal": "TOTAL_ERR_NONFATAL",
            "fatal": "TOTAL_ERR_FATAL",
        }[kind]
        if key in counters:
            return counters[key]
        return sum(v for k, v in counters.items() if not k.startswith("TOTAL_"))


class DeviceNode(BaseModel):
    path: str
    mode: str
    char_device: bool = True


class ContainerToolkit(_Facts):
    """The toolkit's config.toml (the settings set in it) and `nvidia-ctk --version`."""

    config_path: str | None = None
    config: dict[str, Any] | None = None
    version: str | None = None


class CdiSpec(_Facts):
    """One CDI spec file (/etc/cdi, /var/run/cdi) as the probe summarised it.

    `parsed` is None when the file could not be read or parsed (the reason in `unreadable`).
    `driver_versions` maps each driver version named by a library it mounts to one such path.
    """

    path: str
    parsed: bool | None = None
    format: str | None = None
    cdi_version: str | None = None
    kind: str | None = None
    devices: list[str] = Field(default_factory=list)
    device_count: int | None = None
    device_nodes: list[str] = Field(default_factory=list)
    mount_count: int | None = None
    driver_versions: dict[str, str] = Field(default_factory=dict)
    host_driver_version: str | None = None
    missing_host_paths: list[str] = Field(default_factory=list)
    missing_count: int | None = None


class ContainerRuntime(_Facts):
    docker_installed: bool = False
    containerd_installed: bool = False
    nvidia_ctk: str | None = None
    nvidia_container_runtime: str | None = None
    docker: dict[str, Any] | None = None
    containerd: dict[str, Any] | None = None
    cdi_specs: list[str] = Field(default_factory=list)
    configured: bool = False
    toolkit: ContainerToolkit | None = None
    cdi: list[CdiSpec] | None = None


class FrameworkProbe(_Facts):
    name: str
    python: str | None = None
    result: dict[str, Any] | None = None

    @property
    def sees_gpu(self) -> bool | None:
        if self.result is None:
            return None
        return bool(self.result.get("cuda_available"))


class PciGpu(_Facts):
    """An NVIDIA display or 3D controller the PCI bus lists (sysfs: vendor 0x10de, class
    0x0300 or 0x0302), whether or not NVML can open it: the bus's count of the GPUs."""

    pci: str | None = None
    pci_class: str | None = None
    device_id: str | None = None


class UpgradeGuard(_Facts):
    """What keeps the distribution's automatic upgrades off the pinned packages, as text: the
    apt.conf files that name `Unattended-Upgrade::Package-Blacklist` (path -> text; Debian) and
    dnf-automatic's /etc/dnf/automatic.conf (RHEL; None when absent)."""

    apt_conf: dict[str, str] | None = None
    dnf_automatic: str | None = None


class HostFacts(_Facts):
    schema_: int = Field(default=1, alias="schema")
    source: FactsSource = "none"
    source_errors: dict[str, Any] = Field(default_factory=dict)
    collected_at: datetime | None = None
    input_file: str | None = None
    identity: HostIdentity | None = None
    versions: Versions = Field(default_factory=Versions)
    gpu_count: int | None = None
    gpus: list[GpuFacts] = Field(default_factory=list)
    kernel_log: KernelLog | None = None
    aer: list[AerCounters] | None = None
    device_nodes: list[DeviceNode] | None = None
    container_runtime: ContainerRuntime | None = None
    frameworks: list[FrameworkProbe] | None = None
    boot: BootFacts | None = None
    """The next-boot kernel, its nvidia module, Secure Boot (the pre-reboot gate's facts)."""
    probe_cpu_ms: float | None = None
    pci_gpus: list[PciGpu] | None = None
    upgrade_guard: UpgradeGuard | None = None
    fabric_manager: FabricManagerFacts | None = None
    """Fabric Manager's service and version (None: not collected; see fleet.domain.node_facts)."""
    node_tools: NodeTools | None = None
    """fleet's boot unit and NVIDIA's MIG tools on the host (None: not collected)."""
    driver_container: DriverContainer | None = None
    """/run/nvidia/driver and the GPU Operator's marks (None: not collected, as in an offline
    import; see fleet.domain.driver_owner)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    def events(self) -> list[KernelEvent]:
        if self.kernel_log is None or self.kernel_log.events is None:
            return []
        return self.kernel_log.events

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
