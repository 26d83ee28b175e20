"""Worker processes for the concurrency tests (a module so `spawn` children can import it)."""

from __future__ import annotations

import time
from typing import Any

from sqlmodel import select

from fleet.history import open_history, record_event, upsert_host
from fleet.history.models import Host

COUNTER_HOST = "counter"


def append_and_count(target: str, worker: int, n: int, go: Any, out: Any) -> None:
    """Open the (possibly fresh) database, then append n events and increment a shared counter.

    The counter is a read-modify-write of `hosts.gpu_count`, the pattern that loses updates with
    pysqlite's deferred BEGIN. On PostgreSQL the row is locked with FOR UPDATE (a no-op on SQLite,
    where BEGIN IMMEDIATE serialises writers).
    """
    go.wait(60)
    t0 = time.perf_counter()
    errors: list[str] = []
    try:
        with open_history(target) as h:
            upsert_host(h, COUNTER_HOST, pool="test")
            for i in range(n):
                record_event(h, "concurrency", f"w{worker}", str(i), {"worker": worker, "i": i})
                with h.write() as s:
                    stmt = select(Host).where(Host.name == COUNTER_HOST).with_for_update()
                    host = s.exec(stmt).one()
                    value = host.gpu_count
                    time.sleep(0.0005)  # widen the race window
                    host.gpu_count = value + 1
                    s.add(host)
    except Exception as e:  # reported to the parent, which fails the test with it
        errors.append(f"{type(e).__name__}: {e}")
    out.put((worker, time.perf_counter() - t0, errors))
