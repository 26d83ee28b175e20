"""NVIDIA's compatibility tables, read from the YAML files shipped in `fleet/data/nvidia/`.

The tables are data, not code, so refreshing them from a new release-notes page is a data edit
with its source next to it. Lookups are pure functions over the parsed tables.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml

from fleet.domain.versions import compare, cuda_major_minor, driver_branch

Designation = Literal["LTSB", "PB", "NFB"]


@dataclass(frozen=True)
class ToolkitRow:
    cuda: str  # X.Y.N: N = 0 for GA, N for "Update N"
    min_driver: str
    verified: bool = True


@dataclass(frozen=True)
class MvcRow:
    cuda_major: int
    min_driver: str
    below_driver: str | None


@dataclass(frozen=True)
class Branch:
    branch: str
    designation: Designation
    eol: str | None  # "YYYY-MM", the last month of support
    verified: bool = True

    @property
    def eol_date(self) -> date | None:
        """The last day of the end-of-life month."""
        if self.eol is None:
            return None
        year, month = (int(x) for x in self.eol.split("-"))
        return date(year, month, calendar.monthrange(year, month)[1])

    def past_eol(self, today: date) -> bool:
        end = self.eol_date
        return end is not None and today > end


@dataclass(frozen=True)
class Architecture:
    name: str
    first_branch: str | None
    last_branch: str | None
    flavors: tuple[str, ...]
    verified: bool = True


@dataclass(frozen=True)
class NvidiaData:
    toolkit: tuple[ToolkitRow, ...]
    mvc: tuple[MvcRow, ...]
    branches: dict[str, Branch]
    architectures: dict[str, Architecture]
    gpu_models: dict[str, str]

    def toolkit_row(self, cuda: str) -> ToolkitRow | None:
        """The table row for a CUDA version: "12.4" is 12.4 GA, "12.4.1" is 12.4 Update 1.

        A patch newer than any row of its minor uses that minor's newest row; a minor the table
        does not know gives None.
        """
        major, minor = cuda_major_minor(cuda)
        parts = cuda.split(".")
        patch = int(parts[2]) if len(parts) > 2 else None
        rows = [r for r in self.toolkit if cuda_major_minor(_mm(r.cuda)) == (major, minor)]
        if not rows:
            return None
        rows.sort(key=lambda r: int(r.cuda.split(".")[2]))
        if patch is None:
            return rows[0]
        fitting = [r for r in rows if int(r.cuda.split(".")[2]) <= patch]
        return fitting[-1] if fitting else rows[0]

    def mvc_row(self, cuda: str) -> MvcRow | None:
        major, _ = cuda_major_minor(cuda)
        return next((r for r in self.mvc if r.cuda_major == major), None)

    def newest_toolkit(self) -> str:
        return max((r.cuda for r in self.toolkit), key=lambda v: tuple(map(int, v.split("."))))

    def branch(self, driver_or_branch: str) -> Branch | None:
        key = driver_or_branch if "." not in driver_or_branch else driver_branch(driver_or_branch)
        return self.branches.get(key)

    def architecture_of(self, gpu_model: str) -> Architecture | None:
        """The architecture of a GPU model name: the longest known prefix wins."""
        name = gpu_model.upper().strip()
        for prefix in ("NVIDIA ", "TESLA "):
            name = name.removeprefix(prefix).strip()
        best = ""
        for model in self.gpu_models:
            if name.startswith(model) and len(model) > len(best):
                best = model
        return self.architectures[self.gpu_models[best]] if best else None


def _mm(cuda: str) -> str:
    return ".".join(cuda.split(".")[:2])


def cuda_compatibility(data: NvidiaData, cuda: str, driver: str) -> tuple[str, str | None]:
    """How a driver runs a CUDA toolkit: ("full" | "mvc" | "too_old" | "unknown", required).

    `required` is the minimum driver for full support (or None when the table lacks the row).
    """
    row = data.toolkit_row(cuda)
    if row is None:
        return "unknown", None
    if compare(driver, row.min_driver) >= 0:
        return "full", row.min_driver
    mvc = data.mvc_row(cuda)
    if mvc is not None and compare(driver, mvc.min_driver) >= 0:
        return "mvc", row.min_driver
    return "too_old", row.min_driver


def _read(name: str) -> dict[str, Any]:
    text = resources.files("fleet.data.nvidia").joinpath(name).read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict) or "source" not in doc:
        raise RuntimeError(f"shipped table {name} is damaged: no source block")
    return doc


@lru_cache(maxsize=1)
def load() -> NvidiaData:
    """The shipped tables, parsed once per process."""
    cuda = _read("cuda_driver.yaml")
    br = _read("branches.yaml")
    return NvidiaData(
        toolkit=tuple(ToolkitRow(**row) for row in cuda["toolkit_minimum_driver"]),
        mvc=tuple(MvcRow(**row) for row in cuda["minor_version_compatibility"]),
        branches={row["branch"]: Branch(**row) for row in br["branches"]},
        architectures={
            name: Architecture(
                name=name,
                first_branch=spec.get("first_branch"),
                last_branch=spec.get("last_branch"),
                flavors=tuple(spec["flavors"]),
                verified=spec.get("verified", True),
            )
            for name, spec in br["architectures"].items()
        },
        gpu_models={str(k).upper(): v for k, v in br["gpu_models"].items()},
    )
