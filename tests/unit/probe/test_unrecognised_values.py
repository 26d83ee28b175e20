"""A boolean or enum value the nvidia-smi parsers do not recognise is unreadable, never the
healthy default: `Pending : Yes <note>` read as "No" would pass a GPU with rows waiting to be
remapped (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.domain.checks import run_checks
from fleet.domain.checks.models import Severity
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.nvsmi.q_text import parse_q_text
from fleet.domain.nvsmi.query_csv import parse_query_csv
from fleet.probe.hostprobe import parse_nvsmi_xml

DATA = Path(__file__).parents[2] / "data" / "realdata"
Q_TEXT = DATA / "nvidia-smi-q-text" / "gpud__a10__535.129.03__remapped-rows-pending.txt"
XML = DATA / "nvidia-smi-xml" / "nvidia-k8s-test-infra__qx-a100.xml"


def _q_text(old: str, new: str) -> HostFacts:
    text = Q_TEXT.read_text()
    assert old in text
    return parse_q_text(text.replace(old, new, 1))


def test_q_text_pending_with_a_note_is_unreadable_not_no() -> None:
    facts = _q_text("        Pending                           : Yes",
                    "        Pending                           : Yes <note>")
    g = facts.gpus[0]
    assert g.remapped_rows_pending is None
    assert g.unreadable["remapped_rows_pending"].startswith("unparsable")
    # and it is judged as such: a failure with no remedy, not a pass
    found = [f for f in run_checks(facts) if "gpus.remapped_rows_pending" in f.facts]
    assert [(f.check, f.severity, f.remediation) for f in found] == [
        ("gpu.unparsable", Severity.FAIL, "none")]


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("    Persistence Mode                      : Enabled",
         "    Persistence Mode                      : Enabled-ish", "persistence_mode"),
        ("        Remapping Failure Occurred        : No",
         "        Remapping Failure Occurred        : No (see log)", "remapped_rows_failure"),
        ("        Pending                           : Enabled",
         "        Pending                           : Enabled*", "ecc_mode_pending"),
        ("        Idle                              : Active",
         "        Idle                              : Activated", "clock_event_reasons"),
        ("        Reset Required                    : No",
         "        Reset Required                    : Maybe", "recovery_action"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " not in v else "",
)
def test_q_text_unrecognised_flags_are_unreadable(old: str, new: str, field: str) -> None:
    g = _q_text(old, new).gpus[0]
    assert getattr(g, field) is None
    assert g.unreadable[field] .startswith("unparsable")


def test_q_text_known_words_still_read() -> None:
    g = parse_q_text(Q_TEXT.read_text()).gpus[0]
    assert g.remapped_rows_pending is True
    assert g.remapped_rows_failure is False
    assert g.persistence_mode is True
    assert g.recovery_action == "none"  # Reset Required: No, Drain and Reset Recommended: N/A
    assert g.clock_event_reasons is not None and "gpu_idle" in g.clock_event_reasons


def test_xml_unrecognised_flag_is_unreadable() -> None:
    text = XML.read_text()
    old = "<remapped_row_pending>No</remapped_row_pending>"
    assert old in text
    raw = parse_nvsmi_xml(text.replace(old, "<remapped_row_pending>No?</remapped_row_pending>"))
    g = GpuFacts.model_validate(raw["gpus"][0])
    assert g.remapped_rows_pending is None
    assert g.unreadable["remapped_rows_pending"] .startswith("unparsable")


def test_csv_unrecognised_flag_is_unreadable() -> None:
    text = ("name, remapped_rows.pending, persistence_mode, mig.mode.current\n"
            "NVIDIA A10, Yes <note>, Disabled, Enabled\n")
    g = parse_query_csv(text).gpus[0]
    assert g.remapped_rows_pending is None
    assert g.unreadable["remapped_rows_pending"] .startswith("unparsable")
    assert g.persistence_mode is False and g.mig_mode_current is True
