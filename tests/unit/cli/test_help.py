"""Help that teaches (issue 13, point 6): every command of the app, walked as click sees it, has
examples in its `--help` that parse against its own options, and no flag shows a value
placeholder (`--json <bool>`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from fleet.cli.app import build_app
from fleet.cli.examples import EXAMPLES, parse_command

ROOT = Path(__file__).resolve().parents[3]
WIDTH = 80  # a plain terminal: an example must fit on one line of it
PREFIX = re.compile(r"^(sudo\s+)?(\S*/)?fleet\s")  # `sudo .venv/bin/fleet demo --lab`


def _root() -> Any:
    return typer.main.get_command(build_app())


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    if isinstance(cmd, TyperGroup):
        for name, sub in cmd.commands.items():
            yield from _walk(sub, (*path, name))


ROOT_CMD = _root()
TREE = list(_walk(ROOT_CMD))
PATHS = [" ".join(p) for p, _ in TREE]


def _help(path: str) -> str:
    env = {"COLUMNS": str(WIDTH), "TERM": "dumb", "NO_COLOR": "1"}
    r = CliRunner().invoke(build_app(), [*path.split(), "--help"], env=env)
    assert r.exit_code == 0, r.output
    return r.output


def parse_example(line: str) -> tuple[str, ...]:
    """The command `line` runs, parsed as the shell and then click would (nothing runs)."""
    argv = shlex.split(PREFIX.sub("fleet ", line))
    assert argv[0] == "fleet", line
    return parse_command(argv[1:], ROOT_CMD)


@pytest.fixture(autouse=True)
def _no_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """FLEET_INVENTORY or FLEET_MATRIX in the environment would hide an example that lacks a
    required option."""
    for var in ("FLEET_INVENTORY", "FLEET_MATRIX", "FLEET_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(ROOT)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p or "fleet")
def test_every_help_shows_examples_that_parse(path: str) -> None:
    text = _help(path)
    assert "Examples:" in text
    shown = [line.strip() for line in text.splitlines()[text.splitlines().index(
        next(x for x in text.splitlines() if x.strip() == "Examples:")) + 1:] if line.strip()]
    assert shown and all(PREFIX.match(x) for x in shown), shown  # each on a line of its own
    assert any(x.startswith("fleet ") for x in shown)
    assert shown == list(EXAMPLES[path])  # printed as written: no markup eaten, not wrapped
    for line in shown:
        runs = parse_example(line)
        want = tuple(path.split())
        assert runs[:len(want)] == want, f"{line!r} runs {' '.join(runs)}, not {path}"


def test_every_example_is_for_a_command_that_exists() -> None:
    assert sorted(EXAMPLES) == sorted(PATHS)


def test_an_example_with_a_removed_option_fails() -> None:
    """What the walk above relies on: click refuses what the command does not know."""
    with pytest.raises(Exception, match="No such option"):
        parse_example("fleet check --no-such-option")
    with pytest.raises(Exception, match="Missing"):
        parse_example("fleet rollout start --sim 8")  # --matrix is required
    assert parse_example("fleet rollout status 3") == ("rollout", "status")


def _bool_options() -> Iterator[tuple[str, Any, Any]]:
    for path, cmd in TREE:
        ctx = cmd.make_context("fleet", [], resilient_parsing=True)
        for p in cmd.get_params(ctx):  # with --help, --install-completion
            ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if isinstance(p, TyperOption) and (p.is_flag or ann in (bool, bool | None)):
                yield " ".join(path), p, ctx


def test_no_bool_option_renders_a_value_placeholder() -> None:
    seen = 0
    for path, p, ctx in _bool_options():
        seen += 1
        assert p.is_flag, f"{path}: {p.opts} is a bool that takes a value"
        assert not p.display_type_rich(ctx), f"{path}: {p.opts} shows a placeholder"
    assert seen > len(TREE)  # --help of every command, and the --json flags
    for path in PATHS:
        text = _help(path)
        assert "<bool>" not in text, path
        for line in text.splitlines():  # `--json   Machine-readable ...`: nothing in between
            m = re.search(r"(--json|--help)\s+(\S+)", line)
            if m:
                assert not m.group(2).startswith("<"), (path, line)


def test_no_option_shows_a_python_type_as_its_placeholder() -> None:
    """`--perf <list[str]>` says how typer stores it, not what to type: such options name
    their value (`RELEASE=FACTOR`, `SPEC`)."""
    env = {"COLUMNS": "250", "TERM": "dumb", "NO_COLOR": "1"}
    for path in PATHS:
        text = CliRunner().invoke(build_app(), [*path.split(), "--help"], env=env).output
        assert not re.findall(r"<(?:list|dict|tuple|set)\b|\[str\]>", text), (path, text)


def test_examples_fit_a_terminal() -> None:
    long = [x for lines in EXAMPLES.values() for x in lines if len(x) > WIDTH - 2]  # padding
    assert not long


def test_docstrings_reflow_to_the_terminal() -> None:
    """A docstring wrapped at 100 columns reads as paragraphs at 80, not as ragged lines;
    indented or bulleted paragraphs keep their layout."""
    from fleet.cli.examples import reflow

    text = "First line\n    goes on.\n\n    Second para\n    continues here.\n\n    - a\n    - b"
    assert reflow(text) == "First line goes on.\n\nSecond para continues here.\n\n- a\n- b"
    probe = _help("probe")
    assert "Exit 3 when a host is unreachable" in " ".join(probe.split())
    lines = [x.strip() for x in probe.splitlines()]
    assert "a check fails." not in lines  # the docstring's own break, once left dangling


@pytest.mark.parametrize("path", sorted(EXAMPLES), ids=lambda p: p or "fleet")
def test_examples_are_escaped_as_rich_escapes_them(path: str) -> None:
    """`epilog` skips rich's escape for lines it would leave alone (no `[`, no trailing
    backslash): the help must read exactly as with every line escaped."""
    from rich.markup import escape

    from fleet.cli.examples import epilog

    text = epilog(path, markup=True)
    assert text == "Examples:\n" + "\n".join(f"  {escape(x)}" for x in EXAMPLES[path])
