"""The history schema: every probe, finding, benchmark, rollout step and decision.

Why these choices (see shared/reference/packages-and-style.md §5):
- no `from __future__ import annotations` here: it breaks sqlmodel's field resolution;
- states, kinds and severities are `str` columns validated by callers, not SQL enums, so adding a
  value never needs a migration (alembic does not autogenerate enum members);
- datetimes are sqlmodel's `UTCDateTime`: naive values are rejected at flush, values come back
  tz-aware in UTC on SQLite and PostgreSQL alike;
- JSON columns are `JSONB` on PostgreSQL (indexable) and plain JSON elsewhere. In-place mutation of
  a loaded JSON value is NOT tracked: assign a new dict.
- counters are nullable: `None` means "could not be read", never a silent zero.

Any change here needs a new migration: `fleet.history.migrate.new_revision(message, rev_id)`,
then review the generated file.
"""

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Index, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

JSONType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> dt.datetime:
    """The one clock of the history layer: aware, UTC."""
    return dt.datetime.now(dt.UTC)


def _json_dict() -> Any:
    return Field(default_factory=dict, sa_type=JSONType, nullable=False)


class Host(SQLModel, table=True):
    """One GPU host, as last seen by a probe or named by an inventory."""

    __tablename__ = "hosts"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, index=True)
    pool: str = Field(default="", index=True)
    gpu_model: str | None = None
    gpu_count: int = 0
    labels: dict[str, Any] = _json_dict()
    first_seen: dt.datetime = Field(default_factory=utcnow)
    last_seen: dt.datetime = Field(default_factory=utcnow)


class Snapshot(SQLModel, table=True):
    """One probe of one host: the raw facts plus the columns queries filter on."""

    __tablename__ = "snapshots"
    __table_args__ = (Index("ix_snapshots_host_taken", "host_id", "taken_at"),)

    id: int | None = Field(default=None, primary_key=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    taken_at: dt.datetime = Field(index=True)
    source: str  # "nvml", "nvidia-smi", "import", "none": which path produced the facts
    reachable: bool = True
    driver_nvml: str | None = None  # NVML's (userspace library) driver version
    driver_kmod: str | None = None  # loaded kernel module, /proc/driver/nvidia/version
    driver_package: str | None = None  # the package manager's installed version
    release: str | None = None  # matrix release name, when the versions match one
    facts: dict[str, Any] = _json_dict()


class GpuSampleBase(SQLModel):
    """Per-GPU error counters of one snapshot; `None` means could not be read."""

    gpu_index: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remapped_corrected: int | None = None
    remapped_uncorrected: int | None = None
    remapped_pending: bool | None = None
    remapped_failure: bool | None = None
    pcie_replay: int | None = None
    aer_corrected: int | None = None
    aer_nonfatal: int | None = None
    aer_fatal: int | None = None
    boot_id: str | None = None  # the host's boot id: a new one means the counters since boot reset
    xid_counts: dict[str, int] = Field(default_factory=dict, sa_type=JSONType, nullable=False)


class GpuSample(GpuSampleBase, table=True):
    """Stored sample; host and time are copied from the snapshot so trend queries need no join."""

    __tablename__ = "gpu_samples"
    __table_args__ = (
        Index("ix_gpu_samples_uuid_taken", "uuid", "taken_at"),
        Index("ix_gpu_samples_host_gpu_taken", "host_id", "gpu_index", "taken_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    snapshot_id: int = Field(foreign_key="snapshots.id", ondelete="CASCADE", index=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    taken_at: dt.datetime


class FindingBase(SQLModel):
    """One check result worth keeping (what, how bad, what to do)."""

    check_id: str
    severity: str  # "ok", "warn", "fail"
    gpu_index: int | None = None
    message: str = ""
    remediation: str | None = None
    details: dict[str, Any] = Field(default_factory=dict, sa_type=JSONType, nullable=False)


class Finding(FindingBase, table=True):
    __tablename__ = "findings"

    id: int | None = Field(default=None, primary_key=True)
    snapshot_id: int = Field(foreign_key="snapshots.id", ondelete="CASCADE", index=True)
    check_id: str = Field(index=True)


class BenchmarkRun(SQLModel, table=True):
    """One benchmark (synthetic or trace replay) on one host under one release."""

    __tablename__ = "benchmark_runs"
    __table_args__ = (Index("ix_benchmark_runs_host_started", "host_id", "started_at"),)

    id: int | None = Field(default=None, primary_key=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    rollout_id: int | None = Field(default=None, foreign_key="rollouts.id", ondelete="SET NULL")
    release: str | None = None
    kind: str  # "synthetic" or "replay"
    name: str
    status: str = "running"  # "running", "done", "error"
    started_at: dt.datetime
    ended_at: dt.datetime | None = None


class BenchmarkSample(SQLModel, table=True):
    __tablename__ = "benchmark_samples"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="benchmark_runs.id", ondelete="CASCADE", index=True)
    metric: str
    value: float
    unit: str = ""
    gpu_index: int | None = None


class Rollout(SQLModel, table=True):
    """A staged upgrade; the lock fields make it one-at-a-time and resumable."""

    __tablename__ = "rollouts"

    id: int | None = Field(default=None, primary_key=True)
    matrix_path: str
    release: str
    scope: str = ""  # pool(s) the rollout covers, as the engine names them
    status: str = "planned"
    started_by: str
    started_at: dt.datetime
    ended_at: dt.datetime | None = None
    lock_owner: str | None = None
    lock_pid: int | None = None
    lock_heartbeat: dt.datetime | None = None


class Wave(SQLModel, table=True):
    __tablename__ = "waves"
    __table_args__ = (UniqueConstraint("rollout_id", "index", name="uq_waves_rollout_index"),)

    id: int | None = Field(default=None, primary_key=True)
    rollout_id: int = Field(foreign_key="rollouts.id", ondelete="CASCADE")
    index: int
    pool: str
    status: str = "pending"
    verdict: str | None = None  # "pass", "fail", "inconclusive", "error"
    started_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None


class HostStep(SQLModel, table=True):
    """One host's progress in a wave, written before and after each action."""

    __tablename__ = "host_steps"
    __table_args__ = (Index("ix_host_steps_rollout_host", "rollout_id", "host_id"),)

    id: int | None = Field(default=None, primary_key=True)
    rollout_id: int = Field(foreign_key="rollouts.id", ondelete="CASCADE")
    wave_id: int = Field(foreign_key="waves.id", ondelete="CASCADE", index=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    state: str
    from_release: str | None = None
    to_release: str | None = None
    started_at: dt.datetime
    ended_at: dt.datetime | None = None
    detail: dict[str, Any] = _json_dict()


class Quarantine(SQLModel, table=True):
    __tablename__ = "quarantines"
    __table_args__ = (Index("ix_quarantines_host_opened", "host_id", "opened_at"),)

    id: int | None = Field(default=None, primary_key=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    reason: str
    opened_at: dt.datetime
    opened_by: str
    closed_at: dt.datetime | None = None
    closed_by: str | None = None
    close_reason: str | None = None


class Event(SQLModel, table=True):
    """The append-only log: who (OS user), when, what, why. Triggers forbid UPDATE and DELETE."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_kind_at", "kind", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    at: dt.datetime = Field(index=True)
    actor: str
    kind: str
    subject: str = ""
    message: str = ""
    data: dict[str, Any] = _json_dict()


class GpuRollup(SQLModel, table=True):
    """One GPU board's samples of one epoch week, once pruned (`fleet.domain.retention`).

    Times are epoch seconds (the trend analysis's unit); `first`, `last`, `end_known` and
    `first_known` are lists in the order of `fleet.domain.retention.COUNTERS`; `breaks` holds
    [t, *counters] rows around resets (NULL when the week had none). `uuid` is "" when the
    board had none.
    """

    __tablename__ = "gpu_rollups"
    __table_args__ = (
        UniqueConstraint("host_id", "gpu_index", "week", "uuid", name="uq_gpu_rollups_key"),
        Index("ix_gpu_rollups_week", "week"),
    )

    id: int | None = Field(default=None, primary_key=True)
    host_id: int = Field(foreign_key="hosts.id", ondelete="CASCADE")
    gpu_index: int
    week: int
    uuid: str = ""
    t_first: float
    t_last: float
    count: int
    first: list[Any] = Field(default_factory=list, sa_type=JSONType, nullable=False)
    last: list[Any] = Field(default_factory=list, sa_type=JSONType, nullable=False)
    end_known: list[Any] = Field(default_factory=list, sa_type=JSONType, nullable=False)
    xid_counts: dict[str, int] = Field(default_factory=dict, sa_type=JSONType, nullable=False)
    first_known: list[Any] | None = Field(default=None, sa_type=JSONType, nullable=True)
    breaks: list[Any] | None = Field(default=None, sa_type=JSONType, nullable=True)
