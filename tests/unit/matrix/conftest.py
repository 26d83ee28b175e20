"""Shared fixtures for the matrix tests."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "matrices" / "example.yaml"
BROKEN = ROOT / "tests" / "data" / "matrices"
TODAY = date(2026, 11, 30)


@pytest.fixture()
def example_text() -> str:
    return EXAMPLE.read_text()
