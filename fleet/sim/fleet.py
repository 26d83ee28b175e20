"""`SimFleet`: the simulated fleet, an in-process `Backend` for rehearsals, the demo and tests.

A host is a handful of slots (pool, GPU profile, installed and loaded release, boot count,
counters, faults); its `HostFacts` are built only when it is probed. Pins go through the real
planner (`fleet.domain.pinning.plan_pin`) against the host's package state, so a plan from the
simulated fleet is the plan a real host in that state would get.

Lifecycle of a driver change, as on a real host:

    apply(release)   packages and holds change; the old kernel module stays loaded, so NVML
                     fails with "Driver/library version mismatch" and `driver.agreement` asks
                     for a reboot (three ways to read the driver: NVML, /proc, packages)
    reboot()         the new module is loaded; faults tied to the new release show up
                     (Xid in the kernel log, lower performance); a hung reboot never returns

Deterministic: all randomness comes from the seed (per host and per call count, so one host's
results do not depend on the order other hosts were called in) and time from the clock passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleet.domain.facts import HostFacts
from fleet.domain.kernel_hold import record_text, with_kernel_hold
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH, PinPlan, plan_pin
from fleet.domain.ports import HostRef, HostResult, Samples
from fleet.domain.reboot_gate import RebootPass, require_pass
from fleet.errors import BadInput
from fleet.sim import facts as F
from fleet.sim.host import SimHost, bench_samples, profile_for, split_pools, start_release
from fleet.sim.model import (
    HEALTHY,
    MIX,
    FaultRates,
    HostFaults,
    Latency,
    OsFamily,
    SimClock,
    SimSpec,
)
from fleet.sim.scheduler import SimScheduler

SUITES = ("synthetic", "replay")
RACK_SIZE = 4


class SimFleet:
    """An in-process fleet implementing `fleet.domain.ports.Backend` (see the module doc)."""

    name = "sim"

    def __init__(
        self,
        hosts: Sequence[SimHost],
        releases: Iterable[Release],
        *,
        seed: int = 0,
        clock: Callable[[], datetime] | None = None,
        pool_order: Sequence[str] = (),
        canary_pools: Iterable[str] = (),
        release_perf: Mapping[str, float] | None = None,
        latency: Latency | None = None,
        drained: Mapping[str, str] | None = None,
    ) -> None:
        self.seed = seed
        self.clock: Callable[[], datetime] = clock or SimClock()
        self.releases: dict[str, Release] = {r.name: r for r in releases}
        self.release_perf = dict(release_perf or {})
        self.latency = latency or Latency()
        self.canary_pools = frozenset(canary_pools)
        order = {p: i for i, p in enumerate(pool_order)}
        ranked = sorted(
            hosts,
            key=lambda h: (h.pool not in self.canary_pools, order.get(h.pool, len(order)),
                           h.pool, h.index),
        )
        self._hosts: dict[str, SimHost] = {h.name: h for h in ranked}
        if len(self._hosts) != len(hosts):
            raise ValueError("host names must be unique")
        self._refs: list[HostRef] | None = None
        self._canon: dict[tuple[str | None, str], tuple[dict[str, str], frozenset[str],
                                                          dict[str, str | None]]] = {}
        self._plans: dict[tuple[str | None, str, str], PinPlan] = {}
        self._initial_drained = dict(drained or {})
        self._scheduler: SimScheduler | None = None

    # ------------------------------------------------------------------------ constructors
    @classmethod
    def build(
        cls,
        matrix: Matrix,
        n_hosts: int | None = None,
        seed: int = 0,
        *,
        pools: Mapping[str, int] | Sequence[str] | None = None,
        start: str | Mapping[str, str] | None = None,
        unit_size: int | Mapping[str, int] = 0,
        gpu_models: Mapping[str, str] | None = None,
        rates: FaultRates | Mapping[str, Any] | None = None,
        faults: Mapping[str, HostFaults] | None = None,
        drained: Mapping[str, str] | None = None,
        release_perf: Mapping[str, float] | None = None,
        clock: Callable[[], datetime] | None = None,
        latency: Latency | None = None,
        os_family: OsFamily | Mapping[str, OsFamily] = "debian",
    ) -> SimFleet:
        """A fleet of `n_hosts` spread over the matrix pools (canary pools get a few hosts
        each, the rest is split evenly), or exactly `pools` = {pool: count}.

        Each pool starts on `start` (one release for all, or per pool), else on the matrix's
        rollback target for the pool (`policy.previous`), else on its golden release: so a
        rollout to the golden release has work to do. GPU models come from the matrix pools
        (`gpu_model`), else `gpu_models`, else H100 x8, A100 x8, L40S x4 in turn.
        """
        counts = split_pools(matrix, n_hosts, pools)
        clock = clock or SimClock()
        now = clock()
        rng = random.Random(f"build/{seed}")
        hosts: list[SimHost] = []
        index = 0
        unmodelled = 0
        for pool, count in counts.items():
            settings = matrix.pools.get(pool)
            model = (gpu_models or {}).get(pool) or (settings.gpu_model if settings else None)
            if model is None:
                model = MIX[unmodelled % len(MIX)]
                unmodelled += 1
            profile = profile_for(model)
            release = start_release(matrix, pool, start)
            size = unit_size.get(pool, 0) if isinstance(unit_size, Mapping) else unit_size
            family = os_family.get(pool, "debian") if isinstance(os_family, Mapping) else os_family
            for i in range(count):
                index += 1
                up_days = rng.uniform(1.0, 60.0)
                hosts.append(SimHost(
                    name=f"{pool}-{i + 1:05d}", index=index, pool=pool, profile=profile,
                    gpu_count=profile.count,
                    unit=f"{pool}-u{i // size + 1:04d}" if size > 1 else None,
                    rack=f"{pool}-r{i // RACK_SIZE + 1:04d}", os_family=family,
                    release=release, boot_at=now - timedelta(days=up_days),
                ))
        fleet = cls(
            hosts, matrix.releases, seed=seed, clock=clock, pool_order=list(matrix.pools),
            canary_pools=[p for p, s in matrix.pools.items() if s.canary],
            release_perf=release_perf, latency=latency, drained=drained,
        )
        fleet._assign_rates(FaultRates.model_validate(dict(rates)) if isinstance(rates, Mapping)
                            else rates)
        for host, f in (faults or {}).items():
            fleet._host(host).faults = f
        return fleet

    @classmethod
    def from_spec(cls, spec: SimSpec | Mapping[str, Any], matrix: Matrix, *,
                  clock: Callable[[], datetime] | None = None,
                  latency: Latency | None = None) -> SimFleet:
        """A fleet from a small declarative spec (see `SimSpec`; YAML via `SimSpec.load`)."""
        s = spec if isinstance(spec, SimSpec) else SimSpec.parse(spec)
        pools = {p: ps.hosts for p, ps in s.pools.items()} or None
        if pools is None and s.hosts is None:
            raise BadInput.single("the simulation spec names neither pools nor hosts",
                                  field="hosts")
        starts = {p: ps.release for p, ps in s.pools.items() if ps.release}
        for pool in s.pools:
            if pool not in matrix.pools:
                starts.setdefault(pool, matrix.golden_name(pool))
        return cls.build(
            matrix, s.hosts, s.seed, pools=pools,
            start={p: starts.get(p) or start_release(matrix, p, None)
                   for p in (pools or matrix.pools)},
            unit_size={p: ps.unit_size or s.unit_size for p, ps in s.pools.items()}
            if s.pools else s.unit_size,
            gpu_models={p: ps.gpu_model for p, ps in s.pools.items() if ps.gpu_model},
            rates=s.rates,
            faults={h: f.faults() for h, f in s.faults.items()},
            drained=s.drained, release_perf=s.release_perf, clock=clock, latency=latency,
            os_family={p: ps.os_family for p, ps in s.pools.items()},
        )

    def _assign_rates(self, rates: FaultRates | None) -> None:
        if rates is None:
            return
        rng = random.Random(f"faults/{self.seed}")
        for h in self._hosts.values():
            changes: dict[str, Any] = {}
            if rates.apply_fail and rng.random() < rates.apply_fail:
                changes["apply_fail"] = True
            if rates.unreachable and rng.random() < rates.unreachable:
                changes["unreachable"] = True
            if rates.xid_after_upgrade and rng.random() < rates.xid_after_upgrade:
                changes["xid_after_upgrade"] = (rng.choice(rates.xid_codes),)
            if rates.slow and rng.random() < rates.slow:
                changes["slow_factor"] = rates.slow_factor
            if rates.ecc_rising and rng.random() < rates.ecc_rising:
                changes["ecc_rising"] = rates.ecc_per_probe
            if rates.reboot_hangs and rng.random() < rates.reboot_hangs:
                changes["reboot_hangs"] = True
            if rates.drained and rng.random() < rates.drained:
                self._initial_drained.setdefault(h.name, "hw: ticket HW-1234 (simulated)")
            if changes:
                h.faults = h.faults.merged(**changes)

    # ---------------------------------------------------------------------------- helpers
    def __len__(self) -> int:
        return len(self._hosts)

    def is_reachable(self, host: str) -> bool:
        """Whether `host` answers now (KeyError for a host the fleet does not have)."""
        return self._host(host).reachable

    def _host(self, name: str) -> SimHost:
        try:
            return self._hosts[name]
        except KeyError:
            raise KeyError(f"not in the simulated fleet: {name}") from None

    def _release(self, name: str | None) -> Release | None:
        return self.releases.get(name) if name is not None else None

    def _register(self, release: Release) -> None:
        known = self.releases.get(release.name)
        if known is None or known != release:
            self.releases[release.name] = release
            self._canon = {k: v for k, v in self._canon.items() if k[0] != release.name}
            self._plans = {k: v for k, v in self._plans.items()
                           if release.name not in (k[0], k[1])}

    def _canonical(self, release: str | None, os_family: str) -> tuple[
            dict[str, str], frozenset[str], dict[str, str | None]]:
        """Packages, holds and pin files of a host the pin deploy left on `release`."""
        key = (release, os_family)
        hit = self._canon.get(key)
        if hit is not None:
            return hit
        rel = self._release(release)
        files: dict[str, str | None] = {PREFERENCES_PATH: None, UNATTENDED_PATH: None}
        if rel is None:
            out: tuple[dict[str, str], frozenset[str], dict[str, str | None]] = (
                {}, frozenset(), files if os_family == "debian" else {})
        else:
            fam: OsFamily = "debian" if os_family == "debian" else "rhel"
            wanted = rel.packages(fam)
            installed = {w.name: F.distro_version(w.version, os_family) for w in wanted}
            if fam == "debian":
                from fleet.domain.pinning import apt_preferences, unattended_blacklist

                files = {PREFERENCES_PATH: apt_preferences(wanted),
                         UNATTENDED_PATH: unattended_blacklist(wanted)}
            else:
                files = {}
            out = (installed, frozenset(installed), files)
        self._canon[key] = out
        return out

    def _packages(self, h: SimHost) -> tuple[dict[str, str], frozenset[str]]:
        """Installed packages (name -> distro version) and held names, drift included."""
        installed, held, _ = self._canonical(h.pkg, h.os_family)
        if not h.drift:
            return installed, held
        pkgs, holds = dict(installed), set(held)
        for name, (version, is_held) in h.drift.items():
            if version is None:
                pkgs.pop(name, None)
                holds.discard(name)
                continue
            pkgs[name] = version
            if is_held:
                holds.add(name)
            else:
                holds.discard(name)
        return pkgs, frozenset(holds)

    def _plan_for(self, h: SimHost, release: Release, hold: bool = False) -> PinPlan:
        """The release's plan (cached per start and target release) with the kernel hold on
        top: a host holds the kernel packages only when a pin of a pool asking for it did."""
        fam: OsFamily = "debian" if h.os_family == "debian" else "rhel"
        if h.drift:  # a hand-changed host: its own plan, never cached
            installed, held = self._packages(h)
            files = self._canonical(h.pkg, h.os_family)[2]
            plan = plan_pin(fam, release.packages(fam), installed, held, files)
        else:
            key = (h.pkg, release.name, h.os_family)
            cached = self._plans.get(key)
            if cached is None:
                installed, held, files = self._canonical(h.pkg, h.os_family)
                cached = plan_pin(fam, release.packages(fam), installed, held, files)
                self._plans[key] = cached
            plan = cached
        if not hold and not h.kernel_held:
            return plan
        return with_kernel_hold(plan, hold=hold, kernels=F.KERNEL_PACKAGES[fam],
                                record=record_text(h.kernel_held) if h.kernel_held else None,
                                held=plan.held | h.kernel_held)

    def _active_xids(self, h: SimHost) -> tuple[int, ...]:
        if h.faults.xid_after_upgrade and h.loaded is not None and h.loaded != h.initial:
            return h.faults.xid_after_upgrade
        return ()

    def _fault_gpu(self, h: SimHost) -> int:
        return h.index % h.gpu_count

    def perf_factor(self, host: str) -> float:
        """The performance factor of the release running on `host` (1.0 = baseline)."""
        h = self._host(host)
        factor = self.release_perf.get(h.loaded or "", 1.0)
        if h.faults.slow_factor is not None and h.loaded != h.initial:
            factor *= h.faults.slow_factor
        return factor

    # ------------------------------------------------------------------ Backend: inventory
    def hosts(self) -> list[HostRef]:
        """Every host, canary pools first, then the matrix's pool order, then by name."""
        if self._refs is None:
            self._refs = [
                HostRef(name=h.name, pool=h.pool, gpu_model=h.profile.model,
                        gpu_count=h.gpu_count, unit=h.unit, groups=(h.pool,),
                        data={"pool": h.pool, "rack": h.rack, "os_family": h.os_family,
                              "sim": True})
                for h in self._hosts.values()
            ]
        return list(self._refs)

    def pools(self) -> dict[str, list[HostRef]]:
        """Hosts grouped by pool, in the same order as `hosts()` (canary pools first)."""
        out: dict[str, list[HostRef]] = {}
        for ref in self.hosts():
            out.setdefault(ref.pool or "", []).append(ref)
        return out

    # ---------------------------------------------------------------------- Backend: calls
    def probe(self, hosts: Sequence[str], *, since: Mapping[str, str | None] | None = None,
              frameworks: bool = False) -> dict[str, HostResult[HostFacts]]:
        out: dict[str, HostResult[HostFacts]] = {}
        for name in hosts:
            h = self._host(name)
            if not h.reachable:
                out[name] = self._unreachable(h)
                continue
            h.probes += 1
            h.probes_boot += 1
            h.ecc_agg += h.faults.ecc_rising
            h.ecc_vol += h.faults.ecc_rising
            out[name] = HostResult(name, HostFacts.model_validate(
                self.probe_document(name, since=(since or {}).get(name))),
                seconds=self.latency.probe)
        return out

    def probe_document(self, host: str, *, since: str | None = None) -> dict[str, Any]:
        """The probe JSON for `host` now (what `hostprobe.py` would print); counts no probe."""
        h = self._host(host)
        xids = self._active_xids(h)
        gpu = self._fault_gpu(h)
        return F.host_facts(
            seed=self.seed, host=h.name, host_index=h.index, profile=h.profile,
            gpu_count=h.gpu_count, os_family=h.os_family, now=self.clock(),
            boot_at=h.boot_at, boots=h.boots, installed=self._installed(h),
            userspace=self._release(h.pkg), loaded=self._release(h.loaded), log_lines=h.log,
            since=since, lost_gpu=gpu if 79 in xids else None,
            dbe_gpu=gpu if 48 in xids else None, ecc_gpu=gpu,
            ecc_volatile=h.ecc_vol, ecc_aggregate=h.ecc_agg,
            boot=F.boot_facts(h.os_family, *self._module_of(h.pkg),
                              new_kernel=h.faults.kernel_without_module,
                              booted_new=h.booted_new,
                              secure_boot=h.faults.secure_boot_unsigned),
        )

    def _module_of(self, release: str | None) -> tuple[str | None, str | None]:
        """The driver version and flavor whose module the installed packages built."""
        rel = self._release(release)
        return (rel.driver.version, rel.driver.flavor) if rel is not None else (None, None)

    def _installed(self, h: SimHost) -> list[tuple[str, str, bool]]:
        installed, held = self._packages(h)
        return [(n, v, n in held) for n, v in sorted(installed.items())]

    def plan(self, hosts: Sequence[str], release: Release, *,
             kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        self._register(release)
        out: dict[str, HostResult[PinPlan]] = {}
        for name in hosts:
            h = self._host(name)
            out[name] = (self._unreachable(h) if not h.reachable
                         else HostResult(name, self._plan_for(h, release, name in kernel_hold)))
        return out

    def apply(self, hosts: Sequence[str], release: Release, *,
              kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        self._register(release)
        out: dict[str, HostResult[PinPlan]] = {}
        for name in hosts:
            h = self._host(name)
            if not h.reachable:
                out[name] = self._unreachable(h)
                continue
            plan = self._plan_for(h, release, name in kernel_hold)
            if not plan.changed:
                out[name] = HostResult(name, plan, seconds=self.latency.apply_noop)
                continue
            if h.faults.apply_fail:
                out[name] = HostResult(
                    name, plan, ok=False, seconds=self.latency.apply,
                    error="apt-get install failed (exit 100): E: Sub-process /usr/bin/dpkg "
                          "returned an error code (1)")
                continue
            h.pkg = release.name
            h.kernel_held = (h.kernel_held | frozenset(plan.kernel_hold)
                             if name in kernel_hold else frozenset())
            if h.drift:  # the pin puts back every package it manages
                fam: OsFamily = "debian" if h.os_family == "debian" else "rhel"
                managed = {p.name for p in release.packages(fam)}
                managed |= {c.package for c in plan.changes}
                h.drift = {k: v for k, v in h.drift.items() if k not in managed}
            if not plan.reboot_required and h.loaded is not None:
                h.loaded = release.name  # same kernel module: nothing to reload
            out[name] = HostResult(name, plan, changed=True, seconds=self.latency.apply)
        return out

    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]:
        require_pass(gate, hosts)
        out: dict[str, HostResult[None]] = {}
        now = self.clock()
        for name in hosts:
            h = self._host(name)
            if not h.reachable:
                out[name] = self._unreachable(h)
                continue
            if h.faults.reboot_hangs:
                h.hung = True
                out[name] = HostResult(
                    name, None, ok=False, reachable=False, changed=True,
                    seconds=self.latency.reboot_timeout,
                    error=f"did not come back within {self.latency.reboot_timeout:g} s "
                          "after reboot")
                continue
            h.boots += 1
            h.boot_at = now
            h.probes_boot = 0
            h.ecc_vol = 0
            # the default entry boots; a kernel without the module (or an unsigned module
            # under Secure Boot) comes up without the driver: no GPUs
            h.booted_new = h.booted_new or h.faults.kernel_without_module
            lost = h.booted_new or h.faults.secure_boot_unsigned
            h.loaded = None if lost else h.pkg
            h.log = self._boot_log(h, now)
            out[name] = HostResult(name, None, changed=True, seconds=self.latency.reboot)
        return out

    def _boot_log(self, h: SimHost, now: datetime) -> list[str]:
        lines: list[str] = []
        pci = h.profile.bus_ids[self._fault_gpu(h) % len(h.profile.bus_ids)]
        for k, xid in enumerate(self._active_xids(h)):
            uptime = 40.0 + 7.5 * k
            when = now + timedelta(seconds=uptime)
            lines.append(F.xid_line(when, h.name, uptime, pci, xid))
            if xid == 79:
                lines.append(F.fallen_off_bus_line(when, h.name, uptime, pci))
        return lines

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]:
        """Samples per metric: `synthetic` gives tflops, latency_ms (per step) and errors;
        `replay` gives latency_ms (per request), throughput_rps and errors (per window).

        params: samples (default 50), noise (relative, default 0.02).
        """
        p = dict(params or {})
        n = int(p.get("samples", 50))
        noise = float(p.get("noise", 0.02))
        out: dict[str, HostResult[Samples]] = {}
        for name in hosts:
            h = self._host(name)
            if not h.reachable:
                out[name] = self._unreachable(h)
                continue
            if suite not in SUITES:
                out[name] = HostResult.failed(name, f"unknown benchmark suite {suite!r} "
                                              f"(known: {', '.join(SUITES)})")
                continue
            problem = self._cannot_run(h)
            if problem:
                out[name] = HostResult(name, None, ok=False, error=problem,
                                       seconds=self.latency.benchmark)
                continue
            h.benches += 1
            rng = random.Random(int.from_bytes(
                F.digest("bench", self.seed, h.name, h.benches, suite)[:8], "big"))
            out[name] = HostResult(name, bench_samples(
                h, suite, n, noise, self.perf_factor(name),
                0.02 if 48 in self._active_xids(h) else 0.0, rng),
                seconds=self.latency.benchmark)
        return out

    def _cannot_run(self, h: SimHost) -> str | None:
        pkg, loaded = self._release(h.pkg), self._release(h.loaded)
        if pkg is None:
            return "CUDA driver initialization failed: no NVIDIA driver installed"
        if loaded is None:
            return "CUDA driver initialization failed: NVIDIA kernel module not loaded"
        if pkg.driver.version != loaded.driver.version:
            return ("CUDA driver initialization failed: Driver/library version mismatch "
                    f"(module {loaded.driver.version}, library {pkg.driver.version}); reboot")
        if 79 in self._active_xids(h):
            return "CUDA error: unspecified launch failure (a GPU has fallen off the bus)"
        return None

    def _unreachable(self, h: SimHost) -> HostResult[Any]:
        if h.hung:
            return HostResult.unreachable(h.name, "no route to host (did not come back after "
                                                  "reboot)")
        return HostResult.unreachable(h.name, f"ssh: connect to host {h.name} port 22: "
                                              "Connection timed out")

    def close(self) -> None:
        """Nothing to release."""

    # --------------------------------------------------------------- simulation controls
    def installed_release(self, host: str) -> str | None:
        """The release whose packages are on `host` (the simulation's ground truth)."""
        return self._host(host).pkg

    def loaded_release(self, host: str) -> str | None:
        """The release whose kernel module is loaded on `host`."""
        return self._host(host).loaded

    def releases_by_host(self) -> dict[str, str | None]:
        return {n: h.pkg for n, h in self._hosts.items()}

    def unreachable_hosts(self) -> list[str]:
        return [n for n, h in self._hosts.items() if not h.reachable]

    def faults(self, host: str) -> HostFaults:
        return self._host(host).faults

    def inject(self, host: str, **changes: Any) -> HostFaults:
        """Add or change faults of one host, e.g. `inject("h100-00003", apply_fail=True)`."""
        h = self._host(host)
        h.faults = h.faults.merged(**changes)
        return h.faults

    def drift(self, host: str, package: str, version: str | None, *,
              held: bool | None = None) -> dict[str, str]:
        """Change one installed package of `host` by hand, as `apt-get install pkg=VERSION`
        would (`version` None: the package is removed), so the drift audit sees it. `version`
        is the upstream version ("1.18.1"); the distro revision is added. `held` None keeps the
        package's hold as it was. A later pin that manages the package puts it back.

        Returns the host's installed packages (name -> distro version) after the change.
        """
        h = self._host(host)
        was_held = package in self._packages(h)[1]
        distro = F.distro_version(version, h.os_family) if version is not None else None
        h.drift[package] = (distro, was_held if held is None else held)
        return dict(self._packages(h)[0])

    def heal(self, host: str) -> None:
        """Clear every fault of `host` and bring it back if a reboot hung."""
        h = self._host(host)
        h.faults = HEALTHY
        h.hung = False

    def state(self, host: str) -> dict[str, Any]:
        """Ground truth of one host, for assertions and the demo."""
        h = self._host(host)
        return {
            "host": h.name, "pool": h.pool, "gpu_model": h.profile.model,
            "gpu_count": h.gpu_count, "unit": h.unit, "rack": h.rack,
            "os_family": h.os_family, "initial": h.initial, "installed": h.pkg,
            "loaded": h.loaded, "reachable": h.reachable, "boots": h.boots,
            "probes": h.probes, "benchmarks": h.benches, "faults": h.faults.as_dict(),
            "perf_factor": self.perf_factor(host),
            "drift": {k: v for k, (v, _held) in sorted(h.drift.items())},
            "kernel_held": sorted(h.kernel_held),
        }

    def scheduler(self) -> SimScheduler:
        """The simulated workload manager of this fleet (one per fleet)."""
        if self._scheduler is None:
            self._scheduler = SimScheduler(self, drained=self._initial_drained)
        return self._scheduler
