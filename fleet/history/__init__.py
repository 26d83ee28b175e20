"""The history store: every probe, finding, benchmark, rollout step and decision.

Open it with `open_history(url_or_path)` (a SQLite path or any SQLAlchemy URL; the schema is
upgraded on open), then call the repository functions below, or use `history.write()` /
`history.read()` sessions with the models for anything they do not cover.

The names are loaded on first use (PEP 562): `fleet probe` imports `fleet.history.lite`, the
stdlib reader and writer of a SQLite history, and must not pull SQLAlchemy in through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleet.history.engine import History, open_history
    from fleet.history.events import count_events, list_events, record_event
    from fleet.history.lite import os_actor
    from fleet.history.models import utcnow
    from fleet.history.store import (
        FindingRecord,
        GpuCounters,
        add_snapshot,
        benchmark_samples,
        close_quarantine,
        findings_of,
        get_host,
        gpu_samples,
        iter_gpu_series,
        latest_snapshots,
        list_hosts,
        list_quarantines,
        open_quarantine,
        record_benchmark,
        upsert_host,
    )

_WHERE = {
    "History": "fleet.history.engine",
    "open_history": "fleet.history.engine",
    "count_events": "fleet.history.events",
    "list_events": "fleet.history.events",
    "record_event": "fleet.history.events",
    "utcnow": "fleet.history.models",
    "FindingRecord": "fleet.history.store",
    "GpuCounters": "fleet.history.store",
    "add_snapshot": "fleet.history.store",
    "benchmark_samples": "fleet.history.store",
    "close_quarantine": "fleet.history.store",
    "findings_of": "fleet.history.store",
    "get_host": "fleet.history.store",
    "gpu_samples": "fleet.history.store",
    "iter_gpu_series": "fleet.history.store",
    "latest_snapshots": "fleet.history.store",
    "list_hosts": "fleet.history.store",
    "list_quarantines": "fleet.history.store",
    "open_quarantine": "fleet.history.store",
    "record_benchmark": "fleet.history.store",
    "upsert_host": "fleet.history.store",
    "os_actor": "fleet.history.lite",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FindingRecord",
    "GpuCounters",
    "History",
    "add_snapshot",
    "benchmark_samples",
    "close_quarantine",
    "count_events",
    "findings_of",
    "get_host",
    "gpu_samples",
    "iter_gpu_series",
    "latest_snapshots",
    "list_events",
    "list_hosts",
    "list_quarantines",
    "open_history",
    "open_quarantine",
    "os_actor",
    "record_benchmark",
    "record_event",
    "upsert_host",
    "utcnow",
]
