"""Shared fixtures. Tests that need root, the lab or PostgreSQL skip with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def project_root() -> Path:
    return ROOT


def run_fleet(*args: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a subprocess: exit codes and stderr as users see them."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "fleet", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd or ROOT, timeout=120,
    )


@pytest.fixture
def fleet_cli():
    return run_fleet


# --- CI runs everything: a lab, root or PostgreSQL test that skips there is a failure --------
# scripts/test sets FLEET_TEST_NO_SKIP=1 when it runs as root (as CI does): it has installed
# every system package and started the servers, so a skipped integration test means a missing
# install step, not a machine without root (tests/integration only; unit tests skip for
# reasons of their own, such as a kill that landed before the rollout was recorded).
_skipped_integration: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "tests/integration/" in report.nodeid.replace("\\", "/") \
            and os.environ.get("FLEET_TEST_NO_SKIP") == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _skipped_integration.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_integration:
        print("\nFLEET_TEST_NO_SKIP=1 (root, as in CI): these integration tests skipped, "
              "which here means an install step is missing:", file=sys.stderr)
        for line in _skipped_integration:
            print(f"  {line}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
