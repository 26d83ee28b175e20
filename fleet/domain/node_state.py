"""The weekly report's node-state section: per host, is it conformant to its pool's node profile,
and per `node.*` check, how many differences and unreadable values the fleet shows.

Pure: the hygiene job's findings in, a JSON-able mapping out (the Markdown, HTML and Prometheus
renderers read it). A host whose profile values could not all be read is not conformant
(`conformant` false, `unreadable` > 0), and so is a host with a profile but no facts (not
probed: counted under `node.facts`): unknown never counts as healthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleet.domain.checks.models import Finding, Severity

# node.next_boot is the pre-reboot gate's check, not node state a profile declares.
NOT_NODE_STATE = frozenset({"node.next_boot"})


def is_node_state(f: Finding) -> bool:
    return f.check.startswith("node.") and f.check not in NOT_NODE_STATE


def node_state_section(findings: Mapping[str, Iterable[Finding]],
                       pools: Mapping[str, str | None],
                       profiles: Mapping[str, str | None]) -> dict[str, Any]:
    """`findings`: host -> its findings; `pools`: host -> pool; `profiles`: host -> the name
    of the profile its pool selects (None: no profile; such a host is listed only when a
    node check still found something, e.g. persistence mode by the matrix's thresholds)."""
    hosts: list[dict[str, Any]] = []
    fields: dict[str, dict[str, int]] = {}
    for host in sorted(pools):
        mine = [f for f in findings.get(host, ()) if is_node_state(f)
                and f.severity is not Severity.OK]
        unread = [f for f in mine if f.evidence.get("unreadable")]
        differ = [f for f in mine if not f.evidence.get("unreadable")]
        for f in mine:
            counts = fields.setdefault(f.check, {"differ": 0, "unreadable": 0})
            counts["unreadable" if f.evidence.get("unreadable") else "differ"] += 1
        profile = profiles.get(host)
        no_facts = profile is not None and host not in findings
        if no_facts:
            counts = fields.setdefault("node.facts", {"differ": 0, "unreadable": 0})
            counts["unreadable"] += 1
        if profile is None and not mine:
            continue  # nothing declared, nothing found: not part of the section
        hosts.append({
            "host": host, "pool": pools[host], "profile": profile,
            "conformant": None if profile is None and not mine else not (mine or no_facts),
            "differ": len(differ), "unreadable": len(unread) + no_facts,
            "findings": [{"check": f.check, "gpu": f.gpu, "severity": f.severity.value,
                          "message": f.message, "wanted": f.evidence.get("wanted"),
                          "found": f.evidence.get("found"), "fix": f.evidence.get("fix"),
                          "unreadable": bool(f.evidence.get("unreadable"))} for f in mine],
        })
    judged = [h for h in hosts if h["conformant"] is not None]
    return {
        "hosts": hosts,
        "fields": dict(sorted(fields.items())),
        "hosts_judged": len(judged),
        "hosts_conformant": sum(1 for h in judged if h["conformant"]),
    }
