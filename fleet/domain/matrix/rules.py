"""Cross-field rules of a matrix, checked against NVIDIA's shipped tables.

Each rule is a pure function `(matrix, today) -> list[Problem]`. Problems carry the field path
(`releases[1].cuda`) but no file or line: the loader fills those in from the YAML source map, so
the rules stay independent of how the matrix was read. `today` is passed in (None skips the
date-dependent checks), never read from the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date

from fleet.domain import nvidia_data
from fleet.domain.matrix.framework_check import framework_compatibility
from fleet.domain.matrix.lifecycle import branch_lifecycle
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.matrix.profile_rules import PROFILE_RULES
from fleet.domain.matrix.references import as_data, reference_problems
from fleet.domain.versions import branch_label, compare
from fleet.errors import Problem

Rule = Callable[[Matrix, date | None], list[Problem]]


def _error(field: str, message: str) -> Problem:
    return Problem(None, None, field, message, "error")


def _warning(field: str, message: str) -> Problem:
    return Problem(None, None, field, message, "warning")


def _index(matrix: Matrix) -> dict[str, int]:
    """Release name -> index of its first definition."""
    out: dict[str, int] = {}
    for i, rel in enumerate(matrix.releases):
        out.setdefault(rel.name, i)
    return out


def _references(matrix: Matrix) -> Iterator[tuple[str, str, str]]:
    """Every (field path, release name, role) where the policy names a release."""
    policy = matrix.policy
    yield "policy.golden.default", policy.golden.default, "golden"
    for pool, name in policy.golden.pools.items():
        yield f"policy.golden.pools.{pool}", name, "golden"
    for i, name in enumerate(policy.allowed):
        yield f"policy.allowed[{i}]", name, "allowed"
    for pool, name in policy.previous.items():
        yield f"policy.previous.{pool}", name, "previous"


def _pool_releases(matrix: Matrix) -> Iterator[tuple[str, str, Release, str]]:
    """(pool, field, release, role) for each pool's golden and previous release that exist."""
    index = _index(matrix)
    for pool in matrix.pools:
        field = (
            f"policy.golden.pools.{pool}" if pool in matrix.policy.golden.pools
            else "policy.golden.default"
        )
        name = matrix.golden_name(pool)
        if name in index:
            yield pool, field, matrix.releases[index[name]], "golden"
        prev = matrix.policy.previous.get(pool)
        if prev is not None and prev in index:
            yield pool, f"policy.previous.{pool}", matrix.releases[index[prev]], "previous"


def references(matrix: Matrix, today: date | None) -> list[Problem]:
    """Duplicate release names and undefined releases, pools and profiles
    (fleet.domain.matrix.references, which the loader also runs on a matrix that is not valid)."""
    return reference_problems(as_data(matrix))


def cuda_needs_driver(matrix: Matrix, today: date | None) -> list[Problem]:
    """CUDA toolkit vs driver, from Table 3 (full support) and Table 2 (minor-version compat)."""
    data = nvidia_data.load()
    out = []
    for i, rel in enumerate(matrix.releases):
        field = f"releases[{i}].cuda"
        verdict, required = nvidia_data.cuda_compatibility(data, rel.cuda, rel.driver.version)
        row, exact = data.toolkit_lookup(rel.cuda)
        if row is not None and not exact:
            out.append(_warning(field, (
                f"NVIDIA's Table 3 has no row for CUDA {rel.cuda}; checked against CUDA "
                f"{row.cuda}'s minimum driver (>= {row.min_driver}), which is unverified for it"
            )))
        if row is not None and not row.verified:
            out.append(_warning(field, (
                f"the minimum driver for CUDA {row.cuda} (>= {row.min_driver}) is unverified: "
                f"no stored NVIDIA page states it ({data.cite(row.source)})"
            )))
        if verdict == "unknown":
            out.append(_warning(field, (
                f"CUDA {rel.cuda} is not in NVIDIA's table shipped with fleet (newest known "
                f"{data.newest_toolkit()}); driver compatibility not checked"
            )))
        elif verdict == "too_old":
            mvc = data.mvc_row(rel.cuda)
            mvc_text = (
                f"; minor-version compatibility for CUDA {mvc.cuda_major}.x needs >= "
                f"{mvc.min_driver}" if mvc else ""
            )
            out.append(_error(field, (
                f"CUDA {rel.cuda} is too new for driver {rel.driver.version}: it needs driver "
                f">= {required}{mvc_text}"
            )))
        elif verdict == "mvc":
            out.append(_warning(field, (
                f"CUDA {rel.cuda} needs driver >= {required} for full support; driver "
                f"{rel.driver.version} runs it only through minor-version compatibility "
                "(limited features, newer PTX will not JIT)"
            )))
    return out


def fabric_manager_matches_driver(matrix: Matrix, today: date | None) -> list[Problem]:
    """Fabric Manager refuses to start unless its version equals the driver's exactly."""
    return [
        _error(
            f"releases[{i}].companions.fabric_manager",
            f"fabric manager {rel.companions.fabric_manager} must equal the driver version "
            f"{rel.driver.version}",
        )
        for i, rel in enumerate(matrix.releases)
        if rel.companions.fabric_manager is not None
        and compare(rel.companions.fabric_manager, rel.driver.version) != 0
    ]


def architecture_problems(release: Release, gpu_model: str,
                          data: nvidia_data.NvidiaData | None = None) -> list[str] | None:
    """Why `release` cannot drive `gpu_model`: [] when it can, None when the model is unknown."""
    data = data or nvidia_data.load()
    arch = data.architecture_of(gpu_model)
    if arch is None:
        return None
    what = f"{gpu_model} ({arch.name.capitalize()})"
    branch = release.branch
    out = []
    if arch.last_branch is not None and compare(branch, arch.last_branch) > 0:
        out.append(f"release {release.name!r} uses {branch_label(branch)}, but "
                   f"{branch_label(arch.last_branch)} is the last branch supporting {what}")
    if arch.first_branch is not None and compare(branch, arch.first_branch) < 0:
        out.append(f"release {release.name!r} uses {branch_label(branch)}, older than "
                   f"{branch_label(arch.first_branch)}, the first branch supporting {what}")
    if release.driver.flavor not in arch.flavors:
        out.append(f"release {release.name!r} uses the {release.driver.flavor} kernel modules; "
                   f"{what} needs {' or '.join(arch.flavors)}")
    return out + product_problems(release, gpu_model, data)


def product_problems(release: Release, gpu_model: str,
                     data: nvidia_data.NvidiaData | None = None) -> list[str]:
    """Why `release` cannot drive this product, by NVIDIA's rules for it (Grace Hopper and
    Blackwell need the open modules; HGX B200 needs 570.133.20 or later)."""
    data = data or nvidia_data.load()
    product = data.product_of(gpu_model)
    if product is None:
        return []
    out = []
    flavor = release.driver.flavor
    wanted = product.flavors
    if wanted is not None and "flavors" not in product.unverified and flavor not in wanted:
        out.append(f"release {release.name!r} uses the {flavor} kernel modules; NVIDIA states "
                   f"{product.title} needs the {' or '.join(wanted)} kernel modules "
                   f"({data.cite(product.source)})")
    minimum = product.min_driver
    if (minimum is not None and "min_driver" not in product.unverified
            and compare(release.driver.version, minimum) < 0):
        out.append(f"release {release.name!r} uses driver {release.driver.version}; NVIDIA states "
                   f"{product.title} needs {minimum} or later ({data.cite(product.source)})")
    return out


def blocked_components(matrix: Matrix, release: Release) -> list[str]:
    """The blocked versions `release` uses, each with the policy's reason."""
    versions = release.versions()
    return [
        f"{block.component} {block.version} is blocked: {block.reason}"
        for block in matrix.policy.blocked
        if (used := versions.get(block.component)) is not None
        and _same_version(used, block.version)
    ]


def _same_version(a: str, b: str) -> bool:
    """Numeric equality where both are dotted numbers ("4.1" == "4.1.0"), else exact text:
    companion versions may carry letters ("1.17.3-rc1"), which `compare` refuses."""
    try:
        return compare(a, b) == 0
    except ValueError:
        return a == b


def gpu_architecture(matrix: Matrix, today: date | None) -> list[Problem]:
    """The golden and previous release of each pool must support the pool's GPU architecture."""
    data = nvidia_data.load()
    out = []
    for pool, settings in matrix.pools.items():
        if settings.gpu_model is None:
            continue
        if data.architecture_of(settings.gpu_model) is None:
            out.append(_warning(f"pools.{pool}.gpu_model", (
                f"unknown GPU model {settings.gpu_model!r}; driver branch support not checked"
            )))
            continue
        product = data.product_of(settings.gpu_model)
        if product is not None and product.unverified:
            out.append(_warning(f"pools.{pool}.gpu_model", (
                f"NVIDIA's rule for {product.title} ({', '.join(product.unverified)}) is "
                f"unverified, not checked: {product.note or 'no stored NVIDIA page states it'}"
            )))
        for rel_pool, field, rel, role in _pool_releases(matrix):
            if rel_pool == pool:
                for why in architecture_problems(rel, settings.gpu_model, data) or []:
                    out.append(_error(field, f"{role} {why} in pool {pool!r}"))
    return out


def blocked_versions(matrix: Matrix, today: date | None) -> list[Problem]:
    """No golden or rollback release may use a blocked version; an allowed one gets a warning."""
    index = _index(matrix)
    out = []
    for field, name, role in _references(matrix):
        if name not in index:
            continue
        for why in blocked_components(matrix, matrix.releases[index[name]]):
            message = f"{role} release {name!r}: {why}"
            out.append(_warning(field, message) if role == "allowed" else _error(field, message))
    return out


RULES: tuple[Rule, ...] = (
    references,
    cuda_needs_driver,
    fabric_manager_matches_driver,
    gpu_architecture,
    blocked_versions,
    branch_lifecycle,
    framework_compatibility,
    *PROFILE_RULES,
)


def check(matrix: Matrix, today: date | None) -> list[Problem]:
    """Every rule's problems, errors and warnings together."""
    return [problem for rule in RULES for problem in rule(matrix, today)]
