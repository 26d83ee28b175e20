"""Golden files: each broken matrix in tests/data/matrices/ against its `.expected` lines."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.errors import BadInput, Problem

from .conftest import BROKEN, TODAY

CASES = sorted(BROKEN.glob("*.yaml"))


def _report(case: Path) -> list[str]:
    cwd = os.getcwd()
    os.chdir(case.parent)
    try:
        problems: list[Problem] = load_matrix(case.name, today=TODAY).warnings
    except BadInput as exc:
        problems = exc.problems
    finally:
        os.chdir(cwd)
    return [f"{p.severity}: {p}" for p in problems]


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_golden(case: Path) -> None:
    expected_file = case.with_suffix(".expected")
    got = _report(case)
    if os.environ.get("FLEET_REGEN"):
        expected_file.write_text("\n".join(got) + "\n")
    assert expected_file.exists(), f"missing {expected_file.name}; run with FLEET_REGEN=1"
    assert got == expected_file.read_text().splitlines()


def test_every_case_has_expected() -> None:
    stems = {c.stem for c in CASES}
    assert stems == {e.stem for e in BROKEN.glob("*.expected")}
    assert len(stems) >= 12
