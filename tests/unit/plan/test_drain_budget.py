"""`fit_drain_budget`: which hosts of a wave may be drained against what is out of service now
(issue 29, defect 9). Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fleet.domain.plan import fit_drain_budget


def test_hosts_out_now_shrink_the_wave() -> None:
    take, held = fit_drain_budget(["h3", "h4"], out_now={"h1"}, max_unavailable=2)
    assert take == ["h3"] and held == ["h4"]


def test_a_host_already_out_costs_nothing() -> None:
    take, held = fit_drain_budget(["h1", "h3"], out_now={"h1", "h2"}, max_unavailable=2)
    assert take == ["h1"] and held == ["h3"]


def test_a_unit_moves_whole_or_not_at_all() -> None:
    units = {"a1": "A", "a2": "A", "b1": "B"}
    take, held = fit_drain_budget(["a1", "a2", "b1"], out_now={"x"}, max_unavailable=2,
                                  units=units)
    assert take == ["b1"] and held == ["a1", "a2"]


@given(st.lists(st.integers(0, 12), unique=True, max_size=8),
       st.sets(st.integers(0, 12), max_size=6), st.integers(1, 6),
       st.dictionaries(st.integers(0, 12), st.sampled_from("AB"), max_size=6))
def test_never_over_the_budget(cands: list[int], out: set[int], cap: int,
                               unit_of: dict[int, str]) -> None:
    names = [f"h{i}" for i in cands]
    out_now = {f"h{i}" for i in out}
    units = {f"h{i}": u for i, u in unit_of.items()}
    take, held = fit_drain_budget(names, out_now, cap, units)
    assert sorted(take + held) == sorted(names)
    assert len(out_now | set(take)) <= max(cap, len(out_now))
    for u in set(units.values()):  # whole units only
        members = {h for h in names if units.get(h) == u}
        assert members <= set(take) or members <= set(held)
