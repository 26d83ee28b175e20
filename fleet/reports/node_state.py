"""The node-state section's rows, shared by the Markdown and HTML reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOST_HEADER = ("host", "pool", "profile", "conformant", "differences", "unreadable")
FINDING_HEADER = ("host", "check", "GPU", "wanted", "found", "fix")
FIELD_HEADER = ("check", "differences", "unreadable")


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "NO"


def node_state_rows(report: Mapping[str, Any], worst: int = 50) -> dict[str, Any]:
    """{"summary": str, "hosts": rows, "findings": rows, "fields": rows}; empty rows when the
    report has no node-state section (an older report) or no host has a profile."""
    ns = report.get("node_state") or {}
    hosts = [h for h in ns.get("hosts", []) if h["conformant"] is not None]
    bad = [h for h in hosts if not h["conformant"]]
    findings = [(h["host"], f["check"], f["gpu"] or "-",
                 "?" if f["wanted"] is None else f["wanted"],
                 "unreadable" if f["unreadable"] else f["found"], f["fix"] or "-")
                for h in bad for f in h["findings"]][:worst]
    return {
        "summary": (f"{ns.get('hosts_conformant', 0)} of {ns.get('hosts_judged', 0)} host(s) "
                    "with a node profile conformant" if hosts else
                    "No host has a node profile (matrix `profiles:`)."),
        "hosts": [(h["host"], h["pool"] or "-", h["profile"] or "-", _yes_no(h["conformant"]),
                   h["differ"], h["unreadable"]) for h in bad],
        "findings": findings,
        "fields": [(c, v["differ"], v["unreadable"]) for c, v in ns.get("fields", {}).items()],
    }
