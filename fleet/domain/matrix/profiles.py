"""Node profiles: the GPU settings, MIG layout, firmware and links a pool's hosts must show.

A matrix's top-level `profiles:` names them; `pools.NAME.profile` selects one (a name, or a
mapping of GPU model -> name). Every field is optional: absent means "not checked". The
`node.*` checks (fleet.domain.checks.node_*) compare a host's facts with its pool's profile.

The MIG layout is mig-parted's own file format (`version: v1`, `mig-configs`, each config a list
of `devices`, `device-filter`, `mig-enabled`, `mig-devices`), given inline (`mig.layout`) or as a
file beside the matrix (`mig.file`, read by the loader), with the config to use (`mig.config`).
Layouts are checked against the sourced table of MIG profiles (fleet/data/nvidia/mig_profiles.yaml)
by fleet.domain.matrix.profile_rules.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from fleet.domain.matrix.base import Model as _Model
from fleet.domain.versions import NAME_RE

ComputeModeSetting = Literal["default", "exclusive_process", "prohibited"]
GpuModelKey = Annotated[str, Field(min_length=1, max_length=64)]
_FW_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
FirmwareString = Annotated[str, Field(pattern=_FW_RE)]


def _name(value: str) -> str:
    if not NAME_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid name (letters, digits, . _ -)")
    return value


ProfileName = Annotated[str, AfterValidator(_name)]


class ApplicationClocks(_Model):
    memory_mhz: int = Field(gt=0, le=100_000)
    graphics_mhz: int = Field(gt=0, le=100_000)


class Clocks(_Model):
    """Either application clocks (`nvidia-smi -ac`) or a locked range (`nvidia-smi -lgc`)."""

    applications: ApplicationClocks | None = None
    locked_graphics_mhz: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Clocks:
        if self.applications is not None and self.locked_graphics_mhz is not None:
            raise ValueError("give applications or locked_graphics_mhz, not both")
        if self.applications is None and self.locked_graphics_mhz is None:
            raise ValueError("give applications {memory_mhz, graphics_mhz} or "
                             "locked_graphics_mhz [min, max]")
        lo_hi = self.locked_graphics_mhz
        if lo_hi is not None and not 0 < lo_hi[0] <= lo_hi[1]:
            raise ValueError(f"locked_graphics_mhz {list(lo_hi)}: expected [min, max] with "
                             "0 < min <= max")
        return self


class GpuSettings(_Model):
    persistence_mode: bool | None = None
    ecc: bool | None = None
    compute_mode: ComputeModeSetting | None = None
    power_limit_w: float | Literal["default", "max"] | None = Field(
        default=None, description="Watts, or the GPU's own default or maximum limit.")
    clocks: Clocks | None = None
    count: int | None = Field(default=None, ge=1, le=64, description="GPUs per host.")

    @model_validator(mode="after")
    def _positive_power(self) -> GpuSettings:
        p = self.power_limit_w
        if isinstance(p, float) and not 0 < p <= 5000:
            raise ValueError(f"power_limit_w {p:g}: expected watts in (0, 5000], "
                             "'default' or 'max'")
        return self


class MigDeviceGroup(_Model):
    """One entry of a mig-parted config: which GPUs, and the MIG devices on each."""

    devices: Literal["all"] | list[Annotated[int, Field(ge=0, le=63)]]
    device_filter: str | list[str] | None = Field(default=None, alias="device-filter")
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, Annotated[int, Field(ge=0, le=8)]] = Field(
        default={}, alias="mig-devices")

    def filters(self) -> list[str]:
        f = self.device_filter
        return [] if f is None else [f] if isinstance(f, str) else list(f)


def overlap(groups: list[MigDeviceGroup]) -> str | None:
    """Two entries of one config that can match the same GPU: the same index (or `all`) and no
    device-filter telling them apart. nvidia-mig-parted applies every matching entry in turn,
    so such a layout ends otherwise than it reads (or fails on the host, e.g. devices asked for
    after a later entry turned MIG off); fleet refuses it when the matrix loads."""
    for i, a in enumerate(groups):
        for j in range(i + 1, len(groups)):
            b = groups[j]
            same_gpus = a.devices == "all" or b.devices == "all" or set(a.devices) & set(b.devices)
            fa, fb = {f.lower() for f in a.filters()}, {f.lower() for f in b.filters()}
            if same_gpus and (not fa or not fb or fa & fb):
                return (f"entries {i} and {j} can both match the same GPU (devices "
                        f"{a.devices} and {b.devices}); nvidia-mig-parted would apply both in "
                        "turn: list each GPU in one entry only")
    return None


class MigPartedFile(_Model):
    """mig-parted's configuration file (version v1)."""

    version: Literal["v1"]
    mig_configs: dict[str, list[MigDeviceGroup]] = Field(alias="mig-configs", min_length=1)

    @model_validator(mode="after")
    def _no_overlap(self) -> MigPartedFile:
        for name, groups in self.mig_configs.items():
            why = overlap(groups)
            if why:
                raise ValueError(f"mig-configs.{name}: {why}")
        return self


class MigSettings(_Model):
    layout: MigPartedFile | None = None
    file: str | None = Field(default=None, min_length=1, description="mig-parted file beside "
                             "the matrix (relative to the matrix's folder).")
    config: str = Field(min_length=1, description="The mig-configs entry to apply.")

    @model_validator(mode="after")
    def _one_source(self) -> MigSettings:
        if (self.layout is None) == (self.file is None):
            raise ValueError("give the mig-parted layout inline (layout) or as a file beside "
                             "the matrix (file), exactly one")
        if self.file is not None and (self.file.startswith("/") or ".." in self.file.split("/")):
            raise ValueError(f"file {self.file!r}: a path beside the matrix (no '/' start, "
                             "no '..')")
        return self

    def groups(self) -> list[MigDeviceGroup] | None:
        """The chosen config's entries (None until a file layout has been read)."""
        if self.layout is None:
            return None
        return self.layout.mig_configs.get(self.config)


class Firmware(_Model):
    vbios: dict[GpuModelKey, list[FirmwareString]] | None = Field(
        default=None, description="GPU model -> allowed VBIOS versions.")
    inforom_image: dict[GpuModelKey, list[FirmwareString]] | None = Field(
        default=None, description="GPU model -> allowed InfoROM image versions.")
    gsp: bool | None = Field(default=None, description="GSP firmware in use (true) or not.")
    all_equal: bool | None = Field(
        default=None, description="Every GPU of a host, and of a pool per model, on one VBIOS.")


class PcieLink(_Model):
    gen: int = Field(ge=1, le=7)
    width: Literal[1, 2, 4, 8, 16, 32]


class Links(_Model):
    pcie: dict[GpuModelKey, PcieLink] | None = Field(
        default=None, description="GPU model -> the PCIe generation and width under load.")
    nvlink_active: int | None = Field(default=None, ge=0, le=64,
                                      description="NVLink links up per GPU.")
    fabric_manager: Literal["required"] | None = None


class NodeProfile(_Model):
    gpu: GpuSettings | None = None
    mig: MigSettings | None = None
    firmware: Firmware | None = None
    links: Links | None = None


PoolProfile = ProfileName | dict[GpuModelKey, ProfileName]
"""`pools.NAME.profile`: one profile for the pool, or one per GPU model."""


def model_matches(key: str, gpu_name: str) -> bool:
    """Whether a GPU-model key of a profile ("H100", "A100-SXM4-80GB") names this GPU (its
    nvidia-smi product name, or a pool's gpu_model): the name starts with the key, ignoring
    case, an "NVIDIA " prefix and the difference between spaces and dashes."""
    return _norm(gpu_name).startswith(_norm(key))


def best_key(keys: list[str], gpu_name: str) -> str | None:
    """The longest key that names this GPU, or None."""
    hits = [k for k in keys if model_matches(k, gpu_name)]
    return max(hits, key=lambda k: len(_norm(k))) if hits else None


def _norm(name: str) -> str:
    n = name.upper().strip()
    for prefix in ("NVIDIA ", "TESLA "):
        n = n.removeprefix(prefix).strip()
    return n.replace("-", " ").replace("_", " ")
