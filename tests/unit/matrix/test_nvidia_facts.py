"""NVIDIA's facts as shipped (fleet/data/nvidia, fleet/data/xid.json), each with its source.

Each test names the page the fact comes from; docs/nvidia-data.md says how to refresh them.
"""

from __future__ import annotations

import json
from datetime import date
from importlib import resources
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from fleet.cli.app import app, run
from fleet.domain import nvidia_data
from fleet.domain.checks.xid import xid_catalog
from fleet.domain.matrix.lifecycle import end_of_life

from .helpers import dump, errors, load, release, single, warnings

TODAY = date(2026, 11, 30)
runner = CliRunner()


def _table(name: str) -> dict[str, Any]:
    doc = yaml.safe_load(resources.files("fleet.data.nvidia").joinpath(name).read_text())
    assert isinstance(doc, dict)
    return doc


# ------------------------------------------------------------------------------ sources
@pytest.mark.parametrize("name", ["cuda_driver.yaml", "branches.yaml"])
def test_every_row_names_a_known_source(name: str) -> None:
    doc = _table(name)
    assert nvidia_data.rows_without_source(doc) == []
    for key, spec in doc["sources"].items():
        assert spec["edition"] and spec["cited_as"], key
        assert spec["url"] is None or spec["url"].startswith("https://"), key
    rows = sum(len(v) for k, v in doc.items() if k not in ("sources", "gpu_models"))
    assert rows > 5


@pytest.mark.parametrize("name", ["cuda_driver.yaml", "branches.yaml"])
def test_a_row_without_a_source_is_found(name: str) -> None:
    doc = _table(name)
    section = "toolkit_minimum_driver" if name == "cuda_driver.yaml" else "branches"
    del doc[section][3]["source"]
    doc[section][5]["source"] = "no-such-page"
    assert nvidia_data.rows_without_source(doc) == [
        f"{section}[3]: source None", f"{section}[5]: source 'no-such-page'"]


def test_every_xid_row_names_its_source() -> None:
    doc = json.loads(resources.files("fleet.data").joinpath("xid.json").read_text())
    assert set(doc["sources"]) == {"xid-catalog"}
    assert doc["sources"]["xid-catalog"]["url"].startswith("https://docs.nvidia.com/deploy/")
    missing = [x["id"] for x in doc["xids"]
               if x.get("source") not in doc["sources"] or not x.get("catalog_action")]
    assert missing == []


def test_unverified_rows_say_why() -> None:
    data = nvidia_data.load()
    for b in data.branches.values():
        assert not b.unverified or b.note, b.branch
    assert [r.cuda for r in data.toolkit if not r.verified] == ["13.3.1", "13.3.0"]


# ------------------------------------------------------- branches (Supported Drivers, Table 2)
@pytest.mark.parametrize(
    ("branch", "designation", "eol", "source"),
    [
        ("620", "LTSB", "2029-09", "drivers-620"),  # R620 edition
        ("595", "PB", "2027-03", "drivers-620"),
        ("580", "LTSB", "2028-06", "drivers-620"),  # was August 2028 in the v580 edition
        ("610", "NFB", "2026-08", "drivers-615"),  # R615 edition
        ("535", "LTSB", "2026-06", "drivers-615"),
        ("570", "PB", "2026-02", "drivers-580"),  # v580 edition (Aug 2025)
        ("460", "PB", "2022-01", "drivers-pdf-2021"),  # March 2021 PDF
    ],
)
def test_branch_rows(branch: str, designation: str, eol: str, source: str) -> None:
    row = nvidia_data.load().branch(branch)
    assert row is not None
    assert (row.designation, row.eol, row.source) == (designation, eol, source)


@pytest.mark.parametrize("branch", ["575", "565", "560", "550", "525"])
def test_branches_the_v580_edition_lists_as_ended(branch: str) -> None:
    row = nvidia_data.load().branch(branch)
    assert row is not None and row.source == "drivers-580" and row.eol_listed == "2025-08"
    assert row.past_eol(TODAY) and not row.past_eol(date(2025, 8, 31))


def test_r615_resolves_but_its_lifecycle_is_unverified() -> None:
    row = nvidia_data.load().branch("615.78.08")
    assert row is not None and row.designation is None and "eol" in row.unverified
    found = warnings(single(release("r615", "615.78.08", "13.2.1")))
    assert ["no stored NVIDIA page states the end of life of R615" in w.message
            for w in found] == [True]


def test_supported_replacements_on_2026_11_30() -> None:
    got = [(b.branch, b.designation) for b in nvidia_data.load().supported_branches(TODAY)]
    assert got == [("620", "LTSB"), ("595", "PB"), ("580", "LTSB")]


# ------------------------------------------------------------- end of life in the check
def test_golden_on_r570_warns_that_r570_ended_in_february_2026() -> None:
    data = single(release("r570", "570.133.20", "12.8.1"))
    found = [w for w in warnings(data) if "end of life" in w.message]
    assert len(found) == 1 and found[0].field == "releases[0].driver.version"
    msg = found[0].message
    assert "R570 (Production Branch) reached end of life in February 2026" in msg
    assert "R595 (Production Branch, until March 2027)" in msg
    assert "R580 (Long Term Support Branch, until June 2028)" in msg
    assert "v580 edition" in msg


def test_end_of_life_is_structured_and_takes_today() -> None:
    matrix = load(single(release("r570", "570.133.20", "12.8.1"))).matrix
    assert end_of_life(matrix, date(2026, 2, 28)) == []
    [finding] = end_of_life(matrix, date(2026, 3, 1))
    doc = finding.as_dict()
    assert (doc["branch"], doc["eol"], doc["release"]) == ("570", "2026-02", "r570")
    # R535 (LTSB) is still supported on 2026-03-01
    assert [r["branch"] for r in doc["replacements"]] == ["620", "595", "580", "535"]  # type: ignore


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) through the real exit-code boundary."""
    with pytest.raises(SystemExit) as info:
        run(list(argv))
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _eol_matrix(policy: str | None) -> str:
    data = single(release("r570", "570.133.20", "12.8.1"))
    if policy:
        data["policy"]["end_of_life"] = policy
    return dump(data)


def test_check_warns_and_exits_0_by_default(tmp_path: Any) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(_eol_matrix(None))
    res = runner.invoke(app, ["matrix", "check", str(path), "--today", "2026-11-30"])
    assert res.exit_code == 0, res.output
    assert "warning:" in res.stderr and "February 2026" in res.stderr


def test_policy_makes_end_of_life_an_error_exit_1(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(_eol_matrix("error"))
    code, out, _ = fleet(capsys, "matrix", "check", str(path), "--json", "--today", "2026-11-30")
    assert code == 1, out
    doc = json.loads(out)
    assert doc["schema"] == 1 and doc["valid"] is True and doc["end_of_life_policy"] == "error"
    [eol] = doc["end_of_life"]
    line = _line_of(path.read_text(), "570.133.20")
    assert (eol["branch"], eol["eol"], eol["severity"], eol["line"]) == ("570", "2026-02",
                                                                         "error", line)
    assert eol["source_url"].startswith("https://docs.nvidia.com/datacenter/tesla/drivers/")
    assert [e["field"] for e in doc["errors"]] == ["releases[0].driver.version"]
    code, _, err = fleet(capsys, "matrix", "check", str(path), "--today", "2026-02-28")
    assert code == 0, err  # R570 still supported that day
    code, _, err = fleet(capsys, "matrix", "check", str(path))  # today by the clock: ended
    assert code == 1 and "past end of life (policy.end_of_life: error)" in err


def test_bad_today_is_exit_2(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(_eol_matrix(None))
    code, _, err = fleet(capsys, "matrix", "check", str(path), "--today", "30/11/2026")
    assert code == 2 and "--today: not a date" in err


def test_end_of_life_policy_rejects_other_values() -> None:
    errs = errors(yaml.safe_load(_eol_matrix("fail")))
    assert [e.field for e in errs] == ["policy.end_of_life"]


# ---------------------------------------------------------------------- per-product rules
def test_gh200_needs_the_open_modules() -> None:  # NVIDIA blog on the open modules, July 2024
    errs = errors(single(release("r", "580.95.05", "13.0.2", "proprietary"), gpu="GH200"))
    assert len(errs) == 1 and errs[0].field == "policy.golden.default"
    assert "GH200 Grace Hopper needs the open kernel modules" in errs[0].message
    assert errors(single(release("r", "580.95.05", "13.0.2", "open"), gpu="GH200")) == []
    assert errors(single(release("r", "580.95.05", "13.0.2", "proprietary"), gpu="H100")) == []


def test_gh200_proprietary_is_exit_2_with_file_and_line(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(dump(single(release("r", "580.95.05", "13.0.2", "proprietary"),
                                gpu="GH200")))
    code, _, err = fleet(capsys, "matrix", "check", str(path))
    line = _line_of(path.read_text(), "default: r")
    assert code == 2 and f"{path}:{line}: policy.golden.default:" in err


@pytest.mark.parametrize(("driver", "ok"), [("570.86.16", False), ("570.133.20", True)])
def test_hgx_b200_needs_570_133_20(driver: str, ok: bool) -> None:  # GPU Operator docs
    errs = errors(single(release("r", driver, "12.8.0"), gpu="B200"))
    assert (errs == []) is ok
    if not ok:
        assert "HGX B200 needs 570.133.20 or later" in errs[0].message


def test_rtx_pro_6000_rule_is_unverified_and_says_so() -> None:
    data = single(release("r", "580.95.05", "13.0.2"), gpu="RTX PRO 6000 Blackwell")
    assert errors(data) == []
    assert any("unverified, not checked" in w.message for w in warnings(data))


def test_kepler_resolves_and_ends_at_r470() -> None:  # Architecture Matrix: Kepler -> R470
    arch = nvidia_data.load().architecture_of("Tesla K80")
    assert arch is not None and arch.name == "kepler" and arch.last_branch == "470"


# ------------------------------------------------------------- CUDA tables 2 and 3
def test_11_0_resolves_to_ga_not_the_release_candidate() -> None:
    row, exact = nvidia_data.load().toolkit_lookup("11.0")
    assert row is not None and (row.cuda, row.label, row.min_driver) == ("11.0.2", "GA",
                                                                        "450.51.05")
    assert exact


@pytest.mark.parametrize(("cuda", "fallback"), [
    ("12.3.2", "12.3.1"), ("12.8.2", "12.8.1"), ("12.9.2", "12.9.1"), ("13.0.3", "13.0.2"),
    ("13.1.2", "13.1.1"), ("13.2.2", "13.2.1"),
])
def test_patch_toolkits_without_a_row_fall_back_and_say_so(cuda: str, fallback: str) -> None:
    row, exact = nvidia_data.load().toolkit_lookup(cuda)
    assert row is not None and row.cuda == fallback and not exact
    driver = row.min_driver
    found = warnings(single(release("r", f"{driver}.99" if driver.count(".") == 1 else driver,
                                    cuda)))
    assert any(f"Table 3 has no row for CUDA {cuda}" in w.message for w in found)


def test_12x_minor_version_minimum_is_525() -> None:  # CUDA Minor Version Compatibility guide
    mvc = nvidia_data.load().mvc_row("12.8")
    assert mvc is not None and mvc.min_driver == "525" and mvc.source == "mvc-guide"
    assert nvidia_data.cuda_compatibility(nvidia_data.load(), "12.2", "525.53.01")[0] == "mvc"


# ------------------------------------------------------------------------ Xid catalog
@pytest.mark.parametrize(("xid", "name"), [
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT"),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING"),
    (56, "DISPLAY_CHANNEL_EXCEPTION"),
    (57, "FB_LINK_TRAINING_FAILURE_ERROR"),
    (73, "ROBUST_CHANNEL_NVENC2_ERROR"),
    (136, "ALI_TRAINING_FAIL"),
])
def test_xid_names_match_nvidias_catalog(xid: int, name: str) -> None:
    assert xid_catalog()[xid].name == name


def test_xid_8_is_restart_the_application_not_reset() -> None:
    info = xid_catalog()[8]
    assert info.remediation == "none"
    raw = json.loads(resources.files("fleet.data").joinpath("xid.json").read_text())
    assert next(x for x in raw["xids"] if x["id"] == 8)["catalog_action"].startswith(
        "RESTART_APP")
