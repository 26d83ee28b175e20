"""Matrix diff: per pool, which golden components change and how."""

from __future__ import annotations

from fleet.domain.matrix.diff import diff_matrices

from .helpers import example_data, load


def _by_component(pool_diff):  # type: ignore[no-untyped-def]
    return {c.component: c for c in pool_diff.changes}


def test_promoting_the_candidate() -> None:
    old = load(example_data()).matrix
    data = example_data()
    data["policy"]["golden"]["default"] = "r595-cuda13.2"
    new = load(data).matrix
    pools = {p.pool: p for p in diff_matrices(old, new)}
    assert not pools["h100-canary"].changed
    h100 = _by_component(pools["h100"])
    assert (h100["driver"].kind, h100["driver"].direction) == ("branch_switch", "upgrade")
    assert (h100["driver"].old, h100["driver"].new) == ("580.95.05", "595.58.03")
    assert h100["cuda"].kind == "upgrade"
    assert h100["fabric_manager"].kind == "branch_switch"
    assert "kernel" not in h100 and "dcgm" not in h100  # same companions: only driver and CUDA


def test_rollback_is_a_downgrade_and_companions_can_be_added_or_removed() -> None:
    data = example_data()
    data["releases"][1]["companions"].pop("tensorrt")
    old = load(data).matrix
    data2 = example_data()
    data2["policy"]["golden"]["default"] = "r570-cuda12.8"
    new = load(data2).matrix
    a100 = _by_component({p.pool: p for p in diff_matrices(old, new)}["a100"])
    assert a100["driver"].kind == "branch_switch" and a100["driver"].direction == "downgrade"
    assert a100["cuda"].kind == "downgrade"
    assert a100["dcgm"].kind == "downgrade"
    assert a100["tensorrt"].kind == "added"


def test_same_branch_patch_upgrade_and_pool_changes() -> None:
    data = example_data()
    old = load(data).matrix
    data["releases"][1]["driver"]["version"] = "580.105.08"
    data["releases"][1]["companions"]["fabric_manager"] = "580.105.08"
    del data["pools"]["l40s"]
    del data["policy"]["previous"]["l40s"]
    data["pools"]["h200"] = {"gpu_model": "H200"}
    pools = {p.pool: p for p in diff_matrices(old, load(data).matrix)}
    assert _by_component(pools["a100"])["driver"].kind == "upgrade"
    assert pools["l40s"].new_release is None
    assert {c.kind for c in pools["l40s"].changes} == {"removed"}
    assert pools["h200"].old_release is None
    assert pools["h200"].as_dict()["changed"] is True
