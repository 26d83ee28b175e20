"""The output layer (issue 30): results on stdout, diagnostics on stderr, whole tables, `-o`,
the root's options after the command, a closed pipe that leaves the exit code alone, and
usage errors that list their `problems`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from fleet.cli.app import run
from fleet.cli.table import Grid, show
from fleet.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "matrices" / "example.yaml"
BROKEN = ROOT / "tests" / "data" / "matrices" / "float_version.yaml"

HOST = "gpu-node-with-a-very-long-name-0001.rack17.cluster.example.com"
FIX = "apt-get install --only-upgrade nvidia-driver-550-server=550.127.08-0ubuntu1"
WHY = "the driver is older than the golden release of this pool allows, so the host drifts"


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run(list(argv))
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def _grid() -> Grid:
    g = Grid(("host", "severity", "check", "remediation", "message"),
             prose=("remediation", "message"))
    g.add_row(HOST, "[red]fail[/]", "driver.version", FIX, WHY)
    g.add_row("gpu-02", "ok", "gpu.count", "", "")
    return g


def _render(output: str | None, *, terminal: bool, width: int = 80) -> str:
    buf = io.StringIO()
    show(_grid(), output, Console(file=buf, width=width, force_terminal=terminal,
                                  color_system=None))
    return buf.getvalue()


# ------------------------------------------------------------------ the table renderer
def test_a_pipe_gets_every_row_on_one_line_whole() -> None:
    text = _render(None, terminal=False)
    row = next(line for line in text.splitlines() if HOST in line)
    assert FIX in row and WHY in row and "…" not in text
    assert all(line == line.rstrip() for line in text.splitlines())  # no padding at the end


@pytest.mark.parametrize("width", [80, 40])
def test_a_narrow_terminal_never_cuts_a_name(width: int) -> None:
    text = _render(None, terminal=True, width=width)
    assert "…" not in text and HOST in text and FIX in text
    assert " ".join(text.split()).count(" ".join(WHY.split())) == 1  # wrapped at spaces only


def test_a_wide_terminal_wraps_prose_and_keeps_names() -> None:
    text = _render(None, terminal=True, width=140)
    assert HOST in text and "driver.version" in text and "…" not in text
    assert set(WHY.split()) <= set(text.split())


def test_wide_is_one_line_per_row_on_a_terminal_too() -> None:
    text = _render("wide", terminal=True, width=80)
    assert [line for line in text.splitlines() if HOST in line][0].count(FIX) == 1


def test_tsv_is_plain_tab_separated_with_a_header() -> None:
    lines = _render("tsv", terminal=True).splitlines()
    assert lines[0] == "host\tseverity\tcheck\tremediation\tmessage"
    assert lines[1].split("\t") == [HOST, "fail", "driver.version", FIX, WHY]
    assert lines[2].split("\t") == ["gpu-02", "ok", "gpu.count", "", ""]
    assert "\x1b" not in "".join(lines)


# ------------------------------------------------------------------ commands
LONG = "r570-cuda12.8-a-release-name-longer-than-any-column"


def _long_names(tmp_path: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(EXAMPLE.read_text().replace("r570-cuda12.8", LONG))
    return path


def test_matrix_show_prints_whole_names_in_a_pipe_at_80_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = fleet(capsys, "matrix", "show", str(_long_names(tmp_path)))
    assert code == 0 and "…" not in out
    assert LONG in out and "Releases" in out and "Pools" in out  # the tables: stdout
    assert "Releases" not in err and "warning:" not in out  # the warnings: stderr


def test_matrix_check_ok_is_a_result_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "matrix", "check", str(EXAMPLE))
    assert code == 0 and out.startswith("ok: ") and "ok: " not in err


def test_matrix_show_tsv(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fleet(capsys, "matrix", "show", str(EXAMPLE), "-o", "tsv")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "# Releases" and lines[1].startswith("release\tbranch\tdriver")


def test_o_json_is_the_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = fleet(capsys, "matrix", "show", str(EXAMPLE), "--json")
    _, as_o, _ = fleet(capsys, "matrix", "show", str(EXAMPLE), "-o", "json")
    assert json.loads(as_o) == json.loads(as_json)


def test_global_db_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint the tool prints, `fleet history migrate --db PATH`, works as printed."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "after.db"
    code, _, err = fleet(capsys, "history", "migrate", "--db", str(db))
    assert code == 0, err
    assert db.is_file() and not (tmp_path / "fleet.db").exists()
    code, out, _ = fleet(capsys, "history", "events", "--json", f"--db={db}")
    assert code == 0 and json.loads(out)["events"] == []


def test_usage_error_documents_list_their_problems(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fleet(capsys, "history", "events", "--no-such-flag", "--json")
    assert code == ExitCode.BAD_INPUT
    err = json.loads(out)["error"]
    assert [(p["field"], p["severity"]) for p in err["problems"]] == [("--no-such-flag", "error")]
    assert err["problems"][0]["message"] == err["message"]


# ------------------------------------------------------------------ real processes
def _fleet_proc(*argv: str, **kw: object) -> subprocess.Popen[bytes]:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.Popen([sys.executable, "-m", "fleet", *argv], cwd=ROOT, env=env,
                            **kw)  # type: ignore[call-overload, no-any-return]


def test_a_closed_stdout_pipe_keeps_exit_0() -> None:
    """`fleet matrix show m.yaml | head -1`: the reader is gone before the first write."""
    proc = _fleet_proc("matrix", "show", str(EXAMPLE), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "BrokenPipe" not in err and "internal error" not in err


def test_a_closed_stderr_pipe_keeps_exit_2() -> None:
    """`fleet matrix check bad.yaml 2>&1 | head`: the errors' reader is gone."""
    proc = _fleet_proc("matrix", "check", str(BROKEN), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=60) == ExitCode.BAD_INPUT


def test_help_keeps_option_names_whole_at_80_columns() -> None:
    proc = _fleet_proc("hygiene", "run", "--help", stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)
    text = out.decode()
    assert proc.returncode == 0 and "--apply-quarantine" in text and "…" not in text


def test_a_json_command_leaves_the_next_command_on_stdout(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Commands share the process in tests and embedders: `--json` routes results to stderr
    for its own command only (an order dependency found between two test files)."""
    from typer.testing import CliRunner

    from fleet.cli.app import app

    with pytest.raises(SystemExit):
        run(["--json", "matrix", "check", str(EXAMPLE)])
    capsys.readouterr()
    result = CliRunner().invoke(app, ["matrix", "check", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.stdout
