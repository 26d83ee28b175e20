"""`fleet demo`: the whole mission in one run, on an embedded simulated fleet, told with the real
engine (the rollout engine, the hygiene job, the rollback path and the history they write).

    result = run_demo(folder, reporter=write_hygiene_reports, on_step=print_step)

The folder gets a matrix (`fleet/data/demo_matrix.yaml`: the golden release and two candidates),
a SQLite history, the simulated fleet's state (so `fleet --db ... rollout status` and the other
read commands work on it afterwards) and the hygiene reports. The story, on a logical clock that
starts on a fixed Monday and only moves when the demo moves it:

1. three weekly probes (what `fleet probe` from cron records), then the baseline hygiene run;
2. candidate A, which silently runs 25% slower, rolled out: the canary's benchmark gate fails and
   the canary is rolled back automatically;
3. candidate B rolled out, promoted through every wave of every pool;
4. three more weekly probes while corrected ECC errors rise on two GPUs (in two pools, so the
   circuit breaker, 10% of a pool per run, lets each through) and someone hand-upgrades a package
   on one host; the weekly hygiene run quarantines the two and flags the drifted host;
5. an incident: a pool rolled back to its last known-good release, by the same path as
   `fleet rollback --pool ...` (`pin_hosts(kind="rollback")`), and verified.

Deterministic: a fixed seed, the logical clock, and judges with seeded generators. Whatever does
not go as the story says is listed in `DemoResult.problems` (the command then exits 1).

Layers: this module orchestrates; rendering the reports is the caller's (`reporter`), printing too
(`on_step`, `on_progress`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from fleet.domain.checks import run_checks
from fleet.domain.checks.expect import expectations_for
from fleet.domain.matrix.models import Matrix
from fleet.history import (
    History,
    add_snapshot,
    list_quarantines,
    open_history,
    os_actor,
    record_event,
)
from fleet.jobs.apply import pin_hosts, previous_known_good
from fleet.jobs.hygiene import HygieneReport, run_hygiene
from fleet.jobs.record import record_snapshot
from fleet.jobs.rollout import RolloutEngine, RolloutResult, invariants
from fleet.sim import SimClock, SimFleet, save_fleet

SEED = 7
START = datetime(2025, 9, 1, 8, 0, tzinfo=UTC)
"""The logical clock starts here (a Monday morning, UTC); the history is stamped with it."""
WEEK = timedelta(weeks=1)
POOLS: dict[str, int] = {"h100-canary": 4, "h100": 20, "a100": 20, "l40s": 20}
GOLDEN = "r570-cuda12.8"
CANDIDATE_A = "r575-cuda12.9"
CANDIDATE_B = "r580-cuda13.0"
SLOW_A = 0.75
"""Candidate A's performance factor on every host: 25% less replay throughput."""
ECC_HOSTS = ("h100-00007", "a100-00013")
ECC_RAMP = (100, 400, 1600)
"""Corrected ECC errors each probe adds on the faulty GPU, raised week by week."""
DRIFT_HOST = "l40s-00005"
DRIFT_PACKAGE = "nvidia-container-toolkit"
DRIFT_VERSION = "1.18.1"
INCIDENT_POOL = "l40s"
INCIDENT_REASON = "inference jobs on l40s fail with CUDA_ERROR_ILLEGAL_ADDRESS since r580"

MATRIX_FILE = "matrix.yaml"
DB_FILE = "fleet.db"
SIM_FILE = "fleet.sim.json"
REPORT_DIR = "reports"

Reporter = Callable[[Mapping[str, Any], Path], Mapping[str, Path]]
"""(a hygiene report's `as_dict()`, a directory) -> the files written, by kind (html, md, ...)."""


@dataclass
class Step:
    """One chapter of the story: what happened, and what a user types to do it on a fleet."""

    number: int
    title: str
    lines: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    ok: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "title": self.title, "lines": list(self.lines),
                "commands": list(self.commands), "ok": self.ok}


@dataclass
class DemoResult:
    folder: Path
    matrix: Path
    db: Path
    sim_state: Path
    report: Path | None = None
    reports: dict[str, Path] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    incident: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    started: datetime = START
    ended: datetime = START

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        """The `--json` document (stable keys)."""
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "seed": SEED,
            "folder": str(self.folder),
            "matrix": str(self.matrix),
            "db": str(self.db),
            "sim_state": str(self.sim_state),
            "report": str(self.report) if self.report else None,
            "reports": {k: str(v) for k, v in sorted(self.reports.items())},
            "fleet": {"hosts": sum(POOLS.values()), "pools": dict(POOLS)},
            "releases": {"golden": GOLDEN, "candidate_a": CANDIDATE_A,
                         "candidate_b": CANDIDATE_B},
            "baseline": dict(self.baseline),
            "rollouts": list(self.rollouts),
            "quarantined": list(self.quarantined),
            "drift": list(self.drift),
            "incident": dict(self.incident),
            "steps": [s.as_dict() for s in self.steps],
            "simulated_time": {"start": self.started.isoformat(),
                               "end": self.ended.isoformat()},
        }


def demo_matrix_text() -> str:
    """The demo's matrix, shipped as package data."""
    return resources.files("fleet.data").joinpath("demo_matrix.yaml").read_text()


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
    """The state the chapters share: fleet, clock, history, matrix, result."""

    def __init__(self, folder: Path, history: History, matrix: Matrix, clock: SimClock,
                 fleet: SimFleet, result: DemoResult, reporter: Reporter,
                 on_progress: Callable[[str], None]) -> None:
        self.folder, self.history, self.matrix = folder, history, matrix
        self.clock, self.fleet, self.result = clock, fleet, result
        self.reporter, self.say = reporter, on_progress
        self.actor = os_actor()
        self.m = MATRIX_FILE  # as a user in the folder would type it

    # ------------------------------------------------------------------ building blocks
    def at(self, when: datetime) -> None:
        if when > self.clock():
            self.clock.set(when)

    def expect(self, step: Step, ok: bool, problem: str) -> None:
        if not ok:
            step.ok = False
            self.result.problems.append(f"step {step.number}: {problem}")

    def weekly_probe(self) -> None:
        """What `fleet probe` from cron records: every host, its checks, one snapshot each."""
        now = self.clock()
        self.say(f"weekly probe, {now:%Y-%m-%d}")
        refs = self.fleet.hosts()
        answers = self.fleet.probe([r.name for r in refs])
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
        report = run_hygiene(self.fleet, self.fleet.scheduler(), self.history, self.matrix,
                             now=self.clock(), apply_quarantine=True, actor=self.actor,
                             progress=self.say)
        data = report.as_dict()
        paths = self.reporter(data, self.folder / REPORT_DIR)
        return report, data, paths

    def rollout(self, release: str) -> RolloutResult:
        self.say(f"rolling out {release}")
        engine = RolloutEngine(
            self.fleet, self.fleet.scheduler(), self.history, self.matrix, now=self.clock,
            sleep=self.clock.advance, actor=self.actor)
        return engine.start(
            matrix_path=str(self.result.matrix), release=release,
            releases=self.fleet.releases_by_host(), unreachable=self.fleet.unreachable_hosts(),
            start_data={"source": {"source": "sim", "sim_state": str(self.result.sim_state)},
                        "demo": True})

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

        return invariants(load_steps(self.history, res.rollout_id), self.fleet.scheduler(),
                          self.fleet.installed_release)

    def on(self, pool: str | None = None) -> dict[str, int]:
        """How many hosts (of a pool) run each release."""
        out: dict[str, int] = {}
        for ref in self.fleet.hosts():
            if pool is None or ref.pool == pool:
                rel = self.fleet.installed_release(ref.name) or "none"
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
        step.lines += [
            f"{sum(POOLS.values())} simulated hosts in {len(POOLS)} pools "
            f"({', '.join(f'{p} x{n}' for p, n in POOLS.items())}), all on golden {GOLDEN}.",
            f"Three weekly probes ({START:%Y-%m-%d} on, logical clock), then the hygiene run: "
            f"{d['conformant']}/{d['hosts']} conformant, {s['gpus_flagged']} GPU(s) flagged, "
            f"{s['quarantine_proposed']} quarantine proposal(s).",
        ]
        step.commands += [
            "fleet probe -i inventory.py                      # weekly, from cron",
            f"fleet hygiene run -m {self.m} -i inventory.py --report-dir reports/",
        ]
        self.expect(step, report.exit_code == 0 and d["conformant"] == d["hosts"],
                    f"baseline hygiene not clean: {report.problems()[:3]}")
        return step

    def candidate_a(self) -> Step:
        step = Step(2, f"candidate A ({CANDIDATE_A}): the canary gate fails, rolled back")
        self.at(START + 3 * WEEK + timedelta(days=1, hours=1))
        res = self.rollout(CANDIDATE_A)
        rec = self.rollout_record(CANDIDATE_A, res)
        self.result.rollouts.append(rec)
        canary = self.on("h100-canary")
        step.lines += [
            f"{CANDIDATE_A} silently runs {round((1 - SLOW_A) * 100)}% slower "
            "(the simulation's release performance factor); no health check can see that.",
            f"Rollout {res.rollout_id}: {rec['outcome']}: " + _gate_text(rec),
            f"Canary hosts now on: {', '.join(f'{k} x{v}' for k, v in canary.items())}; "
            "no other pool was touched.",
        ]
        step.commands += [
            f"fleet rollout start -m {self.m} -i inventory.py --release {CANDIDATE_A}",
            f"fleet rollout status {res.rollout_id}",
        ]
        self.expect(step, res.status == "rolled_back",
                    f"rollout of {CANDIDATE_A} ended {res.status}, not rolled_back")
        self.expect(step, rec["failed_wave"] is not None
                    and rec["failed_wave"]["pool"] == "h100-canary",
                    "the failing wave was not the canary's")
        self.expect(step, self.on() == {GOLDEN: sum(POOLS.values())},
                    f"hosts not all back on {GOLDEN}: {self.on()}")
        self.expect(step, not self.rollout_problems(res),
                    f"rollout invariants: {self.rollout_problems(res)[:3]}")
        return step

    def candidate_b(self) -> Step:
        step = Step(3, f"candidate B ({CANDIDATE_B}): promoted through every wave")
        self.at(START + 3 * WEEK + timedelta(days=2, hours=1))
        res = self.rollout(CANDIDATE_B)
        rec = self.rollout_record(CANDIDATE_B, res)
        self.result.rollouts.append(rec)
        step.lines += [
            f"Rollout {res.rollout_id}: {rec['outcome']}: {rec['waves_done']} wave(s) over "
            f"{len(POOLS)} pools, canary first; each drained, pinned, rebooted, health-checked, "
            "benchmarked against hosts still on the old release, baked and undrained.",
            f"Fleet now on: {', '.join(f'{k} x{v}' for k, v in self.on().items())}.",
        ]
        step.commands += [
            f"fleet rollout start -m {self.m} -i inventory.py --release {CANDIDATE_B}",
            "fleet rollout history",
        ]
        self.expect(step, res.status == "completed",
                    f"rollout of {CANDIDATE_B} ended {res.status}: {res.reason}")
        self.expect(step, self.on() == {CANDIDATE_B: sum(POOLS.values())},
                    f"hosts not all on {CANDIDATE_B}: {self.on()}")
        self.expect(step, not self.rollout_problems(res),
                    f"rollout invariants: {self.rollout_problems(res)[:3]}")
        return step

    def weekly_hygiene(self) -> Step:
        step = Step(4, "weekly hygiene: rising ECC quarantined, drift flagged")
        for i, rate in enumerate(ECC_RAMP):
            week = START + (4 + i) * WEEK
            self.at(week)
            self.weekly_probe()
            for host in ECC_HOSTS:  # the faulty GPUs get worse week by week
                self.fleet.inject(host, ecc_rising=rate)
        self.at(START + 6 * WEEK + timedelta(days=3))
        self.fleet.drift(DRIFT_HOST, DRIFT_PACKAGE, DRIFT_VERSION)
        record_event(self.history, "demo.note", DRIFT_HOST,
                     f"someone ran apt-get install {DRIFT_PACKAGE}={DRIFT_VERSION}-1 by hand",
                     {"package": DRIFT_PACKAGE, "version": DRIFT_VERSION}, actor="someone",
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
        self.expect(step, quarantined == sorted(ECC_HOSTS),
                    f"quarantined {quarantined}, expected {sorted(ECC_HOSTS)}")
        self.expect(step, drifted == [DRIFT_HOST], f"drift {drifted}, expected [{DRIFT_HOST}]")
        self.expect(step, not report.quarantine.tripped,
                    f"breaker tripped: {[b.pool for b in report.quarantine.tripped]}")
        open_q = sorted(h.name for _q, h in list_quarantines(self.history))
        self.expect(step, open_q == sorted(ECC_HOSTS), f"open quarantines {open_q}")
        drained = [h for h in ECC_HOSTS if self.fleet.scheduler().state(h).state != "available"]
        self.expect(step, drained == list(ECC_HOSTS), f"drained: {drained}")
        return step

    def incident(self) -> Step:
        step = Step(5, f"incident: pool {INCIDENT_POOL} rolled back to its last known-good")
        self.at(START + 7 * WEEK + timedelta(days=1, hours=2, minutes=17))
        refs = [r for r in self.fleet.hosts() if r.pool == INCIDENT_POOL]
        targets: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for r in refs:
            rel, source = previous_known_good(self.history, self.matrix, r.name, r.pool)
            if rel is not None:
                targets[r.name], sources[r.name] = rel, source
        self.expect(step, len(targets) == len(refs),
                    f"no known-good release for {sorted({r.name for r in refs} - set(targets))}")
        # what `fleet rollback --pool` does: record who and why, then pin, reboot, verify
        record_event(self.history, "rollback", INCIDENT_POOL, INCIDENT_REASON,
                     {"targets": {h: t.name for h, t in targets.items()}, "sources": sources},
                     actor=self.actor, at=self.clock())
        self.say(f"rolling back {INCIDENT_POOL}")
        results = pin_hosts(self.fleet, self.history, self.matrix, targets, now=self.clock,
                            kind="rollback", reason=INCIDENT_REASON, actor=self.actor)
        outcomes: dict[str, int] = {}
        for done in results:
            outcomes[done.outcome] = outcomes.get(done.outcome, 0) + 1
        to = sorted({t.name for t in targets.values()})
        on = self.on(INCIDENT_POOL)
        verified = (all(x.outcome == "changed" and x.rebooted and not x.error for x in results)
                    and on == {GOLDEN: len(refs)})
        drift_left = self.fleet.state(DRIFT_HOST)["drift"]
        self.result.incident = {
            "pool": INCIDENT_POOL, "reason": INCIDENT_REASON, "hosts": len(refs), "to": to,
            "sources": sorted(set(sources.values())), "outcomes": dict(sorted(outcomes.items())),
            "on": on, "verified": verified,
        }
        step.lines += [
            f"\"{INCIDENT_REASON}\": every host of {INCIDENT_POOL} back on "
            f"{', '.join(to)} (known-good from the {', '.join(sorted(set(sources.values())))}), "
            "pinned, rebooted, probed and health-checked; who and why are in the history.",
            "outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())),
        ]
        if not drift_left:
            step.lines.append(f"The pin also put back {DRIFT_HOST}'s hand-installed "
                              f"{DRIFT_PACKAGE}.")
        step.commands += [
            f"fleet rollback -m {self.m} -i inventory.py --pool {INCIDENT_POOL} "
            f"--reason \"{INCIDENT_REASON}\" --yes",
            "fleet history events",
        ]
        self.expect(step, verified, f"rollback not verified: {outcomes}, on {on}")
        return step


def run_demo(
    folder: Path,
    *,
    reporter: Reporter,
    on_step: Callable[[Step], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> DemoResult:
    """Tell the story in `folder` (created if needed; should be empty). Never raises for a
    story that went differently: that is in `result.problems`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPORT_DIR).mkdir(exist_ok=True)
    result = DemoResult(folder=folder, matrix=folder / MATRIX_FILE, db=folder / DB_FILE,
                        sim_state=folder / SIM_FILE)
    for stale in (result.db, result.sim_state, folder / (DB_FILE + "-wal"),
                  folder / (DB_FILE + "-shm")):
        stale.unlink(missing_ok=True)  # a second run in the same folder starts afresh
    result.matrix.write_text(demo_matrix_text())
    from fleet.domain.matrix.loader import load_matrix

    matrix = load_matrix(result.matrix, today=START.date()).matrix
    clock = SimClock(START)
    fleet = SimFleet.build(matrix, None, SEED, pools=POOLS, start=GOLDEN, clock=clock,
                           release_perf={CANDIDATE_A: SLOW_A})
    say = on_progress or (lambda _m: None)
    with open_history(str(result.db)) as history:
        story = _Story(folder, history, matrix, clock, fleet, result, reporter, say)
        chapters: Sequence[Callable[[], Step]] = (
            story.baseline, story.candidate_a, story.candidate_b, story.weekly_hygiene,
            story.incident)
        for chapter in chapters:
            step = chapter()
            result.steps.append(step)
            save_fleet(fleet, result.sim_state)
            if on_step is not None:
                on_step(step)
    result.ended = clock()
    return result
