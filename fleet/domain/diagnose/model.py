"""The data the diagnosis works on (parsed evidence) and what it says (findings, verdict)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# Stable class names of `--json`, in the order the questions are asked.
CLASSES: tuple[str, ...] = (
    "queueing", "gpu_idle", "throttled", "memory_bound", "gpu_memory", "host_memory", "pcie",
    "numa", "nvlink", "drift", "fallback", "hardware", "host_cpu", "disk",
)
Severity = Literal["critical", "warning", "info"]
SEVERITY_RANK: dict[str, int] = {"critical": 2, "warning": 1, "info": 0}
Status = Literal["finding", "ok", "could_not_judge"]


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_mib: int | None = None
    kind: str | None = None
    """`C` compute, `G` graphics, `C+G` both (None: not reported)."""

    @property
    def compute(self) -> bool:
        return self.kind is None or "C" in self.kind.upper()


@dataclass
class GpuState:
    """One GPU as `nvidia-smi -q[ -x]` shows it at one moment (None: not reported)."""

    index: int
    name: str | None = None
    bus_id: str | None = None
    pstate: str | None = None
    util_gpu: int | None = None
    util_mem: int | None = None
    fb_total_mib: int | None = None
    fb_used_mib: int | None = None
    clock_sm: int | None = None
    clock_sm_max: int | None = None
    reasons: list[str] | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    ecc_volatile_uncorrected: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pending: bool | None = None
    recovery_action: str | None = None
    mig: bool | None = None
    processes: list[GpuProcess] = field(default_factory=list)


@dataclass
class SmiSnapshot:
    """`nvidia-smi -q` (either format): the driver, the GPUs, or the failure it printed."""

    source: str
    driver: str | None = None
    cuda: str | None = None
    gpus: list[GpuState] = field(default_factory=list)
    failure: str | None = None
    """nvidia-smi's own error text ("couldn't communicate with the NVIDIA driver")."""


@dataclass(frozen=True)
class DmonSample:
    gpu: int
    values: dict[str, float]
    """Column name (`sm`, `mem`, `pwr`, `pclk`, `mclk`, `fb`, `gtemp`, ...) -> value."""


@dataclass(frozen=True)
class PmonSample:
    gpu: int
    pid: int
    kind: str
    command: str
    sm: float | None = None
    mem: float | None = None
    fb_mib: float | None = None
    sample: int = 0
    """Which pass of `pmon` this row belongs to (0, 1, ...): rows repeat once per interval."""


@dataclass(frozen=True)
class TopoGpu:
    gpu: int
    cpus: frozenset[int] | None
    numa: int | None
    links: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MemInfo:
    total_kib: int
    available_kib: int | None
    swap_total_kib: int
    swap_free_kib: int


@dataclass(frozen=True)
class CpuTimes:
    cpus: int
    busy: int | None
    """busy jiffies between the two snapshots of `stat` (None: one snapshot only)."""
    total: int | None


@dataclass(frozen=True)
class LoadAvg:
    one: float
    five: float
    fifteen: float


@dataclass(frozen=True)
class DiskUse:
    filesystem: str
    mount: str
    used_pct: int
    avail_kib: int


@dataclass(frozen=True)
class HostProcess:
    pid: int
    psr: int | None
    pcpu: float
    rss_kib: int
    args: str


@dataclass(frozen=True)
class QueueMetrics:
    waiting: float | None
    running: float | None
    wait_seconds_mean: float | None
    metrics: dict[str, float]


@dataclass
class Evidence:
    """Everything the bundle held, parsed; None: the file was missing."""

    smi: SmiSnapshot | None = None
    dmon: list[DmonSample] | None = None
    pmon: list[PmonSample] | None = None
    topo: list[TopoGpu] | None = None
    kernel_events: list[dict[str, Any]] | None = None
    kernel_text: str | None = None
    meminfo: MemInfo | None = None
    loadavg: LoadAvg | None = None
    cpu: CpuTimes | None = None
    df: list[DiskUse] | None = None
    ps: list[HostProcess] | None = None
    queue: QueueMetrics | None = None
    queue_source: str | None = None
    """Where queue metrics come from (the pool's metrics URL); None: queueing is not judged."""
    boot: dict[str, Any] | None = None
    """The boot facts (`boot.json`): running and next-boot kernel, the nvidia module per
    kernel, Secure Boot (`fleet.domain.diagnose.bundle.boot_summary`)."""
    files: dict[str, str] = field(default_factory=dict)
    """Bundle file name -> "parsed" | "missing" | "unreadable: why" (and other notes)."""


@dataclass(frozen=True)
class Finding:
    cls: str
    severity: Severity
    summary: str
    evidence: dict[str, Any]
    next: str
    remediation: str
    gpu: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["class"] = d.pop("cls")
        return d


@dataclass(frozen=True)
class Answer:
    """One question's answer: its findings, or that all was well, or why it could not judge."""

    cls: str
    status: Status
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "status": self.status, "reason": self.reason}


@dataclass(frozen=True)
class Diagnosis:
    verdict: str
    findings: list[Finding]
    answers: list[Answer]
    files: dict[str, str]
    boot: dict[str, Any] | None = None  # what boots next (None: the bundle has no boot.json)

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "findings": [f.as_dict() for f in self.findings],
            "questions": [a.as_dict() for a in self.answers],
            "files": dict(self.files),
            "boot": self.boot,
        }
