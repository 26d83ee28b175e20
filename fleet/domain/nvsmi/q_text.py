"""`nvidia-smi -q` (== `-a`) human-readable text -> HostFacts.

The text is turned into the same tree the XML parser builds (labels mapped onto the XML tag
names), then read by the probe's shared `gpu_from_tree`, so both formats have one field mapping.
"""

from __future__ import annotations

import re
from typing import Any

from fleet.domain.facts import HostFacts
from fleet.probe.hostprobe import gpu_from_tree

_GPU_SECTION = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_LINE = re.compile(r"^(\s*)([^:]+?)\s*(?::\s?(.*))?$")

# (parent key in XML terms or "*" for any, text label) -> XML tag
_RENAMES: dict[tuple[str, str], str] = {
    ("gpu", "serial_number"): "serial",
    ("gpu", "gpu_uuid"): "uuid",
    ("mig_mode", "current"): "current_mig",
    ("mig_mode", "pending"): "pending_mig",
    ("ecc_mode", "current"): "current_ecc",
    ("ecc_mode", "pending"): "pending_ecc",
    ("pci", "bus_id"): "pci_bus_id",
    ("pci", "device_id"): "pci_device_id",
    ("pci", "gpu_link_info"): "pci_gpu_link_info",
    ("pci", "replays_since_reset"): "replay_counter",
    ("pci", "replay_number_rollovers"): "replay_rollover_counter",
    ("pci_gpu_link_info", "pcie_generation"): "pcie_gen",
    ("pci_gpu_link_info", "link_width"): "link_widths",
    ("pcie_gen", "max"): "max_link_gen",
    ("pcie_gen", "current"): "current_link_gen",
    ("link_widths", "max"): "max_link_width",
    ("link_widths", "current"): "current_link_width",
    ("temperature", "gpu_current_temp"): "gpu_temp",
    ("clocks", "graphics"): "graphics_clock",
    ("clocks", "sm"): "sm_clock",
    ("clocks", "memory"): "mem_clock",
    ("clocks", "video"): "video_clock",
    ("max_clocks", "graphics"): "graphics_clock",
    ("max_clocks", "sm"): "sm_clock",
    ("max_clocks", "memory"): "mem_clock",
    ("max_clocks", "video"): "video_clock",
    ("*", "sram_uncorrectable_sec_ded"): "sram_uncorrectable_secded",
    ("remapped_rows", "correctable_error"): "remapped_row_corr",
    ("remapped_rows", "uncorrectable_error"): "remapped_row_unc",
    ("remapped_rows", "pending"): "remapped_row_pending",
    ("remapped_rows", "remapping_failure_occurred"): "remapped_row_failure",
    ("remapped_rows", "bank_remap_availability_histogram"): "row_remapper_histogram",
    ("power_readings", "power_limit"): "power_limit",
    ("inforom_version", "image_version"): "img_version",
    ("inforom_version", "power_management_object"): "pwr_object",
    ("applications_clocks", "graphics"): "graphics_clock",
    ("applications_clocks", "memory"): "mem_clock",
    ("default_applications_clocks", "graphics"): "graphics_clock",
    ("default_applications_clocks", "memory"): "mem_clock",
}
_REASON_RENAMES = {"idle": "gpu_idle", "display_clocks_setting": "display_clock_setting"}


def _key(label: str) -> str:
    k = label.strip().lower().replace("-", "_").replace(".", "")
    return re.sub(r"[^a-z0-9]+", "_", k).strip("_")


def _rename(parent: str, key: str) -> str:
    if parent in ("clocks_event_reasons", "clocks_throttle_reasons"):
        return "clocks_reason_" + _REASON_RENAMES.get(key, key)
    if parent == "row_remapper_histogram":
        return "row_remapper_histogram_" + key
    return _RENAMES.get((parent, key)) or _RENAMES.get(("*", key)) or key


def _retired_pages(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "multiple_single_bit_retirement": {"retired_count": node.get("single_bit_ecc")},
        "double_bit_retirement": {"retired_count": node.get("double_bit_ecc")},
        "pending_retirement": node.get(
            "pending_page_blacklist", node.get("pending_page_retirement")
        ),
    }


def text_to_tree(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(top-level fields, [gpu subtree, ...]) from `nvidia-smi -q` text."""
    top: dict[str, Any] = {}
    gpus: list[dict[str, Any]] = []
    # stack of (indent, key-in-xml-terms, dict)
    stack: list[tuple[int, str, dict[str, Any]]] = [(-1, "root", top)]
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("#") or raw.startswith("====="):
            continue
        section = _GPU_SECTION.match(raw)
        if section:
            node: dict[str, Any] = {"@id": section.group(1)}
            gpus.append(node)
            stack = [(-1, "root", top), (0, "gpu", node)]
            continue
        m = _LINE.match(raw.rstrip())
        if not m:
            continue
        indent, label, value = len(m.group(1).expandtabs()), m.group(2), m.group(3)
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent_key, parent = stack[-1][1], stack[-1][2]
        key = _rename(parent_key, _key(label))
        if value is None and (parent_key, key) == ("gpu", "mig_device"):
            # Repeated sections: each "MIG Device" is one more device, as in the XML.
            device: dict[str, Any] = {}
            parent.setdefault("mig_devices", {}).setdefault("mig_device", []).append(device)
            stack.append((indent, key, device))
        elif value is None:
            child: dict[str, Any] = {}
            parent.setdefault(key, child)
            if isinstance(parent[key], dict):
                stack.append((indent, key, parent[key]))
        else:
            # A leaf with deeper lines under it (HW Slowdown -> HW Thermal Slowdown): those lines
            # belong to the same parent, so push the parent again at this indent.
            parent.setdefault(key, value.strip())
            stack.append((indent, parent_key, parent))
    for g in gpus:
        if "mig_mode" in g and "mig_devices" not in g:
            g["mig_devices"] = "None"  # a MIG-capable GPU's -q lists each device; none listed
        rp = g.get("retired_pages")
        if isinstance(rp, dict):
            g["retired_pages"] = _retired_pages(rp)
    return top, gpus


def _version(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", value)
    return m.group(1) if m else None


def looks_like_q_text(text: str) -> bool:
    return "NVSMI LOG" in text[:2000] or bool(re.search(r"^GPU [0-9A-Fa-f]{4,8}:", text, re.M))


def parse_q_text(text: str) -> HostFacts:
    top, trees = text_to_tree(text)
    if not trees and "attached_gpus" not in top:
        raise ValueError("no 'GPU <bus id>' section and no 'Attached GPUs' line")
    gpus = [gpu_from_tree(t, index=i) for i, t in enumerate(trees)]
    attached = top.get("attached_gpus")
    return HostFacts.model_validate(
        {
            "source": "nvidia-smi-q",
            "versions": {
                "driver_library": _version(top.get("kmd_version") or top.get("driver_version")),
                "cuda_driver_api": _version(top.get("cuda_umd_version") or top.get("cuda_version")),
            },
            "gpu_count": int(attached)
            if isinstance(attached, str) and attached.isdigit()
            else len(gpus),
            "gpus": gpus,
        }
    )
