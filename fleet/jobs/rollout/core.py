"""The engine's state and bookkeeping: the lock, the history writes (every step before and
after it runs), events, and the health probe the steps share."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, cast

from fleet.domain.checks import Finding, Severity
from fleet.domain.gates import (
    count_states,
)
from fleet.domain.kernel_hold import holding
from fleet.domain.matrix.models import Matrix, Release, RolloutSettings
from fleet.domain.ports import Backend, HostRef, HostResult, NodeReboot, Scheduler
from fleet.errors import BadInput, CouldNotComplete
from fleet.history import History, os_actor
from fleet.history.bulk import add_snapshots
from fleet.history.controllers import check_lock
from fleet.history.rollouts import (
    EventRow,
    StepRow,
    WaveRow,
    get_rollout,
    load_steps,
    load_waves,
    subject_of,
    take_lock,
    write_steps,
)
from fleet.jobs.apply import health_findings
from fleet.jobs.reboot_gate import gated_reboot
from fleet.jobs.record import snapshot_row
from fleet.jobs.rollout.fence import Fenced, guard_for
from fleet.jobs.rollout.heartbeat import ThreadTicker, Ticker, beat_interval
from fleet.jobs.rollout.model import (
    RolloutOptions,
    RolloutResult,
    _AbortRequested,
    _pid_alive,
    _wall,
    controller_name,
)


class EngineCore:
    """Runs, resumes, promotes and aborts rollouts (see the module doc).

    `now` stamps the history (a `SimClock` in rehearsals); `sleep(seconds)` waits out bake
    times; `wall` is the real clock the lock's heartbeat is compared with across processes.
    `checkpoint(label)` is called at every step boundary (tests inject crashes there);
    `on_progress(engine)` after every write (the live display). `ticker` beats the lock's
    heartbeat while a rollout runs (a thread by default; see `fleet.jobs.rollout.heartbeat`).
    """

    def __init__(
        self,
        backend: Backend,
        scheduler: Scheduler,
        history: History,
        matrix: Matrix,
        *,
        now: Callable[[], datetime],
        sleep: Callable[[float], Any] = time.sleep,
        wall: Callable[[], datetime] = _wall,
        actor: str | None = None,
        options: RolloutOptions | None = None,
        checkpoint: Callable[[str], Any] | None = None,
        on_progress: Callable[[Any], Any] | None = None,
        pid: int | None = None,
        machine: str | None = None,
        pid_alive: Callable[[int | None], bool] = _pid_alive,
        ticker: Ticker | None = None,
    ) -> None:
        self.history, self.matrix = history, matrix
        # every call that reaches a host first checks this controller still holds the lock
        guard = self._guard = guard_for(self._lost)
        self.backend = cast(Backend, Fenced(backend, guard))
        self.scheduler = cast(Scheduler, Fenced(scheduler, guard))
        self.unfenced_backend = backend
        self.now, self.sleep, self.wall = now, sleep, wall
        self.actor = actor or os_actor()
        self.opts = options or RolloutOptions()
        self._checkpoint = checkpoint or (lambda label: None)
        self._on_progress = on_progress
        self.pid = pid if pid is not None else os.getpid()
        self.machine = machine or controller_name()
        self.owner = f"{self.actor}@{self.machine}"
        self.pid_alive = pid_alive
        self.rid: int | None = None
        self.waves: list[WaveRow] = []
        self.steps: dict[str, StepRow] = {}
        self.by_wave: dict[int, list[StepRow]] = {}
        self.gates: dict[int, dict[str, Any]] = {}  # wave id -> last gate result
        self._refs: dict[str, HostRef] | None = None
        self._aborting = False
        self._ticker: Ticker = ticker or ThreadTicker()
        self._alive_at = time.monotonic()  # the last host call started or history write

    # ------------------------------------------------------------------------ internals
    def _lost(self) -> str | None:
        """Why this controller may no longer touch the rollout's hosts (None: it may)."""
        self._alive_at = time.monotonic()
        if self.rid is None:
            return None
        return check_lock(self.history, self.rid, self.owner, self.pid)

    @contextmanager
    def _heartbeat(self) -> Iterator[None]:
        """Beat the lock from a timer while the body runs (a long host call included)."""
        self._alive_at = time.monotonic()
        self._ticker.start(beat_interval(self.opts.heartbeat_s, self.opts.stale_after_s),
                           self._beat)
        try:
            yield
        finally:
            self._ticker.stop()

    def _beat(self) -> None:
        """One timer beat: refresh the heartbeat if this controller still holds the lock and
        has shown a sign of life within `quiet_limit_s` (else let the lock go stale). Never
        raises: a lost lock or an unreachable history is found by the next step itself."""
        if self.rid is None or time.monotonic() - self._alive_at > self.opts.quiet_limit_s:
            return
        try:
            write_steps(self.history, self.rid, [], at=self.now(), actor=self.actor,
                        lock=(self.owner, self.pid), wall=self.wall())
        except Exception:  # a beat never stops the controller: its next write finds out
            return

    @property
    def refs(self) -> dict[str, HostRef]:
        if self._refs is None:
            self._refs = {r.name: r for r in self.backend.hosts()}
        return self._refs

    def _get(self, rollout_id: int) -> Any:
        ro = get_rollout(self.history, rollout_id)
        if ro is None:
            raise BadInput.single(f"no rollout {rollout_id} in the history", field="ID")
        return ro

    def _take(self, rollout_id: int, force: bool, kind: str, verb: str | None) -> None:
        ro = self._get(rollout_id)
        if ro.status not in ("running", "paused", "aborting", "rolling_back"):
            raise CouldNotComplete(f"rollout {rollout_id} is {ro.status}: nothing to resume")
        was = take_lock(self.history, rollout_id, owner=self.owner, pid=self.pid,
                        wall=self.wall(), at=self.now(), actor=self.actor, force=force,
                        stale_after_s=self.opts.stale_after_s, this_machine=self.machine,
                        pid_alive=self.pid_alive)
        self.rid = rollout_id
        if verb is not None:
            with suppress(_AbortRequested):  # resuming an abort: the run loop carries it out
                self._write([], events=[EventRow(kind, subject_of(rollout_id),
                                                 f"rollout {rollout_id} {verb} by {self.owner} "
                                                 f"(pid {self.pid}; lock was {was})",
                                                 {"lock_was": was, "status": ro.status})],
                            label=verb)

    def _load(self) -> None:
        assert self.rid is not None
        self.waves = load_waves(self.history, self.rid)
        rows = load_steps(self.history, self.rid)
        self.steps = {r.host: r for r in rows}
        self.by_wave = {}
        for r in rows:
            self.by_wave.setdefault(r.wave_id, []).append(r)

    def _write(self, steps: Sequence[StepRow], *, events: Sequence[EventRow] = (),
               wave: tuple[int, Mapping[str, Any]] | None = None,
               rollout: Mapping[str, Any] | None = None, label: str,
               snapshots: Sequence[tuple[str, Any, list[Finding], str | None]] = ()) -> None:
        assert self.rid is not None
        self._alive_at = time.monotonic()
        self._checkpoint(label + ":pre")
        if snapshots and self.opts.record_snapshots:
            self._record_snapshots(snapshots)
        status = write_steps(self.history, self.rid, steps, at=self.now(), actor=self.actor,
                             events=events, lock=(self.owner, self.pid), wall=self.wall(),
                             wave=wave, rollout=rollout)
        if self._on_progress is not None:
            self._on_progress(self)
        self._checkpoint(label)
        if status == "aborting" and not self._aborting:
            raise _AbortRequested

    def _record_snapshots(self, snaps: Sequence[tuple[str, Any, list[Finding], str | None]],
                          ) -> None:
        when = self.now()
        add_snapshots(self.history, [snapshot_row(host, facts, findings, taken_at=when,
                                                  release=rel)
                                     for host, facts, findings, rel in snaps])

    def _ev(self, kind: str, message: str, **data: Any) -> EventRow:
        assert self.rid is not None
        return EventRow(kind, subject_of(self.rid), message, data)

    def _set(self, rows: Sequence[StepRow], state: str, *, ended: bool,
             **detail: Any) -> None:
        when = self.now()
        for r in rows:
            if r.state != state:
                r.state, r.started_at = state, when
            r.ended_at = when if ended else None
            if detail:
                r.detail = {**r.detail, **detail}

    def _fail(self, r: StepRow, step: str, error: str | None, *, unreachable: bool = False,
              **detail: Any) -> None:
        when = self.now()
        r.state, r.started_at, r.ended_at = "failed", when, when
        r.detail = {**r.detail, "failed_at": step, "error": error or "failed",
                    "unreachable": unreachable, **detail}

    def _view_waves(self) -> list[dict[str, Any]]:
        out = []
        for w in self.waves:
            rows = self.by_wave.get(w.id, [])
            d = w.as_dict()
            d["hosts"] = len(rows)
            d["states"] = count_states(r.state for r in rows)
            gate = self.gates.get(w.id)
            if gate:
                d["gate"] = gate
            out.append(d)
        return out

    def result(self, status: str, reason: str = "") -> RolloutResult:
        return RolloutResult(self.rid, status, reason, self._view_waves(),
                             count_states(r.state for r in self.steps.values()))

    def _settings(self, pool: str) -> RolloutSettings:
        s = self.matrix.pools.get(pool)
        return s.rollout if s is not None else RolloutSettings()

    def _kernel_hold(self, rows: Sequence[StepRow]) -> frozenset[str]:
        """The rows' hosts whose pool holds the kernel packages (every pin passes this on:
        forward, restore and rollback alike)."""
        return holding(self.matrix, ((r.host, r.pool) for r in rows))

    def _pool_rows(self, pool: str) -> list[StepRow]:
        return [r for w in self.waves if w.pool == pool for r in self.by_wave.get(w.id, [])]

    # ------------------------------------------------------------------------ the steps
    def _step_event(self, w: WaveRow, step: str, phase: str, rows: Sequence[StepRow],
                    extra: Mapping[str, Any] | None = None) -> EventRow:
        hosts = [r.host for r in rows]
        moved: dict[str, list[str]] = {}
        if phase == "end":
            for r in rows:
                moved.setdefault(r.state, []).append(r.host)
        msg = (f"wave {w.index} ({w.pool}): {step} {'started' if phase == 'begin' else 'ended'}"
               f" for {len(rows)} host(s)")
        if phase == "end":
            msg += ": " + ", ".join(f"{len(v)} {k}" for k, v in moved.items())
        return self._ev("rollout.step", msg, wave=w.index, pool=w.pool, step=step,
                        phase=phase, **({"hosts": hosts} if phase == "begin" else {"to": moved}),
                        **dict(extra or {}))

    def _host_events(self, rows: Sequence[StepRow]) -> list[EventRow]:
        return [self._ev("rollout.host", f"{r.host}: {r.state} at {r.detail.get('failed_at')}: "
                                         f"{r.detail.get('error')}", host=r.host,
                         state=r.state, step=r.detail.get("failed_at"),
                         error=r.detail.get("error"))
                for r in rows if r.state == "failed"]

    def _probe_health(self, rows: Sequence[StepRow], release_of_row: Callable[[StepRow], str],
                      ) -> dict[str, tuple[bool, str | None, bool, list[tuple[Any, ...]]]]:
        """Probe in batches and run the checks: host -> (ok, error, unreachable, snapshot)."""
        out: dict[str, tuple[bool, str | None, bool, list[tuple[Any, ...]]]] = {}
        names = [r.host for r in rows]
        by_host = {r.host: r for r in rows}
        for i in range(0, len(names), max(1, self.opts.probe_batch)):
            batch = names[i:i + self.opts.probe_batch]
            probed = self.backend.probe(batch)
            for name in batch:
                got = probed[name]
                if not got.ok or got.value is None:
                    out[name] = (False, f"probe: {got.error}", not got.reachable, [])
                    continue
                rel_name = release_of_row(by_host[name])
                rel = self.matrix.release(rel_name)
                ref = self.refs.get(name) or HostRef(name)
                findings = health_findings(got.value, rel, ref, self.matrix)
                failing = [f for f in findings if f.severity is Severity.FAIL]
                snap = [(name, got.value, findings, rel_name)]
                if failing:
                    out[name] = (False, "health: " + "; ".join(f.message for f in failing[:3]),
                                 False, snap)
                else:
                    out[name] = (True, None, False, snap)
        return out

    # ------------------------------------------------------------------------ reboots
    def _reboot_now(self, pool: str, hosts: Sequence[str], why: str,
                    release: Release | None = None) -> dict[str, HostResult[None]]:
        """The one place a rollout reboots hosts, its forward steps and its rollbacks alike.

        Right before, the scheduler is asked once more: a host that does not read drained by
        fleet with nothing on it is not rebooted (its result says why). Then the pre-reboot
        gate (`fleet.jobs.reboot_gate`): a host whose next-boot kernel cannot load `release`'s
        module is refused, not rebooted. Then over SSH, or through the workload manager when
        the pool says `reboot: slurm` (its RebootProgram, and it knows when the node is back):
        a rollback follows the pool's setting too."""
        out: dict[str, HostResult[None]] = {}
        ready: list[str] = []
        for h in hosts:
            a = self.scheduler.state(h)
            if a.state == "drained" and a.by_fleet and not a.jobs:
                ready.append(h)
                continue
            busy = f", work on it: {', '.join(a.jobs[:5])}" if a.jobs else ""
            owner = "fleet" if a.by_fleet else "someone else"
            out[h] = HostResult.failed(
                h, f"not rebooted: the scheduler reads it {a.state}"
                   + (f" (by {owner}: {a.reason})" if a.reason else "") + busy)
        if not ready:
            return out
        targets = dict.fromkeys(ready, release)
        if self._settings(pool).reboot != "slurm":
            out.update(gated_reboot(self.backend, targets).results)
        elif not isinstance(self.scheduler, NodeReboot):
            out.update({h: HostResult.failed(h, f"rollout.reboot is slurm but the scheduler is "
                                                f"{self.scheduler.name}") for h in ready})
        else:
            sched = self.scheduler
            out.update(gated_reboot(self.backend, targets, reboot=lambda ns, g: (
                sched.reboot_nodes(ns, why, timeout_s=self.opts.reboot_timeout_s,
                                   gate=g))).results)
        return out

    # implemented by the step and rollback mixins; declared here so each half type-checks
    def _wait_out(self, w: WaveRow, seconds: float, what: str) -> None:
        """Sleep `seconds` (a bake, a live window), keeping the lock's heartbeat fresh in
        between: a controller that only waits must not look dead to another one."""
        left = seconds
        beat = self.wall()
        while left > 0:
            chunk = min(left, max(1.0, self.opts.heartbeat_s))
            self.sleep(chunk)
            left -= chunk
            if left > 0 and (self.wall() - beat).total_seconds() >= self.opts.heartbeat_s:
                beat = self.wall()
                self._write([], label=f"wave{w.index}:{what}:beat")

    def _rollback(self, w: WaveRow | None, reason: str) -> RolloutResult:
        raise NotImplementedError

    def _undrain(self, w: WaveRow, rows: list[StepRow]) -> None:
        raise NotImplementedError

    def _rollback_hosts(self, rows: list[StepRow], reason: str) -> None:
        raise NotImplementedError
