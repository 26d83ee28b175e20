"""NVIDIA's compatibility tables, read from the YAML files shipped in `fleet/data/nvidia/`.

The tables are data, not code, so refreshing them from a new release-notes page is a data edit
with its source next to it (docs/nvidia-data.md). Every row names its source; a fact no stored
NVIDIA page states is kept but marked `unverified`, and the matrix rules say so rather than
warn or fail on it. Lookups are pure functions over the parsed tables: `today` is always passed
in, never read from the clock.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from fleet.domain.versions import compare, cuda_major_minor, driver_branch
from fleet.domain.yaml_source import load_shipped

Designation = Literal["LTSB", "PB", "NFB"]
DESIGNATION_NAMES = {
    "LTSB": "Long Term Support Branch", "PB": "Production Branch", "NFB": "New Feature Branch",
}


@dataclass(frozen=True)
class Source:
    """Where a row's facts come from: the page, its edition or date, and the table."""

    key: str
    url: str | None
    edition: str
    table: str = ""
    cited_as: str = ""  # the short name messages use

    def cite(self) -> str:
        return self.cited_as or self.url or self.edition

    def as_dict(self) -> dict[str, object]:
        return {"key": self.key, "url": self.url, "edition": self.edition,
                "cited_as": self.cited_as}


@dataclass(frozen=True)
class ToolkitRow:
    cuda: str  # X.Y.N: N = 0 for GA, N for "Update N" (11.x: NVIDIA's own patch numbers)
    min_driver: str
    source: str
    label: str | None = None  # "GA", "RC", "Update 1" where the patch number does not say it
    unverified: tuple[str, ...] = ()

    @property
    def verified(self) -> bool:
        return "min_driver" not in self.unverified


@dataclass(frozen=True)
class MvcRow:
    cuda_major: int
    min_driver: str
    below_driver: str | None
    source: str


@dataclass(frozen=True)
class Branch:
    branch: str
    designation: Designation | None  # None: NVIDIA's stored pages state none
    eol: str | None  # "YYYY-MM", the last month of support
    source: str
    eol_listed: str | None = None  # "YYYY-MM" of a page listing it as ended, month unstated
    unverified: tuple[str, ...] = ()
    note: str = ""

    @property
    def eol_date(self) -> date | None:
        """The last day of the end-of-life month (or of the month of the page listing it)."""
        month = self.eol or self.eol_listed
        if month is None or "eol" in self.unverified:
            return None
        year, mon = (int(x) for x in month.split("-"))
        return date(year, mon, calendar.monthrange(year, mon)[1])

    @property
    def eol_known(self) -> bool:
        """Whether NVIDIA states when (or that) this branch ends."""
        return self.eol_date is not None

    def past_eol(self, today: date) -> bool:
        end = self.eol_date
        return end is not None and today > end

    def eol_text(self) -> str:
        """"February 2026", or "by August 2025" when only a later page lists it as ended."""
        if self.eol is not None:
            return month_name(self.eol)
        if self.eol_listed is not None:
            return f"by {month_name(self.eol_listed)} (month not stated)"
        return "an unstated date"

    def label(self) -> str:
        """"R570 (Production Branch)"."""
        kind = DESIGNATION_NAMES[self.designation] if self.designation else "designation unstated"
        if "designation" in self.unverified and self.designation:
            kind += ", designation unverified"
        return f"R{self.branch} ({kind})"


@dataclass(frozen=True)
class Architecture:
    name: str
    first_branch: str | None
    last_branch: str | None
    flavors: tuple[str, ...]
    source: str
    note: str = ""


@dataclass(frozen=True)
class Product:
    """Rules for one product finer than its architecture (module flavor, minimum driver)."""

    name: str
    title: str
    flavors: tuple[str, ...] | None  # None: whatever its architecture allows
    min_driver: str | None
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class NvidiaData:
    toolkit: tuple[ToolkitRow, ...]
    mvc: tuple[MvcRow, ...]
    branches: dict[str, Branch]
    architectures: dict[str, Architecture]
    gpu_models: dict[str, str]
    products: dict[str, Product]
    sources: dict[str, Source]

    def toolkit_lookup(self, cuda: str) -> tuple[ToolkitRow | None, bool]:
        """(row, exact) for a CUDA version: "12.4" is 12.4 GA, "12.4.1" is 12.4 Update 1.

        A patch NVIDIA's table has no row for uses the newest row of its minor below it
        (exact is False then); a minor the table does not know gives (None, False).
        """
        major, minor = cuda_major_minor(cuda)
        parts = cuda.split(".")
        patch = int(parts[2]) if len(parts) > 2 else None
        rows = sorted((r for r in self.toolkit if _minor_of(r.cuda) == (major, minor)),
                      key=lambda r: int(r.cuda.split(".")[2]))
        if not rows:
            return None, False
        if patch is None:
            ga = next((r for r in rows if r.label == "GA"), None)
            return ga or rows[0], True
        fitting = [r for r in rows if int(r.cuda.split(".")[2]) <= patch]
        row = fitting[-1] if fitting else rows[0]
        return row, int(row.cuda.split(".")[2]) == patch

    def toolkit_row(self, cuda: str) -> ToolkitRow | None:
        return self.toolkit_lookup(cuda)[0]

    def mvc_row(self, cuda: str) -> MvcRow | None:
        major, _ = cuda_major_minor(cuda)
        return next((r for r in self.mvc if r.cuda_major == major), None)

    def newest_toolkit(self) -> str:
        return max((r.cuda for r in self.toolkit), key=lambda v: tuple(map(int, v.split("."))))

    def branch(self, driver_or_branch: str) -> Branch | None:
        key = driver_or_branch if "." not in driver_or_branch else driver_branch(driver_or_branch)
        return self.branches.get(key)

    def supported_branches(self, today: date) -> list[Branch]:
        """Production and Long Term Support branches NVIDIA supports on `today`, newest first:
        the replacements for a branch past end of life."""
        out = [b for b in self.branches.values()
               if b.designation in ("PB", "LTSB") and "designation" not in b.unverified
               and b.eol is not None and b.eol_known and not b.past_eol(today)]
        return sorted(out, key=lambda b: int(b.branch), reverse=True)

    def architecture_of(self, gpu_model: str) -> Architecture | None:
        """The architecture of a GPU model name: the longest known prefix wins."""
        best = _longest_prefix(gpu_model, self.gpu_models)
        return self.architectures[self.gpu_models[best]] if best else None

    def product_of(self, gpu_model: str) -> Product | None:
        """Product rules for a GPU model name (longest prefix), or None when it has none."""
        best = _longest_prefix(gpu_model, self.products)
        return self.products[best] if best else None

    def cite(self, key: str) -> str:
        return self.sources[key].cite()


def month_name(month: str) -> str:
    year, mon = month.split("-")
    return f"{calendar.month_name[int(mon)]} {year}"


def _minor_of(cuda: str) -> tuple[int, int]:
    return cuda_major_minor(".".join(cuda.split(".")[:2]))


def _longest_prefix(gpu_model: str, table: Iterable[str]) -> str:
    name = gpu_model.upper().strip()
    for prefix in ("NVIDIA ", "TESLA "):
        name = name.removeprefix(prefix).strip()
    best = ""
    for model in table:
        if name.startswith(model) and len(model) > len(best):
            best = model
    return best


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


def rows_without_source(doc: Mapping[str, Any]) -> list[str]:
    """Where a parsed table has a row whose source is missing or names no `sources` entry."""
    known = set(doc.get("sources") or {})
    out = []
    for section, rows in doc.items():
        if section in ("sources", "gpu_models"):
            continue  # gpu_models map names to architectures; the architecture row cites
        items = rows.items() if isinstance(rows, dict) else enumerate(rows or [])
        for key, row in items:
            if isinstance(row, dict) and row.get("source") not in known:
                out.append(f"{section}[{key}]: source {row.get('source')!r}")
    return out


def read_sourced_table(package: str, name: str) -> dict[str, Any]:
    """A shipped table of `package`, checked to have a `sources` block and a known source on
    every row (fleet.data.nvidia here, fleet.data.frameworks in framework_data)."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    doc = load_shipped(text)
    if not isinstance(doc, dict) or "sources" not in doc:
        raise RuntimeError(f"shipped table {name} is damaged: no sources block")
    missing = rows_without_source(doc)
    if missing:
        raise RuntimeError(f"shipped table {name}: rows without a source: {', '.join(missing)}")
    return doc


def _sources(*docs: Mapping[str, Any]) -> dict[str, Source]:
    out: dict[str, Source] = {}
    for doc in docs:
        for key, spec in doc["sources"].items():
            out[key] = Source(key, spec.get("url"), spec["edition"], spec.get("table", ""),
                              spec.get("cited_as", ""))
    return out


def _tuple(row: dict[str, Any], key: str) -> dict[str, Any]:
    return {**row, key: tuple(row.get(key, ()))}


@lru_cache(maxsize=1)
def load() -> NvidiaData:
    """The shipped tables, parsed once per process."""
    cuda = read_sourced_table("fleet.data.nvidia", "cuda_driver.yaml")
    br = read_sourced_table("fleet.data.nvidia", "branches.yaml")
    return NvidiaData(
        toolkit=tuple(ToolkitRow(**_tuple(r, "unverified"))
                      for r in cuda["toolkit_minimum_driver"]),
        mvc=tuple(MvcRow(**row) for row in cuda["minor_version_compatibility"]),
        branches={r["branch"]: Branch(**_tuple(r, "unverified")) for r in br["branches"]},
        architectures={
            name: Architecture(name=name, **_tuple(spec, "flavors"))
            for name, spec in br["architectures"].items()
        },
        gpu_models={str(k).upper(): v for k, v in br["gpu_models"].items()},
        products={
            str(name).upper(): Product(
                name=str(name), **{**_tuple(spec, "unverified"),
                                   "flavors": tuple(spec["flavors"]) if spec["flavors"] else None})
            for name, spec in br["products"].items()
        },
        sources=_sources(cuda, br),
    )
