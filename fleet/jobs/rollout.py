"""The rollout engine: canary pools first, then waves, gated by health and benchmarks,
rolled back automatically, paused for a human when a gate cannot decide, resumable after a
crash at any point.

Per wave (states in `fleet.domain.gates`):

    drain      record each host's administrative state, then drain it (never a host someone
               else drained: it is skipped and never undrained)
    apply      re-plan, then pin the target release on the hosts whose plan still changes
               something (a failed pin is restored to the release the host had)
    reboot     the hosts whose kernel module changed
    verify     health gate: probe + checks against the target release (a snapshot per host)
    budgets    failed or unreachable hosts over the per-wave or the pool's total budget fail
               the wave
    benchmark  synthetic and/or replay samples of the wave's hosts against a same-time baseline
               (hosts of the same pool and GPU model still on the old release), else the pool's
               recent history on the old release (lower confidence), judged by the judge
    bake       wait `bake_minutes` (a `sleep` callable, so tests and rehearsals do not wait),
               then probe the wave again
    repair     hosts that failed after their pin changed are rolled back one by one
    undrain    only what fleet drained

Verdicts: fail rolls back the wave's hosts (or every host moved so far in the pool, with
`rollback_scope="all"`), health-checked, and the rollout stops `rolled_back`; inconclusive pauses
it (`paused`) until `promote` or `abort`; error (could not measure) is retried `max_retries`
times, then it is inconclusive.

Durability: every step is written to the history before it is taken (`ended_at` unset) and
after it ends, in one transaction per step per wave; the same transaction refreshes the lock's
heartbeat and appends the events that explain it. Resume re-reads the rows and re-enters each
step for the hosts whose state says it is due or unfinished; every step is idempotent against
the hosts (see `fleet.domain.gates`). The history's transactions never span a backend call.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from fleet.domain.checks import Finding, Severity
from fleet.domain.gates import (
    MAY_HAVE_MOVED,
    Budget,
    GateVerdict,
    after_retries,
    combine,
    count_states,
    from_judge,
    health_verdict,
)
from fleet.domain.judge import JudgeConfig, MetricSpec, choose_baseline, judge
from fleet.domain.matrix.models import Matrix, Release, RolloutSettings
from fleet.domain.pinning import release_of
from fleet.domain.plan import RolloutPlan, plan_rollout
from fleet.domain.ports import AdminState, Backend, HostRef, Scheduler
from fleet.errors import CouldNotComplete, ProblemsFound
from fleet.history import History, list_quarantines, open_quarantine, os_actor
from fleet.history.rollouts import (
    EventRow,
    LockHeld,
    StepRow,
    WaveRow,
    add_snapshots,
    create_rollout,
    get_rollout,
    load_steps,
    load_waves,
    record_benchmarks,
    release_lock,
    request_status,
    subject_of,
    take_lock,
    write_steps,
)
from fleet.history.store import benchmark_samples
from fleet.jobs.apply import health_findings, needs_reboot, refusal, restore_release
from fleet.jobs.record import snapshot_row

Status = Literal["completed", "rolled_back", "aborted", "paused", "running", "nothing",
                 "aborting", "rolling_back", "failed"]

SUITE_SPECS: dict[str, tuple[MetricSpec, ...]] = {
    "synthetic": (
        MetricSpec("tflops", "higher", 0.05, kind="run"),
        MetricSpec("latency_ms", "lower", 0.05, kind="location"),
    ),
    "replay": (
        MetricSpec("latency_ms", "lower", 0.05, kind="location", tails=(0.95,)),
        MetricSpec("throughput_rps", "higher", 0.05, kind="run"),
    ),
}
"""What the benchmark gates judge by default. Error counts are left to the health gate: bounding
an error rate to 0.2 percentage point takes thousands of requests, more than a gate runs."""

SUITE_PARAMS: dict[str, dict[str, Any]] = {"synthetic": {"samples": 50},
                                           "replay": {"samples": 200}}


@dataclass
class RolloutOptions:
    rollback_scope: Literal["wave", "all"] = "wave"
    stale_after_s: float = 300.0  # a lock whose heartbeat is older is stale
    bench_hosts: int = 4  # hosts per side benchmarked by a gate
    suite_params: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {k: dict(v) for k, v in SUITE_PARAMS.items()})
    suite_specs: Mapping[str, Sequence[MetricSpec]] = field(
        default_factory=lambda: dict(SUITE_SPECS))
    judge_config: JudgeConfig | None = None
    drain_wait_s: float = 0.0
    probe_batch: int = 1000
    record_snapshots: bool = True
    heartbeat_s: float = 60.0  # longest sleep between heartbeats while baking

    def as_dict(self) -> dict[str, Any]:
        return {"rollback_scope": self.rollback_scope, "stale_after_s": self.stale_after_s,
                "bench_hosts": self.bench_hosts,
                "suite_params": {k: dict(v) for k, v in self.suite_params.items()},
                "drain_wait_s": self.drain_wait_s}


@dataclass
class RolloutResult:
    rollout_id: int | None
    status: str
    reason: str = ""
    waves: list[dict[str, Any]] = field(default_factory=list)
    hosts: dict[str, int] = field(default_factory=dict)  # state -> count
    plan: RolloutPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "status": self.status, "reason": self.reason,
                "waves": self.waves, "hosts": self.hosts}


class _Stop(Exception):
    """Leave the wave loop: the rollout paused, rolled back or was aborted."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class _AbortRequested(Exception):
    pass


def _pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wall() -> datetime:
    return datetime.now(UTC)


class RolloutEngine:
    """Runs, resumes, promotes and aborts rollouts (see the module doc).

    `now` stamps the history (a `SimClock` in rehearsals); `sleep(seconds)` waits out bake
    times; `wall` is the real clock the lock's heartbeat is compared with across processes.
    `checkpoint(label)` is called at every step boundary (tests inject crashes there);
    `on_progress(engine)` after every write (the live display).
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
        on_progress: Callable[[RolloutEngine], Any] | None = None,
        pid: int | None = None,
        machine: str | None = None,
        pid_alive: Callable[[int | None], bool] = _pid_alive,
    ) -> None:
        self.backend, self.scheduler, self.history, self.matrix = backend, scheduler, history, \
            matrix
        self.now, self.sleep, self.wall = now, sleep, wall
        self.actor = actor or os_actor()
        self.opts = options or RolloutOptions()
        self._checkpoint = checkpoint or (lambda label: None)
        self._on_progress = on_progress
        self.pid = pid if pid is not None else os.getpid()
        self.machine = machine or socket.gethostname()
        self.owner = f"{self.actor}@{self.machine}"
        self.pid_alive = pid_alive
        self.rid: int | None = None
        self.waves: list[WaveRow] = []
        self.steps: dict[str, StepRow] = {}
        self.by_wave: dict[int, list[StepRow]] = {}
        self.gates: dict[int, dict[str, Any]] = {}  # wave id -> last gate result
        self._refs: dict[str, HostRef] | None = None
        self._aborting = False

    # ------------------------------------------------------------------ public operations
    def start(self, *, matrix_path: str, pools: Sequence[str] | None = None,
              release: str | None = None, releases: Mapping[str, str | None] | None = None,
              unreachable: Sequence[str] = (), start_data: Mapping[str, Any] | None = None,
              ) -> RolloutResult:
        """Plan and run a new rollout (refused while another one holds one of its pools)."""
        refs = list(self.refs.values())
        in_scope = [r for r in refs if r.pool and (pools is None or r.pool in pools)]
        admin = {r.name: s for r in in_scope
                 if (s := self.scheduler.state(r.name)).state != "available"}
        quarantined = {h.name: q.reason for q, h in list_quarantines(self.history)}
        targets = dict.fromkeys(pools or {r.pool for r in in_scope if r.pool}, release) \
            if release else None
        plan = plan_rollout(self.matrix, refs, releases=releases or {}, admin=admin,
                            quarantined=quarantined, unreachable=unreachable,
                            pools=set(pools) if pools else None,
                            targets=targets)
        moving = [p for p in plan.pools if p.waves]
        for p in moving:
            try:
                rel = self.matrix.release(p.release)
            except KeyError:
                raise CouldNotComplete(f"pool {p.pool}: no release {p.release!r} in the "
                                       "matrix") from None
            why = refusal(self.matrix, rel, self.refs[p.waves[0].hosts[0]])
            if why:
                raise ProblemsFound(f"pool {p.pool}: {p.release} must not go onto its hosts: "
                                    f"{why}")
        if not moving:
            blocked = [p.pool for p in plan.pools if p.blocked]
            if blocked:
                raise ProblemsFound("nothing can move: max_unavailable used up in "
                                    + ", ".join(blocked))
            return RolloutResult(None, "nothing", "every host is on its target already "
                                 "(or skipped)", plan=plan)
        waves = [(p.pool, [(h, p.release) for h in w.hosts]) for p in moving for w in p.waves]
        rels = list(dict.fromkeys(p.release for p in moving))
        info = {r.name: {"pool": r.pool, "gpu_model": r.gpu_model, "gpu_count": r.gpu_count}
                for r in in_scope}
        self.rid = create_rollout(
            self.history, matrix_path=matrix_path, release=",".join(rels),
            pools=[p.pool for p in moving], waves=waves, started_by=self.actor,
            owner=self.owner, pid=self.pid, at=self.now(), wall=self.wall(), host_info=info,
            start_data={"options": self.opts.as_dict(), **dict(start_data or {}),
                        "plan": {"pools": [{"pool": p.pool, "release": p.release,
                                            "waves": [len(w.hosts) for w in p.waves],
                                            "skipped": p.skipped, "blocked": p.blocked}
                                           for p in plan.pools]}})
        self._checkpoint("created")
        result = self._run()
        result.plan = plan
        return result

    def resume(self, rollout_id: int, *, force: bool = False) -> RolloutResult:
        """Continue a rollout whose controller stopped (killed, crashed or paused)."""
        self._take(rollout_id, force, "rollout.resume", "resumed")
        return self._run()

    def promote(self, rollout_id: int, *, force: bool = False,
                reason: str | None = None) -> RolloutResult:
        """An operator passes the paused wave; the rollout continues."""
        ro = self._get(rollout_id)
        if ro.status != "paused":
            raise CouldNotComplete(f"rollout {rollout_id} is {ro.status}, not paused: "
                                   "nothing to promote")
        self._take(rollout_id, force, "rollout.promote.lock", None)
        self._load()
        wave = next((w for w in self.waves if w.status == "paused"), None)
        events = [EventRow("rollout.promote", subject_of(rollout_id),
                           f"wave {wave.index if wave else '?'} promoted by {self.actor}"
                           + (f": {reason}" if reason else ""),
                           {"wave": wave.index if wave else None, "reason": reason})]
        self._write([], events=events, rollout={"status": "running"},
                    wave=(wave.id, {"status": "running", "verdict": "pass"}) if wave else None,
                    label="promote")
        if wave is not None:
            wave.status, wave.verdict = "running", "pass"
        return self._run()

    def abort(self, rollout_id: int, *, force: bool = False,
              reason: str | None = None) -> RolloutResult:
        """Roll back the current wave (or every host moved, per `rollback_scope`) and stop.

        When a live controller runs the rollout, the abort is requested: that controller rolls
        back at its next step and this call returns status `aborting`.
        """
        ro = self._get(rollout_id)
        if ro.status not in ("running", "paused", "aborting", "rolling_back"):
            raise CouldNotComplete(f"rollout {rollout_id} is {ro.status}: nothing to abort")
        if ro.status != "aborting":
            request_status(self.history, rollout_id, "aborting", at=self.now(),
                           actor=self.actor, kind="rollout.abort",
                           message=f"abort requested by {self.actor}"
                                   + (f": {reason}" if reason else ""),
                           data={"reason": reason, "was": ro.status},
                           allowed_from=("running", "paused", "rolling_back"))
        try:
            self._take(rollout_id, force, "rollout.abort.lock", None)
        except LockHeld as e:
            return RolloutResult(rollout_id, "aborting",
                                 f"abort requested; the running controller rolls back ({e})")
        return self._run()

    # ------------------------------------------------------------------------ internals
    @property
    def refs(self) -> dict[str, HostRef]:
        if self._refs is None:
            self._refs = {r.name: r for r in self.backend.hosts()}
        return self._refs

    def _get(self, rollout_id: int) -> Any:
        ro = get_rollout(self.history, rollout_id)
        if ro is None:
            raise CouldNotComplete(f"no rollout {rollout_id} in the history")
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

    # ---------------------------------------------------------------------- the run loop
    def _run(self) -> RolloutResult:
        assert self.rid is not None
        self._load()
        try:
            ro = self._get(self.rid)
            if ro.status == "aborting":
                raise _AbortRequested
            if ro.status == "rolling_back":
                wave = next((w for w in reversed(self.waves)
                             if w.status in ("failed", "rolling_back", "rolled_back")), None)
                res = self._rollback(wave, "resuming an interrupted rollback")
                raise _Stop(res.status, res.reason)
            for w in self.waves:
                if w.status in ("done",):
                    continue
                if w.status in ("failed", "rolling_back"):
                    res = self._rollback(w, f"wave {w.index} failed (resuming its rollback)")
                    raise _Stop(res.status, res.reason)
                if w.status == "paused":
                    raise _Stop("paused", f"wave {w.index} ({w.pool}) is paused, waiting for "
                                          f"`fleet rollout promote {self.rid}` or `abort`")
                self._run_wave(w)
            self._write([], events=[self._ev("rollout.end", f"rollout {self.rid} completed",
                                             status="completed")],
                        rollout={"status": "completed", "ended_at": self.now(), **_UNLOCK},
                        label="end")
            result = self.result("completed", "every wave passed")
        except _AbortRequested:
            result = self._abort_now()
        except _Stop as stop:
            result = self.result(stop.status, stop.reason)
        except (Exception, KeyboardInterrupt):
            # an orderly stop (an error, Ctrl-C): every step is on record, so free the lock;
            # anything else (the process being torn down) leaves it to go stale
            release_lock(self.history, self.rid, self.owner, self.pid)
            raise
        release_lock(self.history, self.rid, self.owner, self.pid)
        return result

    def _settings(self, pool: str) -> RolloutSettings:
        s = self.matrix.pools.get(pool)
        return s.rollout if s is not None else RolloutSettings()

    def _pool_rows(self, pool: str) -> list[StepRow]:
        return [r for w in self.waves if w.pool == pool for r in self.by_wave.get(w.id, [])]

    def _run_wave(self, w: WaveRow) -> None:
        rows = self.by_wave.get(w.id, [])
        settings = self._settings(w.pool)
        label = f"wave{w.index}"
        if w.status == "pending":
            w.status = "running"
            self._write([], wave=(w.id, {"status": "running", "started_at": self.now()}),
                        events=[self._ev("rollout.wave", f"wave {w.index} ({w.pool}) started: "
                                         f"{len(rows)} host(s)", wave=w.index, pool=w.pool,
                                         hosts=[r.host for r in rows])],
                        label=f"{label}:start")
        if w.status in ("running",):
            self._drain(w, rows)
            self._apply(w, rows)
            self._reboot(w, rows)
            self._verify(w, rows)
            self._health_gate(w, rows, settings)
            self._bench_gate(w, rows, settings)
        if w.status in ("running", "gated"):
            w.status = "gated"
            self._bake(w, rows, settings)
        self._repair(w, rows)
        self._undrain(w, rows)
        w.status = "done"
        self._write([], wave=(w.id, {"status": "done", "ended_at": self.now()}),
                    events=[self._ev("rollout.wave", f"wave {w.index} ({w.pool}) done: "
                                     + _summary(rows), wave=w.index, pool=w.pool,
                                     states=count_states(r.state for r in rows))],
                    label=f"{label}:done")

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

    def _drain(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if r.state == "planned"
                or (r.state == "draining" and not r.ended)]
        if not todo:
            return
        for r in todo:
            if "admin" not in r.detail:  # the state before fleet touched it, recorded once
                a = self.scheduler.state(r.host)
                r.detail = {**r.detail, "admin": {"state": a.state, "reason": a.reason,
                                                  "by_fleet": a.by_fleet}}
        self._set(todo, "draining", ended=False)
        self._write(todo, events=[self._step_event(w, "drain", "begin", todo)],
                    label=f"wave{w.index}:drain:begin")
        for r in todo:
            a = r.detail["admin"]
            if a["state"] in ("drained", "draining") and not a["by_fleet"]:
                when = self.now()
                r.state, r.started_at, r.ended_at = "skipped", when, when
                r.detail = {**r.detail, "why": f"drained by someone else: {a['reason']}"}
                continue
            res = self.scheduler.drain(r.host, f"rollout {self.rid} wave {w.index}",
                                       wait_s=self.opts.drain_wait_s)
            if res.ok:
                self._set([r], "drained", ended=True, ours=True)
                continue
            now_state = self.scheduler.state(r.host)
            ours = now_state.by_fleet and now_state.state in ("drained", "draining")
            self._fail(r, "drain", res.error, unreachable=not res.reachable
                       or now_state.state == "down", ours=ours)
        self._write(todo, events=[self._step_event(w, "drain", "end", todo),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:drain:end")

    def _apply(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if (r.state == "drained" and r.ended)
                or (r.state == "applying" and not r.ended)]
        if not todo:
            return
        release = self.matrix.release(todo[0].to_release or "")
        plans = self.backend.plan([r.host for r in todo], release)
        ready = []
        for r in todo:
            p = plans[r.host]
            if not p.ok or p.value is None:
                self._fail(r, "plan", p.error, unreachable=not p.reachable)
                continue
            plan = p.value
            if r.from_release is None:
                r.from_release = release_of(self.matrix.releases, plan.installed,
                                            plan.os_family)
            r.detail = {**r.detail, "changed": bool(r.detail.get("changed") or plan.changed),
                        "reboot": bool(r.detail.get("reboot") or plan.reboot_required),
                        "pending": plan.changed}
            ready.append(r)
        self._set(ready, "applying", ended=False)
        self._write(todo, events=[self._step_event(w, "apply", "begin", ready,
                                                   {"release": release.name}),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:apply:begin")
        change = [r for r in ready if r.detail.get("pending")]
        out = self.backend.apply([r.host for r in change], release) if change else {}
        for r in ready:
            res = out.get(r.host)
            if res is not None and not res.ok:
                err = res.error
                if res.reachable:
                    back = restore_release(self.backend, self.matrix, r.host, r.from_release)
                    err = f"{err}; {back}"
                self._fail(r, "apply", err, unreachable=not res.reachable, restored=True)
                continue
            r.detail = {k: v for k, v in r.detail.items() if k != "pending"}
            self._set([r], "applying", ended=True)
        self._write(ready, events=[self._step_event(w, "apply", "end", ready),
                                   *self._host_events(ready)],
                    label=f"wave{w.index}:apply:end")

    def _reboot(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if (r.state == "applying" and r.ended and r.detail.get("reboot"))
                or (r.state == "rebooting" and not r.ended)]
        if not todo:
            return
        self._set(todo, "rebooting", ended=False)
        self._write(todo, events=[self._step_event(w, "reboot", "begin", todo)],
                    label=f"wave{w.index}:reboot:begin")
        out = self.backend.reboot([r.host for r in todo])
        for r in todo:
            res = out[r.host]
            if res.ok:
                self._set([r], "rebooting", ended=True)
            else:
                self._fail(r, "reboot", res.error, unreachable=not res.reachable)
        self._write(todo, events=[self._step_event(w, "reboot", "end", todo),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:reboot:end")

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

    def _verify(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows
                if (r.state == "applying" and r.ended and not r.detail.get("reboot"))
                or (r.state == "rebooting" and r.ended)
                or (r.state == "verifying" and not r.ended)]
        if not todo:
            return
        self._set(todo, "verifying", ended=False)
        self._write(todo, events=[self._step_event(w, "verify", "begin", todo)],
                    label=f"wave{w.index}:verify:begin")
        health = self._probe_health(todo, lambda r: r.to_release or "")
        snaps: list[tuple[Any, ...]] = []
        for r in todo:
            ok, err, unreachable, snap = health[r.host]
            snaps += snap
            if ok:
                self._set([r], "verifying", ended=True)
            else:
                self._fail(r, "verify", err, unreachable=unreachable)
        self._write(todo, events=[self._step_event(w, "verify", "end", todo),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:verify:end", snapshots=snaps)

    def _health_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        failed = sum(1 for r in rows if _is_failure(r))
        total = sum(1 for r in self._pool_rows(w.pool) if _is_failure(r))
        moved = sum(1 for r in rows if r.state in ("verifying", "benchmarking", "judged",
                                                   "undraining", "done"))
        verdict, why = health_verdict(failed, total, Budget(settings.failure_budget_per_wave,
                                                            settings.failure_budget_total), moved)
        self.gates[w.id] = {"health": {"verdict": verdict, "reason": why}}
        if verdict == "fail":
            self._write([], events=[self._ev("rollout.gate", f"wave {w.index} ({w.pool}): "
                                             f"health gate failed: {why}", wave=w.index,
                                             gate="health", verdict="fail", reason=why)],
                        wave=(w.id, {"status": "failed", "verdict": "fail"}),
                        label=f"wave{w.index}:health:fail")
            w.status, w.verdict = "failed", "fail"
            res = self._rollback(w, f"health gate: {why}")
            raise _Stop(res.status, res.reason)

    def _bench_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        todo = [r for r in rows if (r.state == "verifying" and r.ended)
                or (r.state == "benchmarking" and not r.ended)]
        if not todo:
            return
        suites = [s for s, on in (("synthetic", settings.gates.benchmark),
                                  ("replay", settings.gates.replay)) if on]
        if w.verdict == "pass" or not suites:  # promoted by an operator, or no benchmark gate
            why = "promoted" if w.verdict == "pass" else "no benchmark gate"
            self._set(todo, "judged", ended=True, verdict="pass", why=why)
            self._write(todo, events=[self._step_event(w, "judge", "end", todo, {"why": why})],
                        label=f"wave{w.index}:judge:skip")
            return
        self._set(todo, "benchmarking", ended=False)
        self._write(todo, events=[self._step_event(w, "benchmark", "begin", todo,
                                                   {"suites": suites})],
                    wave=(w.id, {"status": "running"}),
                    label=f"wave{w.index}:bench:begin")
        attempt = 0
        while True:
            attempt += 1
            verdict, reason, detail = self._measure(w, todo, suites)
            final = after_retries(verdict, attempt, settings.gates.max_retries)
            self.gates.setdefault(w.id, {})["benchmark"] = {
                "verdict": verdict, "reason": reason, "attempt": attempt, **detail}
            self._write([], events=[self._ev(
                "rollout.gate", f"wave {w.index} ({w.pool}): benchmark gate {verdict} "
                                f"(attempt {attempt}): {reason}", wave=w.index,
                gate="benchmark", verdict=verdict, attempt=attempt, reason=reason, **detail)],
                label=f"wave{w.index}:bench:attempt{attempt}")
            if final is not None:
                break
        if verdict == "error":
            reason = (f"could not measure after {attempt} attempt(s) ({reason}): "
                      "treated as inconclusive")
        self._set(todo, "judged", ended=True, verdict=final)
        status = {"pass": "running", "fail": "failed", "inconclusive": "paused"}[final]
        events = [self._step_event(w, "benchmark", "end", todo, {"verdict": final})]
        rollout: dict[str, Any] | None = None
        if final == "inconclusive":
            events.append(self._ev("rollout.pause", f"wave {w.index} ({w.pool}) inconclusive: "
                                   f"{reason}; paused until `fleet rollout promote {self.rid}` "
                                   f"or `abort`", wave=w.index, reason=reason))
            rollout = {"status": "paused", **_UNLOCK}
        self._write(todo, events=events, wave=(w.id, {"status": status, "verdict": final}),
                    rollout=rollout, label=f"wave{w.index}:bench:end")
        w.status, w.verdict = status, final
        if final == "inconclusive":
            raise _Stop("paused", f"wave {w.index} ({w.pool}) inconclusive: {reason}")
        if final == "fail":
            res = self._rollback(w, f"benchmark gate: {reason}")
            raise _Stop(res.status, res.reason)

    def _measure(self, w: WaveRow, rows: list[StepRow],
                 suites: Sequence[str]) -> tuple[GateVerdict, str, dict[str, Any]]:
        """One try of the benchmark gates: the worst verdict over the suites."""
        n = max(1, self.opts.bench_hosts)
        canary = sorted(r.host for r in rows)[:n]
        models = {self.refs[h].gpu_model for h in canary if h in self.refs}
        old = _most_common([r.from_release for r in rows if r.from_release])
        baseline: list[str] = []
        for r in self._pool_rows(w.pool):
            if len(baseline) >= n:
                break
            ref = self.refs.get(r.host)
            if (r.state == "planned" and (ref is None or ref.gpu_model in models)
                    and self.scheduler.state(r.host).state == "available"):
                baseline.append(r.host)
        verdicts: list[GateVerdict] = []
        reasons: list[str] = []
        detail: dict[str, Any] = {"canary_hosts": canary, "baseline_hosts": baseline,
                                  "suites": {}}
        for suite in suites:
            # the pool's gate settings name the command/endpoint; engine options override them
            pool_params = self._settings(w.pool).gates.suite_params().get(suite, {})
            params = {**pool_params, **self.opts.suite_params.get(suite, {})}
            started = self.now()
            out = self.backend.benchmark(canary + baseline, suite, params)
            ended = self.now()
            c_samples: dict[str, list[float]] = {}
            b_samples: dict[str, list[float]] = {}
            errors = []
            runs = []
            for h in canary + baseline:
                res = out[h]
                side = c_samples if h in canary else b_samples
                ok = res.ok and bool(res.value)
                if ok:
                    for metric, values in (res.value or {}).items():
                        side.setdefault(metric, []).extend(values)
                else:
                    errors.append(f"{h}: {res.error}")
                rel = (self.steps[h].to_release if h in canary else old)
                runs.append((h, rel, res.value if ok else None, "done" if ok else "error"))
            record_benchmarks(self.history, runs, kind=suite, name=f"rollout-{self.rid}",
                              started_at=started, ended_at=ended, rollout_id=self.rid)
            if not c_samples:
                verdicts.append("error")
                reasons.append(f"{suite}: no canary samples ({'; '.join(errors[:3])})")
                continue
            history_base = (benchmark_samples(self.history, pool=w.pool, release=old,
                                              kind=suite) if old else {})
            chosen = choose_baseline(b_samples, history_base)
            if chosen is None:
                verdicts.append("error")
                reasons.append(f"{suite}: no baseline on {old or 'the old release'} (no host "
                               "of the pool left on it, and no history)")
                continue
            base, source = chosen
            # the suite's specs for the metrics this benchmark measures (on either side: one the
            # canary lacks stays, and fails as missing); a configured command that prints other
            # metrics is judged by their names (judge.default_spec)
            specs = [s for s in self.opts.suite_specs.get(suite, ())
                     if s.name in c_samples or s.name in base]
            if suite == "synthetic" and "command" in params:
                specs = []  # the pool's own benchmark: its metrics are judged by their names
            j = judge(c_samples, base, specs or None, baseline_source=source,
                      config=self.opts.judge_config, only_specified=bool(specs))
            v = from_judge(j.verdict)
            verdicts.append(v)
            reasons.append(f"{suite}: {j.verdict}: {j.reason}")
            detail["suites"][suite] = {"verdict": j.verdict, "baseline_source": source,
                                       "low_confidence": j.low_confidence,
                                       "metrics": [m.as_dict() for m in j.metrics]}
        return combine(verdicts), "; ".join(reasons), detail

    def _bake(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        judged = [r for r in rows if r.state == "judged"]
        seconds = settings.bake_minutes * 60.0
        if judged and seconds > 0:
            self._write([], wave=(w.id, {"status": "gated"}),
                        events=[self._ev("rollout.bake", f"wave {w.index} ({w.pool}): baking "
                                         f"{settings.bake_minutes} min", wave=w.index,
                                         minutes=settings.bake_minutes)],
                        label=f"wave{w.index}:bake:begin")
            left = seconds
            beat = self.wall()
            while left > 0:
                chunk = min(left, max(1.0, self.opts.heartbeat_s))
                self.sleep(chunk)
                left -= chunk
                if left > 0 and (self.wall() - beat).total_seconds() >= self.opts.heartbeat_s:
                    beat = self.wall()
                    self._write([], label=f"wave{w.index}:bake:beat")
            health = self._probe_health(judged, lambda r: r.to_release or "")
            snaps: list[tuple[Any, ...]] = []
            for r in judged:
                ok, err, unreachable, snap = health[r.host]
                snaps += snap
                if not ok:
                    self._fail(r, "bake", err, unreachable=unreachable)
            self._write(judged, events=[self._step_event(w, "bake", "end", judged),
                                        *self._host_events(judged)],
                        label=f"wave{w.index}:bake:end", snapshots=snaps)
            if any(r.state == "failed" for r in judged):
                w.status = "running"
                self._health_gate(w, rows, settings)
        w.status = "baked"
        self._write([], wave=(w.id, {"status": "baked"}), label=f"wave{w.index}:baked")

    def _repair(self, w: WaveRow, rows: list[StepRow]) -> None:
        """Roll back, one by one, the failed hosts whose pin may have changed them."""
        todo = [r for r in rows if r.state == "rolling_back"
                or (r.state == "failed" and _moved(r) and not r.detail.get("quarantined"))]
        if todo:
            self._rollback_hosts(todo, f"wave {w.index}: failed host(s) put back")

    def _undrain(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if (r.state == "judged" and r.ended)
                or (r.state == "undraining" and not r.ended)]
        release = [r for r in rows if r.state in ("failed", "rolled_back", "skipped")
                   and r.detail.get("ours") and not r.detail.get("released")
                   and not r.detail.get("quarantined")]
        if not todo and not release:
            return
        self._set(todo, "undraining", ended=False)
        for r in release:
            r.detail = {**r.detail, "releasing": True}
        self._write(todo + release, events=[self._step_event(w, "undrain", "begin",
                                                             todo + release)],
                    label=f"wave{w.index}:undrain:begin")
        for r in todo + release:
            err = self._undrain_one(r)
            if r in todo:
                self._set([r], "done", ended=True, **({"undrain_error": err} if err else {}))
            else:
                r.detail = {**{k: v for k, v in r.detail.items() if k != "releasing"},
                            "released": True, **({"undrain_error": err} if err else {})}
        self._write(todo + release, events=[self._step_event(w, "undrain", "end",
                                                             todo + release)],
                    label=f"wave{w.index}:undrain:end")

    def _undrain_one(self, r: StepRow) -> str | None:
        """Undrain a host only if fleet drained it (recorded) and the scheduler agrees."""
        if not r.detail.get("ours"):
            return None
        a = self.scheduler.state(r.host)
        if a.state not in ("drained", "draining", "down") or not a.by_fleet:
            return None  # not drained, or drained by someone else since: leave it
        res = self.scheduler.undrain(r.host)
        return None if res.ok else res.error

    # ---------------------------------------------------------------------- rollbacks
    def _rollback(self, w: WaveRow | None, reason: str) -> RolloutResult:
        """Roll back the failed wave (or every host moved in its pool), undrain, stop."""
        pool = w.pool if w else None
        waves = [w] if w is not None else []
        if w is not None and self.opts.rollback_scope == "all":
            waves = [x for x in self.waves if x.pool == w.pool and x.index <= w.index]
        rows = [r for x in waves for r in self.by_wave.get(x.id, [])]
        targets = [r for r in rows if r.state in MAY_HAVE_MOVED or r.state == "rolling_back"
                   or (r.state == "failed" and _moved(r) and not r.detail.get("quarantined"))]
        status = "aborted" if self._aborting else "rolled_back"
        self._write([], events=[self._ev("rollout.rollback",
                                         f"rolling back {len(targets)} host(s) of "
                                         f"{pool or 'the rollout'}: {reason}",
                                         reason=reason, scope=self.opts.rollback_scope,
                                         hosts=[r.host for r in targets])],
                    rollout={"status": "aborting" if self._aborting else "rolling_back"},
                    wave=(w.id, {"status": "rolling_back"}) if w else None,
                    label="rollback:begin")
        # hosts of the failed wave that never started stay planned; the rest are put back
        unfinished = [r for r in rows if r.state in ("draining", "drained") and not _moved(r)]
        if unfinished:
            when = self.now()
            for r in unfinished:
                r.state, r.started_at, r.ended_at = "skipped", when, when
                r.detail = {**r.detail, "why": "the wave was rolled back before this host moved"}
            self._write(unfinished, events=[self._step_event(w, "stop", "end", unfinished)]
                        if w else [], label="rollback:unfinished")
        if targets:
            self._rollback_hosts(targets, reason)
        for x in waves:
            self._undrain(x, self.by_wave.get(x.id, []))
        final = {"status": status, "ended_at": self.now(), **_UNLOCK}
        for x in waves:
            x.status = "rolled_back"
            self._write([], wave=(x.id, {"status": "rolled_back", "ended_at": self.now()}),
                        label=f"wave{x.index}:rolled_back")
        self._write([], events=[self._ev("rollout.end", f"rollout {self.rid} {status}: {reason}",
                                         status=status, reason=reason)],
                    rollout=final, label="end")
        return self.result(status, reason)

    def _rollback_hosts(self, rows: list[StepRow], reason: str) -> None:
        """Put hosts back on the release they had: one idempotent step per host (drain if
        needed, re-plan, pin, reboot when the loaded module differs, verify)."""
        for r in rows:
            if r.state != "rolling_back":
                r.detail = {**r.detail, "rollback_from_state": r.state}
        self._set(rows, "rolling_back", ended=False, rollback_reason=reason)
        self._write(rows, events=[self._ev("rollout.step", f"rolling back {len(rows)} host(s)",
                                           step="rollback", phase="begin",
                                           hosts=[r.host for r in rows])],
                    label="rollback:hosts:begin")
        targets: dict[str, list[StepRow]] = {}
        for r in rows:
            back = r.from_release or self._fallback_release(r)
            if back is None:
                self._fail(r, "rollback", "no known previous release to roll back to")
                continue
            r.detail = {**r.detail, "rollback_to": back}
            targets.setdefault(back, []).append(r)
        snaps: list[tuple[Any, ...]] = []
        for back, group in targets.items():
            release = self.matrix.release(back)
            live = []
            for r in group:  # hosts put back in service by an earlier wave: drain them again
                a = self.scheduler.state(r.host)
                if a.state == "available":
                    d = self.scheduler.drain(r.host, f"rollout {self.rid} rollback")
                    if d.ok:
                        r.detail = {**r.detail, "ours": True, "released": False}
                    else:
                        self._fail(r, "rollback", f"drain: {d.error}",
                                   unreachable=not d.reachable)
                        continue
                live.append(r)
            plans = self.backend.plan([r.host for r in live], release) if live else {}
            change = []
            for r in live:
                p = plans[r.host]
                if not p.ok or p.value is None:
                    self._fail(r, "rollback", f"plan: {p.error}", unreachable=not p.reachable)
                elif p.value.changed:
                    change.append(r)
            out = self.backend.apply([r.host for r in change], release) if change else {}
            for r in change:
                if not out[r.host].ok:
                    self._fail(r, "rollback", f"pin: {out[r.host].error}",
                               unreachable=not out[r.host].reachable)
            live = [r for r in live if r.state == "rolling_back"]
            health = self._probe_health(live, lambda r: r.detail["rollback_to"])
            reboot = [r for r in live if health[r.host][3]
                      and needs_reboot(health[r.host][3][0][2])]
            if reboot:
                rb = self.backend.reboot([r.host for r in reboot])
                for r in reboot:
                    if not rb[r.host].ok:
                        self._fail(r, "rollback", f"reboot: {rb[r.host].error}",
                                   unreachable=not rb[r.host].reachable)
                again = [r for r in reboot if r.state == "rolling_back"]
                health.update(self._probe_health(again, lambda r: r.detail["rollback_to"]))
            for r in live:
                if r.state != "rolling_back":
                    continue
                ok, err, unreachable, snap = health[r.host]
                snaps += snap
                if ok:
                    self._set([r], "rolled_back", ended=True)
                else:
                    self._fail(r, "rollback", err, unreachable=unreachable)
        events = [self._ev("rollout.step", f"rollback ended: {_summary(rows)}", step="rollback",
                           phase="end", to={s: [r.host for r in rows if r.state == s]
                                            for s in {r.state for r in rows}})]
        # a host that could not be put back on a verified release is quarantined: it stays
        # drained (on record) instead of going back into service broken
        bad = [r for r in rows if r.state == "failed" and r.detail.get("failed_at") == "rollback"]
        for r in bad:
            r.detail = {**r.detail, "quarantined": True}
            events.append(self._ev("rollout.host", f"{r.host}: rollback failed "
                                   f"({r.detail.get('error')}): quarantined, left drained",
                                   host=r.host, state="failed", step="rollback",
                                   error=r.detail.get("error"), quarantined=True))
        self._write(rows, events=events, label="rollback:hosts:end",
                    snapshots=snaps)
        for r in bad:
            open_quarantine(self.history, r.host, reason=f"rollout {self.rid}: rollback "
                            f"failed: {r.detail.get('error')}", opened_by=self.actor,
                            at=self.now(), data={"rollout": self.rid})

    def _fallback_release(self, r: StepRow) -> str | None:
        prev = self.matrix.policy.previous.get(r.pool)
        return prev

    def _abort_now(self) -> RolloutResult:
        self._aborting = True
        wave = next((w for w in self.waves if w.status not in ("done", "pending",
                                                                "rolled_back")), None)
        if wave is None:  # nothing moving: roll back the last wave that moved, if any
            wave = next((w for w in reversed(self.waves) if w.status == "done"), None)
        return self._rollback(wave, "aborted by an operator")


_UNLOCK = {"lock_owner": None, "lock_pid": None, "lock_heartbeat": None}
"""Written with a rollout's last step: a controller killed right after it leaves no lock."""


def _is_failure(r: StepRow) -> bool:
    """A host that failed in this rollout (including one put back afterwards)."""
    return r.state == "failed" or (r.state == "rolled_back" and bool(r.detail.get("failed_at")))


def _moved(r: StepRow) -> bool:
    return bool(r.detail.get("changed")) and not r.detail.get("restored")


def _most_common(values: Sequence[str]) -> str | None:
    counts = count_states(values)
    return max(counts, key=lambda k: counts[k]) if counts else None


def _summary(rows: Sequence[StepRow]) -> str:
    return ", ".join(f"{n} {s}" for s, n in count_states(r.state for r in rows).items())


def admin_states(scheduler: Scheduler, hosts: Sequence[str]) -> dict[str, AdminState]:
    return {h: scheduler.state(h) for h in hosts}


def invariants(steps: Sequence[StepRow], scheduler: Scheduler,
               installed: Callable[[str], str | None] | None = None) -> list[str]:
    """What is wrong with a finished rollout's hosts (empty when nothing): every host fleet
    drained is undrained (unless quarantined on record), and each host that started runs the
    release it ended on (target when done, previous when rolled back)."""
    problems = []
    for r in steps:
        a = scheduler.state(r.host)
        if a.by_fleet and a.state in ("drained", "draining") and not r.detail.get("quarantined"):
            problems.append(f"{r.host}: left drained by fleet ({r.state})")
        if installed is None:
            continue
        on = installed(r.host)
        if r.state == "done" and on != r.to_release:
            problems.append(f"{r.host}: done but on {on}, not {r.to_release}")
        if r.state == "rolled_back" and on != r.detail.get("rollback_to"):
            problems.append(f"{r.host}: rolled back but on {on}, not "
                            f"{r.detail.get('rollback_to')}")
        if r.state not in ("done", "rolled_back", "failed", "planned", "skipped"):
            problems.append(f"{r.host}: left in state {r.state}")
    return problems


__all__ = ["RolloutEngine", "RolloutOptions", "RolloutResult", "SUITE_SPECS", "invariants",
           "admin_states", "Release"]
