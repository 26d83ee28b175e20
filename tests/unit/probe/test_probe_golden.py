"""Golden tests over real captures (tests/data/realdata, see SOURCES.md there).

Each input has `<input>.expected.json` beside it: the parser's output (host facts plus findings, or
kernel-log events). Set FLEET_REGEN_GOLDEN=1 to rewrite them after a deliberate change, then
review the diff by eye.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleet.cli.logs_cmd import events_from_text
from fleet.domain.checks import run_checks
from fleet.errors import BadInput
from fleet.facts import facts_from_file

DATA = Path(__file__).parents[2] / "data" / "realdata"
REGEN = os.environ.get("FLEET_REGEN_GOLDEN") == "1"

FACT_INPUTS = sorted(
    p
    for d in ("nvidia-smi-xml", "nvidia-smi-q-text", "nvidia-smi-csv")
    for p in (DATA / d).iterdir()
    if not p.name.endswith(".expected.json") and "retired-pages" not in p.name
)
LOG_INPUTS = sorted(p for p in (DATA / "kernel-logs").iterdir() if p.suffix == ".log")


def _check_golden(path: Path, actual: object) -> None:
    expected_path = path.with_name(path.name + ".expected.json")
    text = json.dumps(actual, indent=2, sort_keys=True) + "\n"
    if REGEN or not expected_path.exists():
        expected_path.write_text(text)
        if not REGEN:
            pytest.fail(f"wrote new golden {expected_path.name}; review it and rerun")
    assert json.loads(expected_path.read_text()) == json.loads(text)


def _facts_output(path: Path) -> dict[str, object]:
    facts = facts_from_file(path)
    dumped = facts.to_json_dict()
    dumped["input_file"] = path.name
    return {"facts": dumped, "findings": [f.model_dump(mode="json") for f in run_checks(facts)]}


@pytest.mark.parametrize("path", FACT_INPUTS, ids=lambda p: p.name)
def test_facts_golden(path: Path) -> None:
    _check_golden(path, _facts_output(path))


@pytest.mark.parametrize("path", LOG_INPUTS, ids=lambda p: p.name)
def test_kernel_log_golden(path: Path) -> None:
    events = events_from_text(path.read_text())
    _check_golden(path, [e.model_dump(mode="json") for e in events])


def test_retired_pages_listing_is_rejected_with_its_file() -> None:
    path = (
        DATA / "nvidia-smi-csv" / "linux-x86_64__nvidia-l40s__595.80__idle__query-retired-pages.csv"
    )
    with pytest.raises(BadInput) as exc:
        facts_from_file(path)
    assert exc.value.problems[0].file == str(path)


# Spot checks that document what the goldens must show (reviewed facts, not just snapshots).
def test_a10_remapped_rows_pending() -> None:
    facts = facts_from_file(
        DATA / "nvidia-smi-q-text" / "gpud__a10__535.129.03__remapped-rows-pending.txt"
    )
    g = facts.gpus[0]
    assert (g.remapped_rows_pending, g.remapped_rows_uncorrectable, g.remapped_rows_failure) == (
        True,
        4,
        False,
    )
    assert [(f.check, f.severity.value, f.remediation) for f in run_checks(facts)] == [
        ("remap.pending", "fail", "reset_gpu")  # DCGM diag fails a pending remap
    ]


def test_610_deprecated_driver_version_line() -> None:
    facts = facts_from_file(
        DATA
        / "nvidia-smi-q-text"
        / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04__idle.txt"
    )
    assert facts.versions.driver_library == "610.57.04"
    assert facts.versions.cuda_driver_api == "13.3"


def test_throttle_rename_pre_535_xml() -> None:
    facts = facts_from_file(DATA / "nvidia-smi-xml" / "telegraf__gtx-1660-ti.xml")
    assert facts.versions.driver_library == "418.43"
    assert facts.gpus[0].clock_event_reasons == ["gpu_idle"]


def test_t4_aggregate_correctable_and_gh200_uncorrectable() -> None:
    t4 = facts_from_file(DATA / "nvidia-smi-xml" / "nvidia-k8s-test-infra__qx-t4.xml").gpus[0]
    assert t4.ecc_aggregate_corrected == 1
    gh = facts_from_file(DATA / "nvidia-smi-q-text" / "thamada-gls__GH200__550.127.05.txt").gpus[0]
    assert (gh.ecc_aggregate_uncorrected, gh.remapped_rows_uncorrectable) == (1, 1)
    assert gh.remap_histogram is not None and gh.remap_histogram.high == 1


def test_same_gpu_same_facts_across_formats() -> None:
    q = facts_from_file(
        DATA / "nvidia-smi-q-text" / "linux-x86_64__nvidia-h200__590.48.01__idle.txt"
    )
    c = facts_from_file(
        DATA / "nvidia-smi-csv" / "linux-x86_64__nvidia-h200__590.48.01__idle__query-gpu-full.csv"
    )
    for field in (
        "name",
        "pci_bus_id",
        "pcie_gen_max",
        "pcie_width_max",
        "ecc_mode_current",
        "ecc_aggregate_uncorrected",
        "remapped_rows_pending",
        "mig_mode_current",
        "persistence_mode",
        "remap_histogram",
        "recovery_action",
    ):
        assert getattr(q.gpus[0], field) == getattr(c.gpus[0], field), field


def test_xid_log_events() -> None:
    evs = events_from_text(
        (DATA / "kernel-logs" / "gpud__xid-48-63-94__dbe-rowremap-contained.log").read_text()
    )
    assert [(e.xid, e.pci, e.severity) for e in evs[:3]] == [
        (48, "0000:19:00.0", "memory"),
        (63, "0000:19:00.0", "memory"),
        (94, "0000:19:00.0", "memory"),
    ]
    assert evs[0].line == 2
    nv5 = events_from_text(
        (DATA / "kernel-logs" / "issue__gpud-pr-1174-1160__xid144-145-149-nvlink5.log").read_text()
    )
    assert nv5[0].pci == "0019:01:00.0" and nv5[0].severity == "nvlink"
