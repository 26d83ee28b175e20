"""Which MIG profiles each GPU model offers (fleet/data/nvidia/mig_profiles.yaml), and the check
of a mig-parted config against it. Pure lookups over the shipped, sourced table."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from fleet.domain.nvidia_data import read_sourced_table

_PROFILE_RE = re.compile(r"^(?:(\d)c\.)?(\d)g\.(\d+)gb(?:\+me|\+gfx|\+me\.all|-me)?$")


@dataclass(frozen=True)
class MigModel:
    key: str
    names: tuple[str, ...]
    device_ids: tuple[str, ...]
    slices: int
    profiles: dict[str, int]
    source: str
    cited_as: str
    unverified: tuple[str, ...] = ()
    note: str = ""


def _norm(name: str) -> str:
    n = name.upper().strip()
    for prefix in ("NVIDIA ", "TESLA "):
        n = n.removeprefix(prefix).strip()
    return n.replace("-", " ").replace("_", " ")


@lru_cache(maxsize=1)
def mig_models() -> tuple[MigModel, ...]:
    doc = read_sourced_table("fleet.data.nvidia", "mig_profiles.yaml")
    sources = doc["sources"]
    return tuple(
        MigModel(key=str(key), names=tuple(row["names"]),
                 device_ids=tuple(d.upper() for d in row["device_ids"]),
                 slices=int(row["slices"]), profiles={str(k): int(v) for k, v in
                                                     row["profiles"].items()},
                 source=row["source"], cited_as=sources[row["source"]].get("cited_as", ""),
                 unverified=tuple(row.get("unverified", ())), note=row.get("note", ""))
        for key, row in doc["models"].items()
    )


def models_for(gpu: str) -> list[MigModel]:
    """The table's rows for a GPU model name, a pool's gpu_model or a PCI device id.

    A specific name ("NVIDIA H100 80GB HBM3", "0x233010DE") gives its row; a generic one
    ("H100") gives every row it could be, so a check over them is only as strict as the name."""
    if re.fullmatch(r"(0X)?[0-9A-F]{8}", gpu.upper()):
        dev = gpu.upper() if gpu.upper().startswith("0X") else "0X" + gpu.upper()
        return [m for m in mig_models() if dev in {d.upper() for d in m.device_ids}]
    name = _norm(gpu)
    exact = [m for m in mig_models() if any(name.startswith(_norm(n)) for n in m.names)]
    if exact:
        return exact
    return [m for m in mig_models() if any(_norm(n).startswith(name) for n in m.names)]


def compute_slices(profile: str) -> int | None:
    """The GPU-instance slices of a profile name ("3g.40gb" -> 3, "1c.3g.40gb" -> 3)."""
    m = _PROFILE_RE.match(profile)
    return int(m.group(2)) if m else None


def layout_problems(mig_devices: dict[str, int], models: list[MigModel],
                    what: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) of one GPU's `mig-devices` against the table rows it may be.

    Each profile must be one the model offers, at most its instance count, and the instances
    together within the GPU's compute slices. Placement (which start slot each takes) is left to
    the driver. With several candidate rows (a generic model name), a profile is accepted when
    any row offers it."""
    errors: list[str] = []
    warnings: list[str] = []
    for profile, count in mig_devices.items():
        if _PROFILE_RE.match(profile) is None:
            errors.append(f"{profile!r} is not a MIG profile name (like 1g.10gb, 1g.10gb+me, "
                          "1c.3g.40gb)")
            continue
        if not models:
            continue
        gi = re.sub(r"^\dc\.", "", profile)
        offering = [m for m in models if gi in m.profiles]
        if not offering:
            names = sorted({p for m in models for p in m.profiles})
            errors.append(f"{what} offers no MIG profile {gi!r} (it offers: "
                          f"{', '.join(names)}; {models[0].cited_as})")
            continue
        if all(gi in m.unverified for m in offering):
            warnings.append(f"MIG profile {gi!r} on {what} is unverified: "
                            f"{offering[0].note or 'no stored NVIDIA page states it'}")
        most = max(m.profiles[gi] for m in offering)
        if profile == gi and count > most:
            errors.append(f"{count} x {gi}: {what} fits at most {most} "
                          f"({offering[0].cited_as})")
    if models:
        used = sum((compute_slices(p) or 0) * n for p, n in mig_devices.items()
                   if not re.match(r"^\dc\.", p))
        room = max(m.slices for m in models)
        if used > room:
            errors.append(f"the GPU instances take {used} compute slices; {what} has {room}")
    return errors, warnings
