"""One test per validation rule, with real rows of NVIDIA's tables."""

from __future__ import annotations

from datetime import date

import pytest

from fleet.domain import nvidia_data
from fleet.domain.matrix import rules
from fleet.domain.matrix.loader import parse_matrix

from .helpers import dump, errors, example_data, load, release, single, warnings


def test_example_golden_releases_are_clean_and_the_previous_one_has_ended() -> None:
    found = load(example_data()).warnings  # on 2026-11-30
    assert [w.field for w in found] == ["releases[0].driver.version"]
    assert "release 'r570-cuda12.8': driver branch R570 (Production Branch) reached end of " \
        "life in February 2026" in found[0].message


# CUDA toolkit -> driver, Table 3 (full) and Table 2 (minor-version compatibility)
@pytest.mark.parametrize(
    ("cuda", "driver", "verdict"),
    [
        ("12.4", "550.54.14", "full"),       # 12.4 GA needs >= 550.54.14
        ("12.4.1", "550.54.15", "full"),     # 12.4 Update 1 needs >= 550.54.15
        ("12.4.1", "550.54.14", "mvc"),
        ("13.0", "580.65.06", "full"),       # 13.0 GA needs >= 580.65.06
        ("13.0.2", "580.82.07", "mvc"),      # 13.0 Update 2 needs >= 580.95.05; 13.x MVC >= 580
        ("13.0", "575.57.08", "too_old"),    # 13.x MVC needs R580
        ("12.8", "570.26", "full"),
        ("12.8.1", "570.26", "mvc"),         # 12.8 Update 1 needs >= 570.124.06
        ("12.8", "535.183.01", "mvc"),       # 12.x MVC: >= 525.60.13, so allowed with warning
        ("12.0", "520.61.05", "too_old"),    # below 12.x MVC
        ("11.8", "470.82.01", "mvc"),        # 11.x MVC >= 450.80.02
        ("11.8", "450.51.06", "too_old"),
    ],
)
def test_cuda_driver_table(cuda: str, driver: str, verdict: str) -> None:
    data = nvidia_data.load()
    assert nvidia_data.cuda_compatibility(data, cuda, driver)[0] == verdict


def test_cuda_too_new_is_an_error() -> None:
    errs = errors(single(release("r", "570.124.06", "13.0")))
    assert len(errs) == 1 and errs[0].field == "releases[0].cuda"
    assert "needs driver >= 580.65.06" in errs[0].message


def test_mvc_only_is_a_warning() -> None:
    data = single(release("r", "535.230.02", "12.8", "proprietary"))
    assert errors(data) == []
    assert any("minor-version compatibility" in w.message for w in warnings(data))


def test_cuda_unknown_to_the_table_warns() -> None:
    data = single(release("r", "580.95.05", "13.9"))
    assert errors(data) == []
    assert any("not in NVIDIA's table" in w.message for w in warnings(data))


def test_duplicate_release_names() -> None:
    data = example_data()
    data["releases"].append(dict(data["releases"][0]))
    errs = errors(data)
    assert [e.field for e in errs] == ["releases[3].name"]
    assert "duplicate release name 'r570-cuda12.8'" in errs[0].message


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("golden", "default"), "policy.golden.default"),
        (("golden", "pools", "h100-canary"), "policy.golden.pools.h100-canary"),
        (("previous", "a100"), "policy.previous.a100"),
    ],
)
def test_undefined_release_reference(path: tuple[str, ...], field: str) -> None:
    data = example_data()
    node = data["policy"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "r999"
    errs = errors(data)
    assert [e.field for e in errs] == [field]
    assert "'r999' is not defined" in errs[0].message


def test_undefined_allowed_release() -> None:
    data = example_data()
    data["policy"]["allowed"].append("r999")
    assert [e.field for e in errors(data)] == ["policy.allowed[2]"]


def test_policy_names_unknown_pool() -> None:
    data = example_data()
    data["policy"]["previous"]["h200"] = "r570-cuda12.8"
    assert [e.message for e in errors(data)] == ["pool 'h200' is not defined in pools"]


def test_volta_cannot_run_past_r580() -> None:
    data = single(release("r590", "590.48.01", "13.1.1", "proprietary"), gpu="V100")
    errs = errors(data)
    assert len(errs) == 1 and "R580 is the last branch" in errs[0].message
    ok = single(release("r580", "580.95.05", "13.0.2", "proprietary"), gpu="Tesla V100-SXM2")
    assert errors(ok) == []


def test_v100_model_name_resolves() -> None:
    arch = nvidia_data.load().architecture_of("V100-SXM2-32GB")
    assert arch is not None and arch.name == "volta" and arch.last_branch == "580"
    assert nvidia_data.load().architecture_of("GH200").name == "hopper"  # type: ignore[union-attr]
    assert nvidia_data.load().architecture_of("L40S").name == "ada"  # type: ignore[union-attr]


def test_blackwell_needs_open_modules() -> None:
    errs = errors(single(release("r", "580.95.05", "13.0.2", "proprietary"), gpu="B200"))
    assert len(errs) == 1 and "needs open" in errs[0].message
    assert errors(single(release("r", "580.95.05", "13.0.2", "open"), gpu="GB200")) == []


def test_previous_release_is_checked_against_the_pool_architecture() -> None:
    data = single(release("r580", "580.95.05", "13.0.2", "proprietary"), gpu="V100")
    data["releases"].append(release("r590", "590.48.01", "13.1.1", "proprietary"))
    data["policy"]["previous"] = {"p": "r590"}
    assert [e.field for e in errors(data)] == ["policy.previous.p"]


def test_unknown_gpu_model_warns() -> None:
    data = single(release("r", "580.95.05", "13.0.2"), gpu="Z9000")
    assert errors(data) == []
    assert [w.field for w in warnings(data)] == ["pools.p.gpu_model"]


def test_blocked_driver_on_golden_is_an_error() -> None:
    data = example_data()
    data["releases"][1]["driver"]["version"] = "580.82.07"
    data["releases"][1]["companions"]["fabric_manager"] = "580.82.07"
    data["releases"][1]["cuda"] = "13.0.1"  # 13.0 Update 1 needs >= 580.82.07
    errs = errors(data)  # golden by default, and the canary's rollback target
    assert [e.field for e in errs] == ["policy.golden.default", "policy.previous.h100-canary"]
    assert "driver 580.82.07 is blocked: Xid 31" in errs[0].message


def test_blocked_companion_on_allowed_is_a_warning() -> None:
    data = example_data()
    extra = release("r550-old-dcgm", "550.127.05", "12.4.1")
    extra["companions"] = {"dcgm": "4.0.0"}
    data["releases"].append(extra)
    data["policy"]["allowed"].append("r550-old-dcgm")
    assert errors(data) == []
    assert [w.field for w in warnings(data) if "blocked" in w.message] == ["policy.allowed[2]"]


def test_fabric_manager_must_match_driver() -> None:
    data = example_data()
    data["releases"][2]["companions"]["fabric_manager"] = "580.82.07"
    assert [e.field for e in errors(data)] == ["releases[2].companions.fabric_manager"]


@pytest.mark.parametrize(
    ("today", "expected"),
    [(date(2026, 6, 30), 0), (date(2026, 7, 1), 1)],  # R535 LTSB: end of life June 2026
)
def test_eol_branch_warns_after_its_month(today: date, expected: int) -> None:
    text = dump(single(release("r535", "535.230.02", "12.2.2", "proprietary")))
    found = parse_matrix(text, "m.yaml", today).warnings
    assert len([w for w in found if "end of life" in w.message]) == expected
    assert parse_matrix(text, "m.yaml", None).warnings == []  # no date: no lifecycle check


def test_nfb_golden_warns() -> None:
    found = warnings(single(release("r590", "590.48.01", "13.1.1")))
    assert [w.field for w in found] == ["policy.golden.default"]
    assert "New Feature Branch" in found[0].message


def test_rules_are_pure_functions_of_the_matrix() -> None:
    matrix = load(example_data()).matrix
    for rule in rules.RULES:
        found = rule(matrix, date(2026, 11, 30))
        assert all("reached end of life" in p.message for p in found)
        assert (found != []) is (rule is rules.branch_lifecycle)
        assert rule(matrix, None) == []
        assert all(p.file is None and p.line is None for p in found)


def test_shipped_tables_keep_their_sources() -> None:
    from importlib import resources

    import yaml

    for name in ("cuda_driver.yaml", "branches.yaml"):
        doc = yaml.safe_load(resources.files("fleet.data.nvidia").joinpath(name).read_text())
        assert "sources" in doc
    data = nvidia_data.load()
    assert data.branch("580.95.05").designation == "LTSB"  # type: ignore[union-attr]
    assert data.branch("535").eol == "2026-06"  # type: ignore[union-attr]


def test_a_companion_version_with_letters_is_compared_as_text() -> None:
    data = example_data()  # found by test_random_edits_of_the_source_never_crash: no crash
    data["releases"][1]["companions"]["dcgm"] = "4.a1.1"
    assert [e for e in errors(data) if "blocked" in e.message] == []
    data["policy"]["blocked"][1]["version"] = "4.a1.1"
    assert [e.field for e in errors(data) if "blocked" in e.message] == [
        "policy.golden.default", "policy.previous.h100-canary"]
