"""The benchmark's sample counts as report rows: needed and had, per pool and per judged check.

Shared by the Markdown and HTML reports; reads the `samples` object of a pool's benchmark in the
report's JSON (`fleet.jobs.hygiene_bench.samples_report`), absent in reports made before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

CHECK_HEADER = ("pool", "check", "verdict", "needed per side", "had (this week)",
                "had (baseline)", "rule")


def counts(bench: Mapping[str, Any]) -> str:
    """`1918 / 3836 / 1917` (this week / baseline / needed per side), or "" when unknown."""
    s = bench.get("samples")
    if not s:
        return ""
    return f"{s['had']} / {s['baseline']} / {s['needed']}"


def check_rows(benches: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """One row per judged check of every pool: what it needed per side and what it had."""
    rows: list[tuple[str, ...]] = []
    for b in benches:
        for c in (b.get("samples") or {}).get("checks", []):
            need = "never passes" if c["need"] is None else str(c["need"])
            rows.append((str(b["pool"]), str(c["check"]), str(c["verdict"] or "-"), need,
                         str(c["had"]), str(c["baseline"]), str(c["rule"])))
    return rows
