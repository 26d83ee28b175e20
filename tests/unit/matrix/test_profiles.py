"""Node profiles in the matrix (issue 23 item 1): the model, pool selection, MIG layouts against
the sourced table (fleet/data/nvidia/mig_profiles.yaml), errors with file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.mig_table import layout_problems, mig_models, models_for
from fleet.errors import BadInput

from .helpers import dump, errors, example_data, load, warnings


def _with_profile(profile: dict[str, Any], select: Any = "train") -> dict[str, Any]:
    data = example_data()
    data["profiles"] = {"train": profile}
    data["pools"]["h100"]["profile"] = select
    return data


FULL = {
    "gpu": {"persistence_mode": True, "ecc": True, "compute_mode": "default",
            "power_limit_w": "max", "clocks": {"applications": {"memory_mhz": 2619,
                                                                "graphics_mhz": 1980}},
            "count": 8},
    "mig": {"config": "balanced", "layout": {"version": "v1", "mig-configs": {"balanced": [
        {"devices": "all", "mig-enabled": True,
         "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]}}},
    "firmware": {"vbios": {"H100": ["96.00.99.00.01"]}, "inforom_image": {
        "H100": ["G520.0200.00.05"]}, "gsp": True, "all_equal": True},
    "links": {"pcie": {"H100": {"gen": 5, "width": 16}}, "nvlink_active": 18,
              "fabric_manager": "required"},
}


def test_every_field_of_the_issue_loads_and_the_pool_selects_it() -> None:
    m = load(_with_profile(FULL)).matrix
    profile = m.profile_for("h100")
    assert profile is not None and profile.gpu is not None and profile.links is not None
    assert profile.gpu.power_limit_w == "max" and profile.gpu.count == 8
    assert profile.links.fabric_manager == "required"
    assert m.profile_for("a100") is None  # a pool without a profile checks nothing


def test_every_field_is_optional() -> None:
    assert load(_with_profile({})).matrix.profile_for("h100") is not None


def test_per_gpu_model_selection_picks_the_longest_matching_key() -> None:
    data = _with_profile(FULL, select={"H100": "train", "H100 NVL": "nvl"})
    data["profiles"]["nvl"] = {"gpu": {"count": 4}}
    m = load(data).matrix
    assert m.profile_for("h100", "NVIDIA H100 NVL") == m.profiles["nvl"]
    assert m.profile_for("h100", "NVIDIA H100 80GB HBM3") == m.profiles["train"]
    assert m.profile_for("h100", "NVIDIA A100-SXM4-80GB") is None


def test_bad_values_are_all_reported_with_line_and_field() -> None:
    bad = {"gpu": {"compute_mode": "exclusive", "power_limit_w": "most", "count": 0,
                   "clocks": {"locked_graphics_mhz": [1980, 1410]}},
           "links": {"pcie": {"H100": {"gen": 5, "width": 12}}, "fabric_manager": "yes"}}
    found = {p.field for p in errors(_with_profile(bad))}
    assert {"profiles.train.gpu.compute_mode", "profiles.train.gpu.count",
            "profiles.train.gpu.clocks", "profiles.train.links.pcie.H100.width",
            "profiles.train.links.fabric_manager"} <= found
    assert any(f and f.startswith("profiles.train.gpu.power_limit_w") for f in found)
    assert all(p.line is not None for p in errors(_with_profile(bad)))


def test_unknown_profile_and_unknown_key() -> None:
    probs = errors(_with_profile({"gpu": {"persistance_mode": True}}, select="nope"))
    messages = {p.field: p.message for p in probs}
    assert "persistence_mode" in messages["profiles.train.gpu.persistance_mode"]


def test_pool_naming_an_undefined_profile() -> None:
    probs = errors(_with_profile({}, select="nope"))
    assert [(p.field, "unknown profile 'nope'" in p.message) for p in probs] == [
        ("pools.h100.profile", True)]


def _mig(devices: dict[str, int], **group: Any) -> dict[str, Any]:
    return {"mig": {"config": "c", "layout": {"version": "v1", "mig-configs": {"c": [
        {"devices": "all", "mig-enabled": True, "mig-devices": devices, **group}]}}}}


def test_mig_layout_checked_against_the_pool_gpu_model() -> None:
    probs = errors(_with_profile(_mig({"1g.10gb": 8, "2g.35gb": 1})))
    text = " | ".join(p.message for p in probs)
    assert "fits at most 7" in text and "no MIG profile '2g.35gb'" in text
    assert "compute slices" in text
    assert all(p.field and p.field.endswith("mig-devices") for p in probs)


def test_mig_device_filter_overrides_the_pool_model() -> None:
    ok = _mig({"1g.18gb": 7}, **{"device-filter": "0x233510DE"})  # H200
    assert errors(_with_profile(ok)) == []
    bad = _mig({"1g.10gb": 7}, **{"device-filter": ["0x233510DE"]})
    assert "offers no MIG profile '1g.10gb'" in errors(_with_profile(bad))[0].message


def test_mig_unverified_row_warns() -> None:
    data = _with_profile(_mig({"4g.90gb": 1}, **{"device-filter": "B200"}))
    assert errors(data) == []
    assert any("unverified" in w.message for w in warnings(data))


def test_mig_entries_that_can_match_the_same_gpu_are_refused() -> None:
    """nvidia-mig-parted applies every entry that matches a GPU in turn: `[5] enabled` then
    `all disabled` ends with MIG off on GPU 5 (or fails there), not as the layout reads."""
    def layout(*groups: dict[str, Any]) -> dict[str, Any]:
        return {"mig": {"config": "c", "layout": {"version": "v1", "mig-configs": {
            "c": list(groups)}}}}

    five = {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    for other in ({"devices": "all", "mig-enabled": False},
                  {"devices": [4, 5], "mig-enabled": False}):
        probs = errors(_with_profile(layout(five, other)))
        assert len(probs) == 1 and "entries 0 and 1 can both match the same GPU" in \
            probs[0].message, probs
        assert probs[0].field and probs[0].field.startswith("profiles.train.mig.layout")
        assert probs[0].line is not None
    assert errors(_with_profile(layout(five, {"devices": [0, 1, 2, 3, 4, 6, 7],
                                              "mig-enabled": False}))) == []
    # told apart by their device-filters (NVIDIA's own config file does this): accepted
    h100 = {"devices": "all", "mig-enabled": False, "device-filter": "0x233010DE"}
    h200 = {"devices": "all", "mig-enabled": False, "device-filter": "0x233510DE"}
    assert errors(_with_profile(layout(h100, h200))) == []


def test_mig_config_must_exist() -> None:
    data = _with_profile({"mig": {"config": "missing", "layout": {
        "version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": False}]}}}})
    assert [p.field for p in errors(data)] == ["profiles.train.mig.config"]


def test_mig_layout_in_a_file_beside_the_matrix(tmp_path: Path) -> None:
    data = _with_profile({"mig": {"config": "c", "file": "mig.yaml"}})
    (tmp_path / "m.yaml").write_text(dump(data))
    (tmp_path / "mig.yaml").write_text(
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices:\n        \"7g.80gb\": 2\n")
    with pytest.raises(BadInput) as exc:
        load_matrix(tmp_path / "m.yaml")
    found = [p for p in exc.value.problems if p.severity == "error"]
    assert {(p.file, p.line) for p in found} == {(str(tmp_path / "mig.yaml"), 6)}
    assert any("fits at most 1" in p.message for p in found)
    (tmp_path / "mig.yaml").write_text(
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {\"7g.80gb\": 1}\n")
    loaded = load_matrix(tmp_path / "m.yaml").matrix.profiles["train"]
    assert loaded.mig is not None and loaded.mig.groups() is not None


def test_mig_file_missing_or_both_sources(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(dump(_with_profile({"mig": {"config": "c",
                                                                 "file": "none.yaml"}})))
    with pytest.raises(BadInput) as exc:
        load_matrix(tmp_path / "m.yaml")
    assert exc.value.problems[0].field == "profiles.train.mig.file"
    both = {"mig": {"config": "c", "file": "x.yaml", "layout": {"version": "v1",
                                                               "mig-configs": {"c": []}}}}
    assert "exactly one" in errors(_with_profile(both))[0].message


def test_table_rows_are_sourced_and_lookups_work() -> None:
    assert {m.key for m in mig_models()} >= {"A30", "A100-40GB", "A100-80GB", "H100-80GB",
                                             "H200-141GB", "B200"}
    assert [m.key for m in models_for("NVIDIA H100 80GB HBM3")] == ["H100-80GB"]
    assert [m.key for m in models_for("233010DE")] == ["H100-80GB"]
    assert len(models_for("H100")) >= 2  # generic: every H100 row
    assert layout_problems({"1g.6gb": 4}, models_for("NVIDIA A30"), "A30") == ([], [])
    assert layout_problems({"2g.12gb": 2, "1g.6gb": 1}, models_for("A30"), "A30")[0]
