"""The operator contract of every command (docs/exit-codes.md), at the process boundary.

Reading commands never create a database; a failed command leaves no new one behind; damaged
databases and directories given as `--db` are named; with `--json` stdout is exactly one JSON
document with a `schema` on any exit code; user text is never read as Rich markup or emoji.

Most cases run `fleet.cli.app.run` in-process (fast); a few run the real console script.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.errors import ExitCode, Problem
from fleet.history import (
    add_snapshot,
    list_events,
    open_history,
    open_quarantine,
    record_event,
    upsert_host,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "matrices" / "example.yaml"
CAPTURE = (ROOT / "tests" / "data" / "realdata" / "nvidia-smi-xml"
           / "nvidia-k8s-test-infra__qx-h100.xml")

READERS = [
    ["check"],
    ["quarantine", "list"],
    ["quarantine", "release", "gpu-01", "--reason", "fixed"],
    ["rollout", "history"],
    ["rollout", "status"],
    ["rollout", "status", "3"],
    ["rollout", "resume", "1"],
    ["rollout", "abort", "1", "--force"],
    ["history", "events"],
    ["history", "hosts"],
]


@pytest.fixture(autouse=True)
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines as long as they are: messages are checked whole."""
    from fleet.cli import output

    monkeypatch.setattr(output.console, "_width", 400)  # undone to None: the width is
    monkeypatch.setattr(output.stdout, "_width", 400)   # the terminal's again


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `fleet ARGV`, run in this process (never `probe`: it
    monkey-patches the process for gevent; see `fleet_cli` for those)."""
    assert "probe" not in argv
    with pytest.raises(SystemExit) as info:
        run(list(argv))
        raise SystemExit(0)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


def one_document(out: str) -> dict[str, object]:
    """stdout is exactly one JSON object carrying the schema version."""
    doc = json.loads(out)  # raises on two documents or trailing text
    assert isinstance(doc, dict) and doc["schema"] == 1
    return doc


def error_of(out: str) -> dict[str, object]:
    doc = one_document(out)
    err = doc["error"]
    assert isinstance(err, dict) and set(err) >= {"code", "message", "where"}
    assert set(err["where"]) == {"file", "line", "field"}  # type: ignore[arg-type]
    return err


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLEET_DB", raising=False)
    return tmp_path


# ------------------------------------------------------------------ missing history
@pytest.mark.parametrize("argv", READERS, ids=lambda a: " ".join(a))
def test_reading_commands_never_create_a_database(
        argv: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, *argv)
    assert code == ExitCode.BAD_INPUT, err
    assert "fleet.db" in err and "fleet history migrate --db fleet.db" in err
    assert "fleet probe" in err
    assert list(cwd.iterdir()) == []  # the default ./fleet.db was not created
    assert out == ""


@pytest.mark.parametrize("argv", READERS[:4], ids=lambda a: " ".join(a))
def test_missing_history_with_json_is_an_error_document(
        argv: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = cwd / "typo.db"
    code, out, _ = fleet(capsys, "--db", str(db), *argv, "--json")
    assert code == ExitCode.BAD_INPUT
    err = error_of(out)
    assert err["code"] == 2 and err["where"] == {"file": str(db), "line": None, "field": "--db"}
    assert "fleet history migrate" in str(err["message"])
    assert not db.exists()


def test_probe_with_a_missing_inventory_leaves_no_database(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("probe", "-i", "nope.py", "--json", cwd=tmp_path, env={"FLEET_DB": ""})
    assert r.returncode == ExitCode.BAD_INPUT and "nope.py" in r.stderr
    assert error_of(r.stdout)["code"] == 2
    assert list(tmp_path.iterdir()) == []


def test_a_failed_writer_never_removes_an_existing_database(fleet_cli, tmp_path: Path) -> None:
    open_history(str(tmp_path / "fleet.db")).close()  # exists, migrated, holds nothing
    r = fleet_cli("probe", "-i", "nope.py", cwd=tmp_path)
    assert r.returncode == ExitCode.BAD_INPUT
    assert (tmp_path / "fleet.db").is_file()


def test_a_new_database_that_recorded_something_is_kept(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with pytest.raises(RuntimeError), open_history(str(db)) as h:
        record_event(h, "t", "s", "kept")
        raise RuntimeError("the command failed after recording")
    assert db.is_file()
    with open_history(str(db), create=False) as h:
        assert [e.message for e in list_events(h)] == ["kept"]


def test_a_new_database_that_recorded_nothing_is_removed_on_failure(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with pytest.raises(RuntimeError), open_history(str(db)):
        raise RuntimeError("bad input found after opening")
    assert list(tmp_path.iterdir()) == []


def test_migrate_still_creates_the_database(cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fleet(capsys, "--db", "h.db", "history", "migrate", "--json")
    assert code == 0
    doc = one_document(out)
    assert doc["changed"] is True and doc["after"] == doc["head"]
    assert (cwd / "h.db").is_file()
    code, out, _ = fleet(capsys, "--db", "h.db", "history", "migrate", "--json")
    assert code == 0 and one_document(out)["changed"] is False


# ------------------------------------------------------------------ bad databases
def _truncated(tmp_path: Path, size: int) -> Path:
    good = tmp_path / "good.db"
    with open_history(str(good)) as h:
        record_event(h, "t", "s", "m")
    cut = tmp_path / f"cut-{size}.db"
    cut.write_bytes(good.read_bytes()[:size])
    return cut


@pytest.mark.parametrize("size", [100, 5000, 40000])
@pytest.mark.parametrize("argv", [["check"], ["history", "events"], ["history", "migrate"]],
                         ids=lambda a: " ".join(a))
def test_truncated_database_names_the_file(
        tmp_path: Path, size: int, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    db = _truncated(tmp_path, size)
    code, out, err = fleet(capsys, "--db", str(db), *argv, "--json")
    assert code == ExitCode.INCOMPLETE, err
    assert "internal error" not in err and "Traceback" not in err
    assert str(db) in err and "damaged or not a SQLite database" in err
    e = error_of(out)
    assert e["code"] == 3 and e["where"] == {"file": str(db), "line": None, "field": "--db"}
    assert db.is_file()  # never removed: it is someone's history


def test_corrupt_pages_are_named_not_internal(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "c.db"
    with open_history(str(db)) as h:
        record_event(h, "t", "s", "m")
    data = bytearray(db.read_bytes())
    for i in range(100, len(data), 7):
        data[i] = (data[i] * 31 + 7) % 256
    db.write_bytes(bytes(data))
    code, _, err = fleet(capsys, "--db", str(db), "history", "events")
    assert code == ExitCode.INCOMPLETE
    assert "internal error" not in err and str(db) in err


def test_directory_as_db_is_bad_input_naming_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["check"], ["history", "migrate"], ["facts", "import", str(CAPTURE)]):
        code, out, err = fleet(capsys, "--db", str(tmp_path), *argv, "--json")
        assert code == ExitCode.BAD_INPUT, err
        assert "--db" in err and "directory" in err
        assert error_of(out)["where"] == {"file": str(tmp_path), "line": None, "field": "--db"}


# ------------------------------------------------------------------ --json everywhere
def test_usage_errors_are_json_documents(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "history", "events", "--no-such-flag", "--json")
    assert code == ExitCode.BAD_INPUT
    e = error_of(out)
    assert e["code"] == 2 and e["where"]["field"] == "--no-such-flag"  # type: ignore[index]
    assert "--no-such-flag" in err
    code, out, _ = fleet(capsys, "history", "events", "--limit", "0", "--json")
    assert code == ExitCode.BAD_INPUT
    assert error_of(out)["where"]["field"] == "--limit"  # type: ignore[index]


def test_bad_input_document_lists_every_problem(capsys: pytest.CaptureFixture[str]) -> None:
    broken = ROOT / "tests" / "data" / "matrices" / "float_version.yaml"
    code, out, _ = fleet(capsys, "matrix", "show", str(broken), "--json")
    assert code == ExitCode.BAD_INPUT
    e = error_of(out)
    assert [p["line"] for p in e["problems"]] == [3, 4, 6]  # type: ignore[union-attr,index]
    assert e["where"]["line"] == 3 and e["where"]["file"] == str(broken)  # type: ignore[index]


def test_matrix_check_json_keeps_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    broken = ROOT / "tests" / "data" / "matrices" / "float_version.yaml"
    code, out, _ = fleet(capsys, "matrix", "check", str(broken), "--json")
    assert code == ExitCode.BAD_INPUT
    doc = one_document(out)
    assert doc["valid"] is False and error_of(out)["code"] == 2


def test_a_command_document_then_a_failure_stays_one_document(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --json` prints the findings, then exits 3 for the unreachable host: no second
    document on stdout."""
    db = tmp_path / "h.db"
    with open_history(str(db)) as h:
        upsert_host(h, "gpu-01", pool="p")
        add_snapshot(h, "gpu-01", taken_at=datetime.now(UTC), reachable=False, source="none",
                     facts={"error": "timed out"})
    code, out, err = fleet(capsys, "--db", str(db), "check", "--json")
    assert code == ExitCode.INCOMPLETE, err
    doc = one_document(out)
    assert doc["unreachable"] == ["gpu-01"] and "error" not in doc


def test_internal_errors_are_json_documents(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("fleet.cli.matrix_cmd._load", boom)
    code, out, err = fleet(capsys, "matrix", "show", str(EXAMPLE), "--json")
    assert code == ExitCode.INCOMPLETE and "internal error" in err
    assert "ZeroDivisionError" in str(error_of(out)["message"])


def test_every_document_carries_the_schema(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    open_history(str(db)).close()
    log = tmp_path / "kern.log"
    log.write_text("[  12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    for argv in (["matrix", "show", str(EXAMPLE)], ["matrix", "check", str(EXAMPLE)],
                 ["matrix", "diff", str(EXAMPLE), str(EXAMPLE)],
                 ["--db", str(db), "history", "events"], ["--db", str(db), "history", "hosts"],
                 ["--db", str(db), "quarantine", "list"], ["--db", str(db), "rollout", "history"],
                 ["lab", "faults"]):
        code, out, err = fleet(capsys, *argv, "--json")
        assert code == 0, (argv, err)
        one_document(out)
    code, out, _ = fleet(capsys, "logs", "parse", str(log), "--json")
    doc = one_document(out)
    assert code == ExitCode.PROBLEMS and doc["events"][0]["xid"] == 79  # type: ignore[index]


def test_facts_parse_json_is_an_object(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = fleet(capsys, "facts", "parse", str(CAPTURE), "--json")
    doc = one_document(out)
    assert doc["files"][0]["file"] == str(CAPTURE)  # type: ignore[index]


def test_trace_from_log_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "access.log"
    log.write_text("".join(
        f'10.0.0.1 - - [10/Oct/2024:13:55:{i:02d} +0000] "POST /v1/x HTTP/1.1" 200 12 "-" "c"\n'
        for i in range(3)))
    code, out, err = fleet(capsys, "bench", "trace-from-log", str(log), "--json")
    assert code == ExitCode.BAD_INPUT and "--output" in err
    assert error_of(out)["where"]["field"] == "--output"  # type: ignore[index]
    trace = tmp_path / "t.jsonl"
    code, out, err = fleet(capsys, "bench", "trace-from-log", str(log), "-o", str(trace), "--json")
    assert code == 0, err
    doc = one_document(out)
    assert doc["requests"] == 3 and doc["output"] == str(trace)
    assert len(trace.read_text().splitlines()) == 3


@pytest.mark.parametrize("argv", [["up"], ["down"], ["status"], ["faults"], ["reset", "h1"],
                                  ["reboot", "h1"], ["inject", "h1", "xid79"]],
                         ids=lambda a: a[0])
def test_lab_commands_take_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fleet(capsys, "lab", *argv, "--help")
    assert code == 0 and "--json" in out


def test_lab_faults_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = fleet(capsys, "lab", "faults", "--json")
    faults = one_document(out)["faults"]
    assert code == 0 and isinstance(faults, list) and {"name", "params", "help"} <= set(faults[0])


# ------------------------------------------------------------------ messages
def test_option_problems_name_the_option_never_a_placeholder() -> None:
    assert str(Problem(None, None, "--via", "expected ssh or slurm")) == \
        "--via: expected ssh or slurm"
    assert str(Problem(None, None, None, "plain")) == "plain"
    assert str(Problem("m.yaml", 3, None, "x")) == "m.yaml:3: x"


def test_cli_option_error_has_no_input_placeholder(fleet_cli) -> None:
    r = fleet_cli("probe", "-i", "nope.py", "--via", "pigeon")
    assert r.returncode == ExitCode.BAD_INPUT
    assert "<input>" not in r.stderr and "'--via'" in r.stderr  # a choice: click's usage error
    assert "'pigeon' is not one of 'ssh', 'slurm'" in r.stderr


# ------------------------------------------------------------------ no markup from users
MARKUP = "v[/x][bold]b[/bold]"


def _matrix_error_at_line_100(tmp_path: Path, name: str = "m.yaml", value: str = MARKUP) -> Path:
    lines = EXAMPLE.read_text().splitlines()
    idx = next(i for i, line in enumerate(lines) if line.strip().startswith('cuda: "'))
    bad = lines[idx].rstrip()[:-1] + f'{value}"'  # the first release's CUDA version, spoiled
    lines = lines[:idx] + ["    # padding"] * (99 - idx) + [bad] + lines[idx + 1:]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_line_100_stays_a_line_number(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    m = _matrix_error_at_line_100(tmp_path, value="x")
    code, _, err = fleet(capsys, "matrix", "check", str(m))
    assert code == ExitCode.BAD_INPUT
    assert f"{m}:100: releases[0].cuda: '" in err and "x' is not a valid CUDA version" in err
    assert "\N{HUNDRED POINTS SYMBOL}" not in err


def test_error_at_line_100_with_markup_in_the_value(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    m = _matrix_error_at_line_100(tmp_path)
    code, _, err = fleet(capsys, "matrix", "check", str(m))
    assert code == ExitCode.BAD_INPUT
    assert f"{m}:100: releases[0].cuda: " in err  # the line number, not an emoji
    assert "\N{HUNDRED POINTS SYMBOL}" not in err
    assert MARKUP in err and "MarkupError" not in err and "internal error" not in err


def test_paths_with_brackets_print_as_written(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "a["
    folder.mkdir()
    good = tmp_path / "a[/x][bold].yaml"
    shutil.copy(EXAMPLE, good)
    code, out, _ = fleet(capsys, "matrix", "check", str(good))
    assert code == 0 and f"ok: {good}:" in out  # a result: stdout
    code, out, err = fleet(capsys, "matrix", "diff", str(good), str(good))
    assert code == 0 and f"{good} -> {good}" in out
    bad = _matrix_error_at_line_100(tmp_path, "a[/y][bold]:100:.yaml")
    code, _, err = fleet(capsys, "matrix", "check", str(bad))
    assert code == ExitCode.BAD_INPUT and f"{bad}:100: " in err


def test_reports_echo_user_text_as_written(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    with open_history(str(db)) as h:
        record_event(h, "note", f"host{MARKUP}", f"reason :100: {MARKUP}", actor="[red]bob")
        open_quarantine(h, "gpu[/x]-01", reason="ecc [/x] rising :fire:", opened_by="[b]",
                        at=datetime.now(UTC))
    code, out, err = fleet(capsys, "--db", str(db), "history", "events")
    assert code == 0, err
    assert f"host{MARKUP}" in out and f"reason :100: {MARKUP}" in out and "[red]bob" in out
    code, out, err = fleet(capsys, "--db", str(db), "quarantine", "list")
    assert code == 0, err
    assert "gpu[/x]-01" in out and "ecc [/x] rising :fire:" in out


def test_an_exception_text_with_markup_is_printed_as_written(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fleet.errors import CouldNotComplete

    def fails(*_a: object, **_k: object) -> None:
        raise CouldNotComplete(f"inventory said {MARKUP} :100:")

    monkeypatch.setattr("fleet.cli.matrix_cmd._load", fails)
    code, _, err = fleet(capsys, "matrix", "show", str(EXAMPLE))
    assert code == ExitCode.INCOMPLETE
    assert f"error: inventory said {MARKUP} :100:" in err


# ------------------------------------------------------------------ the real console script
def test_process_boundary(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("check", "--json", cwd=tmp_path)
    assert r.returncode == ExitCode.BAD_INPUT and "Traceback" not in r.stderr
    assert json.loads(r.stdout)["error"]["where"]["field"] == "--db"
    assert not (tmp_path / "fleet.db").exists()
    r = fleet_cli("--db", str(tmp_path), "history", "events", "--json", cwd=tmp_path)
    assert r.returncode == ExitCode.BAD_INPUT and "--db" in r.stderr
    sqlite3.connect(tmp_path / "x.db").close()  # an empty file is a valid (empty) database
    r = fleet_cli("--db", str(tmp_path / "x.db"), "history", "events", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["events"] == []


def test_a_spinner_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """`working` animates where stderr is a terminal and is a silent stand-in elsewhere (CI
    logs, pipes), where rich's status printed nothing either."""
    from rich.status import Status

    from fleet.cli import output

    monkeypatch.setattr(output.sys.stderr, "isatty", lambda: False)
    with output.working("probing") as quiet:
        quiet.update("still probing")
    assert not isinstance(quiet, Status)
    monkeypatch.setattr(output.sys.stderr, "isatty", lambda: True)
    assert isinstance(output.working("probing"), Status)


def test_the_lazy_consoles_serve_rich_live_displays() -> None:
    """rich's Live (under Progress, and a rollout's live table on a terminal) enters its console
    with `with`: the consoles made on first use take that too."""
    from rich.live import Live
    from rich.progress import Progress

    from fleet.cli import output

    with Live(console=output.console, transient=True):
        pass
    with Progress(console=output.console, transient=True) as progress:
        progress.advance(progress.add_task("x", total=2))
    with output.stdout:
        output.stdout.print("inside", end="")


def _deep_yaml(levels: int) -> str:
    return "releases: " + "[" * levels + "]" * levels + "\n"


def _deep_json(levels: int) -> str:
    return '{"latency_ms": ' + "[" * levels + "]" * levels + "}\n"


@pytest.mark.parametrize(("name", "text", "argv"), [
    # libyaml refuses past its own limit (1,000), then PyYAML's composer recursed once a level
    ("deep.yaml", _deep_yaml(5000), ["matrix", "check"]),
    ("mid.yaml", _deep_yaml(800), ["matrix", "check"]),
    ("deep.json", _deep_json(100_000), ["bench", "compare", "--baseline", "BASE", "--canary"]),
    ("deep-probe.json", _deep_json(100_000), ["facts", "parse"]),
])
def test_deep_nesting_is_bad_input_naming_the_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str,
        argv: list[str]) -> None:
    """A document nested thousands of levels deep is bad input (exit 2, file and line), not an
    internal RecursionError (exit 3)."""
    path = tmp_path / name
    path.write_text(text)
    base = tmp_path / "base.json"
    base.write_text('{"latency_ms": [1.0, 2.0, 3.0]}\n')
    args = [str(base) if a == "BASE" else a for a in argv]
    code, out, err = fleet(capsys, *args, str(path))
    assert code == ExitCode.BAD_INPUT, (out, err)
    assert f"{path}:1:" in err and "nested" in err, err
    assert "RecursionError" not in out + err


def test_the_nesting_scan_skips_strings_and_counts_lines() -> None:
    from fleet.domain.nesting import json_too_deep

    assert json_too_deep('{"a": "[[[[[[", "b": [1]}', limit=2) is None
    assert json_too_deep('{"a": "\\"[[[", "b": [[1]]}', limit=2) == 1
    assert json_too_deep('{\n"a":\n[[[1]]]}', limit=3) == 3
    assert json_too_deep("[" * 5, limit=5) is None


@pytest.mark.parametrize("option", ["--report-dir", "--prom-file"])
def test_hygiene_report_paths_are_checked_before_the_run(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, option: str) -> None:
    """A report folder that is a file (or a textfile that is a folder) is bad input, said
    before any host is probed and before a history is made, not an internal error afterwards."""
    target = tmp_path / "taken"
    if option == "--report-dir":
        target.write_text("a file, not a folder\n")
    else:
        target.mkdir()
    db = tmp_path / "fleet.db"
    code, out, err = fleet(capsys, "--db", str(db), "hygiene", "run", "-m", str(EXAMPLE),
                           "--sim", "4", option, str(target))
    assert code == ExitCode.BAD_INPUT, (out, err)
    assert f"{option}: {target}" in err and "internal error" not in err
    assert not db.exists()
