"""The simulated fleet's vocabulary: GPU profiles, the logical clock, faults and the spec. Pure.

Nothing here reads the wall clock or global randomness: time comes from a `SimClock` (or any
callable returning an aware datetime) and every random draw from a `random.Random` seeded by the
fleet's seed, so the same seed and the same calls give the same fleet, facts and samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet.domain.utf8 import decode_utf8
from fleet.errors import BadInput, Problem

EPOCH = datetime(2025, 1, 6, 8, 0, tzinfo=UTC)
"""Where a default `SimClock` starts (a Monday morning, UTC)."""

OsFamily = Literal["debian", "rhel"]


class SimClock:
    """A logical clock: it moves only when told (`advance`, `set`). Call it to read it."""

    def __init__(self, start: datetime = EPOCH) -> None:
        if start.tzinfo is None:
            raise ValueError("SimClock needs a timezone-aware start")
        self._now = start

    def __call__(self) -> datetime:
        return self._now

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += timedelta(seconds=seconds)
        return self._now

    def set(self, when: datetime) -> datetime:
        if when < self._now:
            raise ValueError("a clock does not go back")
        self._now = when
        return self._now


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model as the probe would see it, plus its performance at factor 1.0."""

    model: str
    count: int
    name: str
    pci_device_id: str
    bus_ids: tuple[str, ...]
    pcie_gen: int
    power_limit_w: float
    clock_max_sm_mhz: int
    clock_max_mem_mhz: int
    remap_banks: int
    tflops: float  # dense BF16 per GPU, what the synthetic benchmark reports at factor 1.0
    step_ms: float  # one synthetic training step
    rps: float  # replayed requests per second per GPU
    latency_ms: float  # median request latency of the replayed workload


PROFILES: dict[str, GpuProfile] = {
    "H100": GpuProfile(
        "H100", 8, "NVIDIA H100 80GB HBM3", "0x233010DE",
        ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
         "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"),
        5, 700.0, 1980, 2619, 640, 720.0, 180.0, 42.0, 24.0,
    ),
    "A100": GpuProfile(
        "A100", 8, "NVIDIA A100-SXM4-80GB", "0x20B210DE",
        ("0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
         "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"),
        4, 400.0, 1410, 1593, 640, 250.0, 420.0, 18.0, 41.0,
    ),
    "L40S": GpuProfile(
        "L40S", 4, "NVIDIA L40S", "0x26B910DE",
        ("0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0"),
        4, 350.0, 2520, 9001, 384, 180.0, 560.0, 11.0, 58.0,
    ),
}
MIX: tuple[str, ...] = ("H100", "A100", "L40S")
"""Models given in turn to pools whose matrix entry names no GPU model."""


@dataclass(frozen=True)
class HostFaults:
    """Faults of one host; the defaults mean a healthy host.

    - apply_fail: every apply that would change the host fails; it stays on its old release.
    - unreachable: every call answers unreachable (ssh times out).
    - xid_after_upgrade: these Xids are in the kernel log after the host boots into a release
      other than the one it started on (79: a GPU falls off the bus, 48: a double-bit ECC error).
    - slow_factor: performance factor on any release other than the starting one (0.75 = 25%
      slower); the fleet-wide `release_perf` slows a release on every host.
    - ecc_rising: corrected ECC errors each probe adds on one GPU (volatile since boot, aggregate
      for the GPU's life), from when it is set: raise it week by week for a rising trend.
    - reboot_hangs: a reboot never comes back; the host is unreachable from then on.
    - kernel_without_module: a newer kernel is the default boot entry and has no nvidia module
      (its headers are missing, so no driver install builds one): the pre-reboot gate refuses,
      and a host booted into it anyway has no GPUs.
    - secure_boot_unsigned: Secure Boot is on and the nvidia module is unsigned.
    """

    apply_fail: bool = False
    unreachable: bool = False
    xid_after_upgrade: tuple[int, ...] = ()
    slow_factor: float | None = None
    ecc_rising: int = 0
    reboot_hangs: bool = False
    kernel_without_module: bool = False
    secure_boot_unsigned: bool = False

    @property
    def healthy(self) -> bool:
        return self == HEALTHY

    def merged(self, **changes: Any) -> HostFaults:
        if "xid_after_upgrade" in changes:
            changes["xid_after_upgrade"] = tuple(changes["xid_after_upgrade"] or ())
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


HEALTHY = HostFaults()


@dataclass(frozen=True)
class Latency:
    """Modelled seconds of each call, reported in `HostResult.seconds` (the clock is not moved)."""

    probe: float = 2.0
    apply: float = 95.0
    apply_noop: float = 3.0
    reboot: float = 240.0
    reboot_timeout: float = 600.0
    benchmark: float = 60.0

    @classmethod
    def zero(cls) -> Latency:
        return cls(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


# ------------------------------------------------------------------------------ the spec file
class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FaultSpec(_Spec):
    """Faults of one named host (see `HostFaults`)."""

    apply_fail: bool = False
    unreachable: bool = False
    xid_after_upgrade: list[int] = []
    slow_factor: float | None = Field(default=None, gt=0, le=2)
    ecc_rising: int = Field(default=0, ge=0)
    reboot_hangs: bool = False
    kernel_without_module: bool = False
    secure_boot_unsigned: bool = False

    def faults(self) -> HostFaults:
        return HostFaults(self.apply_fail, self.unreachable, tuple(self.xid_after_upgrade),
                          self.slow_factor, self.ecc_rising, self.reboot_hangs,
                          self.kernel_without_module, self.secure_boot_unsigned)


PERF_MIN, PERF_MAX = 0.01, 100.0
"""Bounds of a release's speed factor (1.0: as fast as the baseline; 0.8: 20% slower)."""

PerfFactor = Annotated[float, Field(ge=PERF_MIN, le=PERF_MAX, allow_inf_nan=False)]


class FaultRates(_Spec):
    """Probability per host of each fault, drawn once at build time from the fleet's seed."""

    apply_fail: float = Field(default=0.0, ge=0, le=1)
    unreachable: float = Field(default=0.0, ge=0, le=1)
    xid_after_upgrade: float = Field(default=0.0, ge=0, le=1)
    slow: float = Field(default=0.0, ge=0, le=1)
    ecc_rising: float = Field(default=0.0, ge=0, le=1)
    reboot_hangs: float = Field(default=0.0, ge=0, le=1)
    drained: float = Field(default=0.0, ge=0, le=1, description="drained by someone else")
    xid_codes: list[int] = [79, 48]
    slow_factor: float = Field(default=0.75, gt=0, le=2)
    ecc_per_probe: int = Field(default=4000, ge=1)


class PoolSpec(_Spec):
    hosts: int = Field(ge=0)
    gpu_model: str | None = None
    gpu_count: int | None = Field(default=None, ge=1, le=16)
    release: str | None = Field(default=None, description="release the hosts start on")
    unit_size: int = Field(default=0, ge=0, description="hosts per NVLink/rack unit; 0: none")
    os_family: OsFamily = "debian"


class SimSpec(_Spec):
    """A small declarative fleet: pools, faults by host or by rate, slow releases."""

    seed: int = 0
    hosts: int | None = Field(default=None, ge=0, description="total, split over matrix pools")
    pools: dict[str, PoolSpec] = {}
    rates: FaultRates = FaultRates()
    faults: dict[str, FaultSpec] = {}
    drained: dict[str, str] = Field(default={}, description="host -> reason, drained by others")
    release_perf: dict[str, PerfFactor] = {}
    unit_size: int = Field(default=0, ge=0)

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, file: str | None = None) -> SimSpec:
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise BadInput([
                Problem(file, None, ".".join(str(p) for p in e["loc"]) or None, e["msg"])
                for e in exc.errors()
            ]) from exc

    @classmethod
    def load(cls, path: str | Path) -> SimSpec:
        p = Path(path)
        if not p.is_file():
            raise BadInput.single("no such simulation spec", file=str(p))
        try:
            data = yaml.safe_load(decode_utf8(p.read_bytes(), str(p))) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise BadInput.single(f"invalid YAML: {exc}", file=str(p),
                                  line=mark.line + 1 if mark else None) from exc
        if not isinstance(data, dict):
            raise BadInput.single("expected a mapping at the top", file=str(p))
        spec = cls.parse(data, file=str(p))
        if not spec.pools and spec.hosts is None:
            raise BadInput.single("the simulation spec names neither pools nor hosts",
                                  file=str(p), field="hosts")
        return spec
