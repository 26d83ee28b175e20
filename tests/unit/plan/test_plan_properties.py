"""Properties of the rollout plan over random pools, units, serial lists and states."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.domain.matrix.models import Matrix, RolloutSettings
from fleet.domain.plan import plan_rollout, serial_count
from fleet.domain.ports import AdminState, HostRef

serial_item = st.one_of(st.integers(1, 12), st.integers(1, 100).map(lambda p: f"{p}%"))


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    pools = draw(st.lists(st.sampled_from(["h100-canary", "h100", "a100", "l40s", "edge"]),
                          min_size=1, max_size=5, unique=True))
    refs: list[HostRef] = []
    settings_by_pool: dict[str, RolloutSettings] = {}
    for pool in pools:
        n = draw(st.integers(0, 60))
        max_unit = draw(st.sampled_from([1, 1, 2, 4, 8]))
        i = 0
        u = 0
        while i < n:
            size = draw(st.integers(1, max_unit))
            for _ in range(min(size, n - i)):
                unit = f"{pool}-u{u}" if max_unit > 1 else None
                refs.append(HostRef(f"{pool}-{i:03d}", pool, unit=unit))
                i += 1
            u += 1
        settings_by_pool[pool] = RolloutSettings(
            waves=draw(st.lists(serial_item, min_size=1, max_size=4)),
            max_unavailable=draw(serial_item))
    refs = draw(st.permutations(refs))
    names = [r.name for r in refs]
    quarantined = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    on_target = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    drained = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    ours = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    admin = {h: AdminState("drained", "ops", False) for h in drained}
    admin.update({h: AdminState("drained", "fleet: x", True) for h in ours if h not in admin})
    return {"refs": refs, "settings": settings_by_pool, "quarantined": quarantined,
            "on_target": on_target, "admin": admin}


def _matrix(base: Matrix, settings_by_pool: dict[str, RolloutSettings]) -> Matrix:
    pools = {}
    for name, rollout in settings_by_pool.items():
        ps = base.pools.get(name) or base.pools["a100"].model_copy(update={"canary": False})
        pools[name] = ps.model_copy(update={"rollout": rollout})
    return base.model_copy(update={"pools": pools})


@settings(max_examples=300, deadline=None)
@given(sc=scenarios())
def test_plan_properties(matrix: Matrix, sc: dict[str, Any]) -> None:
    m = _matrix(matrix, sc["settings"])
    refs: list[HostRef] = sc["refs"]
    releases = {h: m.golden_name(r.pool or "") for r in refs
                if (h := r.name) in sc["on_target"]}
    plan = plan_rollout(m, refs, releases=releases, admin=sc["admin"],
                        quarantined=sc["quarantined"])
    by_pool: dict[str, list[HostRef]] = {}
    for r in refs:
        by_pool.setdefault(r.pool or "", []).append(r)
    # canary pools precede the others
    canary = [p.canary for p in plan.pools]
    assert canary == sorted(canary, reverse=True)
    assert {p.pool for p in plan.pools} == set(by_pool)
    for p in plan.pools:
        pool_hosts = {r.name for r in by_pool[p.pool]}
        moving = p.hosts
        # every host of the pool is in exactly one wave or skipped with a reason
        assert len(moving) == len(set(moving))
        assert set(moving).isdisjoint(p.skipped)
        assert set(moving) | set(p.skipped) == pool_hosts
        assert all(p.skipped.values())
        # excluded hosts never move
        for h in pool_hosts:
            if h in sc["quarantined"] or (h in sc["admin"] and not sc["admin"][h].by_fleet):
                assert h not in moving
            if h in releases:
                assert h not in moving
        # units never split across waves
        unit_of = {r.name: r.unit for r in by_pool[p.pool] if r.unit}
        wave_of_unit: dict[str, int] = {}
        for w in p.waves:
            for h in w.hosts:
                if h in unit_of:
                    assert wave_of_unit.setdefault(unit_of[h], w.index) == w.index
        # waves never exceed the budget left, and follow the serial list within unit rounding
        cap = p.max_unavailable - len(p.unavailable)
        rollout = sc["settings"][p.pool]
        oversized = [h for h, why in p.skipped.items() if why.startswith("unit ")]
        n = len(moving) + len(oversized)  # the hosts that were eligible to move
        biggest = max([sum(1 for h in moving + oversized if unit_of.get(h) == u)
                       for u in set(unit_of.values())] + [1])
        for k, w in enumerate(p.waves):
            assert 0 < len(w.hosts) <= cap
            want = min(serial_count(rollout.waves[min(k, len(rollout.waves) - 1)], n), cap)
            if k < len(p.waves) - 1:
                assert abs(len(w.hosts) - want) < biggest
            else:
                assert len(w.hosts) < want + biggest
            if biggest == 1 and k < len(p.waves) - 1:
                assert len(w.hosts) == want
        assert [w.index for w in p.waves] == list(range(1, len(p.waves) + 1))


@settings(max_examples=100, deadline=None)
@given(sc=scenarios())
def test_plan_is_deterministic(matrix: Matrix, sc: dict[str, Any]) -> None:
    m = _matrix(matrix, sc["settings"])
    a = plan_rollout(m, sc["refs"], admin=sc["admin"], quarantined=sc["quarantined"])
    b = plan_rollout(m, sc["refs"], admin=sc["admin"], quarantined=sc["quarantined"])
    assert a == b
