"""Selectors checked against what exists (pure): a pool, host, release or limit that matches
nothing is a typo, refused with the names that do exist, never an empty selection that
"finds nothing wrong".

Each function returns the messages of what is wrong (empty when all is well); the caller turns
them into `BadInput` naming its own option (`--pool`, `--release`, `--limit`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostRef

SHOW = 12
"""Known names listed in a message; the rest are counted."""


def known(names: Iterable[str], *, show: int = SHOW) -> str:
    """`a, b, c`, or `a, b, ... (+N more)`, or `none` for no name at all."""
    listed = sorted(dict.fromkeys(n for n in names if n))
    if not listed:
        return "none"
    shown = ", ".join(listed[:show])
    return shown + (f", ... (+{len(listed) - show} more)" if len(listed) > show else "")


def host_pools(hosts: Iterable[HostRef]) -> list[str]:
    """The pools that have at least one host."""
    return sorted({h.pool for h in hosts if h.pool})


def pool_problems(wanted: Iterable[str], hosts: Sequence[HostRef], matrix: Matrix) -> list[str]:
    """A pool selected for a rollout must have hosts: one that neither the matrix nor the hosts
    know is a typo; a matrix pool without a host would move nothing."""
    have = set(host_pools(hosts))
    out = []
    for pool in dict.fromkeys(wanted):
        if pool in have:
            continue
        if pool in matrix.pools:
            out.append(f"pool {pool!r} has no host (pools with hosts: {known(have)})")
        else:
            out.append(f"no pool {pool!r} in the matrix or among the hosts (pools: "
                       f"{known(set(matrix.pools) | have)})")
    return out


def release_problem(name: str | None, matrix: Matrix) -> str | None:
    """A release named on the command line must be one of the matrix's."""
    names = [r.name for r in matrix.releases]
    if name is None or name in names:
        return None
    return f"no release {name!r} in the matrix (releases: {known(names)})"


def limit_matches(limit: str, host: HostRef) -> bool:
    """pyinfra's and Ansible's `--limit`: a group (or pool) name, or a glob on the host name."""
    groups = set(host.groups) | ({host.pool} if host.pool else set())
    return limit in groups or fnmatch.fnmatchcase(host.name, limit)


def limit_problem(limit: str, hosts: Sequence[HostRef]) -> str:
    """Why `limit` selects nothing, with what would have matched: pools, other inventory
    groups, host names."""
    pools = {h.pool for h in hosts if h.pool}
    groups = {g for h in hosts for g in h.groups} - pools
    parts = [f"pools: {known(pools)}"]
    if groups:
        parts.append(f"other groups: {known(groups)}")
    parts.append(f"hosts: {known(h.name for h in hosts)}")
    return f"{limit!r} matches no pool, group or host name ({'; '.join(parts)})"


def unmatched(limits: Iterable[str], hosts: Sequence[HostRef]) -> list[str]:
    """The values of `limits` that select no host: each one is a typo, even beside values
    that do select hosts (a union would silently drop it)."""
    return [lim for lim in dict.fromkeys(limits)
            if not any(limit_matches(lim, h) for h in hosts)]


def limit_problems(limits: Iterable[str], hosts: Sequence[HostRef]) -> list[str]:
    """Every `--limit` value must select at least one host."""
    return [limit_problem(lim, hosts) for lim in unmatched(limits, hosts)]


def select(limits: Sequence[str] | None, hosts: Sequence[HostRef]) -> list[HostRef]:
    """The hosts any of `limits` selects (all of them when there is no limit)."""
    if not limits:
        return list(hosts)
    return [h for h in hosts if any(limit_matches(lim, h) for lim in limits)]
