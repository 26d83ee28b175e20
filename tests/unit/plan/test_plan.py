"""The rollout plan on the example matrix and hand-built hosts."""

from __future__ import annotations

import json

from fleet.domain.matrix.models import Matrix, wave_sizes
from fleet.domain.plan import RolloutPlan, plan_rollout
from fleet.domain.ports import AdminState, HostRef
from fleet.sim import SimFleet


def _refs(pool: str, n: int, unit_size: int = 0) -> list[HostRef]:
    return [HostRef(f"{pool}-{i:03d}", pool,
                    unit=f"{pool}-u{i // unit_size}" if unit_size else None)
            for i in range(n)]


def test_example_matrix_canary_first_and_serial_waves(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, pools={"l40s": 40, "h100": 120, "h100-canary": 3})
    plan = plan_rollout(matrix, fleet.hosts(), releases=fleet.releases_by_host())
    assert [p.pool for p in plan.pools] == ["h100-canary", "h100", "l40s"]
    canary, h100, l40s = plan.pools
    assert canary.canary and canary.release == "r595-cuda13.2"
    assert [len(w.hosts) for w in canary.waves] == [1, 1, 1]  # waves [1, 2] capped by budget 1
    assert h100.release == "r580-cuda13.0" and h100.max_unavailable == 12
    assert [len(w.hosts) for w in h100.waves] == [1, 5] + [12] * 9 + [6]  # 20% = 24, cap 12
    assert l40s.max_unavailable == 8
    assert [len(w.hosts) for w in l40s.waves] == [2, 8, 8, 8, 8, 6]  # 50% = 20, cap 8
    assert h100.waves[0].hosts == ["h100-00001"]


def test_waves_equal_wave_sizes_without_budget_pressure(matrix: Matrix) -> None:
    refs = _refs("a100", 40)
    wide = matrix.model_copy(deep=True)
    a100 = wide.pools["a100"]
    roll = a100.rollout.model_copy(update={"max_unavailable": "100%"})
    wide = wide.model_copy(update={"pools": {"a100": a100.model_copy(update={"rollout": roll})}})
    plan = plan_rollout(wide, refs)
    assert [len(w.hosts) for w in plan.pool("a100").waves] == wave_sizes([1, 5, "25%"], 40)


def test_skips_and_budget(matrix: Matrix) -> None:
    refs = _refs("h100", 30)
    names = [r.name for r in refs]
    plan = plan_rollout(
        matrix, refs,
        releases={names[0]: "r580-cuda13.0", names[1]: "r570-cuda12.8"},
        admin={names[2]: AdminState("drained", "ops: PSU", False),
               names[3]: AdminState("drained", "fleet: wave 3", True),
               names[4]: AdminState("down", "Not responding")},
        quarantined={names[5]: "ECC trend"},
        unreachable=[names[6]],
    )
    p = plan.pool("h100")
    assert p.max_unavailable == 3  # 10% of 30
    assert {h: why for h, why in p.skipped.items() if not why.startswith("blocked")} == {
        names[0]: "already on r580-cuda13.0",
        names[2]: "drained by someone else: ops: PSU",
        names[4]: "down (Not responding)",
        names[5]: "quarantined: ECC trend",
        names[6]: "unreachable",
    }
    assert p.unavailable == [names[2], names[4], names[5], names[6]]
    assert p.blocked is not None and "used up by 4" in p.blocked
    assert p.waves == []
    assert names[1] in p.skipped and names[3] in p.skipped  # eligible, but blocked
    assert p.skipped[names[1]] == "blocked: max_unavailable used up"


def test_fleet_drained_host_goes_first(matrix: Matrix) -> None:
    refs = _refs("h100", 50)
    names = [r.name for r in refs]
    plan = plan_rollout(matrix, refs,
                        admin={names[30]: AdminState("drained", "fleet: x", True)})
    p = plan.pool("h100")
    assert p.waves[0].hosts == [names[30]]
    assert names[30] not in p.unavailable


def test_units_move_together_and_oversized_units_are_skipped(matrix: Matrix) -> None:
    refs = _refs("h100", 40, unit_size=4) + [HostRef(f"big-{i}", "h100", unit="huge")
                                             for i in range(9)]
    plan = plan_rollout(matrix, refs)
    p = plan.pool("h100")
    assert p.max_unavailable == 4  # 10% of 49, rounded down
    assert [len(w.hosts) for w in p.waves] == [4] * 10  # waves [1, 5, 20%]: whole units of 4
    assert p.waves[0].units == ["h100-u0"]
    assert all(why.startswith("unit huge has 9 hosts") for why in p.skipped.values())


def test_partial_units_and_unassigned(matrix: Matrix) -> None:
    refs = _refs("l40s", 20, unit_size=4) + [HostRef("stray")]
    plan = plan_rollout(matrix, refs, quarantined=["l40s-001"])
    p = plan.pool("l40s")
    assert plan.unassigned == ["stray"]
    assert p.notes and "l40s-u0" in p.notes[0]
    assert p.waves[0].hosts == ["l40s-000", "l40s-002", "l40s-003"]


def test_unknown_pool_gets_defaults_and_pool_filter(matrix: Matrix) -> None:
    refs = _refs("edge", 4) + _refs("a100", 4)
    plan = plan_rollout(matrix, refs, pools={"edge"})
    assert [p.pool for p in plan.pools] == ["edge"]
    edge = plan.pools[0]
    assert edge.release == matrix.policy.golden.default
    assert edge.notes == ["pool not in the matrix: default rollout settings"]


def test_targets_override(matrix: Matrix) -> None:
    plan = plan_rollout(matrix, _refs("a100", 3), targets={"a100": "r595-cuda13.2"})
    assert plan.pool("a100").release == "r595-cuda13.2"


def test_json_round_trip(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 200, seed=3, unit_size=2,
                           rates={"unreachable": 0.05, "drained": 0.05})
    sched = fleet.scheduler()
    plan = plan_rollout(matrix, fleet.hosts(), releases=fleet.releases_by_host(),
                        admin={r.name: sched.state(r.name) for r in fleet.hosts()},
                        unreachable=fleet.unreachable_hosts())
    text = plan.to_json()
    again = RolloutPlan.from_dict(json.loads(text))
    assert again == plan and again.to_json() == text


def test_a_wave_capped_by_max_unavailable_says_so(matrix: Matrix) -> None:
    """`waves: [1, 5, "20%"]` with max_unavailable 12 plans 1, 5, then 12s: the plan says
    which waves the cap cut, from what to what (issue 30); the pool's last, smaller wave is
    short of hosts, not capped."""
    fleet = SimFleet.build(matrix, pools={"h100": 120, "h100-canary": 3})
    plan = plan_rollout(matrix, fleet.hosts(), releases=fleet.releases_by_host())
    h100, canary = plan.pool("h100"), plan.pool("h100-canary")
    assert h100.notes == ["waves 3-11 capped by max_unavailable 12: from 24 to 12 host(s) each"]
    assert canary.notes == ["wave 2 capped by max_unavailable 1: from 2 to 1 host(s)"]
    assert RolloutPlan.from_dict(plan.as_dict()).pool("h100").notes == h100.notes
