"""An `nvidia-smi -q -x` capture nested thousands of elements deep is bad input naming the
file (exit 2), not `internal error: RecursionError` (exit 3) (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.domain.diagnose.parse_smi import parse_smi_xml
from fleet.errors import BadInput
from fleet.facts import facts_from_file
from fleet.probe.hostprobe import MAX_XML_DEPTH, XmlTooDeep, parse_nvsmi_xml, xml_root

REAL = Path(__file__).parents[2] / "data" / "realdata" / "nvidia-smi-xml" / \
    "nvidia-k8s-test-infra__qx-a100.xml"


def deep(levels: int) -> str:
    return ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>550.54.15</driver_version>'
            '\n<gpu id="00000000:07:00.0">\n' + "<a>" * levels + "x" + "</a>" * levels
            + "</gpu>\n</nvidia_smi_log>\n")


def test_a_deep_capture_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    f = tmp_path / "smi.xml"
    f.write_text(deep(50_000))
    with pytest.raises(BadInput) as e:
        facts_from_file(f)
    (p,) = e.value.problems
    assert p.file == str(f) and f"deeper than {MAX_XML_DEPTH} elements" in p.message
    with pytest.raises(BadInput) as e2:
        parse_smi_xml(f.read_text(), name=str(f))
    assert e2.value.problems[0].file == str(f)


def test_the_probe_reads_a_deep_capture_as_an_error() -> None:
    with pytest.raises(XmlTooDeep):
        parse_nvsmi_xml(deep(MAX_XML_DEPTH))


def test_real_captures_and_the_limit_itself_still_parse() -> None:
    assert parse_nvsmi_xml(REAL.read_text())["gpus"]
    assert xml_root("<a>" * MAX_XML_DEPTH + "</a>" * MAX_XML_DEPTH).tag == "a"
    with pytest.raises(XmlTooDeep):
        xml_root("<a>" * (MAX_XML_DEPTH + 1) + "</a>" * (MAX_XML_DEPTH + 1))
