"""Pydantic shapes of a version matrix (`matrices/*.yaml`).

Every model is frozen and forbids unknown keys, so a typo in a matrix is an error rather than a
silently ignored setting. Versions are strings checked against strict patterns from
`fleet.domain.versions`: they end up on package-manager command lines, and YAML would otherwise turn
`cuda: 12.10` into the float 12.1.

Cross-field rules (references between sections, NVIDIA compatibility tables, lifecycle) live in
`fleet.domain.matrix.rules`, so that the loader can report all of them with file and line.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from fleet.domain.matrix.base import Model as _Model
from fleet.domain.matrix.frameworks import Frameworks
from fleet.domain.matrix.hygiene_settings import HygieneSettings
from fleet.domain.matrix.packages import default_names
from fleet.domain.matrix.profiles import NodeProfile, best_key
from fleet.domain.matrix.rollout_settings import CountOrPercent as CountOrPercent
from fleet.domain.matrix.rollout_settings import DrainSettings as DrainSettings
from fleet.domain.matrix.rollout_settings import GateSettings as GateSettings
from fleet.domain.matrix.rollout_settings import PoolSettings as PoolSettings
from fleet.domain.matrix.rollout_settings import RolloutSettings as RolloutSettings
from fleet.domain.matrix.rollout_settings import wave_sizes as wave_sizes
from fleet.domain.versions import (
    COMPANION_VERSION_RE,
    CUDA_VERSION_RE,
    DRIVER_VERSION_RE,
    NAME_RE,
    PACKAGE_NAME_RE,
    driver_branch,
    parse_constraint,
)

OsFamily = Literal["debian", "rhel"]
Flavor = Literal["open", "proprietary"]
Component = Literal[
    "driver", "cuda", "fabric_manager", "dcgm", "container_toolkit", "cudnn", "tensorrt"
]
COMPONENTS: tuple[Component, ...] = (
    "driver", "cuda", "fabric_manager", "dcgm", "container_toolkit", "cudnn", "tensorrt",
)
"""Install order: the driver first, the user-space stack after it."""



_PACKAGES: dict[int, tuple[weakref.ref[Release], dict[str, tuple[PackageSpec, ...]]]] = {}
"""`Release.packages` answers by id of the release, with a reference that checks the id still
names that object (and drops the entry when it goes)."""


def _forget(key: int, _gone: object) -> None:
    _PACKAGES.pop(key, None)


def _pattern(regex: re.Pattern[str], what: str, example: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what} (expected e.g. {example})")
        return value

    return AfterValidator(check)


def _check_constraint(value: str) -> str:
    parse_constraint(value)
    return value


DriverVersion = Annotated[str, _pattern(DRIVER_VERSION_RE, "driver version", "550.54.15")]
CudaVersion = Annotated[str, _pattern(CUDA_VERSION_RE, "CUDA version", '"12.4" or "12.4.1"')]
CompanionVersion = Annotated[str, _pattern(COMPANION_VERSION_RE, "version", '"4.2.3"')]
PackageName = Annotated[str, _pattern(PACKAGE_NAME_RE, "package name", "nvidia-driver-550")]
Name = Annotated[str, _pattern(NAME_RE, "name", "r550-cuda12.4 (letters, digits, . _ -)")]
KernelConstraint = Annotated[str, AfterValidator(_check_constraint)]


@dataclass(frozen=True, order=True)
class PackageSpec:
    """One package a release installs, with its upstream version (no distro revision)."""

    name: str
    version: str
    component: Component


class Driver(_Model):
    """The kernel driver: exact version, module flavor, and package names per OS family.

    When `packages` names no packages for an OS family, `Release.packages` uses NVIDIA's usual
    names (see there). Blackwell needs `open`; Maxwell, Pascal and Volta need `proprietary`.
    """

    version: DriverVersion
    flavor: Flavor
    packages: dict[OsFamily, list[PackageName]] | None = None

    @property
    def branch(self) -> str:
        return driver_branch(self.version)


class Companions(_Model):
    """Optional user-space components pinned with the driver; None means "not managed"."""

    fabric_manager: CompanionVersion | None = Field(
        default=None, description="Fabric Manager version; must equal the driver version."
    )
    dcgm: CompanionVersion | None = None
    container_toolkit: CompanionVersion | None = None
    cudnn: CompanionVersion | None = None
    tensorrt: CompanionVersion | None = None
    kernel: KernelConstraint | None = Field(
        default=None, description="Kernel version constraint such as '>=5.15,<6.9'."
    )


class Release(_Model):
    """A named, installable set of versions: driver, CUDA toolkit and companions."""

    name: Name
    driver: Driver
    cuda: CudaVersion
    companions: Companions = Companions()
    package_names: dict[Component, dict[OsFamily, list[PackageName]]] = Field(
        default={}, description="Package names per component and OS family, replacing "
        "NVIDIA's default names (fleet/data/nvidia/packages.yaml) for this release.")
    notes: str = ""
    frameworks: Frameworks | None = Field(
        default=None, description="ML frameworks the release's services run with; checked "
        "against the published tables by fleet.domain.matrix.frameworks.")

    @model_validator(mode="after")
    def _names_only_for_managed_components(self) -> Release:
        managed = self.versions()
        for component, by_family in self.package_names.items():
            if component not in managed:
                raise ValueError(f"package_names.{component}: the release pins no "
                                 f"{component} version")
            if any(not names for names in by_family.values()):
                raise ValueError(f"package_names.{component}: an empty list of names")
        if "driver" in self.package_names and self.driver.packages:
            raise ValueError("driver.packages and package_names.driver both name the driver's "
                             "packages: keep one")
        return self

    @property
    def branch(self) -> str:
        """The driver branch number, e.g. "550"."""
        return self.driver.branch

    def versions(self) -> dict[Component, str]:
        """Each managed component's upstream version (unmanaged companions left out)."""
        out: dict[Component, str] = {"driver": self.driver.version, "cuda": self.cuda}
        c = self.companions
        for component, version in (
            ("fabric_manager", c.fabric_manager),
            ("dcgm", c.dcgm),
            ("container_toolkit", c.container_toolkit),
            ("cudnn", c.cudnn),
            ("tensorrt", c.tensorrt),
        ):
            if version is not None:
                out[component] = version  # type: ignore[index]
        return out

    def packages(self, os_family: OsFamily) -> list[PackageSpec]:
        """The exact packages this release installs on an OS family, in install order.

        Names: `package_names` (per component and OS family), else `driver.packages` for the
        driver, else NVIDIA's names from `fleet/data/nvidia/packages.yaml` (for example
        `nvidia-driver-580-open` / `nvidia-driver` with the `580-open` dnf module stream,
        `cuda-toolkit-13-0`, `datacenter-gpu-manager` for DCGM 3 and
        `datacenter-gpu-manager-4-core` + `-4-cuda13` for DCGM 4). Versions are upstream
        versions; epochs and revisions: `fleet.domain.matrix.packages`.

        Worked out once per release object and family (the model is frozen; a copy is a new
        object): a rollout asks for every host at every step.
        """
        key = id(self)
        entry = _PACKAGES.get(key)
        if entry is None or entry[0]() is not self:
            entry = _PACKAGES[key] = (weakref.ref(self, partial(_forget, key)), {})
        specs = entry[1].get(os_family)
        if specs is None:
            specs = entry[1][os_family] = tuple(self._packages(os_family))
        return list(specs)

    def _packages(self, os_family: OsFamily) -> list[PackageSpec]:
        specs: list[PackageSpec] = []
        for component, version in self.versions().items():
            given = (self.package_names.get(component) or {}).get(os_family)
            if not given and component == "driver":
                given = (self.driver.packages or {}).get(os_family)
            names = list(given) if given else default_names(
                component, version, os_family, flavor=self.driver.flavor, branch=self.branch,
                cuda=self.cuda, cudnn=self.companions.cudnn)
            specs += [PackageSpec(n, version, component) for n in names]
        return specs

    def driver_module_stream(self) -> str:
        """The RHEL dnf module stream that selects branch and flavor: "550-open" or "550-dkms"."""
        return f"{self.branch}-{'open' if self.driver.flavor == 'open' else 'dkms'}"


class GoldenPolicy(_Model):
    """Which release each pool should run: a default, and per-pool overrides."""

    default: Name
    pools: dict[Name, Name] = {}


class BlockedVersion(_Model):
    """A version nobody may roll out, with the reason (an incident, a known regression)."""

    version: CompanionVersion
    reason: str = Field(min_length=1)
    component: Component = "driver"


ClockEventReason = Literal[
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    "display_clock_setting",
]
"""NVML clock event ("throttle") reasons, as the probe and the nvidia-smi parsers name them."""


class Thresholds(_Model):
    """Health-check and audit limits: the one place they are defined and overridden.

    Defaults come from DCGM, Azure NHC and node-health-check practice (shared/reference/nvidia.md
    §3-4); each field names its source. `fleet.domain.checks.run_checks` reads the one-snapshot
    fields; the weekly trend audit and automatic quarantine read the rest (each field says which).

    Counts are per GPU. `*_limit` fields trigger at or above the value, `*_max` fields above it;
    each field says whether crossing it warns or fails.
    """

    # ---------------------------------------------------------------------------------- ECC
    ecc_uncorrectable_max: int = Field(
        default=0, ge=0,
        description="Volatile uncorrectable (DBE) ECC errors tolerated since driver load; above "
        "it the check fails (drain and reset). DCGM fails on any (> 0).",
    )
    ecc_corrected_volatile_max: int = Field(
        default=10_000, ge=0,
        description="Volatile corrected ECC errors since driver load above which the check "
        "warns. Azure NHC's correctable limit (`check_gpu_ecc ... 10000`, applied there to SRAM).",
    )
    ecc_corrected_aggregate_max: int = Field(
        default=20_000_000, ge=0,
        description="Lifetime (aggregate) corrected ECC errors above which the check fails "
        "(RMA triage). Azure NHC H100 config (`check_gpu_ecc 20000000`).",
    )
    ecc_corrected_per_week_max: int = Field(
        default=1000, ge=0,
        description="Weekly growth of aggregate DRAM corrected errors before the trend audit "
        "alerts; site-tunable, NVIDIA gives no number (trend signal, alert on step increases).",
    )
    sram_uncorrectable_max: int = Field(
        default=0, ge=0,
        description="Aggregate SRAM uncorrectable errors tolerated by the audit (Azure NHC fails "
        "on any). The one-snapshot check fails on the driver's SRAM threshold-exceeded flag.",
    )
    # ------------------------------------------------------- page retirement (pre-Ampere)
    retired_pages_limit: int = Field(
        default=63, ge=1,
        description="SBE+DBE retired pages at which the check fails (RMA triage). Current DCGM "
        "(DCGM_LIMIT_MAX_RETIRED_PAGES) uses 63 to match the field diag; older DCGM used 60.",
    )
    retired_pages_dbe_max: int = Field(
        default=15, ge=0,
        description="DBE retired pages above which the check warns (RMA triage); DCGM's "
        "DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT, where more than one new DBE retirement in "
        "a week then fails (the trend audit's part).",
    )
    # ---------------------------------------------------------- row remapping (Ampere+)
    remapped_rows_uncorrectable_limit: int = Field(
        default=512, ge=1,
        description="Uncorrectable remapped rows at which the check fails (DCGM "
        "DCGM_LIMIT_MAX_ROW_REMAP_UNCORRECTABLE; Azure NHC fails above 512).",
    )
    fail_on_remap_pending: bool = Field(
        default=True,
        description="A pending row remap fails the check (true, as DCGM diag and Azure NHC do) "
        "or only warns (false); either way the GPU needs a reset to apply the remap.",
    )
    fail_on_remap_failure: bool = Field(
        default=True,
        description="A row remap failure fails the check (true) or only warns (false); it is "
        "NVIDIA's RMA criterion and DCGM fails on it.",
    )
    # ----------------------------------------------------------------------------- PCIe
    pcie_replay_per_lane_per_min: dict[int, float] = Field(
        default={1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84},
        description="Allowed PCIe replays per minute per lane, by PCIe generation (DCGM "
        "GetExpectedPcieReplayRate, BER 1e-12); the limit is ceil(rate * lanes): x16 Gen4 "
        "~16/min, Gen5 ~31/min. Above it the check warns.",
    )
    pcie_link_only_when_busy: bool = Field(
        default=True,
        description="Judge the PCIe link generation and width only while the GPU is busy: the "
        "link legitimately trains down at idle (nvidia-smi help text).",
    )
    aer_uncorrectable_max: int = Field(
        default=0, ge=0,
        description="Fatal plus non-fatal AER errors on a GPU or its upstream port tolerated "
        "(sysfs counters since boot, or kernel-log events); above it the check fails. The "
        "nvidia driver registers no PCI error handlers, so it cannot recover from any.",
    )
    aer_correctable_per_hour_max: float = Field(
        default=100.0, ge=0,
        description="Correctable AER errors (sysfs TOTAL_ERR_COR) per hour of uptime above "
        "which the check warns; site-tunable, no vendor number.",
    )
    aer_correctable_events_max: int = Field(
        default=20, ge=0,
        description="Correctable AER events in one kernel-log window above which the check "
        "warns; site-tunable, no vendor number.",
    )
    aer_correctable_fleet_factor: float = Field(
        default=10.0, gt=0,
        description="The trend audit alerts when a GPU's weekly correctable AER delta exceeds "
        "this multiple of the fleet median for its platform (nvidia.md §4.3).",
    )
    # ------------------------------------------------------------------ clocks, thermals
    clock_slowdown_reasons: tuple[ClockEventReason, ...] = Field(
        default=(
            "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
            "hw_power_brake_slowdown",
        ),
        description="Clock event reasons that mean thermal or power trouble; any active one "
        "warns. sw_power_cap and gpu_idle are normal operation (DCGM warns on thermal and "
        "power-brake violations).",
    )
    gpu_temperature_max_c: int = Field(
        default=87, ge=0, le=150,
        description="GPU core temperature (deg C) above which the check fails; 87 is the H100's "
        "'GPU Max Operating Temp' (nvidia-smi -q).",
    )
    memory_temperature_max_c: int = Field(
        default=95, ge=0, le=150,
        description="HBM temperature (deg C) above which the check fails; 95 is the H100's "
        "'Memory Max Operating Temp' (nvidia-smi -q). Not read yet: the facts carry no "
        "memory temperature.",
    )
    # ---------------------------------------------------------------------- host config
    require_persistence_mode: bool = Field(
        default=True,
        description="Warn when persistence mode is off (NVIDIA recommends nvidia-persistenced "
        "on datacenter hosts).",
    )
    # ---------------------------------------------------------------------------- fleet
    quarantine_max_share: float = Field(
        default=0.10, gt=0, le=1,
        description="Largest share of a pool that automatic quarantine may take out at once; "
        "beyond it the tool stops and asks a human (a broken monitor must not drain the fleet).",
    )


class Policy(_Model):
    """Golden releases, what the drift audit accepts, what is forbidden, and rollback targets."""

    golden: GoldenPolicy
    allowed: list[Name] = []
    blocked: list[BlockedVersion] = []
    previous: dict[Name, Name] = Field(
        default={}, description="Pool -> last known-good release, the rollback target."
    )
    thresholds: Thresholds = Thresholds()
    end_of_life: Literal["warn", "error"] = Field(
        default="warn",
        description="A release on a driver branch NVIDIA has ended: `warn` (exit 0) or `error` "
        "(`fleet matrix check` exits 1). The matrix stays valid either way.",
    )


class Matrix(_Model):
    """The whole matrix file."""

    schema_version: Literal[1] = 1
    releases: list[Release] = Field(min_length=1)
    policy: Policy
    pools: dict[Name, PoolSettings] = {}
    hygiene: HygieneSettings = HygieneSettings()
    profiles: dict[Name, NodeProfile] = Field(
        default={}, description="Named node profiles (GPU settings, MIG layout, firmware, "
        "links) that pools select with pools.NAME.profile; see fleet.domain.matrix.profiles.")

    def profile_name_for(self, pool: str, gpu_model: str | None = None) -> str | None:
        """The name of the node profile a host of `pool` (with this GPU model) must match."""
        settings = self.pools.get(pool)
        chosen = settings.profile if settings is not None else None
        if isinstance(chosen, dict):
            from_model = gpu_model or (settings.gpu_model if settings else None)
            key = best_key(list(chosen), from_model) if from_model else None
            chosen = chosen[key] if key is not None else None
        return chosen

    def profile_for(self, pool: str, gpu_model: str | None = None) -> NodeProfile | None:
        """The node profile a host of `pool` (with this GPU model) must match, or None."""
        name = self.profile_name_for(pool, gpu_model)
        return self.profiles.get(name) if name is not None else None

    def release(self, name: str) -> Release:
        """The release called `name`; KeyError when the matrix has none."""
        for rel in self.releases:
            if rel.name == name:
                return rel
        raise KeyError(name)

    def golden_name(self, pool: str) -> str:
        return self.policy.golden.pools.get(pool, self.policy.golden.default)

    def golden_for(self, pool: str) -> Release:
        """The release a pool should run: its override, else the default."""
        return self.release(self.golden_name(pool))

    def previous_for(self, pool: str) -> Release | None:
        """The pool's known-good rollback target, if the matrix names one."""
        name = self.policy.previous.get(pool)
        return self.release(name) if name is not None else None

    def allowed_releases(self) -> list[Release]:
        """Releases the drift audit accepts: every golden release plus `policy.allowed`."""
        names = {self.policy.golden.default, *self.policy.golden.pools.values(),
                 *self.policy.allowed}
        return [r for r in self.releases if r.name in names]
