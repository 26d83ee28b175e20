from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
