"""The demo's story, told once against a `Target` (simulated or lab): baseline, candidate A
stopped by the canary's gate, candidate B promoted, weekly hygiene, an incident rollback."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fleet.domain.checks import run_checks
from fleet.domain.checks.expect import expectations_for
from fleet.domain.matrix.models import Matrix
from fleet.domain.quarantine import limit_for
from fleet.history import (
    History,
    add_snapshot,
    list_quarantines,
    open_history,
    os_actor,
    record_event,
)
from fleet.jobs.apply import pin_hosts, previous_known_good
from fleet.jobs.demo_cast import (
    INCIDENT_REASON,
    MATRIX_FILE,
    REPORT_DIR,
    START,
    WEEK,
    DemoResult,
    Reporter,
    Step,
    Target,
)
from fleet.jobs.hygiene import HygieneReport, run_hygiene
from fleet.jobs.record import record_snapshot
from fleet.jobs.rollout import RolloutEngine, RolloutResult, invariants


def _gate_text(rec: Mapping[str, Any]) -> str:
    """'wave 1 (h100-canary): benchmark gate failed: replay throughput_rps -25.2%, ...'."""
    failed = rec.get("failed_wave")
    if not failed:
        return str(rec.get("reason", ""))
    shifts = [f"{m['suite']} {m['metric']} {m['shift']:+.1%}" for m in failed["metrics"]
              if m.get("shift") is not None]
    return (f"wave {failed['index']} ({failed['pool']}): benchmark gate failed"
            + (f" ({', '.join(shifts)})" if shifts else f": {rec.get('reason', '')}")
            + "; the wave was rolled back automatically")


def _outcome(status: str) -> str:
    return {"completed": "completed", "rolled_back": "rolled_back", "paused": "paused"}.get(
        status, status)


class _Story:
    """The state the chapters share: target (backend, scheduler, clock), history, matrix,
    result."""

    def __init__(self, folder: Path, history: History, matrix: Matrix, target: Target,
                 result: DemoResult, reporter: Reporter,
                 on_progress: Callable[[str], None]) -> None:
        self.folder, self.history, self.matrix = folder, history, matrix
        self.target, self.cast, self.result = target, target.cast, result
        self.backend = target.backend
        self.clock = target.now
        self.reporter, self.say = reporter, on_progress
        self.actor = os_actor()
        self.m = MATRIX_FILE  # as a user in the folder would type it

    # ------------------------------------------------------------------ building blocks
    def at(self, when: datetime) -> None:
        self.target.at(when)

    def expect(self, step: Step, ok: bool, problem: str) -> None:
        if not ok:
            step.ok = False
            self.result.problems.append(f"step {step.number}: {problem}")

    def weekly_probe(self) -> None:
        """What `fleet probe` from cron records: every host, its checks, one snapshot each."""
        now = self.clock()
        self.say(f"weekly probe, {now:%Y-%m-%d}")
        refs = self.backend.hosts()
        answers = self.backend.probe([r.name for r in refs])
        th = self.matrix.policy.thresholds
        for ref in refs:
            res = answers[ref.name]
            pool = ref.pool or ""
            if res.ok and res.value is not None:
                expect = expectations_for(self.matrix, pool, gpu_model=ref.gpu_model,
                                          gpu_count=ref.gpu_count)
                record_snapshot(self.history, ref.name, res.value,
                                run_checks(res.value, expect, th), taken_at=now, pool=pool)
            else:
                add_snapshot(self.history, ref.name, taken_at=now, source="none",
                             reachable=res.reachable, facts={"error": res.error}, pool=pool)
        record_event(self.history, "probe", "all", f"probed {len(refs)} host(s) (demo, weekly)",
                     {"hosts": len(refs)}, actor=self.actor, at=now)

    def hygiene(self) -> tuple[HygieneReport, dict[str, Any], Mapping[str, Path]]:
        report = run_hygiene(self.backend, self.target.scheduler, self.history, self.matrix,
                             now=self.clock(), apply_quarantine=True, actor=self.actor,
                             benchmark=self.target.hygiene_benchmark, progress=self.say)
        data = report.as_dict()
        paths = self.reporter(data, self.folder / REPORT_DIR)
        return report, data, paths

    def rollout(self, release: str) -> RolloutResult:
        self.say(f"rolling out {release}")
        engine = RolloutEngine(
            self.backend, self.target.scheduler, self.history, self.matrix, now=self.clock,
            sleep=self.target.sleep, actor=self.actor)
        return engine.start(
            matrix_path=str(self.result.matrix), release=release,
            releases=self.target.installed(), unreachable=self.target.unreachable(),
            start_data={"source": dict(self.target.source), "demo": True})

    def rollout_record(self, release: str, res: RolloutResult) -> dict[str, Any]:
        first_fail = next((w for w in res.waves if w.get("verdict") == "fail"), None)
        failed: dict[str, Any] | None = None
        if first_fail is not None:
            suites = ((first_fail.get("gate") or {}).get("benchmark") or {}).get("suites") or {}
            failed = {"index": first_fail["index"], "pool": first_fail["pool"],
                      "metrics": [{"suite": suite, "metric": m["metric"], "shift": m["shift"]}
                                  for suite, j in sorted(suites.items())
                                  for m in j.get("metrics", []) if m.get("verdict") == "fail"]}
        return {"id": res.rollout_id, "release": release, "outcome": _outcome(res.status),
                "reason": res.reason, "waves": len(res.waves),
                "waves_done": sum(1 for w in res.waves if w.get("status") == "done"),
                "failed_wave": failed, "hosts": dict(sorted(res.hosts.items()))}

    def rollout_problems(self, res: RolloutResult) -> list[str]:
        assert res.rollout_id is not None
        from fleet.history.rollouts import load_steps

        installed = self.target.installed()
        return invariants(load_steps(self.history, res.rollout_id), self.target.scheduler,
                          installed.get)

    def on(self, pool: str | None = None) -> dict[str, int]:
        """How many hosts (of a pool) run each release."""
        out: dict[str, int] = {}
        installed = self.target.installed()
        for ref in self.backend.hosts():
            if pool is None or ref.pool == pool:
                rel = installed.get(ref.name) or "none"
                out[rel] = out.get(rel, 0) + 1
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------------ chapters
    def baseline(self) -> Step:
        step = Step(1, "baseline: weekly probes and the first hygiene run")
        for week in range(3):
            self.at(START + week * WEEK)
            self.weekly_probe()
        self.at(START + 3 * WEEK)
        report, data, paths = self.hygiene()
        s = data["summary"]
        d = s["drift"]
        self.result.baseline = {"hosts": d["hosts"], "conformant": d["conformant"],
                                "non_conformant": d["non_conformant"],
                                "quarantine_proposed": s["quarantine_proposed"],
                                "problems": s["problems"], "report": str(paths.get("html", ""))}
        c = self.cast
        step.lines += [
            f"{c.hosts} {c.kind} hosts in {len(c.pools)} pools "
            f"({', '.join(f'{p} x{n}' for p, n in c.pools.items())}), all on golden {c.golden}.",
            f"Three weekly probes ({START:%Y-%m-%d} on, logical clock), then the hygiene run: "
            f"{d['conformant']}/{d['hosts']} conformant, {s['gpus_flagged']} GPU(s) flagged, "
            f"{s['quarantine_proposed']} quarantine proposal(s).",
        ]
        if c.el9_pools:
            step.lines.append(
                f"Pool {', '.join(c.el9_pools)} runs EL9 (Rocky Linux 9 hosts, real dnf and rpm): "
                "there fleet enables the release's nvidia-driver module stream (dnf module "
                "reset/enable), installs the exact versions, versionlocks them and keeps "
                "dnf-automatic off them (an exclude line under [base] of "
                "/etc/dnf/automatic.conf); the other "
                "pools run Debian (apt pins, holds, an unattended-upgrades blacklist).")
        step.commands += [
            "fleet probe -i inventory.py                      # weekly, from cron",
            f"fleet hygiene run -m {self.m} -i inventory.py --report-dir reports/",
        ]
        self.expect(step, report.exit_code == 0 and d["conformant"] == d["hosts"],
                    f"baseline hygiene not clean: {report.problems()[:3]}")
        return step

    def candidate_a(self) -> Step:
        c = self.cast
        step = Step(2, f"candidate A ({c.candidate_a}): the canary gate fails, rolled back")
        self.at(START + 3 * WEEK + timedelta(days=1, hours=1))
        res = self.rollout(c.candidate_a)
        rec = self.rollout_record(c.candidate_a, res)
        self.result.rollouts.append(rec)
        canary = self.on("h100-canary")
        step.lines += [
            f"{c.candidate_a} silently runs {round((1 - c.slow) * 100)}% slower "
            f"({c.slow_how}); no health check can see that.",
            f"Rollout {res.rollout_id}: {rec['outcome']}: " + _gate_text(rec),
            f"Canary hosts now on: {', '.join(f'{k} x{v}' for k, v in canary.items())}; "
            "no other pool was touched.",
        ]
        step.commands += [
            f"fleet rollout start -m {self.m} -i inventory.py --release {c.candidate_a}",
            f"fleet rollout status {res.rollout_id}",
        ]
        self.expect(step, res.status == "rolled_back",
                    f"rollout of {c.candidate_a} ended {res.status}, not rolled_back")
        self.expect(step, rec["failed_wave"] is not None
                    and rec["failed_wave"]["pool"] == "h100-canary",
                    "the failing wave was not the canary's")
        self.expect(step, self.on() == {c.golden: c.hosts},
                    f"hosts not all back on {c.golden}: {self.on()}")
        self.expect(step, not self.rollout_problems(res),
                    f"rollout invariants: {self.rollout_problems(res)[:3]}")
        return step

    def candidate_b(self) -> Step:
        c = self.cast
        step = Step(3, f"candidate B ({c.candidate_b}): promoted through every wave")
        self.at(START + 3 * WEEK + timedelta(days=2, hours=1))
        res = self.rollout(c.candidate_b)
        rec = self.rollout_record(c.candidate_b, res)
        self.result.rollouts.append(rec)
        step.lines += [
            f"Rollout {res.rollout_id}: {rec['outcome']}: {rec['waves_done']} wave(s) over "
            f"{len(c.pools)} pools, canary first; each drained, pinned, rebooted, health-checked, "
            "benchmarked against hosts still on the old release, baked and undrained.",
            f"Fleet now on: {', '.join(f'{k} x{v}' for k, v in self.on().items())}.",
        ]
        step.commands += [
            f"fleet rollout start -m {self.m} -i inventory.py --release {c.candidate_b}",
            "fleet rollout history",
        ]
        self.expect(step, res.status == "completed",
                    f"rollout of {c.candidate_b} ended {res.status}: {res.reason}")
        self.expect(step, self.on() == {c.candidate_b: c.hosts},
                    f"hosts not all on {c.candidate_b}: {self.on()}")
        self.expect(step, not self.rollout_problems(res),
                    f"rollout invariants: {self.rollout_problems(res)[:3]}")
        return step

    def weekly_hygiene(self) -> Step:
        c = self.cast
        step = Step(4, "weekly hygiene: rising ECC caught (quarantine within the circuit "
                       "breaker), drift flagged")
        for i, rate in enumerate(c.ecc_ramp):
            week = START + (4 + i) * WEEK
            self.at(week)
            self.weekly_probe()
            for host in c.ecc_hosts:  # the faulty GPUs get worse week by week
                self.target.ecc(host, rate)
        self.at(START + 6 * WEEK + timedelta(days=3))
        self.target.drift(c.drift_host, c.drift_package, c.drift_version)
        record_event(self.history, "demo.note", c.drift_host,
                     f"someone ran {c.hand_install(c.drift_host)} by hand",
                     {"package": c.drift_package, "version": c.drift_version}, actor="someone",
                     at=self.clock())
        self.at(START + 7 * WEEK)
        report, data, paths = self.hygiene()
        self.result.reports = dict(paths)
        self.result.report = paths.get("html")
        quarantined = sorted(a.host for a in report.applied if a.applied)
        drifted = sorted(d.host for d in report.non_conformant)
        self.result.quarantined, self.result.drift = quarantined, drifted
        applied = {a.host: a for a in report.applied}
        for proposal in report.quarantine.proposals:
            action = applied.get(proposal.host)
            what = ("quarantined (drained)" if action is not None and action.applied
                    else f"quarantine {proposal.decision}")
            step.lines.append(f"{what}: {proposal.host} ({proposal.pool}): {proposal.reason}")
        step.lines.append(f"by hand on {c.drift_host}: {c.hand_install(c.drift_host)}")
        for d in report.non_conformant:
            step.lines.append(f"drift: {d.host}: " + "; ".join(str(x) for x in d.differences))
        breakers = [b for b in report.quarantine.breakers if b.proposed]
        step.lines.append("circuit breaker: " + ", ".join(
            f"{b.pool} {b.proposed}/{b.size} (limit {b.limit})" for b in breakers)
            + ("; tripped: " + ", ".join(b.pool for b in report.quarantine.tripped)
               if report.quarantine.tripped else "; not tripped"))
        step.commands += [
            f"fleet hygiene run -m {self.m} -i inventory.py --scheduler slurm "
            "--apply-quarantine --report-dir reports/",
            "fleet quarantine list",
        ]
        # the breaker lets floor(share x pool size) hosts of a pool go per run: a pool under
        # 1/share hosts (every pool of a small lab) gets none, and its proposals wait for a human
        share = self.matrix.policy.thresholds.quarantine_max_share
        pool_of = {r.name: r.pool or "" for r in self.backend.hosts()}
        may = sorted(h for h in c.ecc_hosts
                     if limit_for(c.pools.get(pool_of.get(h, ""), 0), share) >= 1)
        held = sorted(set(c.ecc_hosts) - set(may))
        if held:
            step.lines.append(
                f"{', '.join(held)}: pool(s) under {round(1 / share)} hosts, so the "
                f"{share:.0%} circuit breaker allows no automatic quarantine there: proposed, "
                "held for a human (`fleet quarantine list`, drain by hand)")
        proposed = sorted(p.host for p in report.quarantine.proposals)
        self.expect(step, proposed == sorted(c.ecc_hosts),
                    f"quarantine proposed for {proposed}, expected {sorted(c.ecc_hosts)}")
        self.expect(step, quarantined == may, f"quarantined {quarantined}, expected {may}")
        self.expect(step, drifted == [c.drift_host], f"drift {drifted}, expected [{c.drift_host}]")
        tripped = sorted(b.pool for b in report.quarantine.tripped)
        held_in = Counter(pool_of.get(h, "") for h in held)  # one fault is no mass fault
        expect_tripped = sorted(p for p, n in held_in.items() if n > 1)
        self.expect(step, tripped == expect_tripped,
                    f"breaker tripped in {tripped}, expected {expect_tripped}")
        open_q = sorted(h.name for _q, h in list_quarantines(self.history))
        self.expect(step, open_q == may, f"open quarantines {open_q}")
        drained = sorted(h for h in c.ecc_hosts
                         if self.target.scheduler.state(h).state != "available")
        self.expect(step, drained == may, f"drained: {drained}")
        return step

    def incident(self) -> Step:
        c = self.cast
        step = Step(5, f"incident: pool {c.incident_pool} rolled back to its last known-good")
        self.at(START + 7 * WEEK + timedelta(days=1, hours=2, minutes=17))
        refs = [r for r in self.backend.hosts() if r.pool == c.incident_pool]
        targets: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for r in refs:
            rel, source = previous_known_good(self.history, self.matrix, r.name, r.pool)
            if rel is not None:
                targets[r.name], sources[r.name] = rel, source
        self.expect(step, len(targets) == len(refs),
                    f"no known-good release for {sorted({r.name for r in refs} - set(targets))}")
        # what `fleet rollback -l POOL` does: record who and why, then pin, reboot, verify
        record_event(self.history, "rollback", c.incident_pool, INCIDENT_REASON,
                     {"targets": {h: t.name for h, t in targets.items()}, "sources": sources},
                     actor=self.actor, at=self.clock())
        self.say(f"rolling back {c.incident_pool}")
        results = pin_hosts(self.backend, self.history, self.matrix, targets, now=self.clock,
                            kind="rollback", reason=INCIDENT_REASON, actor=self.actor)
        outcomes: dict[str, int] = {}
        for done in results:
            outcomes[done.outcome] = outcomes.get(done.outcome, 0) + 1
        to = sorted({t.name for t in targets.values()})
        on = self.on(c.incident_pool)
        verified = (all(x.outcome == "changed" and x.rebooted and not x.error for x in results)
                    and on == {c.golden: len(refs)})
        drift_left = self.target.drifted(c.drift_host)
        self.result.incident = {
            "pool": c.incident_pool, "reason": INCIDENT_REASON, "hosts": len(refs), "to": to,
            "sources": sorted(set(sources.values())), "outcomes": dict(sorted(outcomes.items())),
            "on": on, "verified": verified,
        }
        step.lines += [
            f"\"{INCIDENT_REASON}\": every host of {c.incident_pool} back on "
            f"{', '.join(to)} (known-good from the {', '.join(sorted(set(sources.values())))}), "
            "pinned, rebooted, probed and health-checked; who and why are in the history.",
            "outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())),
        ]
        if c.incident_pool in c.el9_pools:
            step.lines.append(
                f"{c.incident_pool} runs EL9: the pin switched the nvidia-driver module stream "
                "back, downgraded with dnf, removed the newer release's packages and rewrote "
                "the versionlocks and dnf-automatic's exclude guard.")
        if not drift_left:
            step.lines.append(f"The pin also put back {c.drift_host}'s hand-installed "
                              f"{c.drift_package}.")
        step.commands += [
            f"fleet rollback -m {self.m} -i inventory.py -l {c.incident_pool} "
            f"--reason \"{INCIDENT_REASON}\" --yes",
            "fleet history events",
        ]
        self.expect(step, verified, f"rollback not verified: {outcomes}, on {on}")
        return step


def tell(folder: Path, result: DemoResult, matrix: Matrix, target: Target, reporter: Reporter,
          on_step: Callable[[Step], None] | None, say: Callable[[str], None],
          prologue: Callable[[History], None] | None = None) -> None:
    with open_history(str(result.db)) as history:
        if prologue is not None:
            prologue(history)
        story = _Story(folder, history, matrix, target, result, reporter, say)
        chapters: Sequence[Callable[[], Step]] = (
            story.baseline, story.candidate_a, story.candidate_b, story.weekly_hygiene,
            story.incident)
        for chapter in chapters:
            step = chapter()
            result.steps.append(step)
            target.save()
            if on_step is not None:
                on_step(step)
    result.ended = target.now()

