"""Every command the tool tells the operator to type works as printed (issue 30).

`fleet history migrate --db PATH`, printed by every reading command that finds no database
and by docs/exit-codes.md, failed with "No such option: --db". Here every backticked
`fleet ...` in a string of the package that is not a docstring (messages, help texts, notes)
and in docs/exit-codes.md is parsed against the command tree as click would run it (nothing runs):
placeholders (INVENTORY, PATH, an f-string field) get a sample value, `a|b` stands for each
alternative. The database hint is also run for real, as the error printed it.
"""

from __future__ import annotations

import ast
import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from fleet.cli.app import build_app, run
from fleet.cli.examples import parse_command
from fleet.errors import ExitCode

ROOT = Path(__file__).resolve().parents[3]
HINT = re.compile(r"`(fleet [^`]+)`")
SAMPLE = {"INVENTORY": "inv.py", "PATH": "fleet.db", "FILE": "m.yaml", "DIR": "out",
          "POOL": "h100", "N": "1", "ID": "1", "HOST": "gpu-01"}
FIELD = {"act": "promote"}  # an f-string field that names a command, not a value


def _render(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                assert isinstance(v, ast.FormattedValue)
                parts.append(FIELD.get(ast.unparse(v.value), "1"))
        return "".join(parts)
    return None


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstrings: they document the code (a command's is its --help, whose
    examples test_help.py parses), hints are in messages."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


_MESSAGES: list[str] = [(ROOT / "docs" / "exit-codes.md").read_text()]


def printed_hints() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for path in sorted((ROOT / "fleet").rglob("*.py")):
        if path.name == "examples.py":  # parsed by test_help.py
            continue
        source = path.read_text()
        if "`fleet " not in source:
            continue
        tree = ast.parse(source)
        skip = _docstrings(tree) | {  # an f-string's parts: read with the f-string
            id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if id(node) in skip or isinstance(node, ast.FormattedValue):
                continue
            text = _render(node)
            if text and "`fleet " in text:
                _MESSAGES.append(text)
                found += [(f"{path.relative_to(ROOT)}", h) for h in HINT.findall(text)]
    doc = ROOT / "docs" / "exit-codes.md"
    found += [("docs/exit-codes.md", h) for h in HINT.findall(doc.read_text())]
    return sorted(set(found))


def expand(hint: str) -> list[list[str]]:
    """The command lines a hint stands for, with sample values for its placeholders."""
    words = shlex.split(hint)[1:]
    choices = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
    return [[SAMPLE.get(w, w) for w in combo] for combo in itertools.product(*choices)]


HINTS = printed_hints()
_ROOT_CMD: list[Any] = []


def _root() -> Any:
    if not _ROOT_CMD:
        _ROOT_CMD.append(typer.main.get_command(build_app()))
    return _ROOT_CMD[0]


def test_the_hints_are_found() -> None:
    """The scan sees the hints it is for (an empty scan would pass everything)."""
    hints = {h for _, h in HINTS}
    assert "fleet history migrate --db {path}" in hints or any(
        h.startswith("fleet history migrate --db") for h in hints)
    assert any(h.startswith("fleet rollout promote") for h in hints)
    assert len(hints) > 15


RUN = re.compile(r"(?:run|with|try|then)\s+`(fleet [^`]+)`")


def _runs_as_printed(hint: str) -> bool:
    """Whether some message tells the operator to type `hint` (`run ...`, `create it with
    ...`): it must then parse whole; elsewhere a hint may name a command (`` `fleet lab
    reset` needs root``) without its required arguments, but never an option or a command
    that does not exist."""
    return any(hint in RUN.findall(" ".join(text.split())) for text in _MESSAGES)




@pytest.mark.parametrize(("where", "hint"), HINTS, ids=[f"{w}:{h}" for w, h in HINTS])
def test_every_printed_hint_parses(where: str, hint: str) -> None:
    if "..." in hint:  # `fleet ... --json | jq`: a pattern, not a command
        return
    whole = _runs_as_printed(hint)
    for argv in expand(hint.replace("{path}", "fleet.db")):
        try:
            parse_command(argv, _root())
        except Exception as exc:  # click's usage errors (typer's vendored click: by name)
            if whole or not _incomplete(exc):  # no such option, command or value
                raise AssertionError(f"{where}: `{shlex.join(['fleet', *argv])}`: "
                                     f"{type(exc).__name__}: {exc}") from exc


def _incomplete(exc: Exception) -> bool:
    """A usage error that only says something is missing (a required argument or option,
    an option's value, a group's command)."""
    name = type(exc).__name__
    return name in ("MissingParameter", "NoArgsIsHelpError") or (
        name == "BadOptionUsage" and "requires an argument" in str(exc))


def test_the_no_database_hint_runs_as_printed(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "none-yet.db"
    with pytest.raises(SystemExit) as info:
        run(["check", "--db", str(db)])
    assert info.value.code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    hint = next(h for h in HINT.findall(" ".join(err.split())) if "migrate" in h)
    with pytest.raises(SystemExit) as info:
        run(shlex.split(hint)[1:])
    assert info.value.code == 0, capsys.readouterr().err
    assert db.is_file()
    with pytest.raises(SystemExit) as info:  # the database is there now: no longer exit 2
        run(["check", "--db", str(db)])
    assert info.value.code == ExitCode.INCOMPLETE
