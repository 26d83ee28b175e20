"""A real history to read: the demo's (64 simulated hosts, two rollouts, a quarantine, an
incident rollback), made once for the CLI view tests (about 15 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.cli.demo_cmd import write_hygiene_reports
from fleet.jobs.demo import DemoResult, run_demo


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    return run_demo(tmp_path_factory.mktemp("demo"), reporter=write_hygiene_reports)


@pytest.fixture(scope="session")
def demo_db(demo_run: DemoResult) -> Path:
    return Path(demo_run.db)
