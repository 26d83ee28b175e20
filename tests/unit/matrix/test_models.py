"""Model shapes: package derivation, lookups, strictness, and Ansible's serial semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from fleet.domain.matrix.models import (
    Companions,
    Driver,
    GoldenPolicy,
    Matrix,
    PackageSpec,
    Policy,
    PoolSettings,
    Release,
    RolloutSettings,
    Thresholds,
    wave_sizes,
)


def _release(flavor: str = "open", **companions: str) -> Release:
    return Release(
        name="r550",
        driver=Driver(version="550.54.15", flavor=flavor),  # type: ignore[arg-type]
        cuda="12.4.1",
        companions=Companions(**companions),
    )


def test_debian_default_packages() -> None:
    rel = _release(fabric_manager="550.54.15", dcgm="3.3.9", container_toolkit="1.17.3",
                   cudnn="9.1.1.17", tensorrt="10.0.1.6")
    assert rel.branch == "550"
    assert rel.packages("debian") == [
        PackageSpec("nvidia-driver-550-open", "550.54.15", "driver"),
        PackageSpec("cuda-toolkit-12-4", "12.4.1", "cuda"),
        PackageSpec("nvidia-fabricmanager-550", "550.54.15", "fabric_manager"),
        PackageSpec("datacenter-gpu-manager", "3.3.9", "dcgm"),  # DCGM 3's name
        PackageSpec("nvidia-container-toolkit", "1.17.3", "container_toolkit"),
        PackageSpec("nvidia-container-toolkit-base", "1.17.3", "container_toolkit"),
        PackageSpec("libnvidia-container-tools", "1.17.3", "container_toolkit"),
        PackageSpec("libnvidia-container1", "1.17.3", "container_toolkit"),
        PackageSpec("cudnn9-cuda-12", "9.1.1.17", "cudnn"),
        PackageSpec("libcudnn9-cuda-12", "9.1.1.17", "cudnn"),
        PackageSpec("tensorrt", "10.0.1.6", "tensorrt"),
    ]


def test_rhel_default_packages_and_module_stream() -> None:
    rel = _release(flavor="proprietary", fabric_manager="550.54.15")
    names = [p.name for p in rel.packages("rhel")]
    assert names == ["nvidia-driver", "cuda-toolkit-12-4", "nvidia-fabric-manager"]
    assert rel.driver_module_stream() == "550-dkms"
    assert _release().packages("debian")[0].name == "nvidia-driver-550-open"
    assert _release(flavor="proprietary").packages("debian")[0].name == "nvidia-driver-550"


def test_packages_worked_out_once_per_release_object() -> None:
    rel = _release()
    first, again = rel.packages("debian"), rel.packages("debian")
    assert first == again and first is not again  # a fresh list: callers may change theirs
    first.clear()
    assert rel.packages("debian") == again
    # a copy is another object: its own answer, never the original's
    copy = rel.model_copy(update={"cuda": "12.8.0"})
    assert [p.name for p in copy.packages("debian")][1] == "cuda-toolkit-12-8"
    assert [p.name for p in rel.packages("debian")][1] == "cuda-toolkit-12-4"
    assert rel.packages("rhel")[0].name == "nvidia-driver"


def test_explicit_driver_packages() -> None:
    rel = Release(
        name="r550",
        driver=Driver(version="550.54.15", flavor="open",
                      packages={"debian": ["nvidia-driver-550-open", "nvidia-utils-550"]}),
        cuda="12.4",
    )
    deb = rel.packages("debian")
    assert [(p.name, p.version) for p in deb[:2]] == [
        ("nvidia-driver-550-open", "550.54.15"), ("nvidia-utils-550", "550.54.15")]
    assert rel.packages("rhel")[0].name == "nvidia-driver"  # no rhel names given: default


def test_lookups() -> None:
    a, b = _release(), Release(name="r570", driver=Driver(version="570.133.20", flavor="open"),
                               cuda="12.8")
    m = Matrix(
        releases=[a, b],
        policy=Policy(golden=GoldenPolicy(default="r550", pools={"h100": "r570"}),
                      previous={"h100": "r550"}),
        pools={"h100": PoolSettings(gpu_model="H100"), "a100": PoolSettings()},
    )
    assert m.golden_for("h100") is b
    assert m.golden_for("a100") is a
    assert m.previous_for("h100") is a
    assert m.previous_for("a100") is None
    assert m.release("r570") is b
    with pytest.raises(KeyError):
        m.release("nope")
    assert {r.name for r in m.allowed_releases()} == {"r550", "r570"}


def test_models_are_strict_and_frozen() -> None:
    with pytest.raises(ValidationError):
        Driver(version="550.54.15", flavor="open", colour="green")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Release(name="r", driver=Driver(version="550.54.15", flavor="open"), cuda=12.4)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        _release().cuda = "12.8"  # type: ignore[misc]


def test_thresholds_defaults() -> None:
    t = Thresholds()
    assert t.ecc_uncorrectable_max == 0
    assert t.remapped_rows_uncorrectable_limit == 512
    assert t.retired_pages_limit == 63  # current DCGM (was 60 before nvbugs 3024088)
    assert t.retired_pages_dbe_max == 15
    assert t.ecc_corrected_aggregate_max == 20_000_000
    assert t.fail_on_remap_pending is True
    assert "sw_power_cap" not in t.clock_slowdown_reasons
    assert t.quarantine_max_share == 0.10
    assert t.pcie_replay_per_lane_per_min[5] == 1.92


def test_thresholds_reject_unknown_slowdown_reason() -> None:
    with pytest.raises(ValidationError):
        Thresholds(clock_slowdown_reasons=("hw_slowdwn",))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("serial", "n", "expected"),
    [
        ([1, 5, "20%"], 50, [1, 5, 10, 10, 10, 10, 4]),
        ([1, 5, "20%"], 3, [1, 2]),
        (["10%"], 5, [1, 1, 1, 1, 1]),  # rounds down, at least 1
        (["30%"], 10, [3, 3, 3, 1]),
        ([2], 7, [2, 2, 2, 1]),
        ([], 7, [7]),
        ([1, "100%"], 9, [1, 8]),
        ([1], 0, []),
    ],
)
def test_wave_sizes_follow_ansible_serial(serial: list[int | str], n: int,
                                          expected: list[int]) -> None:
    assert wave_sizes(serial, n) == expected


@given(
    st.lists(st.one_of(st.integers(1, 50), st.integers(1, 100).map(lambda p: f"{p}%")),
             max_size=5),
    st.integers(0, 500),
)
def test_wave_sizes_cover_every_host(serial: list[int | str], n: int) -> None:
    sizes = wave_sizes(serial, n)
    assert sum(sizes) == n
    assert all(s >= 1 for s in sizes)


def test_rollout_validation() -> None:
    assert RolloutSettings(waves=[1, 5, "20%"]).wave_sizes(10) == [1, 5, 2, 2]
    for bad in ([0], ["0%"], ["120%"], [True], [2.5], ["5"], []):
        with pytest.raises(ValidationError):
            RolloutSettings(waves=bad)  # type: ignore[arg-type]
