"""From the matrix to check expectations: what a host of a given pool should look like.

Pure: a loaded `Matrix` in, `Expectations` out. The golden release of the pool becomes
`Expectations.release`; every release the drift audit accepts (`Matrix.allowed_releases`, which
includes the goldens of all pools) other than that one becomes `Expectations.allowed`.
"""

from __future__ import annotations

from typing import get_args

from fleet.domain.checks.models import Expectations, ReleaseExpectation
from fleet.domain.matrix.models import Matrix, OsFamily, Release
from fleet.domain.matrix.profiles import NodeProfile


def release_expectation(release: Release, os_family: OsFamily = "debian") -> ReleaseExpectation:
    """The versions and held packages a host on `release` should show.

    Every package the release installs on `os_family` must be held (`apt-mark hold` on Debian,
    versionlock on RHEL): that is how the pin deploy leaves a host, see `fleet.domain.pinning`.
    """
    return ReleaseExpectation(
        name=release.name,
        driver_version=release.driver.version,
        cuda_version=release.cuda,
        packages_held=tuple(spec.name for spec in release.packages(os_family)),
        kernel=release.companions.kernel,
        driver_flavor=release.driver.flavor,
    )


def expectations_for(
    matrix: Matrix,
    pool: str,
    *,
    gpu_model: str | None = None,
    gpu_count: int | None = None,
    os_family: OsFamily = "debian",
) -> Expectations:
    """Expectations for a host of `pool`: its golden release, the other allowed releases, and
    the GPU model (argument, else the pool's `gpu_model` in the matrix) and count, and the
    pool's node profile (one, or one per GPU model).

    A pool the matrix does not list gets the default golden release and no GPU model. Raises
    ValueError for an unknown OS family, and KeyError only if the matrix names a release it does
    not define (which the loader rejects).
    """
    if os_family not in get_args(OsFamily):
        raise ValueError(f"unknown OS family {os_family!r} (expected one of {get_args(OsFamily)})")
    golden = matrix.golden_for(pool)
    allowed = tuple(
        release_expectation(r, os_family)
        for r in matrix.allowed_releases()
        if r.name != golden.name
    )
    settings = matrix.pools.get(pool)
    model = gpu_model if gpu_model is not None else (settings.gpu_model if settings else None)
    profile, by_model = pool_profiles(matrix, pool)
    return Expectations(
        release=release_expectation(golden, os_family),
        allowed=allowed,
        gpu_count=gpu_count,
        gpu_model=model,
        secure_boot=settings.secure_boot if settings else "any",
        profile=profile,
        profile_by_model=by_model,
    )


def pool_profiles(matrix: Matrix, pool: str | None
                  ) -> tuple[NodeProfile | None, dict[str, NodeProfile]]:
    """The node profile `pool` selects (`Expectations.profile`), or its pick per GPU model
    (`Expectations.profile_by_model`); (None, {}) for a pool without one."""
    settings = matrix.pools.get(pool) if pool is not None else None
    chosen = settings.profile if settings else None
    if isinstance(chosen, dict):
        return None, {key: matrix.profiles[name] for key, name in chosen.items()
                      if name in matrix.profiles}
    return (matrix.profiles.get(chosen) if chosen is not None else None), {}
