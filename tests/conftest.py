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
