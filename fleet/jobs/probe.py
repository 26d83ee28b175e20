"""Probe hosts over SSH, judge them with the check catalog, record everything in the history.

Hosts that cannot be reached are recorded as unreachable snapshots and reported, never dropped:
the drift audit fails closed on them.

Start-up matters here (`fleet probe` is the command run most): the check catalog and the models
are imported in a thread while the hosts connect, not before, and a SQLite history is read and
written without SQLAlchemy (see `probe_inventory`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from fleet.domain.checks import Finding
    from fleet.domain.facts import HostFacts
    from fleet.domain.matrix.models import Matrix
    from fleet.history import History
    from fleet.history.lite import EventRow, ProbeRow


@dataclass
class ProbeResult:
    host: str
    pool: str | None
    reachable: bool
    error: str | None = None
    facts: HostFacts | None = None
    findings: list[Finding] = field(default_factory=list)
    snapshot: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host, "pool": self.pool, "reachable": self.reachable,
            "error": self.error, "snapshot": self.snapshot,
            "source": self.facts.source if self.facts else None,
            "driver": self.facts.versions.driver_library if self.facts else None,
            "gpus": len(self.facts.gpus) if self.facts else None,
            "findings": [f.model_dump(mode="json") for f in self.findings],
        }


def pool_of(host: Any, matrix: Matrix | None) -> str | None:
    """The host's pool: its `pool` host data, else the first of its groups the matrix knows.

    `host` is a pyinfra Host or a `HostRef` (both have `.data` and `.groups`)."""
    explicit = host.data.get("pool")
    if explicit:
        return str(explicit)
    groups: list[str] = sorted(getattr(host, "groups", []) or [])
    if matrix is not None:
        for g in groups:
            if g in matrix.pools:
                return g
    return None


def probe_inventory(
    inventory_path: str | Path,
    limit: Sequence[str] | None,
    history: History | Callable[[], History],
    *,
    now: Callable[[], datetime],
    matrix: Matrix | None | Callable[[], Matrix | None] = None,
    frameworks: bool = True,
    connect_timeout: int = 10,
    via: Literal["ssh", "slurm"] = "ssh",
    partition: str | None = None,
    srun_timeout: float = 120.0,
    history_file: str | None = None,
) -> list[ProbeResult]:
    """Probe the inventory's hosts, over SSH or (`via="slurm"`) with one srun on the hosts
    that are nodes of `partition`; from the facts on, both take the same path.

    `matrix` and `history` may be callables (`fleet probe` passes them so): the matrix is
    loaded in a thread while the hosts connect, and then, in the same thread, the history
    layer, the check catalog and each host's expectations are made ready while the probe
    connects and runs; the history is opened before the probe is sent (the probe carries each
    host's kernel-log cursor from it). An error in the matrix or the history stops the run
    before anything runs on a host. `history_file` (the `--db` value, with `history` a
    callable opening it): when it is a SQLite file at the schema head, the cursors are read
    from it and the results written to it with the stdlib (`fleet.history.lite`), and the
    history layer (SQLAlchemy) is never loaded.
    """
    from fleet.remote.backend import SshBackend
    from fleet.remote.session import in_background

    backend: SshBackend
    if via == "slurm":
        from fleet.remote.srun_probe import SrunBackend

        if partition is None:
            raise ValueError("probing via slurm needs a partition")
        backend = SrunBackend(inventory_path, limit, partition=partition,
                              timeout_s=srun_timeout, connect_timeout=connect_timeout)
    else:
        backend = SshBackend(inventory_path, limit, connect_timeout=connect_timeout)
    names = backend.names()
    quick = None
    if history_file is not None and callable(history):
        from fleet.history.lite import sqlite_cursors

        quick = sqlite_cursors(history_file, names)
    ready: dict[str, Any] = {}

    def load_matrix() -> None:  # in a thread while the hosts connect
        ready["matrix"] = matrix() if callable(matrix) else matrix

    def prepare_checks() -> None:  # then in the same thread while the hosts run the probe
        import importlib

        # the history first when the cursors or the write need it (not a SQLite file at head)
        modules: tuple[str, ...] = ("fleet.domain.checks", "fleet.domain.snapshot_rows")
        if quick is None:
            modules = ("fleet.history", "fleet.jobs.record", *modules)
        for module in modules:
            importlib.import_module(module)

        ready["refs"] = refs = backend.hosts()
        ready["expect"] = _expectations(refs, ready.get("matrix"))

    loaded = in_background(load_matrix)
    checks_ready = in_background(prepare_checks)

    def cursors() -> dict[str, str | None]:  # once connected, before the probe is sent
        loaded.get()  # a bad matrix stops the run here
        if quick is not None:
            return quick
        # the history's modules are loading in the background thread: importing the same
        # package from two threads at once can fail ("partially initialized module"
        # sqlalchemy.engine, seen in CI), so this side waits until they are in
        checks_ready.get()
        from fleet.jobs.record import kernel_cursors

        ready["history"] = history() if callable(history) else history
        return kernel_cursors(ready["history"], names)

    answers = backend.probe(names, since=cursors, frameworks=frameworks)
    checks_ready.get()
    matrix_now: Matrix | None = ready["matrix"]
    results = _judge(ready["refs"], answers, ready["expect"], matrix_now)
    taken = now()
    event = _event(results, limit, via, partition)
    if quick is not None and history_file is not None and "history" not in ready:
        from fleet.history.lite import sqlite_record_probe

        ids = sqlite_record_probe(history_file, [_lite_row(r) for r in results],
                                  taken_at=taken, event=event)
        if ids is not None:
            for r, snap in zip(results, ids, strict=True):
                r.snapshot = snap
            return results
    if "history" not in ready:
        ready["history"] = history() if callable(history) else history
    _record(results, ready["history"], taken, event)
    return results


def _expectations(refs: Sequence[Any], matrix: Matrix | None) -> dict[str, Any]:
    """What the matrix expects of each host (None where its pool is not in the matrix)."""
    from fleet.domain.checks.expect import expectations_for

    out: dict[str, Any] = {}
    for ref in refs:
        pool = pool_of(ref, matrix)
        out[ref.name] = None
        if matrix is not None and pool is not None and pool in matrix.pools:
            out[ref.name] = expectations_for(matrix, pool, gpu_model=ref.gpu_model,
                                             gpu_count=ref.gpu_count)
    return out


def _judge(refs: Sequence[Any], answers: dict[str, Any], expect: dict[str, Any],
           matrix: Matrix | None) -> list[ProbeResult]:
    """Run the checks on each host's facts (an unreachable host is a result too)."""
    from fleet.domain.checks import run_checks

    results: list[ProbeResult] = []
    for ref in refs:
        name, pool, got = ref.name, pool_of(ref, matrix), answers[ref.name]
        if got.value is None:  # unreachable, or the probe failed: a finding too
            results.append(ProbeResult(name, pool, got.reachable, got.error))
            continue
        facts = got.value
        findings = run_checks(facts, expect[name],
                              matrix.policy.thresholds if matrix is not None else None)
        results.append(ProbeResult(name, pool, True, None, facts, findings))
    return results


def _event(results: Sequence[ProbeResult], limit: Sequence[str] | None, via: str,
           partition: str | None) -> EventRow:
    from fleet.history.lite import EventRow

    data: dict[str, Any] = {"hosts": [r.host for r in results]}
    if via == "slurm":
        data |= {"via": "slurm", "partition": partition}
    return EventRow("probe", ",".join(limit or []) or "all",
                    f"probed {len(results)} host(s), "
                    f"{sum(not r.reachable for r in results)} unreachable", data)


def _lite_row(r: ProbeResult) -> ProbeRow:
    """What `_record` stores for the result, for the stdlib writer."""
    from fleet.domain.snapshot_rows import gpu_model, snapshot_columns
    from fleet.history.lite import ProbeRow

    if r.facts is None:
        return ProbeRow(r.host, "none", r.reachable, {"error": r.error}, pool=r.pool)
    return ProbeRow(r.host, reachable=r.reachable, pool=r.pool, gpu_model=gpu_model(r.facts),
                    **snapshot_columns(r.facts, r.findings))


def _record(results: Sequence[ProbeResult], history: History, taken: datetime,
            event: EventRow) -> None:
    """Every host's snapshot and the event, in one transaction (20 hosts were 20 commits)."""
    from fleet.history import add_snapshot, record_event
    from fleet.jobs.record import record_snapshot

    with history.write() as s:
        for r in results:
            if r.facts is not None:
                r.snapshot = record_snapshot(history, r.host, r.facts, r.findings,
                                             taken_at=taken, pool=r.pool, session=s)
            else:
                r.snapshot = add_snapshot(history, r.host, taken_at=taken, source="none",
                                          reachable=r.reachable, facts={"error": r.error},
                                          pool=r.pool, session=s)
        record_event(history, event.kind, event.subject, event.message, dict(event.data),
                     session=s)
