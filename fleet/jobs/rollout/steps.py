"""The steps of a wave, each idempotent against the hosts and resumable from its rows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fleet.domain.drain import DrainView, describe_jobs
from fleet.domain.driver_owner import refusal as driver_refusal
from fleet.domain.gates import (
    Budget,
    health_verdict,
)
from fleet.domain.matrix.models import RolloutSettings
from fleet.domain.pinning import release_of
from fleet.domain.plan import fit_drain_budget, resolve_max_unavailable
from fleet.domain.ports import HostRef
from fleet.history import list_quarantines
from fleet.history.quarantines import quarantined_hosts
from fleet.history.rollouts import (
    StepRow,
    WaveRow,
)
from fleet.jobs.drain import DrainWait, drain_hosts
from fleet.jobs.node_apply import plan_nodes, put_right, settle_before_reboot
from fleet.jobs.rollout.core import EngineCore
from fleet.jobs.rollout.fence import FreshRead
from fleet.jobs.rollout.model import _UNLOCK, _is_failure, _moved, _Stop

UNKNOWN_TRIES = 3
"""Reads of a host's state before fleet gives up on an undrain (a flaky `scontrol`)."""
SAID_HOSTS, SAID_CHARS = 3, 700
"""How many failed hosts a failed health gate's reason names, and how much of each error."""


def _failures(rows: list[StepRow]) -> str:
    """Which hosts failed and why, for the gate's reason: the budget alone does not say what
    to fix (a reboot the pre-reboot gate refused names the kernel and the fix)."""
    failed = [r for r in rows if _is_failure(r)]
    if not failed:
        return ""
    said = []
    for r in failed[:SAID_HOSTS]:
        err = str(r.detail.get("error") or "failed")
        err = err if len(err) <= SAID_CHARS else err[:SAID_CHARS - 3] + "..."
        said.append(f"{r.host} failed at {r.detail.get('failed_at') or '?'}: {err}")
    more = len(failed) - SAID_HOSTS
    return f" ({'; '.join(said)}" + (f"; {more} more" if more > 0 else "") + ")"


class WaveSteps(EngineCore):
    """Drain, apply, reboot, verify, health gate, bake, repair and undrain (see the package doc)."""

    def _drain(self, w: WaveRow, rows: list[StepRow]) -> None:
        """Drain the wave's hosts and wait until each is drained AND empty (see
        `fleet.jobs.drain`); jobs outliving the pool's timeout pause the rollout (default),
        skip the host, or are cancelled or requeued, as the matrix says.

        Rows an earlier controller (or a pause) left drained, applying or rebooting are drained
        and waited for again before anything can disrupt them: someone may have put the host
        back into service meanwhile (a forced `fleet rollback`, an operator's resume). Before
        the drain, `max_unavailable` is checked against what is out of service now."""
        again = [r for r in rows if r.state in ("drained", "applying")
                 or (r.state == "rebooting" and not r.ended)]
        for r in again:
            r.detail = {**{k: v for k, v in r.detail.items()
                           if k not in ("drain_since", "drain_timed_out")},
                        "redrain": r.detail.get("redrain") or r.state}
        todo = [r for r in rows if r.state == "planned"
                or (r.state == "draining" and not r.ended) or r in again]
        if not todo:
            return
        settings = self._settings(w.pool).drain
        for r in todo:
            if "admin" not in r.detail:  # the state before fleet touched it, recorded once
                a = self.scheduler.state(r.host)
                r.detail = {**r.detail, "admin": {"state": a.state, "reason": a.reason,
                                                  "by_fleet": a.by_fleet, "owner": a.owner}}
            if r.detail.get("drain_timed_out"):  # keep-waiting after a drain pause: anew
                r.detail = {k: v for k, v in r.detail.items()
                            if k not in ("drain_timed_out", "drain_since")}
        untouched = {id(r) for r in todo if r.state == "planned"}  # fleet never cordoned these
        self._set(todo, "draining", ended=False)
        self._write(todo, events=[self._step_event(w, "drain", "begin", todo)],
                    label=f"wave{w.index}:drain:begin")
        live: list[StepRow] = []
        owner_of = getattr(self.scheduler, "driver_owner", None)  # Kubernetes: the Node's word
        for r in todo:
            a = r.detail["admin"]
            if a["state"] in ("drained", "draining") and not a["by_fleet"]:
                self._skip(r, f"drained by someone else: {a['reason']}"
                              + (f" ({a['owner']})" if a.get("owner") else ""))
                continue
            # only a host fleet has not touched yet: one it may have cordoned (a resumed drain,
            # a host half-way to its target) is drained and judged at its plan as before
            owner = owner_of(r.host) if owner_of is not None and id(r) in untouched else None
            if owner is not None and (why := driver_refusal(owner)) is not None:
                # before the drain: evicting pods from a host fleet will not pin helps no one
                if owner.operator:
                    self._skip(r, why)
                else:  # cannot tell: not moved, and not passed over quietly either
                    self._fail(r, "drain", why, ours=False)
                continue
            live.append(r)
        live = self._within_budget(w, live)
        by_host = {r.host: r for r in live}
        since = {r.host: datetime.fromisoformat(r.detail["drain_since"])
                 for r in live if r.detail.get("drain_since")}
        wait = DrainWait(self.scheduler, settings, f"rollout {self.rid} wave {w.index}",
                         now=self.now, sleep=self.sleep, since=since,
                         on_round=lambda views: self._drain_round(w, by_host, views))
        with self._guard.batch():  # one drain call per host: one lock read per batch window
            refused = wait.issue(list(by_host))
        for r in live:  # the wait's start is on record before the first look
            r.detail = {**r.detail, "drain_since": wait.since[r.host].isoformat(),
                        "ours": r.host not in refused}
        self._write(live, label=f"wave{w.index}:drain:issued")
        stops: list[Any] = []
        views = drain_hosts(wait, [h for h in by_host if h not in refused], issued=True,
                            on_stop=lambda host, msg, jobs: stops.append(self._ev(
                                "rollout.drain.stop", msg, host=host, jobs=jobs,
                                action=settings.on_timeout)))
        views.update(refused)
        late: list[DrainView] = []
        for host, v in views.items():
            r = by_host[host]
            r.detail = {k: val for k, val in r.detail.items() if k != "waiting_for"}
            if v.outcome == "ready":
                self._set([r], "drained", ended=True, ours=True, drain_waited_s=v.waited_s)
            elif v.outcome == "taken":
                why = ("drained by someone else while fleet waited: "
                       f"{v.reason}" + (f" ({v.owner})" if v.owner else ""))
                if _moved(r):  # half-way to the target: a failure, repaired when it can be
                    self._fail(r, "drain", why, ours=False)
                else:
                    self._skip(r, why, ours=False)
            elif v.outcome == "timeout" and settings.on_timeout == "skip" and _moved(r):
                self._fail(r, "drain", f"{describe_jobs(v.jobs)} outlived the drain timeout "
                                       f"({settings.timeout_minutes:g} min) after the host "
                                       "was put back into service half-way to its target")
            elif v.outcome == "timeout" and settings.on_timeout == "skip":
                err = self._undrain_one(r)
                self._skip(r, f"{describe_jobs(v.jobs)} outlived the drain timeout "
                              f"({settings.timeout_minutes:g} min); host left on its release",
                           released=True, **({"undrain_error": err} if err else {}))
            elif v.outcome == "timeout":
                r.detail = {**r.detail, "drain_timed_out": True,
                            "waiting_for": {"jobs": list(v.jobs), "waited_s": round(v.waited_s)}}
                late.append(v)
            else:
                now_state = self.scheduler.state(r.host)
                ours = now_state.by_fleet and now_state.state in ("drained", "draining")
                self._fail(r, "drain", v.reason or v.outcome,
                           unreachable=v.outcome == "down" or now_state.state == "down",
                           ours=ours)
        if late:
            why = (f"wave {w.index} ({w.pool}): jobs outlived the drain timeout "
                   f"({settings.timeout_minutes:g} min"
                   + (f", then {settings.on_timeout}" if settings.on_timeout != "pause" else "")
                   + "): " + "; ".join(v.describe() for v in late)
                   + f"; nothing was rebooted. Paused until `fleet rollout keep-waiting "
                     f"{self.rid}` or `abort`")
            self._write(todo, events=[*stops, self._ev("rollout.pause", why, wave=w.index,
                                                       reason="drain timeout",
                                                       hosts={v.host: list(v.jobs)
                                                              for v in late})],
                        wave=(w.id, {"status": "paused"}),
                        rollout={"status": "paused", **_UNLOCK},
                        label=f"wave{w.index}:drain:paused")
            w.status = "paused"
            raise _Stop("paused", why)
        self._write(todo, events=[*stops, self._step_event(w, "drain", "end", todo),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:drain:end")

    def _within_budget(self, w: WaveRow, rows: list[StepRow]) -> list[StepRow]:
        """The rows that may be drained without more than the pool's `max_unavailable` out of
        service now; the others are skipped, named with what is out (hosts an earlier wave
        left out, quarantined, drained or down by anyone). A host already half-way to its
        target is always drained: leaving it in service is worse."""
        if not rows:
            return rows
        pool = [ref for ref in self.refs.values() if ref.pool == w.pool]
        quarantined = {h.name for _q, h in list_quarantines(self.history, pool=w.pool)}
        out = {ref.name for ref in pool if ref.name in quarantined
               or self.scheduler.state(ref.name).state != "available"}
        cap = resolve_max_unavailable(self._settings(w.pool), len(pool))
        must = [r for r in rows if _moved(r)]
        may, held = fit_drain_budget([r.host for r in rows if not _moved(r)],
                                     out | {r.host for r in must}, cap,
                                     {ref.name: ref.unit for ref in pool})
        if not held:
            return rows
        others = sorted(out - set(may) - {r.host for r in rows})
        why = (f"max_unavailable {cap} of pool {w.pool} used up: {len(out)} host(s) out of "
               f"service now" + (f" ({', '.join(others[:10])})" if others else ""))
        skipped = [r for r in rows if r.host in held]
        for r in skipped:
            self._skip(r, f"{why}; left on its release")
        self._write(skipped, events=[self._ev("rollout.budget", f"wave {w.index} ({w.pool}): "
                                              f"{len(skipped)} host(s) held back: {why}",
                                              wave=w.index, pool=w.pool, out=sorted(out),
                                              hosts=[r.host for r in skipped],
                                              max_unavailable=cap)],
                    label=f"wave{w.index}:drain:budget")
        return [r for r in rows if r.host not in held]

    def _drain_round(self, w: WaveRow, by_host: dict[str, StepRow],
                     views: list[DrainView]) -> None:
        """Who waits for what, on record after every look (the live display and `rollout
        status` read it; the write also refreshes the lock's heartbeat)."""
        waiting = [v for v in views if v.outcome == "wait"]
        if not waiting:
            return
        for v in waiting:
            r = by_host[v.host]
            r.detail = {**r.detail, "waiting_for": {"jobs": list(v.jobs),
                                                    "waited_s": round(v.waited_s)}}
        self._write([by_host[v.host] for v in waiting], label=f"wave{w.index}:drain:wait")

    def _skip(self, r: StepRow, why: str, **detail: Any) -> None:
        when = self.now()
        r.state, r.started_at, r.ended_at = "skipped", when, when
        r.detail = {**r.detail, "why": why, **detail}

    def _apply(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if (r.state == "drained" and r.ended)
                or (r.state == "applying" and not r.ended)]
        if not todo:
            return
        release = self.matrix.release(todo[0].to_release or "")
        plans = self.backend.plan([r.host for r in todo], release,
                                  kernel_hold=self._kernel_hold(todo))
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
        early = [self.refs.get(r.host) or HostRef(r.host) for r in change
                 if r.detail.get("reboot")]
        if early:  # an ECC change rides on the driver's reboot: one reboot, not two
            settle_before_reboot(self.backend, self.matrix, early)
        out = (self.backend.apply([r.host for r in change], release,
                                  kernel_hold=self._kernel_hold(change)) if change else {})
        broken: list[StepRow] = []
        for r in ready:
            res = out.get(r.host)
            if res is not None and not res.ok:
                self._fail(r, "apply", res.error, unreachable=not res.reachable, restored=False)
                if res.reachable:
                    broken.append(r)
                continue
            r.detail = {k: v for k, v in r.detail.items() if k != "pending"}
            self._set([r], "applying", ended=True)
        snaps = self._restore(broken)
        self._write(ready, events=[self._step_event(w, "apply", "end", ready),
                                   *self._host_events(ready)],
                    label=f"wave{w.index}:apply:end", snapshots=snaps)

    def _restore(self, rows: list[StepRow]) -> list[tuple[Any, ...]]:
        """Put hosts whose pin failed half-way back on the release they had (never a reboot).

        `restored` only when a probe against that release then passes the health checks;
        otherwise the host stays failed and moved: drained, repaired by a verified rollback or
        quarantined, and counted against the failure budget like any failure."""
        by_release: dict[str, list[StepRow]] = {}
        for r in rows:
            if r.from_release is None:
                r.detail = {**r.detail, "error": f"{r.detail.get('error')}; no known previous "
                                                 "release to restore: the host needs attention"}
            else:
                by_release.setdefault(r.from_release, []).append(r)
        snaps: list[tuple[Any, ...]] = []
        for back, group in by_release.items():
            out = self.backend.apply([r.host for r in group], self.matrix.release(back),
                                     kernel_hold=self._kernel_hold(group))
            put_back = []
            for r in group:
                res = out[r.host]
                if res.ok:
                    put_back.append(r)
                else:
                    r.detail = {**r.detail, "error": f"{r.detail.get('error')}; restoring "
                                                     f"{back} failed too: {res.error}"}
            health = self._probe_health(put_back, lambda r: r.from_release or "")
            for r in put_back:
                ok, err, _unreachable, snap = health[r.host]
                snaps += snap
                what = f"restored {back}, verified" if ok else f"restoring {back} not " \
                                                              f"verified: {err}"
                r.detail = {**r.detail, "error": f"{r.detail.get('error')}; {what}",
                            "restored": ok}
        return snaps

    def _reboot(self, w: WaveRow, rows: list[StepRow]) -> None:
        todo = [r for r in rows if (r.state == "applying" and r.ended and r.detail.get("reboot"))
                or (r.state == "rebooting" and not r.ended)]
        if not todo:
            return
        self._set(todo, "rebooting", ended=False)
        self._write(todo, events=[self._step_event(w, "reboot", "begin", todo)],
                    label=f"wave{w.index}:reboot:begin")
        out = self._reboot_now(w.pool, [r.host for r in todo],
                               f"rollout {self.rid} wave {w.index}",
                               self.matrix.release(todo[0].to_release or ""))
        for r in todo:
            res = out[r.host]
            if res.ok:
                self._set([r], "rebooting", ended=True)
            else:
                self._fail(r, "reboot", res.error, unreachable=not res.reachable)
        self._write(todo, events=[self._step_event(w, "reboot", "end", todo),
                                  *self._host_events(todo)],
                    label=f"wave{w.index}:reboot:end")

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
        self._node_state(w, todo)
        todo = [r for r in todo if r.state == "verifying"]
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

    def _node_state(self, w: WaveRow, rows: list[StepRow]) -> None:
        """Put the node state right before the health probe judges it (issue 23). Planned
        from a fresh probe, so a resumed verify step runs it again and changes nothing twice;
        an ECC change's reboot is the rollout's one reboot path (`_reboot_now`)."""
        refs = [self.refs.get(r.host) or HostRef(r.host) for r in rows]
        changes = {n: c for n, c in plan_nodes(self.backend, self.matrix, refs).items()
                   if c.changed}
        if not changes:
            return
        release = self.matrix.release(rows[0].to_release or "")
        put_right(self.backend, changes, lambda names: self._reboot_now(
            w.pool, names, f"rollout {self.rid} wave {w.index}: node state", release))
        for r in rows:
            c = changes.get(r.host)
            if c is not None:
                r.detail = {**r.detail, "node_state": c.as_dict()}
                if c.error:
                    self._fail(r, "node_state", c.error)

    def _health_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        failed = sum(1 for r in rows if _is_failure(r))
        total = sum(1 for r in self._pool_rows(w.pool) if _is_failure(r))
        moved = sum(1 for r in rows if r.state in ("verifying", "benchmarking", "judged",
                                                   "undraining", "done"))
        verdict, why = health_verdict(failed, total, Budget(settings.failure_budget_per_wave,
                                                            settings.failure_budget_total), moved)
        if verdict == "fail":
            why += _failures(rows)
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

    def _bake(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        judged = [r for r in rows if r.state == "judged"]
        seconds = settings.bake_minutes * 60.0
        if judged and seconds > 0:
            self._write([], wave=(w.id, {"status": "gated"}),
                        events=[self._ev("rollout.bake", f"wave {w.index} ({w.pool}): baking "
                                         f"{settings.bake_minutes} min", wave=w.index,
                                         minutes=settings.bake_minutes)],
                        label=f"wave{w.index}:bake:begin")
            self._wait_out(w, seconds, "bake")
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
        # one undrain call per host: one lock read and one quarantine read per batch window
        quarantined = FreshRead(lambda: quarantined_hosts(self.history), clock=self._guard.clock)
        undraining = {id(r) for r in todo}  # not `r in todo`: a field-by-field scan per host
        with self._guard.batch():
            for r in todo + release:
                err = self._undrain_one(r, quarantined)
                if id(r) in undraining:
                    self._set([r], "done", ended=True, **({"undrain_error": err} if err else {}))
                else:
                    r.detail = {**{k: v for k, v in r.detail.items() if k != "releasing"},
                                "released": True, **({"undrain_error": err} if err else {})}
        self._write(todo + release, events=[self._step_event(w, "undrain", "end",
                                                             todo + release)],
                    label=f"wave{w.index}:undrain:end")

    def _undrain_one(self, r: StepRow,
                     quarantined: Callable[[], frozenset[str]] | None = None) -> str | None:
        """Undrain a host only if fleet drained it (recorded) and the scheduler agrees.
        `quarantined`: the hosts quarantined now (a batch's `FreshRead`); default: read now."""
        if not r.detail.get("ours"):
            return None
        now = (quarantined or (lambda: quarantined_hosts(self.history)))()
        if r.host in now:  # a quarantine outranks the rollout's undrain
            r.detail = {**r.detail, "quarantined": True}
            return None
        a = self.scheduler.state(r.host)
        for _ in range(UNKNOWN_TRIES - 1):  # one failed read must not leave it drained
            if a.state != "unknown":
                break
            self.sleep(self._settings(r.pool).drain.poll_seconds)
            a = self.scheduler.state(r.host)
        if a.state == "unknown":  # never undrained on a guess: left drained, said why
            return f"state unreadable, left drained: {a.reason or 'unknown'}"
        if a.state not in ("drained", "draining", "down") or not a.by_fleet:
            return None  # not drained, or drained by someone else since: leave it
        res = self.scheduler.undrain(r.host)
        return None if res.ok else res.error
