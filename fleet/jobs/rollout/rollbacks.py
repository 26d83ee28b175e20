"""Rollbacks: a failed wave, an abort, or the hosts that failed after their pin changed."""

from __future__ import annotations

from typing import Any

from fleet.domain.gates import (
    MAY_HAVE_MOVED,
)
from fleet.history import open_quarantine
from fleet.history.rollouts import (
    StepRow,
    WaveRow,
)
from fleet.jobs.apply import needs_reboot
from fleet.jobs.drain import DrainWait, drain_hosts
from fleet.jobs.rollout.core import EngineCore
from fleet.jobs.rollout.model import _UNLOCK, RolloutResult, _moved, _summary

VERIFIED = frozenset({"benchmarking", "judged", "undraining", "done"})
"""Step states in which the host passed its verify on the release it runs."""


class Rollbacks(EngineCore):
    """Put a failed wave (or every host moved in its pool) back on the release it had."""

    def _rollback(self, w: WaveRow | None, reason: str) -> RolloutResult:
        """Roll back the failed wave (or every host moved in its pool), undrain, stop."""
        pool = w.pool if w else None
        waves = [w] if w is not None else []
        if w is not None and self.opts.rollback_scope == "all":
            waves = [x for x in self.waves if x.pool == w.pool and x.index <= w.index]
        rows = [r for x in waves for r in self.by_wave.get(x.id, [])]
        targets = [r for r in rows if r.state in MAY_HAVE_MOVED or r.state == "rolling_back"
                   or (r.state in ("failed", "draining", "drained") and _moved(r)
                       and not r.detail.get("quarantined"))]
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
            live = self._rollback_drain(group)
            plans = (self.backend.plan([r.host for r in live], release,
                                       kernel_hold=self._kernel_hold(live)) if live else {})
            change = []
            for r in live:
                p = plans[r.host]
                if not p.ok or p.value is None:
                    self._fail(r, "rollback", f"plan: {p.error}", unreachable=not p.reachable)
                elif p.value.changed:
                    change.append(r)
            out = (self.backend.apply([r.host for r in change], release,
                                      kernel_hold=self._kernel_hold(change)) if change else {})
            for r in change:
                if not out[r.host].ok:
                    self._fail(r, "rollback", f"pin: {out[r.host].error}",
                               unreachable=not out[r.host].reachable)
            live = [r for r in live if r.state == "rolling_back"]
            health = self._probe_health(live, lambda r: r.detail["rollback_to"])
            reboot = [r for r in live if health[r.host][3]
                      and needs_reboot(health[r.host][3][0][2])]
            if reboot:
                rb: dict[str, Any] = {}
                for pool in dict.fromkeys(r.pool for r in reboot):
                    rb.update(self._reboot_now(pool, [r.host for r in reboot if r.pool == pool],
                                               f"rollout {self.rid} rollback", release))
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
        # drained (on record) instead of going back into service broken. One the rollback
        # could not drain (someone else's drain, jobs past the timeout, a state it could not
        # read) was not touched: it stays on the release it was verified on, else quarantined
        bad = [r for r in rows if r.state == "failed" and r.detail.get("failed_at") == "rollback"
               and not (r.detail.get("rollback_skipped")
                        and r.detail.get("rollback_from_state") in VERIFIED)]
        for r in rows:
            if r.detail.get("rollback_skipped") and r not in bad:
                events.append(self._ev("rollout.host", f"{r.host}: {r.detail.get('error')}; "
                                       f"left on {r.to_release}, the release it was verified "
                                       "on", host=r.host, state="failed", step="rollback",
                                       error=r.detail.get("error"), skipped=True))
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

    def _rollback_drain(self, rows: list[StepRow]) -> list[StepRow]:
        """The same drain-and-wait as a forward step, for every host the rollback puts back
        (one still drained by fleet is ready at the first look); returns the hosts drained and
        empty. The others are skipped and named, never pinned or rebooted: drained by someone
        else, jobs past the timeout (after `cancel`/`requeue` where the matrix says so), a drain
        refused, or a state that stayed unreadable (asked again every poll until the
        timeout)."""
        ready: list[StepRow] = []
        for pool in dict.fromkeys(r.pool for r in rows):
            group = [r for r in rows if r.pool == pool]
            settings = self._settings(pool).drain
            wait = DrainWait(self.scheduler, settings, f"rollout {self.rid} rollback",
                             now=self.now, sleep=self.sleep)
            stops: list[Any] = []
            action = settings.on_timeout

            def stopped(host: str, msg: str, jobs: list[str], stops: list[Any] = stops,
                        action: str = action) -> None:
                stops.append(self._ev("rollout.drain.stop", msg, host=host, jobs=jobs,
                                      action=action))

            views = drain_hosts(wait, [r.host for r in group], on_stop=stopped)
            for r in group:
                v = views[r.host]
                # fleet's drain is on the host now (unless someone else's was): lifted at the
                # end unless the host is quarantined
                r.detail = {**r.detail, "ours": v.outcome not in ("taken", "down"),
                            "released": False}
                if v.outcome == "ready":
                    ready.append(r)
                    continue
                self._fail(r, "rollback", f"not rolled back: {v.describe()}",
                           unreachable=v.outcome == "down",
                           rollback_skipped=v.outcome != "down")
            if stops:
                self._write([], events=stops, label="rollback:drain:stop")
        return ready

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
