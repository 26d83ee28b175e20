"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` -> HostFacts.

With a header, the field names come from it (units such as ` [W]` are stripped). Without one,
pass `fields` (the `--query-gpu=` list), or keep the command line in the file as a comment
(`# COMMAND: $ nvidia-smi --query-gpu=a,b,c ...`). Unknown fields are ignored.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from typing import Any

from fleet.domain.facts import HostFacts
from fleet.probe.hostprobe import CLOCK_EVENT_BITS, err, flag_word, na_reason, norm_pci

_QUERY = re.compile(r"--query-gpu[= ]([A-Za-z0-9_.,]+)")

# GpuFacts field -> CSV field names in order of preference (renames across drivers included)
_FIELDS: dict[str, tuple[str, ...]] = {
    "index": ("index",),
    "name": ("name", "gpu_name"),
    "uuid": ("uuid", "gpu_uuid"),
    "serial": ("serial", "gpu_serial"),
    "pci_bus_id": ("pci.bus_id", "gpu_bus_id"),
    "pci_device_id": ("pci.device_id",),
    "pcie_gen_current": ("pcie.link.gen.gpucurrent", "pcie.link.gen.current"),
    "pcie_gen_max": ("pcie.link.gen.max",),
    "pcie_width_current": ("pcie.link.width.current",),
    "pcie_width_max": ("pcie.link.width.max",),
    "clock_graphics_mhz": ("clocks.current.graphics", "clocks.gr"),
    "clock_sm_mhz": ("clocks.current.sm", "clocks.sm"),
    "clock_mem_mhz": ("clocks.current.memory", "clocks.mem"),
    "clock_max_graphics_mhz": ("clocks.max.graphics", "clocks.max.gr"),
    "clock_max_sm_mhz": ("clocks.max.sm",),
    "clock_max_mem_mhz": ("clocks.max.memory", "clocks.max.mem"),
    "clock_event_reasons_mask": ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    "temperature_c": ("temperature.gpu",),
    "power_draw_w": ("power.draw.average", "power.draw", "power.draw.instant"),
    "power_limit_w": ("enforced.power.limit", "power.limit"),
    "ecc_mode_current": ("ecc.mode.current",),
    "ecc_mode_pending": ("ecc.mode.pending",),
    "ecc_volatile_corrected": ("ecc.errors.corrected.volatile.total",),
    "ecc_volatile_uncorrected": ("ecc.errors.uncorrected.volatile.total",),
    "ecc_aggregate_corrected": ("ecc.errors.corrected.aggregate.total",),
    "ecc_aggregate_uncorrected": ("ecc.errors.uncorrected.aggregate.total",),
    "ecc_sram_threshold_exceeded": ("ecc.errors.uncorrected.aggregate.sram.thresholdExceeded",),
    "retired_pages_sbe": ("retired_pages.single_bit_ecc.count", "retired_pages.sbe"),
    "retired_pages_dbe": ("retired_pages.double_bit.count", "retired_pages.dbe"),
    "retired_pages_pending": ("retired_pages.pending",),
    "remapped_rows_correctable": ("remapped_rows.correctable",),
    "remapped_rows_uncorrectable": ("remapped_rows.uncorrectable",),
    "remapped_rows_pending": ("remapped_rows.pending",),
    "remapped_rows_failure": ("remapped_rows.failure",),
    "mig_mode_current": ("mig.mode.current",),
    "mig_mode_pending": ("mig.mode.pending",),
    "persistence_mode": ("persistence_mode",),
    "recovery_action": ("gpu_recovery_action",),
    # node state (fleet.domain.node_facts)
    "vbios_version": ("vbios_version",),
    "inforom_image": ("inforom.img",),
    "inforom_oem": ("inforom.oem",),
    "inforom_ecc": ("inforom.ecc",),
    "inforom_pwr": ("inforom.pwr",),
    "gsp_mode": ("gsp.mode.current",),
    "compute_mode": ("compute_mode",),
    "power_limit_default_w": ("power.default_limit",),
    "power_limit_min_w": ("power.min_limit",),
    "power_limit_max_w": ("power.max_limit",),
    "clocks_applications_graphics_mhz": ("clocks.applications.graphics",),
    "clocks_applications_memory_mhz": ("clocks.applications.memory",),
    "clocks_default_applications_graphics_mhz": ("clocks.default_applications.graphics",),
    "clocks_default_applications_memory_mhz": ("clocks.default_applications.memory",),
    "fabric_state": ("fabric.state",),
    "fabric_status": ("fabric.status",),
}
_FLAGS = {
    "ecc_mode_current",
    "ecc_mode_pending",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "mig_mode_current",
    "mig_mode_pending",
    "persistence_mode",
    "ecc_sram_threshold_exceeded",
    "gsp_mode",
}
_TEXT = {"name", "uuid", "serial", "pci_bus_id", "pci_device_id", "recovery_action",
         "vbios_version", "inforom_image", "inforom_oem", "inforom_ecc", "inforom_pwr",
         "compute_mode", "fabric_state", "fabric_status"}
_LOWER = {"recovery_action", "compute_mode", "fabric_state", "fabric_status"}
_FLOAT = {"power_draw_w", "power_limit_w", "power_limit_default_w", "power_limit_min_w",
          "power_limit_max_w"}


def looks_like_csv(text: str) -> bool:
    first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
    return first.count(", ") >= 2 and "<" not in first[:5]


def _value(key: str, raw: str) -> Any:
    v = raw.strip()
    if not v or v.startswith("[") or v.lower() in ("n/a", "not supported"):
        return err(na_reason(v))
    if key in _TEXT:
        return v.lower() if key in _LOWER else v
    if key in _FLAGS:
        return flag_word(v)
    token = v.split()[0]
    try:
        if key == "clock_event_reasons_mask" or token.lower().startswith("0x"):
            return int(token, 16)
        return float(token) if key in _FLOAT else int(float(token))
    except ValueError:
        return err("unparsable", v)


def parse_query_csv(text: str, fields: Sequence[str] | None = None) -> HostFacts:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if fields is None:
        m = next(
            (_QUERY.search(ln) for ln in lines if ln.startswith("#") and _QUERY.search(ln)), None
        )
        fields = m.group(1).split(",") if m else None
    body = [ln for ln in lines if not ln.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(body)), skipinitialspace=True))
    if (
        rows
        and fields is None
        or rows
        and fields is not None
        and [c.split(" [")[0].strip() for c in rows[0]] == list(fields)
    ):
        header, rows = rows[0], rows[1:]
    elif fields is not None:
        header = list(fields)
    else:
        raise ValueError("empty CSV")
    names = [re.sub(r"\s*\[[^\]]*\]$", "", h).strip() for h in header]
    if not any(n in names for alts in _FIELDS.values() for n in alts):
        raise ValueError("no known --query-gpu field in the header: " + ", ".join(names[:5]))
    if "retired_pages.address" in names:
        raise ValueError("a --query-retired-pages listing, not a --query-gpu query")
    gpus: list[dict[str, Any]] = []
    driver = cuda = None
    for i, row in enumerate(rows):
        if len(row) != len(names):
            raise ValueError(f"row {i + 1} has {len(row)} values for {len(names)} fields")
        by_name = dict(zip(names, row, strict=True))
        g: dict[str, Any] = {"index": i}
        for key, alts in _FIELDS.items():
            raw = next((by_name[a] for a in alts if a in by_name), None)
            if raw is not None:
                g[key] = _value(key, raw)
        if isinstance(g.get("pci_bus_id"), str):
            g["pci_bus_id"] = norm_pci(g["pci_bus_id"])
        mask = g.get("clock_event_reasons_mask")
        if isinstance(mask, int):
            g["clock_event_reasons"] = sorted(n for b, n in CLOCK_EVENT_BITS if mask & b)
        hist = [
            by_name.get("remapped_rows.histogram." + k)
            for k in ("max", "high", "partial", "low", "none")
        ]
        if all(h is not None and h.strip().isdigit() for h in hist):
            g["remap_histogram"] = dict(
                zip(
                    ("max", "high", "partial", "low", "none"),
                    (int(h) for h in hist if h is not None),
                    strict=True,
                )
            )
        for name in ("kmd_version", "driver_version"):
            v = by_name.get(name, "").strip()
            if v and not v.startswith("[") and driver is None:
                driver = v.split()[0]
        cuda = cuda or (by_name.get("cuda_version") or "").strip() or None
        gpus.append(g)
    return HostFacts.model_validate(
        {
            "source": "nvidia-smi-csv",
            "versions": {"driver_library": driver, "cuda_driver_api": cuda},
            "gpu_count": len(gpus),
            "gpus": gpus,
        }
    )
