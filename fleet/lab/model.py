"""The lab's data: host specs, GPU profiles, pools, and the state file (`lab.json`). Pure."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Mode = Literal["netns", "loopback"]
SUBNET = "10.77.0.0/24"
BRIDGE = "fleetbr0"
BRIDGE_ADDR = "10.77.0.1"
LOOPBACK_PREFIX = "127.0.1."
REPO_PORT = 8077
MODEL_PORT = 8000
MAX_HOSTS = 200


@dataclass(frozen=True)
class GpuProfile:
    model: str
    count: int
    name: str
    memory_total: int
    device_id: int
    arch: int
    brand: int
    power_limit_mw: int
    sm_max: int
    mem_max: int
    pcie_gen: int
    part_number: str
    base_throughput: float  # synthetic benchmark units per second at factor 1.0

    def state_lines(self) -> list[str]:
        return [
            f"gpu.count={self.count}",
            f"gpu*.name={self.name}",
            f"gpu*.memory.total={self.memory_total}",
            f"gpu*.pci.device_id={self.device_id:#010x}",
            f"arch={self.arch}",
            f"gpu*.arch={self.arch}",
            f"gpu*.brand={self.brand}",
            f"gpu*.power.limit_mw={self.power_limit_mw}",
            f"gpu*.power.default_limit_mw={self.power_limit_mw}",
            f"gpu*.clock.max.sm={self.sm_max}",
            f"gpu*.clock.max.graphics={self.sm_max}",
            f"gpu*.clock.sm={self.sm_max}",
            f"gpu*.clock.graphics={self.sm_max}",
            f"gpu*.clock.max.mem={self.mem_max}",
            f"gpu*.clock.mem={self.mem_max}",
            f"gpu*.pcie.gen.curr={self.pcie_gen}",
            f"gpu*.pcie.gen.max={self.pcie_gen}",
            f"gpu*.pcie.gen.gpumax={self.pcie_gen}",
            f"gpu*.part_number={self.part_number}",
            f"perf.base={self.base_throughput:g}",
        ]


PROFILES: dict[str, GpuProfile] = {
    "H100": GpuProfile(
        "H100",
        8,
        "NVIDIA H100 80GB HBM3",
        85520809984,
        0x233010DE,
        9,
        14,
        700000,
        1980,
        2619,
        5,
        "692-2G520-0200-000",
        1000.0,
    ),
    "A100": GpuProfile(
        "A100",
        8,
        "NVIDIA A100-SXM4-80GB",
        85899345920,
        0x20B210DE,
        7,
        2,
        400000,
        1410,
        1593,
        4,
        "692-2G506-0212-002",
        450.0,
    ),
    "L40S": GpuProfile(
        "L40S",
        4,
        "NVIDIA L40S",
        48305799168,
        0x26B910DE,
        8,
        14,
        350000,
        2520,
        9001,
        4,
        "900-2G133-0080-000",
        350.0,
    ),
}
MIX = ("H100", "H100", "A100", "L40S")
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def gpu_bus(index: int) -> int:
    return PCI_BUSES[index] if index < len(PCI_BUSES) else 0x10 + index


def gpu_bdf(index: int) -> str:
    return f"0000:{gpu_bus(index):02x}:00.0"


def upstream_bdf(index: int) -> str:
    """The PCIe switch downstream port above the GPU."""
    return f"0000:{gpu_bus(index) - 1:02x}:00.0"


@dataclass
class HostSpec:
    name: str
    index: int
    address: str
    pool: str
    gpu_model: str
    gpu_count: int
    unit: str
    port: int = 22
    netns: str | None = None
    veth: str | None = None
    wave: str = ""  # lab rehearsal group: canary, wave1, wave2, ...
    os: str = "debian"  # host flavor: "debian" (apt, dpkg) or "el9" (dnf, rpm; Rocky Linux 9)

    @property
    def hostname(self) -> str:
        return f"lab-{self.name}"


def pools_for(n: int) -> list[str]:
    """canary first (1 host, 2 from 20 hosts), then waves that double in size."""
    if n <= 0:
        return []
    canary = 2 if n >= 20 else 1
    out = ["canary"] * min(canary, n)
    rest = n - len(out)
    size, wave = 1 if n < 10 else max(2, rest // 7), 1
    while rest > 0:
        take = min(size, rest)
        out += [f"wave{wave}"] * take
        rest -= take
        wave += 1
        size *= 2
    return out


def matrix_pool(model: str, pools: Mapping[str, tuple[str | None, bool]],
                taken: set[str]) -> str | None:
    """The matrix pool for a host of `model`: its model's canary pool until that has a host,
    then its model's other pool. `pools` maps pool name to (gpu_model, canary)."""
    mine = [(name, canary) for name, (gpu, canary) in sorted(pools.items())
            if gpu is not None and model.upper().startswith(gpu.upper())]
    for name, canary in sorted(mine, key=lambda p: not p[1]):
        if canary and name in taken:
            continue
        return name
    return mine[0][0] if mine else None


def plan_hosts(n: int, mode: Mode,
               pools: Mapping[str, tuple[str | None, bool]] | None = None,
               el9: int = 0, el9_pools: Collection[str] = ()) -> list[HostSpec]:
    """Hosts with a GPU mix, a rehearsal wave, and the matrix pool of their GPU model (the
    wave name when the matrix has no pool for the model). The last `el9` hosts are el9 hosts
    (dnf and rpm), so a mixed lab keeps its Debian canary; so is every host of a pool in
    `el9_pools` (a whole pool on EL9, as fleets split by OS usually are)."""
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"host count must be 1..{MAX_HOSTS}")
    if not 0 <= el9 <= n:
        raise ValueError(f"el9 host count must be 0..{n}")
    waves = pools_for(n)
    taken: set[str] = set()
    hosts = []
    for i in range(1, n + 1):
        model = MIX[(i - 1) % len(MIX)]
        addr = f"10.77.0.{10 + i}" if mode == "netns" else f"{LOOPBACK_PREFIX}{10 + i}"
        hosts.append(
            HostSpec(
                name=f"h{i}",
                index=i,
                address=addr,
                pool=(matrix_pool(model, pools or {}, taken) or waves[i - 1]),
                wave=waves[i - 1],
                gpu_model=model,
                gpu_count=PROFILES[model].count,
                unit=f"rack{(i - 1) // 4 + 1}",
                netns=f"fleet-h{i}" if mode == "netns" else None,
                veth=f"fleetv{i}" if mode == "netns" else None,
                os="debian",
            )
        )
        if i > n - el9 or hosts[-1].pool in el9_pools:
            hosts[-1].os = "el9"
        taken.add(hosts[-1].pool)
    return hosts


@dataclass
class LabState:
    mode: Mode
    hosts: list[HostSpec]
    repo_url: str
    matrix: str
    release: str | None
    run_dir: str
    base_key: str
    created: str
    perf: dict[str, dict[str, float]] = field(default_factory=dict)
    version: int = 1
    slurm: bool = False  # a real Slurm: slurmctld + munged on the controller, slurmd per host
    slurm_conf: str | None = None  # SLURM_CONF for every Slurm command (None: no Slurm)
    health_check_interval: int | None = None
    slurm_ready_s: float | None = None  # slurmctld started -> every node idle, measured at up
    kubeconfig: str | None = None  # the lab's own Kubernetes API server (None: `--kubernetes` off)
    kube_ready_s: float | None = None  # etcd started -> API server ready, every Node created
    fleet_binds: list[str] = field(default_factory=list)  # read-only into every host
    prometheus_url: str | None = None  # the lab's Prometheus (fleet.lab.prom_service)
    prometheus_ready_s: float | None = None  # its start to /-/ready, measured at up

    def host(self, name: str) -> HostSpec:
        for h in self.hosts:
            if h.name == name or h.address == name or h.hostname == name:
                return h
        raise KeyError(name)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabState:
        d = dict(d)
        d["hosts"] = [HostSpec(**h) for h in d["hosts"]]
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> LabState:
        return cls.from_dict(json.loads(path.read_text()))
