"""A tiny in-test fleet for the hygiene job: a fake Backend and Scheduler, facts and histories.

Hosts are conformant to the example matrix (`matrices/example.yaml`) unless a test changes them;
GPU counters are plain dicts the test advances week by week.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.domain.facts import HostFacts
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.pinning import UNATTENDED_PATH, unattended_blacklist
from fleet.domain.ports import AdminState, HostRef, HostResult, Samples
from fleet.domain.snapshot_rows import gpu_rows
from fleet.history import History, add_snapshot

ROOT = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2026, 3, 2, 6, 0, tzinfo=dt.UTC)
WEEK = dt.timedelta(weeks=1)


def example_matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml").matrix


def healthy_counters() -> dict[str, Any]:
    return {"ecc_volatile_corrected": 0, "ecc_volatile_uncorrected": 0,
            "ecc_aggregate_corrected": 0, "ecc_aggregate_uncorrected": 0,
            "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
            "remapped_rows_pending": False, "remapped_rows_failure": False,
            "pcie_replay_counter": 0}


@dataclass
class FakeHost:
    name: str
    pool: str
    release: Release
    gpus: int = 8
    counters: list[dict[str, Any]] = field(default_factory=list)
    aer: list[int] = field(default_factory=list)
    xids: list[dict[int, int]] = field(default_factory=list)
    """Xid events since the last probe, per GPU (consumed by each probe)."""
    reachable: bool = True
    held: bool = True
    kmod: str | None = None
    lib: str | None = None
    package_versions: dict[str, str] = field(default_factory=dict)
    guard: bool = True
    """Whether unattended-upgrades' blacklist names the release's packages (as fleet writes it)."""

    def __post_init__(self) -> None:
        if not self.counters:
            self.counters = [healthy_counters() for _ in range(self.gpus)]
        if not self.aer:
            self.aer = [0] * self.gpus
        if not self.xids:
            self.xids = [{} for _ in range(self.gpus)]

    def pci(self, i: int) -> str:
        return f"0000:{0x10 + i:02x}:00.0"

    def facts(self) -> HostFacts:
        r = self.release
        items = [{"name": s.name, "version": self.package_versions.get(s.name, s.version + "-1"),
                  "held": self.held} for s in r.packages("debian")]
        events = []
        line = 1
        for i, xids in enumerate(self.xids):
            for xid, n in xids.items():
                for _ in range(n):
                    events.append({"kind": "xid", "pci": self.pci(i), "xid": xid, "line": line,
                                   "text": f"NVRM: Xid (PCI:{self.pci(i)}): {xid}, pid=1"})
                    line += 1
        self.xids = [{} for _ in range(self.gpus)]
        return HostFacts.model_validate({
            "source": "nvml",
            "identity": {"hostname": self.name, "kernel": "6.5.0-1007-nvidia", "uptime_s": 1e6},
            "versions": {
                "driver_library": self.lib or r.driver.version,
                "driver_kernel_module": self.kmod or r.driver.version,
                "packages": {"manager": "dpkg", "items": items},
            },
            "gpu_count": self.gpus,
            "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{self.name}-{i}",
                      "pci_bus_id": self.pci(i), "persistence_mode": True, **c}
                     for i, c in enumerate(self.counters)],
            "kernel_log": {"source": "journal", "events": events},
            "upgrade_guard": {"apt_conf": {UNATTENDED_PATH: unattended_blacklist(
                r.packages("debian"))} if self.guard else {}},
            "aer": [{"pci": self.pci(i), "role": "device",
                     "correctable": {"TOTAL_ERR_COR": n}, "nonfatal": {"TOTAL_ERR_NONFATAL": 0},
                     "fatal": {"TOTAL_ERR_FATAL": 0}} for i, n in enumerate(self.aer)],
        })


class FakeBackend:
    def __init__(self, hosts: Sequence[FakeHost], bench: Mapping[str, float] | None = None):
        self.by_name = {h.name: h for h in hosts}
        self.bench_factor = dict(bench or {})
        self.benchmarked: list[str] = []
        self.since: list[Mapping[str, str | None] | None] = []  # the cursors each probe got
        self.rng = random.Random(3)

    def hosts(self) -> list[HostRef]:
        return [HostRef(h.name, h.pool, "H100", h.gpus) for h in self.by_name.values()]

    def probe(self, hosts: Sequence[str], *, since: Mapping[str, str | None] | None = None,
              ) -> dict[str, HostResult[HostFacts]]:
        self.since.append(since)
        out: dict[str, HostResult[HostFacts]] = {}
        for name in hosts:
            h = self.by_name[name]
            out[name] = (HostResult(name, h.facts()) if h.reachable
                         else HostResult.unreachable(name, "ssh: connection timed out"))
        return out

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]:
        self.benchmarked += list(hosts)
        out: dict[str, HostResult[Samples]] = {}
        for name in hosts:
            f = self.bench_factor.get(self.by_name[name].pool, 1.0)
            out[name] = HostResult(name, {"tflops": [
                round(100.0 * f * self.rng.gauss(1.0, 0.01), 3) for _ in range(5)]})
        return out

    def plan(self, hosts: Sequence[str], release: Release, **_: Any) -> dict[str, Any]:
        raise NotImplementedError

    apply = plan

    def reboot(self, hosts: Sequence[str]) -> dict[str, Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FakeScheduler:
    name = "fake"

    def __init__(self) -> None:
        self.states: dict[str, AdminState] = {}
        self.drained: list[str] = []
        self.undrained: list[str] = []

    def state(self, host: str) -> AdminState:
        return self.states.get(host, AdminState("available"))

    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        self.drained.append(host)
        self.states[host] = AdminState("drained", reason, by_fleet=True)
        return HostResult(host, None)

    def undrain(self, host: str) -> HostResult[None]:
        self.undrained.append(host)
        self.states[host] = AdminState("available")
        return HostResult(host, None)


def fleet(matrix: Matrix, pools: Mapping[str, int]) -> list[FakeHost]:
    hosts = []
    for pool, n in pools.items():
        rel = matrix.golden_for(pool)
        hosts += [FakeHost(f"{pool}-{i:02d}", pool, rel) for i in range(n)]
    return hosts


def record_week(history: History, hosts: Sequence[FakeHost], when: dt.datetime) -> None:
    """One weekly probe of every host straight into the history (no checks), for seeding."""
    for h in hosts:
        facts = h.facts()
        add_snapshot(history, h.name, taken_at=when, source="nvml", pool=h.pool,
                     gpus=gpu_rows(facts), facts={})
