"""Errors that refer across sections are reported with the file's schema errors, in one run
(issue 28: a policy naming an unknown pool or release was left out while a release was invalid,
so a user fixed the file once per error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.domain.matrix.loader import parse_matrix
from fleet.errors import BadInput, Problem

from .conftest import TODAY
from .helpers import dump, example_data


def problems(data: dict[str, object]) -> list[Problem]:
    with pytest.raises(BadInput) as info:
        parse_matrix(dump(data), "m.yaml", TODAY)
    return info.value.problems


def broken() -> dict[str, object]:
    """The example with one schema error and three cross-section errors."""
    data = example_data()
    data["releases"][2]["cuda"] = "13.2.1x"  # the schema refuses it
    data["policy"]["golden"]["pools"]["h200"] = "r580-cuda13.0"  # no pool h200
    data["policy"]["previous"]["h100"] = "r999"  # no release r999
    data["pools"]["a100"]["profile"] = "nosuch"  # no profile nosuch
    return data


def test_cross_section_errors_come_with_the_schema_errors() -> None:
    found = problems(broken())
    assert [p.field for p in found] == [
        "releases[2].cuda", "policy.golden.pools.h200", "policy.previous.h100",
        "pools.a100.profile"]
    assert all(p.file == "m.yaml" and p.line and p.severity == "error" for p in found)
    messages = [p.message for p in found]
    assert "pool 'h200' is not defined in pools" in messages[1]
    assert "previous release 'r999' is not defined in releases" in messages[2]
    assert "unknown profile 'nosuch'" in messages[3]


def test_a_field_the_schema_refuses_is_reported_once() -> None:
    data = example_data()
    data["policy"]["allowed"].append("r 999;x")  # not a name: the schema says so, once
    data["releases"][0]["driver"]["version"] = "x"
    found = problems(data)
    assert [p.field for p in found] == ["releases[0].driver.version", "policy.allowed[2]"]
    assert "not defined" not in found[1].message


def test_a_release_without_a_valid_entry_still_defines_its_name() -> None:
    """A release whose CUDA is bad is still named: the policy naming it is not an error."""
    data = example_data()
    data["releases"][1]["cuda"] = 13
    assert [p.field for p in problems(data)] == ["releases[1].cuda"]


def test_sections_of_the_wrong_type_define_nothing_and_crash_nothing() -> None:
    data = example_data()
    data["pools"] = ["h100"]
    data["policy"]["previous"] = "h100"
    data["releases"].append("r1")
    found = problems(data)
    assert {p.field for p in found} >= {"pools", "policy.previous", "releases[3]"}
    assert not any("is not defined in pools" in p.message for p in found)


def check(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run(["matrix", "check", str(path), *extra])
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


def test_matrix_check_lists_every_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(dump(broken()))
    code, _out, err = check(path, capsys)
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 4, err
    assert all(ln.startswith(f"error: {path}:") for ln in lines)
    code, out, _err = check(path, capsys, "--json")
    assert code == 2 and len(json.loads(out)["error"]["problems"]) == 4
