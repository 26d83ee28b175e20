"""Node-profile checks across a pool (`profiles.NAME.firmware.all_equal`): every GPU of one model
in a pool on the same VBIOS. A per-host check cannot see this (each host may be equal within
itself), so the weekly audit runs it over all the hosts it probed and names the odd ones out.

The pool's VBIOS is the one most of its hosts of that GPU model run (by host); a host with any GPU
of the model on another version is an odd one out. Where two versions are equally common there
is no majority to name a host against: every host of the model gets the finding, which lists the
split. A VBIOS that could not be read is left to the per-host check (`node.firmware` reports it
unreadable); it never counts towards a version. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.domain.checks.base import WARN, finding
from fleet.domain.checks.models import Finding
from fleet.domain.checks.node_firmware import FIRMWARE_FIX
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.profiles import NodeProfile

CHECK = "node.firmware"


@dataclass(frozen=True)
class PoolHost:
    """One probed host: its pool, its facts and the profile it must match (None: none)."""

    pool: str
    facts: HostFacts
    profile: NodeProfile | None


def _versions(facts: HostFacts) -> dict[str, set[str]]:
    """GPU model (product name) -> the VBIOS versions its GPUs on this host run."""
    out: dict[str, set[str]] = {}
    for g in facts.gpus:
        if g.name and g.vbios_version is not None:
            out.setdefault(g.name, set()).add(g.vbios_version)
    return out


def pool_vbios_findings(hosts: Mapping[str, PoolHost]) -> dict[str, list[Finding]]:
    """host -> the pool-wide VBIOS findings about it (hosts without one are left out)."""
    groups: dict[tuple[str, str], dict[str, set[str]]] = {}
    for name, h in hosts.items():
        fw = h.profile.firmware if h.profile is not None else None
        if fw is None or not fw.all_equal:
            continue
        for model, versions in _versions(h.facts).items():
            groups.setdefault((h.pool, model), {})[name] = versions
    out: dict[str, list[Finding]] = {}
    for (pool, model), by_host in sorted(groups.items()):
        per_version = Counter(v for versions in by_host.values() for v in versions)
        if len(per_version) < 2:
            continue
        ranked = per_version.most_common()
        top, n = ranked[0]
        majority = top if len(ranked) < 2 or ranked[1][1] < n else None
        odd = sorted(h for h, versions in by_host.items()
                     if majority is None or versions != {majority})
        split = ", ".join(f"{v} on {c}" for v, c in sorted(per_version.items()))
        for host in odd:
            found = sorted(by_host[host])
            if majority is not None:
                msg = (f"pool {pool}: {model} VBIOS {', '.join(found)} on this host; "
                       f"{n} of the pool's {len(by_host)} host(s) run {majority}; odd host(s) "
                       f"out: {', '.join(odd)}")
            else:
                msg = (f"pool {pool}: {model} GPUs on {len(per_version)} VBIOS versions "
                       f"with no majority ({split} host(s)); this host runs {', '.join(found)}")
            out.setdefault(host, []).append(finding(
                CHECK, WARN, "none", f"{msg}; fix: {FIRMWARE_FIX}", facts=["gpus.vbios_version"],
                scope="pool", pool=pool, model=model, wanted=majority or "one VBIOS per pool",
                found=found, odd_hosts=odd, versions=dict(sorted(per_version.items())),
                fix=FIRMWARE_FIX))
    return out
