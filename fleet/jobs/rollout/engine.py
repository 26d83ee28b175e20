"""The rollout engine: start, resume, promote and abort, and the loop over waves."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from fleet.domain.gates import (
    count_states,
)
from fleet.domain.selection import known
from fleet.errors import CouldNotComplete, ProblemsFound
from fleet.history import list_quarantines
from fleet.history.rollouts import (
    EventRow,
    LockHeld,
    LockLost,
    WaveRow,
    create_rollout,
    load_waves,
    release_lock,
    request_status,
    subject_of,
)
from fleet.jobs.rollout.benchgate import BenchGate
from fleet.jobs.rollout.livegate import LiveGate
from fleet.jobs.rollout.model import (
    _UNLOCK,
    RolloutResult,
    _AbortRequested,
    _Stop,
    _summary,
)
from fleet.jobs.rollout.rollbacks import Rollbacks
from fleet.jobs.rollout.startplan import nothing_reason, plan_start
from fleet.jobs.rollout.steps import WaveSteps


class RolloutEngine(WaveSteps, BenchGate, LiveGate, Rollbacks):
    """Runs, resumes, promotes and aborts rollouts (see the module doc).

    `now` stamps the history (a `SimClock` in rehearsals); `sleep(seconds)` waits out bake
    times; `wall` is the real clock the lock's heartbeat is compared with across processes.
    `checkpoint(label)` is called at every step boundary (tests inject crashes there);
    `on_progress(engine)` after every write (the live display).
    """

    # ------------------------------------------------------------------ public operations
    def start(self, *, matrix_path: str, pools: Sequence[str] | None = None,
              release: str | None = None, releases: Mapping[str, str | None] | None = None,
              unreachable: Sequence[str] = (), start_data: Mapping[str, Any] | None = None,
              ) -> RolloutResult:
        """Plan and run a new rollout (refused while another one holds one of its pools).

        Refused before anything runs (`BadInput`) when `pools` names a pool without a host or
        `release` is not in the matrix. Hosts in `unreachable` are skipped by the plan, never
        counted as on their target: when nothing else moves, the start `CouldNotComplete`s
        naming them; otherwise the result lists them (`RolloutResult.unreachable`).
        """
        refs = list(self.refs.values())
        quarantined = {h.name: q.reason for q, h in list_quarantines(self.history)}
        plan = plan_start(self.matrix, refs, self.scheduler, quarantined, pools=pools,
                          release=release, releases=releases or {}, unreachable=unreachable)
        moving = [p for p in plan.pools if p.waves]
        in_scope = [r for r in refs if r.pool and (pools is None or r.pool in pools)]
        if not moving:
            blocked = [p.pool for p in plan.pools if p.blocked]
            if blocked:
                raise ProblemsFound("nothing can move: max_unavailable used up in "
                                    + ", ".join(blocked))
            lost = plan.unreachable
            if lost:  # never "on target": nobody knows what they run
                raise CouldNotComplete(
                    f"nothing moved: {len(lost)} host(s) could not be reached, so whether "
                    f"they are on their target is unknown: {known(lost)}")
            return RolloutResult(None, "nothing", nothing_reason(plan), plan=plan)
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
                                            "skipped": p.skipped, "blocked": p.blocked,
                                            "notes": p.notes}
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
        """An operator passes the paused wave's inconclusive benchmark gate; the rollout
        continues (the wave's later steps, bake and undrain, still run).

        Refused (`CouldNotComplete`, nothing changed) when the wave paused before its gates
        ran (a drain timeout): there is no verdict to overrule, and passing it would skip the
        benchmark. `keep_waiting` is that case's action."""
        ro = self._get(rollout_id)
        if ro.status != "paused":
            raise CouldNotComplete(f"rollout {rollout_id} is {ro.status}, not paused: "
                                   "nothing to promote")
        wave = self._paused_wave(rollout_id)
        if wave is not None and wave.verdict != "inconclusive":
            raise CouldNotComplete(
                f"rollout {rollout_id}: wave {wave.index} ({wave.pool}) paused before its "
                "gates ran (jobs outlived the drain timeout), so there is no gate verdict to "
                f"promote; `fleet rollout keep-waiting {rollout_id}` waits for the jobs again "
                "(the health and benchmark gates then run as usual), `abort` stops")
        self._take(rollout_id, force, "rollout.promote.lock", None)
        self._load()
        wave = next((w for w in self.waves if w.status == "paused"), None)
        # a wave paused by its live gate is back in service: that gate is the one passed
        live = [r for r in self.by_wave.get(wave.id, [])
                if r.detail.get("live_gate") == "paused"] if wave else []
        for r in live:
            r.detail = {**r.detail, "live_gate": "promoted"}
        gate = "live" if live else "benchmark"
        events = [EventRow("rollout.promote", subject_of(rollout_id),
                           f"wave {wave.index if wave else '?'} promoted by {self.actor}: "
                           f"its inconclusive {gate} gate passed by hand"
                           + (f" ({reason})" if reason else ""),
                           {"wave": wave.index if wave else None, "reason": reason,
                            "gate": gate, "was": "inconclusive"})]
        self._write(live, events=events, rollout={"status": "running"},
                    wave=(wave.id, {"status": "running", "verdict": "pass"}) if wave else None,
                    label="promote")
        if wave is not None:
            wave.status, wave.verdict = "running", "pass"
        return self._run()

    def keep_waiting(self, rollout_id: int, *, force: bool = False,
                     reason: str | None = None) -> RolloutResult:
        """After a drain-timeout pause: wait for the wave's jobs again, a whole drain timeout
        from now; once the hosts are empty the wave goes on through every gate. Refused
        (`CouldNotComplete`) for a wave paused by an inconclusive gate (promote or abort)."""
        ro = self._get(rollout_id)
        if ro.status != "paused":
            raise CouldNotComplete(f"rollout {rollout_id} is {ro.status}, not paused: "
                                   "nothing is waiting")
        wave = self._paused_wave(rollout_id)
        if wave is not None and wave.verdict == "inconclusive":
            raise CouldNotComplete(
                f"rollout {rollout_id}: wave {wave.index} ({wave.pool}) is paused on an "
                "inconclusive benchmark gate, not on its drain: `fleet rollout promote "
                f"{rollout_id}` passes it by hand, `abort` rolls it back")
        self._take(rollout_id, force, "rollout.keep_waiting.lock", None)
        self._load()
        wave = next((w for w in self.waves if w.status == "paused"), None)
        events = [EventRow("rollout.keep_waiting", subject_of(rollout_id),
                           f"wave {wave.index if wave else '?'}: {self.actor} keeps waiting "
                           "for its jobs" + (f" ({reason})" if reason else ""),
                           {"wave": wave.index if wave else None, "reason": reason})]
        self._write([], events=events, rollout={"status": "running"},
                    wave=(wave.id, {"status": "running", "verdict": None}) if wave else None,
                    label="keep_waiting")
        if wave is not None:  # no verdict: every gate of the wave runs once it is drained
            wave.status, wave.verdict = "running", None
        return self._run()

    def _paused_wave(self, rollout_id: int) -> WaveRow | None:
        """The rollout's paused wave, read from the history (no lock needed)."""
        return next((w for w in load_waves(self.history, rollout_id)
                     if w.status == "paused"), None)

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
            if e.stale:  # no controller will see the request: say how to carry it out
                raise LockHeld(f"abort of rollout {rollout_id} recorded, but {e}",
                               stale=True) from None
            return RolloutResult(rollout_id, "aborting",
                                 f"abort requested; the running controller rolls back ({e})")
        return self._run()

    # ---------------------------------------------------------------------- the run loop
    def _run(self) -> RolloutResult:
        with _long_lived_frozen(), self._heartbeat():  # heartbeat: issue 29, defect 11
            return self._run_waves()

    def _run_waves(self) -> RolloutResult:
        assert self.rid is not None
        self._load()
        try:
            ro = self._get(self.rid)
            if ro.status == "aborting":
                raise _AbortRequested
            if ro.status == "paused" and not any(w.status == "paused" for w in self.waves):
                # paused by a forced rollback (preempted), not by a gate: resuming continues
                self._write([], events=[self._ev("rollout.continue",
                                                 f"rollout {self.rid} continues after a "
                                                 f"preemption, by {self.owner}")],
                            rollout={"status": "running"}, label="continue")
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
                    act = "promote" if w.verdict == "inconclusive" else "keep-waiting"
                    raise _Stop("paused", f"wave {w.index} ({w.pool}) is paused, waiting for "
                                          f"`fleet rollout {act} {self.rid}` or `abort`")
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
        except LockLost as lost:  # taken over or preempted: say so, touch nothing more
            self._record_lost(str(lost))
            raise
        except (Exception, KeyboardInterrupt):
            # an orderly stop (an error, Ctrl-C): every step is on record, so free the lock;
            # anything else (the process being torn down) leaves it to go stale
            release_lock(self.history, self.rid, self.owner, self.pid)
            raise
        release_lock(self.history, self.rid, self.owner, self.pid)
        return result

    def _record_lost(self, why: str) -> None:
        """The stopping controller's own word, so the history says both sides."""
        from contextlib import suppress

        from fleet.history import record_event

        assert self.rid is not None
        with suppress(CouldNotComplete):  # the history is out of reach: the raise says it all
            record_event(self.history, "rollout.lock.lost", subject_of(self.rid),
                         f"controller {self.owner} (pid {self.pid}) stopped: {why}",
                         {"owner": self.owner, "pid": self.pid}, actor=self.actor,
                         at=self.now())

    def _run_wave(self, w: WaveRow) -> None:
        rows = self.by_wave.get(w.id, [])
        settings = self._settings(w.pool)
        label = f"wave{w.index}"
        if w.status == "pending":
            # in memory too: the live gate's before-change baseline ends when the wave started
            w.status, w.started_at = "running", self.now()
            self._write([], wave=(w.id, {"status": "running", "started_at": w.started_at}),
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
        self._live_gate(w, rows, settings)
        w.status = "done"
        self._write([], wave=(w.id, {"status": "done", "ended_at": self.now()}),
                    events=[self._ev("rollout.wave", f"wave {w.index} ({w.pool}) done: "
                                     + _summary(rows), wave=w.index, pool=w.pool,
                                     states=count_states(r.state for r in rows))],
                    label=f"{label}:done")


@contextmanager
def _long_lived_frozen() -> Iterator[None]:
    """The objects that exist when a run starts (modules, the matrix, the inventory, the
    fleet's hosts) outlive it: kept out of the collector's full passes while it runs, which
    walked all of them each time a wave's facts aged into the oldest generation (about a third
    of a 1,000-host run on the simulated fleet). Unfrozen at the end unless someone froze
    before us, so cyclic garbage among them is still collected afterwards.

    The youngest generation is collected every `RUN_GC_THRESHOLD` allocations at most, as the
    CLI does for every command (`fleet.cli.app.run`): a wave's facts are many objects alive
    together, and at the default 700 they were walked again and again on their way to the
    oldest generation. Restored at the end."""
    ours = gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], RUN_GC_THRESHOLD), *thresholds[1:])
    gc.freeze()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if ours:
            gc.unfreeze()


RUN_GC_THRESHOLD = 50_000
"""Allocations between two collections of the youngest generation during a run."""
