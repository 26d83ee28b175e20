"""`SimHost`: one simulated host's slots, its GPU profile, the pools a matrix gives a fleet, and
the benchmark samples a host produces (deterministic, from the generator passed in)."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from datetime import datetime

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import Samples
from fleet.errors import BadInput
from fleet.sim.model import HEALTHY, PROFILES, GpuProfile, HostFaults, OsFamily


class SimHost:
    """One simulated host: a few slots, no facts until probed."""

    __slots__ = ("name", "index", "pool", "profile", "gpu_count", "unit", "rack", "os_family",
                 "initial", "pkg", "loaded", "boots", "boot_at", "probes", "probes_boot",
                 "benches", "faults", "hung", "log", "drift", "ecc_agg", "ecc_vol", "booted_new",
                 "kernel_held")

    def __init__(self, name: str, index: int, pool: str, profile: GpuProfile, gpu_count: int,
                 unit: str | None, rack: str, os_family: OsFamily, release: str | None,
                 boot_at: datetime) -> None:
        self.name = name
        self.index = index
        self.pool = pool
        self.profile = profile
        self.gpu_count = gpu_count
        self.unit = unit
        self.rack = rack
        self.os_family: OsFamily = os_family
        self.initial = release  # the release it started on; "after an upgrade" means off it
        self.pkg = release  # release whose packages are installed (None: no driver)
        self.loaded = release  # release whose kernel module is loaded
        self.boots = 0
        self.boot_at = boot_at
        self.probes = 0
        self.probes_boot = 0
        self.benches = 0
        self.faults: HostFaults = HEALTHY
        self.hung = False
        self.booted_new = False  # booted the newer kernel of `kernel_without_module`
        self.kernel_held: frozenset[str] = frozenset()  # kernel packages fleet held (recorded)
        self.log: list[str] = []
        # packages changed by hand (package -> (distro version or None: removed, held)),
        # on top of what the pin deploy left; a pin that manages the package puts it back
        self.drift: dict[str, tuple[str | None, bool]] = {}
        # corrected ECC errors of the faulty GPU: lifetime, and since the driver was loaded
        self.ecc_agg = 0
        self.ecc_vol = 0

    @property
    def reachable(self) -> bool:
        return not (self.hung or self.faults.unreachable)



def profile_for(model: str) -> GpuProfile:
    known = PROFILES.get(model) or next(
        (p for k, p in PROFILES.items() if k.lower() in model.lower()), None)
    if known is not None:
        return known
    base = PROFILES["H100"]
    return GpuProfile(model, base.count, f"NVIDIA {model}", base.pci_device_id, base.bus_ids,
                      base.pcie_gen, base.power_limit_w, base.clock_max_sm_mhz,
                      base.clock_max_mem_mhz, base.remap_banks, base.tflops, base.step_ms,
                      base.rps, base.latency_ms)


def split_pools(matrix: Matrix, n_hosts: int | None,
           pools: Mapping[str, int] | Sequence[str] | None) -> dict[str, int]:
    if isinstance(pools, Mapping):
        return {p: int(c) for p, c in pools.items() if c > 0}
    if n_hosts is None:
        raise ValueError("give n_hosts, or pools as {pool: count}")
    names = list(pools) if pools is not None else list(matrix.pools) or ["default"]
    canary = [p for p in names if p in matrix.pools and matrix.pools[p].canary]
    others = [p for p in names if p not in canary]
    counts = dict.fromkeys(canary + others, 0)
    left = n_hosts
    if others:
        each = max(1, min(n_hosts // 20, max(3, n_hosts // 100)))
        for p in canary:
            take = min(each, left)
            counts[p] = take
            left -= take
    targets = others or canary
    for i, p in enumerate(targets):
        share = left // len(targets) + (1 if i < left % len(targets) else 0)
        counts[p] += share
    return {p: c for p, c in counts.items() if c > 0}


def start_release(matrix: Matrix, pool: str, start: str | Mapping[str, str] | None) -> str:
    if isinstance(start, str):
        name = start
    elif start is not None and start.get(pool):
        name = start[pool]
    else:
        name = matrix.policy.previous.get(pool) or matrix.golden_name(pool)
    try:
        matrix.release(name)
    except KeyError:
        raise BadInput.single(f"pool {pool} starts on release {name!r}, which the matrix does "
                              "not define", field="release") from None
    return name


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def bench_samples(h: SimHost, suite: str, n: int, noise: float, factor: float, error_rate: float,
             rng: random.Random) -> Samples:
    prof, gpus = h.profile, h.gpu_count
    if suite == "synthetic":
        return {
            "tflops": [round(prof.tflops * gpus * factor * rng.gauss(1.0, noise), 3)
                       for _ in range(n)],
            "latency_ms": [round(prof.step_ms / factor * rng.lognormvariate(0.0, noise), 3)
                           for _ in range(n)],
            "errors": [float(_poisson(rng, error_rate * 10)) for _ in range(n)],
        }
    latency = []
    for _ in range(n):
        x = prof.latency_ms / factor * rng.lognormvariate(0.0, 2 * noise)
        if rng.random() < 0.01:  # the tail a replay sees: a slow request now and then
            x *= 1.0 + rng.random() * 2.0
        latency.append(round(x, 3))
    rps = prof.rps * gpus * factor
    return {
        "latency_ms": latency,
        "throughput_rps": [round(rps * rng.gauss(1.0, noise), 3) for _ in range(n)],
        "errors": [float(_poisson(rng, error_rate * rps)) for _ in range(n)],
    }
