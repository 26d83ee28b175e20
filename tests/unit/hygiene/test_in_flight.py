"""In flight only while the rollout's lock is live (issue 31, defect 8).

A rollout whose controller died mid-step stays `running` until someone resumes or aborts it;
its half-moved hosts must be judged as drift once the lock's heartbeat is stale, not hidden as
"in flight" for weeks.
"""

from __future__ import annotations

import datetime as dt
from datetime import date
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.errors import ExitCode
from fleet.history.controllers import STALE_AFTER_S, in_flight_hosts
from fleet.jobs.hygiene import run_hygiene
from tests.unit.hygiene.fakes import ROOT
from tests.unit.rollout.helpers import Crash, Rig


def _crash_after_apply(label: str) -> None:
    if label == "wave1:apply:end:pre":  # the canary hosts pinned, the step not closed
        raise Crash(label)


@pytest.fixture
def dead_rollout(tmp_path: Path) -> Rig:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
    rig = Rig(matrix, tmp_path, pools={"h100-canary": 3, "h100": 6})
    with pytest.raises(Crash):
        rig.start(engine=rig.engine(checkpoint=_crash_after_apply))
    return rig


def test_a_live_lock_keeps_its_hosts_in_flight(dead_rollout: Rig) -> None:
    wall = dt.datetime.now(dt.UTC)  # the heartbeat was written moments ago
    moving = in_flight_hosts(dead_rollout.history, wall=wall, stale_after_s=STALE_AFTER_S)
    assert moving and all(h.startswith("h100-canary") for h in moving)


def test_a_stale_lock_moves_nothing(dead_rollout: Rig) -> None:
    moved = in_flight_hosts(dead_rollout.history, wall=dt.datetime.now(dt.UTC),
                            stale_after_s=STALE_AFTER_S)
    assert moved
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=STALE_AFTER_S + 60)
    assert in_flight_hosts(dead_rollout.history, wall=later, stale_after_s=STALE_AFTER_S) == {}
    rig = dead_rollout
    report = run_hygiene(rig.fleet, rig.fleet.scheduler(), rig.history, rig.matrix,
                         now=rig.clock() + dt.timedelta(weeks=3), judge=None, benchmark=False,
                         wall=lambda: later + dt.timedelta(weeks=3))
    assert not report.in_flight
    assert {d.host for d in report.non_conformant} >= set(moved)  # pinned, old module loaded
    assert report.exit_code == ExitCode.PROBLEMS
