"""A host's GPUs or MIG instances, the denominator of the live gate's throughput per GPU
(fleet.domain.serving_units), on real `nvidia-smi -q` facts and the inventory's count."""

from __future__ import annotations

import json
from typing import Any

from fleet.domain.serving_units import Units, serving_units
from tests.conftest import ROOT

SMI = ROOT / "tests" / "data" / "realdata" / "nvidia-smi-q-text"


def _facts(name: str) -> dict[str, Any]:
    facts: dict[str, Any] = json.loads((SMI / f"{name}.txt.expected.json").read_text())["facts"]
    return facts


def test_a_mig_host_counts_its_mig_instances() -> None:
    facts = _facts("linux-x86_64__nvidia-h200-mig__590.48.01__idle")  # one H200, 5 instances
    assert serving_units(8, facts) == Units(5, "mig", "facts")
    assert serving_units(8, facts).describe() == "5 MIG instances (facts)"  # type: ignore[union-attr]


def test_whole_gpus_from_the_facts_before_the_inventory() -> None:
    facts = _facts("thamada-gls__V100_x8__550.127.05")
    assert serving_units(4, facts) == Units(8, "gpu", "facts")  # what the probe saw
    assert serving_units(4, None) == Units(4, "gpu", "inventory")
    assert serving_units(4, {"gpus": []}) == Units(4, "gpu", "inventory")


def test_mixed_host_counts_instances_and_whole_gpus() -> None:
    facts = {"gpus": [{"index": 0, "mig_mode_current": True, "mig_devices": [{}, {}, {}]},
                      {"index": 1, "mig_mode_current": False, "mig_devices": []},
                      {"index": 2}]}
    assert serving_units(None, facts) == Units(5, "mig", "facts")


def test_unknown_is_a_reason_never_a_count() -> None:
    unread = {"gpus": [{"index": 3, "mig_mode_current": True, "mig_devices": None}]}
    assert serving_units(8, unread) == ("GPU 3 runs MIG and its MIG instances could not be read")
    assert "no MIG instance" in str(serving_units(8, {"gpus": [
        {"mig_mode_current": True, "mig_devices": []}]}))
    for count in (None, 0, -1, True):
        assert serving_units(count, None) == ("GPU count unknown (no facts list its GPUs, no "
                                              "inventory gpu_count)")
    assert "not readable" in str(serving_units(8, {"gpus": ["junk"]}))
