"""Names one section of a matrix gives to another: release names in the policy, pool names in
the policy, profile names in the pools (pure).

These checks read the matrix as plain data (the YAML mapping), not the validated model, so they
run whether or not the rest of the file is valid: a release with a bad CUDA version must not
hide that the policy names a pool that does not exist, or a user fixes the file once per run
(issue 28). Values of the wrong type are skipped here: the schema reports them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.errors import Problem


def _error(field: str, message: str) -> Problem:
    return Problem(None, None, field, message, "error")


def _mapping(value: Any) -> Mapping[Any, Any]:
    return value if isinstance(value, Mapping) else {}


def _names(value: Any) -> list[str]:
    return [k for k in _mapping(value) if isinstance(k, str)]


def _release_refs(policy: Mapping[Any, Any]) -> Iterator[tuple[str, Any, str]]:
    """Every (field path, release name, role) where the policy names a release."""
    golden = _mapping(policy.get("golden"))
    if "default" in golden:
        yield "policy.golden.default", golden["default"], "golden"
    for pool, name in _mapping(golden.get("pools")).items():
        yield f"policy.golden.pools.{pool}", name, "golden"
    allowed = policy.get("allowed")
    for i, name in enumerate(allowed if isinstance(allowed, list) else []):
        yield f"policy.allowed[{i}]", name, "allowed"
    for pool, name in _mapping(policy.get("previous")).items():
        yield f"policy.previous.{pool}", name, "previous"


def reference_problems(data: Mapping[Any, Any]) -> list[Problem]:
    """Duplicate release names, and every release, pool or profile a section names that is not
    defined. A section that is missing or of the wrong type defines nothing, and is not judged
    as a list of names: only a readable list of releases, mapping of pools or of profiles."""
    out: list[Problem] = []
    releases = data.get("releases")
    index: dict[str, int] = {}
    for i, rel in enumerate(releases if isinstance(releases, list) else []):
        name = _mapping(rel).get("name")
        if not isinstance(name, str):
            continue
        if name in index:
            out.append(_error(f"releases[{i}].name", f"duplicate release name {name!r} "
                                                     f"(also releases[{index[name]}])"))
        else:
            index[name] = i
    policy = _mapping(data.get("policy"))
    if isinstance(releases, list):
        known = ", ".join(sorted(index)) or "none"
        out += [_error(field, f"{role} release {name!r} is not defined in releases (known: "
                              f"{known})")
                for field, name, role in _release_refs(policy)
                if isinstance(name, str) and name not in index]
    pools = data.get("pools", {})
    if isinstance(pools, Mapping):
        for section in ("golden.pools", "previous"):
            where: Any = policy
            for key in section.split("."):
                where = _mapping(where).get(key)
            out += [_error(f"policy.{section}.{pool}", f"pool {pool!r} is not defined in pools")
                    for pool in _names(where) if pool not in pools]
    profiles = data.get("profiles", {})
    if isinstance(profiles, Mapping):
        defined = ", ".join(sorted(_names(profiles))) or "none"
        for pool, settings in _mapping(pools).items():
            chosen = _mapping(settings).get("profile")
            refs = {"": chosen} if isinstance(chosen, str) else _mapping(chosen)
            for model, name in refs.items():
                if isinstance(name, str) and name not in profiles:
                    field = f"pools.{pool}.profile" + (f".{model}" if model else "")
                    out.append(_error(field, f"unknown profile {name!r} (defined: {defined})"))
    return out


def as_data(matrix: Matrix) -> dict[str, Any]:
    """The parts of a validated matrix that `reference_problems` reads, as plain data."""
    policy = matrix.policy
    return {
        "releases": [{"name": r.name} for r in matrix.releases],
        "policy": {"golden": {"default": policy.golden.default, "pools": policy.golden.pools},
                   "allowed": policy.allowed, "previous": policy.previous},
        "pools": {name: {"profile": s.profile} for name, s in matrix.pools.items()},
        "profiles": dict.fromkeys(matrix.profiles, {}),
    }
