"""`nvidia-smi -q -x` and `nvidia-smi -q` -> SmiSnapshot.

The field mapping is the project's (`fleet.probe.hostprobe.gpu_from_tree`, shared with `fleet
facts import` and the probe); this module only adds what a diagnosis needs on top: utilization,
frame-buffer use, performance state and the per-process GPU memory.
"""

from __future__ import annotations

import re
from typing import Any

from fleet.domain.diagnose.model import GpuProcess, GpuState, SmiSnapshot
from fleet.domain.facts import GpuFacts
from fleet.domain.nvsmi.q_text import looks_like_q_text, text_to_tree
from fleet.errors import BadInput
from fleet.probe.hostprobe import XmlTooDeep, _etree_to_tree, gpu_from_tree, xml_root

# What nvidia-smi prints instead of a report when it cannot talk to the driver or finds no GPU.
_FAILURES = (
    "NVIDIA-SMI has failed",
    "Failed to initialize NVML",
    "No devices were found",
    "couldn't communicate with the NVIDIA driver",
    "Unable to determine the device handle",
    "command not found",
    "nvidia-smi: not found",
)
_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")


def smi_failure(text: str) -> str | None:
    """nvidia-smi's own failure line, when the capture is one (not a report)."""
    for line in text.splitlines():
        if any(f.lower() in line.lower() for f in _FAILURES):
            return line.strip()
    return None


def _int(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    m = _NUM.match(value)
    return int(float(m.group(1))) if m else None


def _get(tree: dict[str, Any], *paths: str) -> Any:
    for path in paths:
        node: Any = tree
        for part in path.split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


def _state(tree: dict[str, Any], index: int, processes: list[GpuProcess]) -> GpuState:
    f = GpuFacts.model_validate(gpu_from_tree(tree, index=index))
    pstate = _get(tree, "performance_state")
    reasons = f.clock_event_reasons
    return GpuState(
        index=index,
        name=f.name,
        bus_id=f.pci_bus_id,
        pstate=pstate.strip() if isinstance(pstate, str) and pstate.strip() else None,
        util_gpu=_int(_get(tree, "utilization/gpu_util", "utilization/gpu")),
        util_mem=_int(_get(tree, "utilization/memory_util", "utilization/memory")),
        fb_total_mib=_int(_get(tree, "fb_memory_usage/total")),
        fb_used_mib=_int(_get(tree, "fb_memory_usage/used")),
        clock_sm=f.clock_sm_mhz,
        clock_sm_max=f.clock_max_sm_mhz,
        reasons=list(reasons) if reasons is not None else None,
        power_draw_w=f.power_draw_w,
        power_limit_w=f.power_limit_w,
        temperature_c=f.temperature_c,
        pcie_gen=f.pcie_gen_current,
        pcie_gen_max=f.pcie_gen_max,
        pcie_width=f.pcie_width_current,
        pcie_width_max=f.pcie_width_max,
        pcie_replays=f.pcie_replay_counter,
        ecc_volatile_uncorrected=f.ecc_volatile_uncorrected,
        remap_pending=f.remapped_rows_pending,
        remap_failure=f.remapped_rows_failure,
        retired_pending=f.retired_pages_pending,
        recovery_action=f.recovery_action,
        mig=f.mig_mode_current,
        processes=processes,
    )


def _version(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", value)
    return m.group(1) if m else None


def _check_whole(sections: int, attached: Any, name: str, line: int) -> None:
    """A report without a single GPU section (a capture cut after its header) shows nothing of
    the GPUs: a located error, never healthy. Fewer sections than `Attached GPUs` is fine: that
    is `nvidia-smi -q -i N`, one GPU of several."""
    if sections == 0:
        want = _int(attached)
        said = f"its header says {want} attached GPU(s) but " if want is not None else ""
        raise BadInput.single(f"{said}no GPU section follows: the capture is cut short (or "
                              "empty); collect it again", file=name, line=line, field="GPU")


def parse_smi_xml(text: str, name: str = "nvidia-smi-q.xml") -> SmiSnapshot:
    """`nvidia-smi -q -x`; a capture that is nvidia-smi's failure message is a failed snapshot,
    text that is neither is a located error."""
    import xml.etree.ElementTree as ET  # noqa: N817

    body = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    if "<" not in body:
        failure = smi_failure(text)
        if failure:
            return SmiSnapshot(source="nvidia-smi-xml", failure=failure)
    try:
        root = xml_root(body)
    except XmlTooDeep as exc:
        raise BadInput.single(str(exc), file=name, field="nvidia_smi_log") from None
    except ET.ParseError as exc:
        failure = smi_failure(text)
        if failure:
            return SmiSnapshot(source="nvidia-smi-xml", failure=failure)
        line, col = exc.position
        # the DOCTYPE line was removed in place: line numbers are unchanged
        raise BadInput.single(f"not valid XML (column {col}): {exc}", file=name, line=line,
                              field="nvidia_smi_log") from None
    if root.tag != "nvidia_smi_log":
        raise BadInput.single(f"root element is <{root.tag}>, not <nvidia_smi_log>", file=name,
                              line=1, field="nvidia_smi_log")
    _check_whole(len(root.findall("gpu")), root.findtext("attached_gpus"), name,
                 text.count("\n") + 1)
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        procs = []
        for p in g.findall("processes/process_info"):
            pid = _int(p.findtext("pid"))
            if pid is not None:
                procs.append(GpuProcess(pid, (p.findtext("process_name") or "").strip(),
                                        _int(p.findtext("used_memory")),
                                        (p.findtext("type") or "").strip() or None))
        gpus.append(_state(_etree_to_tree(g), i, procs))
    return SmiSnapshot(
        source="nvidia-smi-xml",
        driver=_version(root.findtext("kmd_version") or root.findtext("driver_version")),
        cuda=_version(root.findtext("cuda_umd_version") or root.findtext("cuda_version")),
        gpus=gpus,
    )


_PROC_KEY = re.compile(r"^\s+(Process ID|Type|Name|Process Name|Used GPU Memory)\s*:\s*(.*)$")


def _text_processes(text: str) -> list[list[GpuProcess]]:
    """Per GPU section, its `Processes` entries (the tree parser keeps only the first)."""
    out: list[list[GpuProcess]] = []
    current: dict[str, str] | None = None
    in_procs = False

    def flush() -> None:
        nonlocal current
        if current is not None and out and (pid := _int(current.get("Process ID"))) is not None:
            name = current.get("Name") or current.get("Process Name") or ""
            kind = (current.get("Type") or "").strip() or None
            out[-1].append(GpuProcess(pid, name.strip(), _int(current.get("Used GPU Memory")),
                                      kind if kind != "N/A" else None))
        current = None

    for raw in text.splitlines():
        if re.match(r"^GPU [0-9A-Fa-f]{4,8}:", raw):
            flush()
            out.append([])
            in_procs = False
            continue
        if re.match(r"^    \S", raw):
            flush()
            in_procs = raw.strip().startswith("Processes")
            continue
        if not in_procs:
            continue
        m = _PROC_KEY.match(raw)
        if m and m.group(1) == "Process ID":
            flush()
            current = {"Process ID": m.group(2)}
        elif m and current is not None:
            current[m.group(1)] = m.group(2)
    flush()
    return out


def parse_smi_text(text: str, name: str = "nvidia-smi-q.txt") -> SmiSnapshot:
    """`nvidia-smi -q`: GPU sections by their `GPU <bus id>` headers."""
    if not looks_like_q_text(text):
        failure = smi_failure(text)
        if failure:
            return SmiSnapshot(source="nvidia-smi-q", failure=failure)
        first = next((i for i, ln in enumerate(text.splitlines(), 1) if ln.strip()), 1)
        raise BadInput.single("not `nvidia-smi -q` output (no 'GPU <bus id>' section and no "
                              "'NVSMI LOG' header)", file=name, line=first, field="GPU")
    top, trees = text_to_tree(text)
    _check_whole(len(trees), top.get("attached_gpus"), name, text.count("\n") + 1)
    procs = _text_processes(text)
    gpus = [_state(t, i, procs[i] if i < len(procs) else []) for i, t in enumerate(trees)]
    return SmiSnapshot(
        source="nvidia-smi-q",
        driver=_version(top.get("kmd_version") or top.get("driver_version")),
        cuda=_version(top.get("cuda_umd_version") or top.get("cuda_version")),
        gpus=gpus,
    )
