"""The matrix -> Expectations adapter, and the checks driven end to end by a loaded matrix."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.checks import (
    Expectations,
    ReleaseExpectation,
    expectations_for,
    release_expectation,
    run_checks,
)
from fleet.domain.facts import HostFacts
from fleet.domain.matrix import Matrix
from fleet.domain.matrix.loader import load_matrix

EXAMPLE = Path(__file__).resolve().parents[3] / "matrices" / "example.yaml"


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(EXAMPLE, date(2026, 11, 30)).matrix


def test_golden_of_a_pool_override(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "h100-canary")
    assert exp.release == ReleaseExpectation(
        name="r595-cuda13.2",
        driver_version="595.58.03",
        cuda_version="13.2.1",
        packages_held=(
            "nvidia-driver-595-open",
            "cuda-toolkit-13-2",
            "nvidia-fabricmanager-595",
            "datacenter-gpu-manager-4-core",  # DCGM 4's names
            "datacenter-gpu-manager-4-cuda13",
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
            "cudnn9-cuda-13",
            "libcudnn9-cuda-13",
            "tensorrt",
        ),
        kernel=matrix.release("r595-cuda13.2").companions.kernel,
        driver_flavor="open",
    )
    assert exp.release.kernel == ">=5.15,<6.12"  # checked on the next-boot kernel too
    assert exp.gpu_model == "H100"  # from the matrix's pool settings
    assert exp.gpu_count is None


def test_allowed_are_the_other_accepted_releases(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "h100")
    assert exp.release is not None and exp.release.name == "r580-cuda13.0"
    # allowed_releases(): every pool's golden plus policy.allowed, minus this pool's golden.
    assert [r.name for r in exp.allowed] == ["r570-cuda12.8", "r595-cuda13.2"]
    assert exp.release.name not in {r.name for r in exp.allowed}


def test_explicit_driver_packages_are_held(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "a100")
    assert exp.release is not None
    assert exp.release.packages_held[:3] == (
        "nvidia-driver-580-open",
        "nvidia-utils-580",
        "cuda-toolkit-13-0",
    )


def test_rhel_package_names(matrix: Matrix) -> None:
    rel = release_expectation(matrix.release("r570-cuda12.8"), "rhel")
    assert rel.packages_held[:3] == ("nvidia-driver", "cuda-toolkit-12-8", "nvidia-fabric-manager")


def test_arguments_override_pool_settings(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "l40s", gpu_model="L40", gpu_count=4)
    assert (exp.gpu_model, exp.gpu_count) == ("L40", 4)


def test_unknown_pool_gets_the_default_golden(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "not-in-matrix")
    assert exp.release is not None and exp.release.name == matrix.policy.golden.default
    assert exp.gpu_model is None


def test_unknown_os_family_is_rejected(matrix: Matrix) -> None:
    with pytest.raises(ValueError, match="ubuntu"):
        expectations_for(matrix, "h100", os_family="ubuntu")  # type: ignore[arg-type]


def test_result_is_plain_expectations(matrix: Matrix) -> None:
    exp = expectations_for(matrix, "h100")
    assert isinstance(exp, Expectations)
    assert exp.mig_mode is None and exp.container_runtime is False


def _host(
    rel: ReleaseExpectation, *, driver: str | None = None, unheld: str | None = None
) -> dict[str, Any]:
    """A host with every package of `rel` installed, held except `unheld`."""
    version = driver or rel.driver_version
    pkgs = [
        {"name": name, "version": f"{version}-0ubuntu1", "held": name != unheld}
        for name in rel.packages_held
    ]
    return {
        "source": "nvml",
        "versions": {
            "driver_library": version,
            "driver_kernel_module": version,
            "packages": {"manager": "dpkg", "items": pkgs},
            "toolkits": [{"version": rel.cuda_version, "path": "/usr/local/cuda"}],
        },
    }


def _conformance(matrix: Matrix, data: dict[str, Any]) -> list[tuple[str, str]]:
    facts = HostFacts.model_validate(data)
    exp = expectations_for(matrix, "h100")
    return [
        (f.severity.value, f.message)
        for f in run_checks(facts, exp, matrix.policy.thresholds)
        if f.check == "release.conformance"
    ]


def test_host_on_golden_with_held_packages_conforms(matrix: Matrix) -> None:
    rel = expectations_for(matrix, "h100").release
    assert rel is not None
    assert _conformance(matrix, _host(rel)) == []


def test_host_on_allowed_release_conforms(matrix: Matrix) -> None:
    rel = release_expectation(matrix.release("r570-cuda12.8"))
    assert _conformance(matrix, _host(rel)) == []


def test_unheld_golden_package_warns(matrix: Matrix) -> None:
    rel = expectations_for(matrix, "h100").release
    assert rel is not None
    out = _conformance(matrix, _host(rel, unheld="nvidia-utils-580"))
    assert out == [
        ("warn", "package nvidia-utils-580 is not held: an unattended upgrade can replace it")
    ]


def test_unknown_driver_fails_conformance(matrix: Matrix) -> None:
    rel = expectations_for(matrix, "h100").release
    assert rel is not None
    out = _conformance(matrix, _host(rel, driver="535.54.03"))
    assert len(out) == 1 and out[0][0] == "fail" and "neither golden" in out[0][1]
