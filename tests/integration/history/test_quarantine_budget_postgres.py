"""The quarantine budget on PostgreSQL (issue 31, defect 7): READ COMMITTED would let every
racer count the same open quarantines; the advisory lock makes them take turns."""

from __future__ import annotations

from fleet.history import list_quarantines, open_history
from tests.unit.hygiene.test_quarantine_budget import race_for_the_budget


def test_simultaneous_reservations_spend_the_budget_once_on_postgres(pg_db: str) -> None:
    got = race_for_the_budget(pg_db)
    assert sum(q is not None for q in got) == 2
    with open_history(pg_db) as hist:
        assert len(list_quarantines(hist)) == 2
