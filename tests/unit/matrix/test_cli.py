"""`fleet matrix check|show|diff` through typer's runner and the real exit-code boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from fleet.cli.app import app, run

from .conftest import BROKEN, EXAMPLE, ROOT
from .helpers import dump, example_data
from .test_loader import mutated_examples

runner = CliRunner()


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        run(argv)
        raise SystemExit(0)
    return int(info.value.code or 0)


def test_check_valid() -> None:
    result = runner.invoke(app, ["matrix", "check", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.stdout  # a result (issue 30); the warnings stay on stderr


def test_check_json_valid() -> None:
    result = runner.invoke(app, ["matrix", "check", str(EXAMPLE), "--json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["valid"] is True and report["errors"] == []


def test_check_invalid_exits_2_with_every_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["matrix", "check", str(BROKEN / "shell_metachar.yaml")]) == 2
    err = capsys.readouterr().err
    assert "shell_metachar.yaml:4: releases[0].driver.version:" in err
    assert "shell_metachar.yaml:8: releases[0].cuda:" in err
    assert "Traceback" not in err


def test_check_json_invalid(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["matrix", "check", str(BROKEN / "float_version.yaml"), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False
    assert [e["line"] for e in report["errors"]] == [3, 4, 6]


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["matrix", "check", "does-not-exist.yaml"]) == 2
    err = capsys.readouterr().err
    assert "does-not-exist.yaml: no such file" in err and "Traceback" not in err
    assert _exit_code(["matrix", "show", "does-not-exist.yaml"]) == 2
    assert _exit_code(["matrix", "diff", str(EXAMPLE), "does-not-exist.yaml"]) == 2


def test_show() -> None:
    result = runner.invoke(app, ["matrix", "show", str(EXAMPLE)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "r595-cuda13.2" in result.stdout and "h100-canary" in result.stdout
    dumped = json.loads(runner.invoke(app, ["matrix", "show", str(EXAMPLE), "--json"]).stdout)
    assert dumped["policy"]["golden"]["default"] == "r580-cuda13.0"
    assert dumped["pools"]["h100"]["rollout"]["waves"] == [1, 5, "20%"]


def test_diff(tmp_path: Path) -> None:
    data = example_data()
    data["policy"]["golden"]["default"] = "r595-cuda13.2"
    new = tmp_path / "new.yaml"
    new.write_text(dump(data))
    result = runner.invoke(app, ["matrix", "diff", str(EXAMPLE), str(new), "--json"])
    assert result.exit_code == 0, result.output
    pools = {p["pool"]: p for p in json.loads(result.stdout)["pools"]}
    driver = pools["a100"]["changes"][0]
    assert driver == {"component": "driver", "old": "580.95.05", "new": "595.58.03",
                      "kind": "branch_switch", "direction": "upgrade"}
    human = runner.invoke(app, ["matrix", "diff", str(EXAMPLE), str(new)],
                          env={"COLUMNS": "200"})
    assert "branch_switch" in human.stdout


def test_help_texts() -> None:
    for sub in ("check", "show", "diff"):
        result = runner.invoke(app, ["matrix", sub, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "Usage" in result.stdout


@pytest.mark.parametrize("case", ["yaml_syntax", "empty", "duplicate_key", "wrong_type"])
def test_console_script_exit_code(case: str) -> None:
    fleet = Path(sys.executable).with_name("fleet")
    proc = subprocess.run([str(fleet), "matrix", "check", str(BROKEN / f"{case}.yaml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "error" in proc.stderr


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=mutated_examples())
def test_cli_on_mutated_matrices_exits_0_or_2(text: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    assert _exit_code(["matrix", "check", str(path)]) in (0, 2)
    assert "internal error" not in capsys.readouterr().err
