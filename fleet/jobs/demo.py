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
   `fleet rollback -l POOL ...` (`pin_hosts(kind="rollback")`), and verified.

Deterministic: a fixed seed, the logical clock, and judges with seeded generators. Whatever does
not go as the story says is listed in `DemoResult.problems` (the command then exits 1).

Layers: this module orchestrates; rendering the reports is the caller's (`reporter`), printing too
(`on_step`, `on_progress`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from fleet.jobs.demo_cast import (
    CANDIDATE_A,
    CANDIDATE_B,
    DB_FILE,
    DRIFT_HOST,
    DRIFT_PACKAGE,
    DRIFT_VERSION,
    ECC_HOSTS,
    ECC_RAMP,
    GOLDEN,
    INCIDENT_POOL,
    INCIDENT_REASON,
    MATRIX_FILE,
    POOLS,
    REPORT_DIR,
    SEED,
    SIM_CAST,
    SIM_FILE,
    SLOW_A,
    START,
    WEEK,
    Cast,
    DemoResult,
    Reporter,
    Step,
    Target,
    cast_backend,
    demo_matrix_text,
)
from fleet.jobs.demo_folder import clear_for_run
from fleet.jobs.demo_story import tell
from fleet.local_files import create_file
from fleet.sim import SimClock, SimFleet, save_fleet

if TYPE_CHECKING:
    from fleet.domain.ports import Backend, Scheduler
    from fleet.lab.paths import LabPaths

__all__ = [
    "CANDIDATE_A", "CANDIDATE_B", "DB_FILE", "DRIFT_HOST", "DRIFT_PACKAGE", "DRIFT_VERSION",
    "ECC_HOSTS", "ECC_RAMP", "GOLDEN", "INCIDENT_POOL", "INCIDENT_REASON", "MATRIX_FILE",
    "POOLS", "REPORT_DIR", "SEED", "SIM_CAST", "SIM_FILE", "SLOW_A", "START", "WEEK", "Cast",
    "DemoResult", "Reporter", "SimTarget", "Step", "Target", "run_demo",
]


class SimTarget:
    """The embedded simulated fleet, on a logical clock."""

    hygiene_benchmark = True

    def __init__(self, fleet: SimFleet, clock: SimClock, state: Path,
                 cast: Cast = SIM_CAST) -> None:
        self.fleet, self.clock, self.state_path, self.cast = fleet, clock, state, cast
        self.backend: Backend = cast_backend(fleet)
        self.source = {"source": "sim", "sim_state": str(state)}

    @property
    def scheduler(self) -> Scheduler:
        return self.fleet.scheduler()

    def now(self) -> datetime:
        return self.clock()

    def at(self, when: datetime) -> None:
        if when > self.clock():
            self.clock.set(when)

    def sleep(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def installed(self) -> dict[str, str | None]:
        return {r.name: self.fleet.installed_release(r.name) for r in self.fleet.hosts()}

    def unreachable(self) -> list[str]:
        return self.fleet.unreachable_hosts()

    def ecc(self, host: str, count: int) -> None:
        self.fleet.inject(host, ecc_rising=count)

    def drift(self, host: str, package: str, version: str) -> None:
        self.fleet.drift(host, package, version)

    def drifted(self, host: str) -> bool:
        return bool(self.fleet.state(host)["drift"])

    def save(self) -> None:
        save_fleet(self.fleet, self.state_path)



def _prepare(folder: Path, *, sim_state: bool) -> DemoResult:
    clear_for_run(folder)  # a second run in the same folder starts afresh, following no link
    return DemoResult(folder=folder, matrix=folder / MATRIX_FILE, db=folder / DB_FILE,
                      sim_state=folder / SIM_FILE if sim_state else None)


def run_demo(
    folder: Path,
    *,
    reporter: Reporter,
    on_step: Callable[[Step], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    lab: bool = False,
    lab_paths: LabPaths | None = None,
) -> DemoResult:
    """Tell the story in `folder` (created if needed; should be empty). Never raises for a
    story that went differently: that is in `result.problems`.

    `lab`: on the lab of real SSH hosts instead (root; `fleet.jobs.demo_lab`): a lab of its own,
    brought up and always torn down, or, with `lab_paths`, the hosts of a lab already up there
    (left up)."""
    say = on_progress or (lambda _m: None)
    if lab or lab_paths is not None:
        from fleet.jobs.demo_lab import run_lab_story

        result = _prepare(folder, sim_state=False)
        run_lab_story(result, reporter=reporter, on_step=on_step, say=say,
                      lab_paths=lab_paths)
        return result
    result = _prepare(folder, sim_state=True)
    create_file(result.matrix, demo_matrix_text())
    from fleet.domain.matrix.loader import load_matrix

    matrix = load_matrix(result.matrix, today=START.date()).matrix
    clock = SimClock(START)
    fleet = SimFleet.build(matrix, None, SEED, pools=POOLS, start=GOLDEN, clock=clock,
                           release_perf={CANDIDATE_A: SLOW_A})
    assert result.sim_state is not None
    tell(folder, result, matrix, SimTarget(fleet, clock, result.sim_state), reporter, on_step,
          say)
    return result
