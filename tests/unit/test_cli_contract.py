"""The exit-code contract at the process boundary: what scripts and CI jobs rely on."""

from __future__ import annotations

import pytest

from fleet.errors import BadInput, ExitCode, Problem


def test_version(fleet_cli) -> None:
    r = fleet_cli("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("fleet ")


def test_unknown_flag_is_usage_error(fleet_cli) -> None:
    r = fleet_cli("--no-such-flag")
    assert r.returncode == ExitCode.BAD_INPUT
    assert "Traceback" not in r.stderr


def test_unknown_command_is_usage_error(fleet_cli) -> None:
    r = fleet_cli("frobnicate")
    assert r.returncode == ExitCode.BAD_INPUT


def test_help_lists_exit_codes(fleet_cli) -> None:
    r = fleet_cli("--help")
    assert r.returncode == 0
    assert "3 could not complete" in r.stdout


def test_problem_renders_file_line_field() -> None:
    p = Problem("m.yaml", 12, "releases[0].cuda", "quote it")
    assert str(p) == "m.yaml:12: releases[0].cuda: quote it"


def test_bad_input_keeps_every_problem() -> None:
    err = BadInput([Problem("a", 1, None, "x"), Problem("a", 2, None, "y")])
    assert len(err.problems) == 2
    assert err.exit_code == ExitCode.BAD_INPUT
    assert "a:1" in str(err) and "a:2" in str(err)


@pytest.mark.parametrize("code", list(ExitCode))
def test_codes_are_the_documented_values(code: ExitCode) -> None:
    assert code.value == {"OK": 0, "PROBLEMS": 1, "BAD_INPUT": 2, "INCOMPLETE": 3}[code.name]
