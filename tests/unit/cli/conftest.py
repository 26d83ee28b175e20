"""Fixtures of the CLI tests: a real history to read, the demo's (64 simulated hosts, two
rollouts, a quarantine, an incident rollback), made once for the view tests (about 15 s); and
in-process runs of `fleet`: (exit code, stdout, stderr)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.cli.demo_cmd import write_hygiene_reports
from fleet.jobs.demo import DemoResult, run_demo

Fleet = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"), reporter=write_hygiene_reports)


@pytest.fixture(scope="session")
def demo_db(demo_run: DemoResult) -> Path:
    return Path(demo_run.db)


@pytest.fixture
def fleet_run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """`fleet_run(*argv, stdin=b"...")`: `fleet ARGV` in this process, lines as long as they
    are (never `probe`: it monkey-patches the process for gevent)."""
    from fleet.cli import output

    monkeypatch.setattr(output.console, "_width", 400)
    monkeypatch.setattr(output.stdout, "_width", 400)

    def call(*argv: str, stdin: bytes | None = None) -> tuple[int, str, str]:
        assert "probe" not in argv or "--help" in argv  # the help patches nothing
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        with pytest.raises(SystemExit) as info:
            run(list(argv))
            raise SystemExit(0)
        out, err = capsys.readouterr()
        code = info.value.code
        return (code if isinstance(code, int) else 0), out, err

    return call
