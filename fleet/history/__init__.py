"""The history store: every probe, finding, benchmark, rollout step and decision.

Open it with `open_history(url_or_path)` (a SQLite path or any SQLAlchemy URL; the schema is
upgraded on open), then call the repository functions below, or use `history.write()` /
`history.read()` sessions with the models for anything they do not cover.
"""

from fleet.history.engine import History, open_history
from fleet.history.events import count_events, list_events, record_event
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
from fleet.history_lite import os_actor

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
