"""`fleet demo` as a new user meets it (issue 13, point 6): after the README's install
(`.venv/bin/pip install -e .`, no virtual environment activated), `.venv/bin/fleet demo` tells
its story on stdout, unwrapped in a pipe, and every command it suggests works as printed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from fleet.cli.app import build_app
from fleet.cli.demo_cmd import as_typed, invoked_as
from fleet.cli.examples import parse_command

ROOT = Path(__file__).resolve().parents[3]
CONSOLE_SCRIPT = Path(sys.executable).parent / "fleet"  # what `pip install -e .` put there


def _typed() -> str:
    """`.venv/bin/fleet`, relative to the checkout as the README types it."""
    if CONSOLE_SCRIPT.is_relative_to(ROOT):
        return str(CONSOLE_SCRIPT.relative_to(ROOT))
    return str(CONSOLE_SCRIPT)


def _sections(stdout: str) -> dict[str, list[str]]:
    """The `$ ...` lines of the story, under the heading they follow."""
    out: dict[str, list[str]] = {"on a real fleet:": [], "look around:": []}
    heading = None
    for line in stdout.splitlines():
        text = line.strip()
        if text in out:
            heading = text
        elif text.startswith("$ ") and heading is not None:
            out[heading].append(text[2:])
        elif not text:
            heading = None
    return out


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, dict[str, str]]:
    """`.venv/bin/fleet demo --keep DIR` typed in the checkout, stdout a pipe, `fleet` not on
    PATH (the README never activates the virtual environment), no COLUMNS."""
    assert CONSOLE_SCRIPT.is_file(), f"{CONSOLE_SCRIPT}: the install the README describes"
    folder = tmp_path_factory.mktemp("demo") / "kept folder"  # a space: printed paths quoted
    bin_dir = str(CONSOLE_SCRIPT.parent)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FLEET_DB")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != Path(bin_dir).resolve())
    r = subprocess.run([_typed(), "demo", "--keep", str(folder)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return folder, r.stdout, r.stderr, env


@pytest.mark.slow
def test_the_story_is_on_stdout_unwrapped(told: tuple[Path, str, str, dict[str, str]]) -> None:
    folder, stdout, stderr, _ = told
    for chapter in ("1. baseline", "2. candidate A", "3. candidate B", "4. weekly hygiene",
                    "5. incident", "look around:"):
        assert chapter in stdout
    assert "1. baseline" not in stderr and "look around" not in stderr
    assert "\x1b[" not in stdout  # no colour codes in a pipe
    rollback = [c for c in _sections(stdout)["on a real fleet:"] if " rollback " in c]
    assert len(rollback) == 1 and rollback[0].endswith("--yes")  # 150 characters, one line
    assert max(len(line) for line in stdout.splitlines()) > 120  # nothing cut at 80 columns
    assert f"database:    {folder / 'fleet.db'}" in stdout


@pytest.mark.slow
def test_every_suggested_command_works_as_printed(
        told: tuple[Path, str, str, dict[str, str]]) -> None:
    """The commands on the demo's own files run, exit 0, in a shell, as printed; those meant
    for a real fleet (its inventory.py) parse against the command's options."""
    folder, stdout, _, env = told
    sections = _sections(stdout)
    look, real = sections["look around:"], sections["on a real fleet:"]
    assert len(look) >= 5 and len(real) >= 8
    prog = shlex.split(look[0])[0]
    assert prog == _typed()  # as typed: `fleet` is not on PATH
    for cmd in look:
        assert shlex.split(cmd)[0] == prog
        r = subprocess.run(cmd, shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Traceback" not in r.stderr
    assert any(str(folder / "fleet.db") in shlex.split(c) for c in look)
    root = typer.main.get_command(build_app())
    for cmd in real:
        argv = shlex.split(cmd, comments=True)  # `# weekly, from cron`, as a shell reads it
        assert argv[0] == prog, cmd
        parse_command(argv[1:], root)  # raises on an option the command does not have


def test_invoked_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "bin" / "fleet"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert invoked_as(".venv/bin/fleet") == ".venv/bin/fleet"  # not on PATH: as typed
    assert invoked_as("fleet") == "fleet"  # found on PATH by the shell
    assert invoked_as("/opt/my tools/fleet") == "'/opt/my tools/fleet'"
    monkeypatch.setenv("PATH", str(script.parent))
    assert invoked_as(str(script)) == "fleet"  # the same file PATH finds
    assert invoked_as("/work/fleet/__main__.py") == f"{shlex.quote(sys.executable)} -m fleet"
    assert as_typed("fleet rollout history", ".venv/bin/fleet") == ".venv/bin/fleet rollout history"
