"""Several controllers on one history, in one process on SQLite (the PostgreSQL and
network-namespace version: tests/integration/history/test_controllers_postgres.py).

A second start names the holder; a forced rollback preempts a running rollout, whose engine
stops at its next host call without touching a host; a taken-over controller's fence holds; the
audit calls hosts a rollout is moving in flight, not drifted; FLEET_CONTROLLER is checked."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.drift import DriftInput, audit_host, summarize
from fleet.domain.matrix.models import Matrix
from fleet.errors import BadInput
from fleet.history.controllers import (
    check_lock,
    controller_name,
    holders,
    in_flight_hosts,
    preempt,
    release,
)
from fleet.history.rollouts import LockHeld, LockLost, get_rollout, rollout_events
from fleet.jobs.rollout.fence import TOUCH
from tests.unit.hygiene.fakes import FakeHost, example_matrix
from tests.unit.rollout.helpers import Rig

POOLS = {"h100-canary": 2, "h100": 4}


class Spy:
    """Notes every host call that reaches the fleet."""

    def __init__(self, target: Any, log: list[str]) -> None:
        self._t, self._log = target, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._t, name)
        if name in TOUCH and callable(attr):
            def call(*a: Any, **k: Any) -> Any:
                self._log.append(name)
                return attr(*a, **k)
            return call
        return attr


def _wall() -> datetime:
    return datetime.now(UTC)


def test_second_start_names_the_holder(matrix: Matrix, tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools=POOLS)
    seen: list[Any] = []

    def checkpoint(label: str) -> None:
        if label == "created" and not seen:
            other = rig.engine(pid=2000)
            other.machine, other.owner = "ctl-b", "tester@ctl-b"
            with pytest.raises(LockHeld) as e:
                rig.start(engine=other, pools=["h100"])
            seen.append(e.value)

    rig.start(engine=rig.engine(checkpoint=checkpoint))
    (err,) = seen
    assert "is running on h100" in str(err) and "controller tester@testbox (pid 1000)" in str(err)
    assert "since " in str(err) and "last heartbeat" in str(err)
    assert err.holders[0].owner == "tester@testbox" and err.holders[0].pid == 1000


def test_forced_rollback_preempts_and_the_engine_touches_no_host(matrix: Matrix,
                                                                 tmp_path: Path) -> None:
    rig = Rig(matrix, tmp_path, pools=POOLS)
    calls: list[str] = []
    rig.backend = Spy(rig.fleet, calls)
    at: list[int] = []

    def checkpoint(label: str) -> None:
        if label == "wave1:apply:begin" and not at:
            at.append(len(calls))
            found = preempt(rig.history, ["h100-canary"], owner="ops@laptop", pid=99,
                            actor="ops", reason="Xid storm", kind="rollback", at=rig.clock(),
                            wall=_wall())
            assert [h.owner for h in found] == ["tester@testbox"]

    eng = rig.engine(checkpoint=checkpoint)
    with pytest.raises(LockLost) as e:
        rig.start(engine=eng)
    assert calls[at[0]:] == []  # not one host call after the preemption
    assert "held by ops@laptop (pid 99)" in str(e.value) and "Xid storm" in str(e.value)
    rid = eng.rid
    assert rid is not None
    ro = get_rollout(rig.history, rid)
    assert ro is not None and ro.status == "paused" and ro.lock_owner == "ops@laptop"
    kinds = [ev.kind for ev in rollout_events(rig.history, rid)]
    assert "rollout.preempt" in kinds and kinds[-1] == "rollout.lock.lost"
    moving = in_flight_hosts(rig.history, wall=_wall(), stale_after_s=300)
    assert moving and all(v.startswith(f"rollout {rid} wave 1 (h100-canary): ") for v in
                          moving.values())
    release(rig.history, [rid], "ops@laptop", 99)
    assert check_lock(rig.history, rid, "ops@laptop", 99) is not None  # released
    assert holders(rig.history, ["h100-canary"])[0].owner is None  # still holds the pool
    res = rig.engine(pid=3000).resume(rid)  # another controller continues it
    assert res.status == "completed", res.reason
    assert in_flight_hosts(rig.history, wall=_wall(), stale_after_s=300) == {}
    assert not rig.problems(rid)


def test_audit_reports_a_moving_host_in_flight_not_drifted() -> None:
    m = example_matrix()
    h = FakeHost("gpu-01", "h100", m.golden_for("h100"), kmod="570.133.20")  # pinned, no reboot
    plain = audit_host(DriftInput(h.name, h.pool, True, h.facts()), m)
    moving = audit_host(DriftInput(h.name, h.pool, True, h.facts(),
                                   in_flight="rollout 3 wave 1 (h100): rebooting"), m)
    assert not plain.conformant and plain.in_flight is None
    assert not moving.conformant and moving.differences == plain.differences
    assert moving.as_dict()["in_flight"] == "rollout 3 wave 1 (h100): rebooting"
    s = summarize([plain, moving])
    assert (s["non_conformant"], s["in_flight"]) == (1, 1)


@pytest.mark.parametrize("value", ["", "a b", "ops@x", "x" * 65])
def test_controller_name_is_checked(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_CONTROLLER", value)
    with pytest.raises(BadInput) as e:
        controller_name()
    assert "FLEET_CONTROLLER" in str(e.value)


def test_controller_name_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_CONTROLLER", "eu-west-1")
    assert controller_name() == "eu-west-1"
