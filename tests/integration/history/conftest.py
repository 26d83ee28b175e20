"""PostgreSQL fixtures: a server from FLEET_TEST_PG_URL, a fresh database per test.

`scripts/test` starts a throwaway server (scripts/pg-throwaway) and exports the URL; without it
these tests skip and say why.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

PG_ENV = "FLEET_TEST_PG_URL"


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"{PG_ENV} is not set (scripts/test starts a throwaway PostgreSQL and sets it)")
    return url


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[str]:
    """A brand-new, empty database on the test server; dropped afterwards."""
    name = f"fleet_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as e:
        admin.dispose()
        pytest.fail(f"cannot create a test database on {PG_ENV}: {e}")
    try:
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
